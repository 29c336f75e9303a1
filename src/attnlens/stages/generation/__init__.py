"""Rules of ``workflow/rules/generation.smk``: the generation study (``studies: [generation]``, ``data.task:
generation``) — a causal language model's answers (:mod:`~.generator`), learned attention's head weights
(:mod:`~.learned`), the ablations of their contexts, every answer method's source scores, and their judgement
(:mod:`~.answers`), and the randomisation sanity check of the methods in a grid (:mod:`~.sanity`); the leaderboard and
the explorer are report rules
(:mod:`attnlens.stages.report.generation_report`).

The responses and every ablation's answer scores are computed once, by ``generate_answers`` and ``ablate_contexts``,
and every method and metric reads them: leave-one-out and the surrogate are scored from the cached ablations, the
linear datamodeling score from the cached held-out ones. Only the top-``k`` removals, which depend on the methods'
rankings, are run by ``judge_answers`` (once per distinct mask of an answer).
"""

from __future__ import annotations

from attnlens.stages.generation.answers import run_ablate_contexts, run_explain_answers, run_judge_answers
from attnlens.stages.generation.generator import run_generate_answers, run_train_generator
from attnlens.stages.generation.learned import run_fit_learned_attention
from attnlens.stages.generation.sanity import run_answer_sanity

__all__ = [
    "run_ablate_contexts",
    "run_answer_sanity",
    "run_explain_answers",
    "run_fit_learned_attention",
    "run_generate_answers",
    "run_judge_answers",
    "run_train_generator",
]
