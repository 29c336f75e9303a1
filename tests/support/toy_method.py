"""A method of the tests' own, for both scopes, in one file, as a method's module under
``attnlens/attribution/methods/`` is written: its card and a scorer for each scope. ``position`` scores each token of a
document by its place (``i / n``, closed form) and each source of an answer by its index (``s / n_sources``), read
from the ``attention`` pass, which it checks it was given. Not registered on import: a test registers :data:`METHOD`
and unregisters it after (``tests/unit/attribution/test_methods.py``)."""

import numpy as np

from attnlens.attribution.methods import ANSWER, DOCUMENT, Method, Scored

METHOD = Method("position", "token position (test)", signed=False, needs="attention", cost="forward")


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    assert len(shared.bands) == len(shared.hidden) > 0  # it was given the document's attention pass
    return Scored(np.arange(x.n) / x.n)


@METHOD.explains(ANSWER)
def answer_scores(x, rows) -> Scored:
    assert rows.shape[-1] == x.n  # it was given the answer's attention pass: (layers, heads, n)
    return Scored(np.arange(x.n_sources) / x.n_sources)
