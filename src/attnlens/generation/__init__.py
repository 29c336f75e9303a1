"""The generation study: which sources of a context a causal language model's generated answer rests on.

This package holds the study's own numerics: the prompt a context and its question are put into, cut into sources
(:mod:`~.prompts`), the decoder's training from scratch on the embedded corpus (:mod:`~.decoder_training`), its
greedy answers (:mod:`~.decoding`), every ablation's answer score (:mod:`~.ablation`), an example's prompt, answer
and scores as the stages and the ``cite`` door share them (:mod:`~.responses`), the judges of the answer methods
(:mod:`~.answer_leaderboard`: linear datamodeling score, top-k removals) and the files they write
(:mod:`~.answer_artifacts`). The rest of the study is named after it in every layer: its task
(:mod:`attnlens.tasks.generation`), its rules (:mod:`attnlens.stages.generation`, ``workflow/rules/generation.smk``),
its report (:mod:`attnlens.stages.report.generation_report`), its pages (:mod:`attnlens.render.generation_pages`)
and its door (:mod:`attnlens.api.cite`). The answer methods' numerics are explanation methods like the documents'
and live beside them: :mod:`attnlens.attribution.answer_example` (an answer as a scorer sees it),
:mod:`attnlens.attribution.source_scores`, :mod:`attnlens.attribution.head_weights` (AT2) and
:mod:`attnlens.attribution.datamodels` (the surrogate).
"""
