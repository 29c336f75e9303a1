"""Attention in its native sparse form and everything computed on it, never the ``n × n`` matrix.

* :mod:`~attnlens.attention.band` — the band layout (window slots, global slots and rows) and its
  operations: received attention, top-k partners, binned heat-maps, layer configurations;
* :mod:`~attnlens.attention.kernels` — the compiled single-pass kernels those operations call;
* :mod:`~attnlens.attention.weighted` — attention weighted by what flows through it: value norms,
  rollout, gradient-weighted attention;
* :mod:`~attnlens.attention.summaries` — the per-example summaries of ``extract_attention`` and their
  artifact readers.

Reading a model's outputs into a band is the model seam's job (:mod:`attnlens.models`).
"""
