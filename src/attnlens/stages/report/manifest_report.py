"""``results/manifest.json``: every artifact of the run, its rule and its inputs' hashes.

A light job (:mod:`attnlens.stages.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import pandas as pd

from attnlens.io import (
    StrPath,
    config_sha256,
    provenance,
    save_csv,
    save_json,
)
from attnlens.pipeline.entry import stage
from attnlens.pipeline.manifest import MANIFEST_SCHEMA, NO_NOTES, artifact_notes, build_manifest, lacking_provenance

logger = logging.getLogger(__name__)


@stage()
def run_manifest(
    run_config: dict[str, Any], targets: Sequence[str], logs_dir: StrPath, out_path: StrPath, notes_path: StrPath
) -> dict[str, Any]:
    """Rule ``manifest``: write ``results/manifest.json`` and the run notes (``results/run_notes.csv``)."""
    artifacts = build_manifest(targets, logs_dir)
    notes = artifact_notes(artifacts)
    for n in notes:
        logger.warning("%s (%s): %s", n["artifact"], n["rule"], n["note"])
    rows = notes or [{"artifact": "", "rule": "", "note": NO_NOTES}]
    save_csv(pd.DataFrame(rows, columns=["artifact", "rule", "note"]), notes_path, provenance("run_notes/v1"))
    missing = lacking_provenance(artifacts)
    summary = {
        "n_artifacts": len(artifacts),
        "n_files": sum(len(a.get("files", [])) or 1 for a in artifacts),
        "rules": sorted({a["rule"] for a in artifacts if a["rule"]}),
        "run_config_sha256": config_sha256(run_config),
        "without_provenance": missing,
        "n_notes": len(notes),
    }
    save_json({"summary": summary, "artifacts": artifacts}, out_path, provenance(MANIFEST_SCHEMA, None, None))
    logger.info(
        "%d artifacts (%d files) from %d rules", summary["n_artifacts"], summary["n_files"], len(summary["rules"])
    )
    return summary
