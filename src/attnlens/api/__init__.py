"""One document in a few lines: the pipeline's per-example steps behind one call, for a notebook or a script.

::

    import attnlens
    classifier = attnlens.load("results/models/finetuned")   # a classifier folder, a run's results/, or a hub id
    doc = attnlens.explain(open("paper.txt").read(), classifier)
    doc.to_frame()                                            # one row per token: IG, attention, every method
    doc.show()                                                # the explorer page, inline in Jupyter

Every number comes from the functions the pipeline's rules call for each test example — the prediction of
``predict``, the band attention and top-k partners of ``extract_attention``, IG of ``attribute``, the methods of
``explain``, the metrics of ``compare`` and the page of ``build_explorers`` — with the settings of a pipeline
config: the defaults, or ``config=`` (a YAML path or a mapping, validated as the pipeline validates it). What a
dataset-wide run adds is the dataset: head importance is estimated on the training split, so a document
explained alone is scaled by the importance of the run it came from (:func:`load` of a run's ``results/``
finds it, or ``importance=``) and, without one, by uniform weights (scaled and unscaled agree).

One module a job: :mod:`~.explain` (the classifier and the call), :mod:`~.document` (what the call returns), and
:mod:`~.cite`, one generated answer's sources (``attnlens.cite(context, question, model)``).
"""

from __future__ import annotations

from attnlens.api.cite import CITATION_SCHEMA, Citation, cite
from attnlens.api.document import SCORES_SCHEMA, DocumentExplanation, Settings
from attnlens.api.explain import RUN_IMPORTANCE, RUN_MODEL, Classifier, explain, load

__all__ = [
    "CITATION_SCHEMA",
    "RUN_IMPORTANCE",
    "RUN_MODEL",
    "SCORES_SCHEMA",
    "Citation",
    "Classifier",
    "DocumentExplanation",
    "Settings",
    "cite",
    "explain",
    "load",
]
