"""attnlens: does what a transformer attends to agree with what its prediction depends on?

The importable half of the pipeline: every numeric step and every artifact reader/writer lives
here, covered by unit tests; the Snakemake rules only decide what runs where.

One document, without the pipeline (:mod:`attnlens.api`)::

    import attnlens
    doc = attnlens.explain(text, attnlens.load("results/models/finetuned"))

One generated answer's sources: ``attnlens.cite(context, question, "results/")``.

``load``, ``explain``, ``cite`` and the API's classes are resolved on first use (PEP 562), so that ``import attnlens``
from a light rule does not import torch and transformers.
"""

import importlib

from attnlens.errors import InputError
from attnlens.version import __version__

#: Names of :mod:`attnlens.api` re-exported here.
API = ("Citation", "Classifier", "DocumentExplanation", "Settings", "cite", "explain", "load")

__all__ = ["InputError", "__version__", *API]


def __getattr__(name: str):
    if name in API:  # deferred on purpose: see the module docstring
        return getattr(importlib.import_module("attnlens.api"), name)
    raise AttributeError(f"module 'attnlens' has no attribute {name!r}")
