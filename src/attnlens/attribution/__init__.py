"""Attributions and the explanation methods judged against them.

* :mod:`~attnlens.attribution.ig` — integrated gradients (Captum's ``LayerIntegratedGradients``) with
  attnlens's adaptive Gauss–Legendre schedule and convergence delta, and the per-embedding variant;
* :mod:`~attnlens.attribution.explanations` — the explanation leaderboard's methods for one example
  (attention-based on the band, Captum's saliency, gradient × input and feature ablation);
* :mod:`~attnlens.attribution.ranking_faithfulness` — deletion / insertion curves, AOPC and plausibility;
* :mod:`~attnlens.attribution.leaderboard` — agreement with IG and the per-method summary.
"""
