"""Rules of ``workflow/rules/data.smk``: the dataset splits, rationales and split manifest."""

from __future__ import annotations

import logging

from attnlens.config import DataConfig
from attnlens.data import EXAMPLES_SCHEMA, MANIFEST_SCHEMA, RATIONALES_SCHEMA, prepare_dataset
from attnlens.io import StrPath, provenance, save_json, save_parquet

log = logging.getLogger(__name__)


def run_prepare_dataset(
    cfg: DataConfig, train_path: StrPath, test_path: StrPath, rationales_path: StrPath, manifest_path: StrPath
) -> None:
    """Rule ``prepare_dataset``: write the splits, the rationales and ``split_manifest.json``."""
    frames, rationales, manifest = prepare_dataset(cfg)
    for split, path in (("train", train_path), ("test", test_path)):
        prov = provenance(EXAMPLES_SCHEMA, cfg.to_dict(), cfg.seed, split=split, classes=manifest["classes"])
        save_parquet(frames[split], path, prov)
        log.info("%s: %d examples %s", split, len(frames[split]), manifest["counts"][split])
    save_parquet(rationales, rationales_path, provenance(RATIONALES_SCHEMA, cfg.to_dict(), cfg.seed))
    save_json(manifest, manifest_path, provenance(MANIFEST_SCHEMA, cfg.to_dict(), cfg.seed))
