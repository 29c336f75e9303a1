"""Layer configurations: which layers a token's combined attention sums over (recipes §8, §11).

Plain Python, apart from the tensors: the rules that only name or select configurations (comparison, tables,
figures, findings) read them from here without loading torch.
"""

from __future__ import annotations

#: Layer configurations of recipes §11: the paper's "layer 12", all layers, lower and upper half.
LAYER_CONFIGURATIONS = ("last", "all", "lower", "upper")


def layer_slice(n_layers: int, layers: str) -> slice:
    """The layers of a configuration: ``last``, ``all``, ``lower`` (first half) or ``upper`` (second half)."""
    half = n_layers // 2
    chosen = {
        "last": slice(n_layers - 1, n_layers),
        "all": slice(0, n_layers),
        "lower": slice(0, half),
        "upper": slice(half, n_layers),
    }
    if layers not in chosen:
        raise ValueError(f"unknown layer configuration {layers!r}; expected one of {LAYER_CONFIGURATIONS}")
    return chosen[layers]
