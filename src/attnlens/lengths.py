"""How long a model reads: a sliding window fits the length it slides over. A leaf: the config's checks and the
model builders read it alike.
"""

from __future__ import annotations

from attnlens.errors import InputError


def check_window_fits(max_length: int, windows: list[int], where: str = "config") -> None:
    """A sliding window wider than the maximum length is a configuration mistake (it silently degenerates into
    full attention): checked on the config as given and again on the length and window a run resolves.

    Raises:
        InputError: naming ``model.attention_window``.
    """
    for w in windows:
        if w > max_length:
            raise InputError(
                where, "model.attention_window", f"expected at most model.max_length ({max_length}), got {w}"
            )
