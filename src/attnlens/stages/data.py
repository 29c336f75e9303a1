"""Rules of ``workflow/rules/data.smk``: the dataset splits, rationales and split manifest."""

from __future__ import annotations

import logging

from attnlens.data.layouts import left_out_note
from attnlens.data.reading import encode_splits, token_counts, truncation, truncation_note, unknown_note, unknown_tokens
from attnlens.data.sources import EXAMPLES_SCHEMA, MANIFEST_SCHEMA, RATIONALES_SCHEMA, prepare_dataset
from attnlens.errors import InputError
from attnlens.io import StrPath, provenance, save_json, save_parquet
from attnlens.models.checkpoints import gguf_parsed_once, resolve_pretrained, source_tokenizer
from attnlens.models.loading import check_labels, resolve_max_length, source_config
from attnlens.pipeline.config import DataConfig, ModelConfig
from attnlens.pipeline.entry import stage
from attnlens.tasks import get_task, task_of

log = logging.getLogger(__name__)


@stage("data", "model")
def run_prepare_dataset(
    cfg: DataConfig,
    model_cfg: ModelConfig,
    train_path: StrPath,
    test_path: StrPath,
    rationales_path: StrPath,
    manifest_path: StrPath,
) -> None:
    """Rule ``prepare_dataset``: write the splits, the rationales and ``split_manifest.json``.

    The manifest also says how many tokens of every document the model will see: documents longer than
    ``model.max_length`` (the checkpoint's own length when it is null) are cut there by every later stage, and
    the manifest, the log and the run notes (``notes`` in the manifest's provenance, gathered into
    ``results/run_notes.csv``) count what was cut, and the rows ``data.layout`` left out. They also state the share
    of ``[UNK]`` among each split's content tokens, with a warning above
    :data:`attnlens.data.reading.UNKNOWN_WARN_SHARE`.
    An existing classifier (``model.source: classifier``) must predict the dataset's classes.
    """
    frames, rationales, manifest = prepare_dataset(cfg)
    # a wrong checkpoint, or a classifier of other classes, fails before any file is written; a GGUF file is parsed
    # once for its configuration and its tokenizer
    with gguf_parsed_once(resolve_pretrained(model_cfg.name_or_path)):
        src_config = source_config(model_cfg.name_or_path, model_cfg.source)
        if model_cfg.source == "classifier":
            task = get_task(manifest["task"])
            if task_of(src_config) is not task:
                raise InputError(
                    "config",
                    "model.name_or_path",
                    f"expected a {task.label} model for data.task "
                    f"{task.name!r}, {model_cfg.name_or_path!r} is a {task_of(src_config).label} model "
                    f"(problem_type {src_config.problem_type!r})",
                )
            check_labels(list(task.output_names(manifest["classes"])), src_config, model_cfg.name_or_path)
        max_length = resolve_max_length(model_cfg, src_config)
        tokenizer = source_tokenizer(model_cfg.name_or_path, max_length)
    ids = encode_splits(tokenizer, frames, get_task(manifest["task"]))
    cut = truncation(manifest, token_counts(ids), max_length)
    notes = [n for n in [left_out_note(manifest["source"], manifest["left_out"], cfg.layout)] if n]
    notes += [n for split in cut if (n := truncation_note(split, cut[split], max_length))]
    manifest["unknown_tokens"] = unknown_tokens(tokenizer, ids, max_length)
    notes += [
        unknown_note(split, summary, tokenizer.unk_token) for split, summary in manifest["unknown_tokens"].items()
    ]
    for split, path in (("train", train_path), ("test", test_path)):
        prov = provenance(EXAMPLES_SCHEMA, cfg.to_dict(), cfg.seed, split=split, classes=manifest["classes"])
        save_parquet(frames[split], path, prov)
        log.info("%s: %d examples %s", split, len(frames[split]), manifest["counts"][split])
    for note in notes:
        log.warning("%s", note)
    save_parquet(rationales, rationales_path, provenance(RATIONALES_SCHEMA, cfg.to_dict(), cfg.seed))
    section = {"data": cfg.to_dict(), "model": model_cfg.to_dict()}
    save_json(manifest, manifest_path, provenance(MANIFEST_SCHEMA, section, cfg.seed, notes=notes))
