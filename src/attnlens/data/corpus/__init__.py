"""The generated corpus of every task, with the character span of every planted phrase: ground truth no real corpus
gives. One module a task (:mod:`~.papers` for classification, :mod:`~.counts` for regression, :mod:`~.topics` for
multilabel, :mod:`~.questions` for qa and generation), each registering its generator in :data:`GENERATORS` under
the task's name; :mod:`~.phrases` holds what they share, and :mod:`~.sentence_pairs` the text pairs of study 3.
Everything is a pure function of the seed and the :class:`~attnlens.pipeline.config.SyntheticConfig`.
"""

from __future__ import annotations

from attnlens.data.corpus.phrases import CLASS_NAMES, EVIDENCE_PHRASES, GENERATORS, SyntheticCorpus

# isort: split
# registration order (the tasks' order): each module registers its generator as it is imported
from attnlens.data.corpus.papers import generate_corpus

# isort: split
from attnlens.data.corpus.counts import COUNTED_FIELD, generate_regression_corpus

# isort: split
from attnlens.data.corpus.topics import CO_OCCURRENCE, TOPIC_NAMES, generate_multilabel_corpus

# isort: split
from attnlens.data.corpus.questions import generate_generation_corpus, generate_qa_corpus

# isort: split
from attnlens.data.corpus.sentence_pairs import PAIR_GRADES, generate_pairs

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
