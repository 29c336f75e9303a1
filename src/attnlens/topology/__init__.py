"""Attention topology: mutual-information distances, persistence diagrams, bottleneck distances.

:mod:`attnlens.topology.pooling` pools a text's attention into units (torch, bands);
:mod:`attnlens.topology.persistence` turns pooled attention into MI, distances, diagrams and bottleneck
distances, and reads the diagrams back (numpy, scipy, gudhi: no torch).

The claim under test (a companion study): turn a text's attention into a mutual-information (MI)
matrix between its units, use ``MI⁻¹(I, J) = 2·ln 2 − MI(I, J)`` as a distance, take the
Vietoris–Rips persistent homology of that distance, and compare two texts by the bottleneck distance
between their persistence diagrams; small distance is said to mean semantically similar texts.

**Units.** Special tokens are dropped (CLS is global and soaks up attention; its row says nothing
about the text). The remaining tokens are pooled into units (``pooling``): consecutive chunks of
``chunk_size`` tokens (default), sentences (split after ``.``/``!``/``?`` tokens), or single tokens
(``none``, for short texts). The pooled attention of unit ``I`` to unit ``J`` in one layer and head is
``S[I, J] = (1/|I|) Σ_{i∈I} Σ_{j∈J} A[i, j]``: the attention mass a query of ``I`` sends to ``J`` on
average. On a band it is summed straight from the band (local window slots, the local rows'
global slots and the global tokens' own rows); pairs outside the band have zero attention, so they
add nothing to ``S`` and — when the whole unit pair lies outside the band — get MI 0, i.e. the
largest distance. Dense attention of any encoder is pooled the same way.

**Estimators** (each summed over the chosen layers and heads; ``0·log 0 = 0``):

* ``pooled_pmi`` (a): ``MI[I, J] = Σ_{l,h} max(0, log₂(S_lh[I, J] / (f_I f_J)))`` with ``f_I`` the
  mean, over the tokens of ``I``, of their token type's relative frequency in the text;
* ``joint_ppmi`` (b): ``P = S_lh / Σ S_lh`` (a joint distribution), ``r`` its row sums,
  ``MI[I, J] = Σ_{l,h} max(0, log₂(P[I, J] / (r_I r_J)))``;
* ``xlogy`` (c): ``P`` as in (b), ``r`` and ``c`` its row and column sums,
  ``MI[I, J] = Σ_{l,h} max(0, P[I, J] · ln(P[I, J] / (r_I c_J + ε)))`` — the pointwise summand of
  ``I(P)`` (nats), with ``ε`` guarding empty rows and columns.

Negative pointwise terms (less co-attention than independence predicts) are set to 0: ``MI⁻¹`` needs
``MI ≥ 0``, and "no information" is the natural reading. ``MI`` is made symmetric by
``(MI + MIᵀ) / 2``.

**Distance.** ``MI`` is not bounded by ``2 ln 2`` (PPMI of a peaked ``m``-unit distribution reaches
``log₂ m``), so ``2 ln 2 − MI`` can be negative. ``distance: rescale`` (default) maps each text's
largest off-diagonal MI to 0 and MI 0 to ``2 ln 2``: ``d = 2 ln 2 · (1 − MI / max MI)`` — every
distance lies in ``[0, 2 ln 2]``, and texts of different lengths and attention sharpness are
compared by the shape of their MI structure. ``distance: clip`` is the literal formula clipped at 0,
``d = max(0, 2 ln 2 − MI)``, which saturates (many distances 0) when MI is large. The diagonal is 0.

**Persistence.** gudhi's Rips complex of ``d`` up to ``max_dimension`` (H0, H1 by default), optionally
truncated at ``max_edge_length`` or sparsified (gudhi's ``sparse`` parameter). Infinite bars (the one
H0 component that never dies, and any class still alive at the truncation) are kept with their flag
and capped at the filtration's end (``2 ln 2`` or ``max_edge_length``) so bottleneck distances stay
finite and comparable; the cap is recorded.
"""
