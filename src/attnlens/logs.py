"""Route a rule's logging and stderr into its log file; turn bad input into one clear line.

Scripts wrap their one package call in :func:`log_to`. Inside, ``logging`` and ``sys.stderr``
(warnings, progress bars) go to the rule's log. An :class:`~attnlens.errors.InputError` is written
as a single ``attnlens: error: <file>: <field>: <expected>`` line to the log *and* to the terminal,
and the process exits with status 1 — no traceback. Any other exception is a bug: its traceback
goes to the log as usual.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from attnlens.errors import InputError


def error_line(err: InputError) -> str:
    return f"attnlens: error: {err}"


@contextmanager
def log_to(path: str | os.PathLike | None) -> Iterator[None]:
    """Send logging and stderr to ``path`` (append); report :class:`InputError` as one line and exit 1."""
    terminal = sys.stderr
    handle = open(path, "a", buffering=1, encoding="utf-8") if path else terminal  # noqa: SIM115
    root = logging.getLogger()
    handler = logging.StreamHandler(handle)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    sys.stderr = handle
    try:
        yield
    except InputError as err:
        print(error_line(err), file=handle, flush=True)
        if handle is not terminal:
            print(error_line(err), file=terminal, flush=True)
        raise SystemExit(1) from None
    finally:
        sys.stderr = terminal
        root.removeHandler(handler)
        if handle is not terminal:
            handle.close()


def use_threads(n: int) -> None:
    """Let torch use the ``threads`` Snakemake granted the job (never more than the machine has)."""
    import torch

    torch.set_num_threads(max(1, min(int(n), os.cpu_count() or 1)))
