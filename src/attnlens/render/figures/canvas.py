"""matplotlib headless (Agg, text never parsed as mathtext), saving a figure with its provenance and notes, and the
figure a rule draws when it has nothing to draw."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from attnlens.io import PROVENANCE_KEY, artifact_provenance, atomic_path

matplotlib.rcParams["text.parse_math"] = False  # "$…$" in an example id or a token is text, not mathtext


SCALES = ("log", "linear", "rank")


def save_figure(fig, stem: str | Path, dpi: int = 150, notes: list[str] | None = None) -> list[Path]:
    """Write ``<stem>.png`` and ``<stem>.pdf`` atomically, with provenance (and run ``notes``) in their metadata,
    and close the figure."""
    stem = Path(stem)
    written = []
    for suffix in (".png", ".pdf"):
        path = stem.with_suffix(suffix)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format=suffix[1:], metadata=figure_metadata(suffix, notes))
        written.append(path)
    plt.close(fig)
    return written


def figure_metadata(suffix: str, notes: list[str] | None = None) -> dict:
    """Metadata of a figure file: the job's provenance as JSON (PNG text chunk ``attnlens``, PDF ``Subject``).

    It holds no creation time, so a figure stays reproducible byte for byte. ``notes`` go to the run notes.
    """
    record = artifact_provenance("figure")
    if notes:
        record["notes"] = list(notes)
    prov = json.dumps(record, sort_keys=True)
    if suffix == ".png":
        return {"Software": "attnlens", PROVENANCE_KEY: prov}
    return {"Creator": "attnlens", "CreationDate": None, "Subject": prov}


def plot_skipped(stem, what: str, why: str, dpi: int = 150, notes: list[str] | None = None) -> list[Path]:
    """A figure that says it was skipped and why, in place of one whose subject this run does not have."""
    fig, ax = plt.subplots(figsize=(8, 2.5))
    # wrapped here: matplotlib's own wrapping measures text as mathtext whatever text.parse_math says
    lines = [*textwrap.wrap(f"{what}: skipped", 90), *textwrap.wrap(why, 90)]
    ax.text(0.5, 0.5, "\n".join(lines), ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return save_figure(fig, stem, dpi, notes)
