"""The model under study as a predictor: fine-tuning it, its predictions, the documents it showcases and the
importance of its heads.

* :mod:`~attnlens.classifier.fine_tuning` — fine-tuning with accelerate (the paper's recipe);
* :mod:`~attnlens.classifier.prediction` — tokenising and batched inference;
* :mod:`~attnlens.classifier.selection` — the showcased test documents and why each was chosen;
* :mod:`~attnlens.classifier.importance` — head importance by first-order Taylor expansion.
"""
