"""Rules of ``workflow/rules/report.smk``: the explorer pages and ``results/manifest.json``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from attnlens.attention.summaries import load_bands
from attnlens.attribution.explanations import load_explanations, scores_by_example
from attnlens.attribution.faithfulness import example_evidence
from attnlens.attribution.ig import load_attributions
from attnlens.config import ExplorerConfig
from attnlens.data import load_examples
from attnlens.importance import load_importance
from attnlens.io import (
    StrPath,
    atomic_dir,
    atomic_path,
    config_sha256,
    file_stem,
    load_json,
    provenance,
    save_csv,
    save_json,
)
from attnlens.manifest import MANIFEST_SCHEMA, NO_NOTES, artifact_notes, build_manifest, lacking_provenance
from attnlens.models.loading import load_tokenizer
from attnlens.render.explorer import EXPLORER_SCHEMA, document_for, payload, render_explorer
from attnlens.selection import load_selection

logger = logging.getLogger(__name__)


def run_build_explorers(
    cfg: ExplorerConfig,
    bands_paths: Sequence[StrPath],
    attribution_paths: Sequence[StrPath],
    importance_path: StrPath,
    selection_path: StrPath,
    test_path: StrPath,
    rationales_path: StrPath,
    manifest_path: StrPath,
    model_dir: StrPath,
    out_dir: StrPath,
    explanation_paths: Sequence[StrPath] = (),
) -> list[Path]:
    """Rule ``build_explorers``: ``<role>_<example>.html`` for every showcased example (one page per example),
    with one overlay per explanation method when the ``explain`` shards are given."""
    tokenizer = load_tokenizer(model_dir)
    importance = load_importance(importance_path, cfg.importance)
    attributions = load_attributions(attribution_paths).set_index("example_id")
    examples, _ = load_examples(test_path)
    text_of = dict(zip(examples["example_id"].astype(str), examples["text"], strict=True))
    rationales = pd.read_parquet(rationales_path)
    evidence_rows = rationales[rationales["evidence"]] if len(rationales) else rationales
    class_names = list(load_json(manifest_path)["classes"])
    explained = scores_by_example(load_explanations(explanation_paths)) if explanation_paths else {}
    selection = load_selection(selection_path)
    roles: dict[str, list[str]] = {}
    first: dict[str, dict] = {}
    for e in selection:
        roles.setdefault(e["example_id"], []).append(e["role"])
        first.setdefault(e["example_id"], e)
    prov = provenance(EXPLORER_SCHEMA, cfg.to_dict(), None)
    prov.pop("created")
    written = []
    with atomic_dir(out_dir) as tmp:
        for eid, example in first.items():
            bands, ids = load_bands(bands_paths, eid)
            ids = [int(i) for i in ids]
            evidence = None
            if len(rationales):
                spans = evidence_rows.loc[evidence_rows["example_id"] == eid, ["char_start", "char_end"]]
                evidence = example_evidence(tokenizer, text_of[eid], ids, [tuple(s) for s in spans.to_numpy()], eid)
            doc = document_for(
                example, roles[eid], bands, ids, attributions.loc[eid], importance, tokenizer, class_names,
                evidence, cfg.top_k, prov, explained.get(eid),
            )  # fmt: skip
            meta, blob = payload(doc)
            name = f"{file_stem(eid)}.html"
            with atomic_path(tmp / name) as out:
                out.write_text(render_explorer(meta, blob), encoding="utf-8")
            size = (tmp / name).stat().st_size
            logger.info("%s: %d tokens, %d views, top-%d: %.2f MB", eid, len(ids), len(doc.views.received),
                        cfg.top_k, size / 1e6)  # fmt: skip
            written.append(Path(out_dir) / name)
    return written


def run_manifest(
    config: dict[str, Any], targets: Sequence[str], logs_dir: StrPath, out_path: StrPath, notes_path: StrPath
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
        "run_config_sha256": config_sha256(config),
        "without_provenance": missing,
        "n_notes": len(notes),
    }
    save_json({"summary": summary, "artifacts": artifacts}, out_path, provenance(MANIFEST_SCHEMA, None, None))
    logger.info("%d artifacts (%d files) from %d rules", summary["n_artifacts"], summary["n_files"],
                len(summary["rules"]))  # fmt: skip
    return summary
