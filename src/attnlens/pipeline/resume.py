"""Where a sharded job keeps each finished unit of work (an example and target, an answer), so that a job killed
midway resumes where it stopped — and never from another config's or another input file's results.

A job's units go under ``.<output>.partial/`` beside its output, each named by a fingerprint of the job's config
section and input files (path, size, mtime) and by the unit's key; the folder is removed once the output is
written. A unit read back is the rows it wrote, value for value (parquet keeps every float64 and list as it was).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from attnlens.io import atomic_path


def fingerprint(section: dict, inputs: Sequence) -> str:
    """What a unit is reused for: the same config section and the same input files (path, size, mtime); a folder's
    files each count."""
    stats = []
    for root in map(Path, inputs):
        for f in sorted([root] if root.is_file() else root.rglob("*")):
            if f.is_file():
                st = f.stat()
                stats.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    return hashlib.sha256(json.dumps([section, stats], sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Resumable:
    """One job's finished units under :func:`fingerprint` (``resumed``: how many were read back)."""

    folder: Path
    fingerprint: str
    resumed: int = 0

    @classmethod
    def beside(cls, out_path, section: dict, inputs: Sequence) -> Resumable:
        """The units of the job writing ``out_path``, for its config ``section`` and ``inputs``."""
        out = Path(out_path)
        folder = out.parent / f".{out.name}.partial"
        folder.mkdir(parents=True, exist_ok=True)
        return cls(folder, fingerprint(section, [p for p in inputs if p]))

    def path(self, *key: Any) -> Path:
        """The file of the unit named by ``key`` (an example id, a target, …)."""
        name = hashlib.sha256("\x00".join(map(str, key)).encode()).hexdigest()[:16]
        return self.folder / f"{self.fingerprint}-{name}.parquet"

    def rows(self, key: tuple, compute: Callable[[], list[dict]]) -> list[dict]:
        """The rows of unit ``key``: read back where a killed run of this job finished it, else computed and kept."""
        path = self.path(*key)
        if path.exists():
            self.resumed += 1
            return pq.read_table(path).to_pylist()
        rows = compute()
        with atomic_path(path) as tmp:
            pd.DataFrame(rows).to_parquet(tmp)
        return rows

    def finish(self) -> None:
        """Remove the units once the job's output is written."""
        for f in self.folder.glob("*.parquet"):
            f.unlink()
        self.folder.rmdir()
