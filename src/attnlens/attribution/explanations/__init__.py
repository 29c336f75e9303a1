"""A document's explanations beyond raw attention, computed on the band: what the ``document`` scope of
:mod:`attnlens.attribution.methods` reads.

One module a concern: :mod:`~.document_example` (the document as a scorer sees it), :mod:`~.passes` (the shared
passes over the model and the band numerics of the attention methods), :mod:`~.sentence_occlusion` (occlusion's
numerics); the
methods' cards and scorers are in :mod:`attnlens.attribution.methods`, the scheduler in
:mod:`attnlens.attribution.engine`.

Every method gives one score per token of one example, for the output IG explains (its ``target``).
``F`` is the task's readout of that output (:mod:`attnlens.tasks`: the class's softmax probability for a
classifier, the value for a regression), ``e`` the output of the embedding module (IG's layer), ``A``
a head's attention with rows = attending queries, ``o_i = Σ_j A_ij v_j`` its output at query ``i``
(before the output projection ``W_O``):

* ``attention_last`` / ``attention_all`` — raw received attention ``Σ_h Σ_i A_ij`` over the heads of
  the last layer / of every layer (the attention vector of the similarity tables, unscaled).
* ``value_norm`` — Kobayashi et al. (EMNLP 2020), "Attention is not only a weight": ``Σ_h Σ_i
  ‖A_ij f_h(x_j)‖`` with ``f_h(x) = (x W_V^h + b_V^h) W_O^h`` the value vector transformed by the
  head's slice of the output projection. The norm only depends on the key, so it multiplies the
  attention a key receives; global rows with a value projection of their own (the architecture's
  ``value_projections()["global"]``) are weighted with its norm. Summed over the heads of
  ``explanations.layers`` (the per-head norms, the upper bound of the norm of their sum).
* ``rollout`` — Abnar & Zuidema (ACL 2020): the CLS row of ``Ã_L ⋯ Ã_1`` with ``Ã = ½ mean_h A + ½ I``.
  The full product widens the band by the window at every layer (``min(n, 1 + l·w)`` keys per row
  after ``l`` layers) and, through the global token's row and column, is dense from the second layer
  on, so it is never formed: the CLS row is
  carried down as a vector, ``r ← ½ r + ½ rᵀ Ā_l``, and ``rᵀ Ā_l`` is the attention each key receives
  from queries weighted by ``r`` — :func:`attnlens.attention.band.received_attention` of a weighted band.
  Time ``O(L · n · w)``, memory ``O(n)`` beyond one head-averaged band, whatever the depth.
* ``grad_attention`` — ``Σ_h Σ_i A_ij · ∂F/∂A_ij`` (signed). ``A`` enters the network only through
  ``o_i``, so ``∂F/∂A_ij = ⟨∂F/∂o_i, v_j⟩``: the gradient band is the band of products of the output
  gradients with the value vectors (global rows with their own value projection's), computed block by
  block like the attention scores themselves (:func:`band_products`).
* ``saliency`` — ``Σ_d |∂F/∂e_jd|``; ``grad_input`` — ``Σ_d e_jd · ∂F/∂e_jd`` (signed): Captum's ``Saliency``
  and ``InputXGradient`` of :class:`EmbeddingForward`, ``F`` as a function of the embedding output, both read
  from one gradient (Captum's ``Saliency`` without the absolute value, taken once by the shared pass: the two
  classes each ran their own backward of the same function).
* ``attnlrp`` — AttnLRP (Achtibat et al., ICML 2024): the relevance of the target class's *logit* (not its
  probability) from one forward and one backward pass with AttnLRP's modified gradients
  (:mod:`attnlens.attribution.lrp`), ``Σ_d e_jd · ∂̃f/∂e_jd`` (signed); the row keeps the explained logit and
  ``δ = f − Σ_j R_j``, what the biases and the softmax absorbed.
* ``occlusion`` — sentence groups (whole sentences, each ending with a ``.``, ``!`` or ``?`` token,
  packed into spans of at most ``occlusion_max_tokens``; a longer sentence is cut) replaced on the token
  ids by the pad token, IG's baseline token, with positions and masks kept: every token of a span
  scores ``F(x) − F(x with the span occluded)``: Captum's ``FeatureAblation`` with one feature group per
  span. Special tokens are never occluded and score 0.

Signed methods (``grad_attention``, ``grad_input``, ``attnlrp``, ``occlusion`` and IG) rank by signed score for
faithfulness and plausibility; agreement with IG compares magnitudes (the similarity tables' fixed mode).

Every method is checked in ``tests/unit/attribution/test_explanations.py``: the attention methods against a dense
re-implementation of the model's self-attention whose ``n × n`` matrices are leaves of the graph, the
gradient methods against plain Captum calls set up by the test itself and a finite difference, occlusion
against a plain ``FeatureAblation`` and a brute-force loop, each also on a toy whose answer is known in
closed form.
"""

from attnlens.attribution.explanations.document_example import Example
from attnlens.attribution.explanations.passes import (
    Attention,
    EmbeddingForward,
    EmbeddingGradient,
    Gradients,
    attention_pass,
    grad_attention_score,
    gradient_pass,
    received_scores,
    rollout_scores,
    value_norm_scores,
)
from attnlens.attribution.explanations.sentence_occlusion import (
    SENTENCE_ENDS,
    occlude_sentences,
    occlusion_batch,
    occlusion_scores,
    sentence_spans,
)

__all__ = [
    "SENTENCE_ENDS",
    "Attention",
    "EmbeddingForward",
    "EmbeddingGradient",
    "Example",
    "Gradients",
    "attention_pass",
    "grad_attention_score",
    "gradient_pass",
    "occlude_sentences",
    "occlusion_batch",
    "occlusion_scores",
    "received_scores",
    "rollout_scores",
    "sentence_spans",
    "value_norm_scores",
]
