"""The generated corpus of every task, with the character span of every planted phrase: ground truth no real corpus
gives. One module a task (:mod:`~.classification`, :mod:`~.regression`, :mod:`~.multilabel`, :mod:`~.qa`), each
registering its generator in :data:`GENERATORS` under the task's name; :mod:`~.base` holds what they share, and
:mod:`~.pairs` the text pairs of study 3. Everything is a pure function of the seed and the
:class:`~attnlens.pipeline.config.SyntheticConfig`.
"""

from __future__ import annotations

from attnlens.data.corpus.base import CLASS_NAMES, EVIDENCE_PHRASES, GENERATORS, SyntheticCorpus

# isort: split
# registration order (the tasks' order): each module registers its generator as it is imported
from attnlens.data.corpus.classification import generate_corpus

# isort: split
from attnlens.data.corpus.regression import COUNTED_FIELD, generate_regression_corpus

# isort: split
from attnlens.data.corpus.multilabel import CO_OCCURRENCE, TOPIC_NAMES, generate_multilabel_corpus

# isort: split
from attnlens.data.corpus.qa import generate_generation_corpus, generate_qa_corpus

# isort: split
from attnlens.data.corpus.pairs import PAIR_GRADES, generate_pairs

__all__ = [
    "CLASS_NAMES",
    "COUNTED_FIELD",
    "CO_OCCURRENCE",
    "EVIDENCE_PHRASES",
    "GENERATORS",
    "PAIR_GRADES",
    "TOPIC_NAMES",
    "SyntheticCorpus",
    "generate_corpus",
    "generate_generation_corpus",
    "generate_multilabel_corpus",
    "generate_pairs",
    "generate_qa_corpus",
    "generate_regression_corpus",
]
