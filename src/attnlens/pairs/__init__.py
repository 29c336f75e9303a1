"""Token-pair attributions for Siamese encoders with integrated Jacobians (Moeller et al., EMNLP 2023, EACL 2024).

A Siamese encoder embeds each text on its own, ``e(a) = g(x_a)``, where ``x_a ∈ R^{n×d}`` is the
representation entering layer ``l`` and ``g`` runs the remaining layers and the pooling. The
similarity of two texts is ``s(a, b) = e(a)·e(b)`` for ``dot`` and ``ê(a)·ê(b)`` (unit vectors) for
``cosine``. With a reference input ``r`` of the same length (every non-special token replaced by
padding, the reference of the method) and ``Δ_a = x_a − r_a``, the path integral of the embedding
``φ`` (``g`` or ``g/|g|``) gives per token ``i`` a vector

    ``u_a[i] = ∫₀¹ J_φ(r_a + α Δ_a)[:, i, :] Δ_a[i] dα ∈ R^D``   (``Σ_i u_a[i] = φ(x_a) − φ(r_a)``),

and the token-pair attribution ``A[i, j] = u_a[i] · u_b[j]`` sums to

    ``Σ A = s(a, b) − s(a, r_b) − s(r_a, b) + s(r_a, r_b)``

up to the quadrature error of the integrals: the *attribution error* ``Σ A − target``.

**Approximate vs exact.** An off-the-shelf model (EACL 2024) is explained by ``A`` with the three
reference terms left over: ``Σ A − s(a, b)`` is their sum plus the quadrature error. The *exact*
variant (EMNLP 2023) changes the model so the reference terms vanish: the embedding is shifted,
``e'(x) = g(x) − g(r_x)``, and the similarity is the dot product of shifted embeddings
(``shifted_dot``), so ``e'(r) = 0`` and ``Σ A = s'(a, b)`` up to the quadrature error alone. The
shift is a constant, so ``A`` is the ``dot`` matrix; what changes is the score the model reports,
which is why the model is fine-tuned with the shift (:func:`train_pair_encoder`).

**Cost.** Each ``u_a[i]`` is a Jacobian–vector product with ``Δ_a`` restricted to token ``i``: all
(step, token) products run as forward-mode passes over batches of ``chunk`` copies of the sequence,
so the ``D × n × d`` Jacobian is never formed and memory grows with ``chunk``, not with ``D``. One
pass gives both the ``dot`` and the ``cosine`` vectors (chain rule through the normalisation).
Time grows as ``n² · N · (layers after l)`` per text.

:mod:`~attnlens.pairs.jacobians` (the method), :mod:`~attnlens.pairs.encoder` (the model it runs),
:mod:`~attnlens.pairs.encoder_training` (the exact variant's fine-tuning), :mod:`~attnlens.pairs.pair_artifacts`
(pairs and scores as files).
"""
