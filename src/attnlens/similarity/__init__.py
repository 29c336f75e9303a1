"""Attention against attribution, over a whole dataset (recipes §11).

* :mod:`~attnlens.similarity.metrics` — the per-example metrics in legacy and fixed mode, with their
  permutation chance levels;
* :mod:`~attnlens.similarity.aggregate` — dataset means with bootstrap intervals and paired tests;
* :mod:`~attnlens.similarity.paper` — the paper's table layout, the masking increase and the
  single-example top-set view.
"""
