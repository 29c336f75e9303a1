"""One 34-token sequence and its ablations, deleted or masked, shared by the tests of the ablation engines
(tests/unit/generation/test_ablation.py, test_prefix_tree.py): two template tokens, six sources of four tokens, a
template token and a three-token answer (the last five tokens after the sources), and the decoder families that
score them."""

from __future__ import annotations

import numpy as np
import torch

KINDS = ["llama", "mistral", "qwen2", "qwen3", "gemma3"]
#: The sources' token spans.
SPANS = [(2 + 4 * s, 6 + 4 * s) for s in range(6)]


def ablations(masks: np.ndarray, removal: str) -> tuple[list[int], list[list[int]], list[list[int]] | None]:
    """The full sequence, each mask's sequence (its removed sources' tokens cut out, ``delete``, or kept and flagged
    0, ``mask``) and the keep flags (None for ``delete``)."""
    full = torch.randint(5, 60, (34,), generator=torch.Generator().manual_seed(8)).tolist()
    if removal == "delete":
        deleted = [[t for i, t in enumerate(full) if all(m[s] or not a <= i < b for s, (a, b) in enumerate(SPANS))]
                   for m in masks]  # fmt: skip
        return full, deleted, None
    keep = [[int(all(m[s] or not a <= i < b for s, (a, b) in enumerate(SPANS))) for i in range(34)] for m in masks]
    return full, [full] * len(masks), keep
