"""Rules of ``workflow/rules/model.smk``: the base model, fine-tuning and the prediction pass."""

from __future__ import annotations

import argparse
import json
import logging
import os

from accelerate import PartialState

from attnlens.classifier.fine_tuning import METRICS_SCHEMA, MODEL_SCHEMA, train_classifier
from attnlens.classifier.prediction import encode_examples, predict_logits
from attnlens.classifier.selection import PREDICTIONS_SCHEMA, SELECTION_SCHEMA, roles_left_out, select_examples
from attnlens.data.sources import MANIFEST_SCHEMA, load_examples
from attnlens.device import place
from attnlens.io import Job, StrPath, load_json, provenance, save_json, save_parquet, save_pretrained, set_job
from attnlens.models import architecture
from attnlens.models.checkpoints import load_classifier
from attnlens.models.loading import build_base_model, import_classifier
from attnlens.pipeline.config import ModelConfig, PredictConfig, TrainConfig, rule_section
from attnlens.pipeline.entry import stage
from attnlens.pipeline.runtime import JobClock, first_seed, log_to, use_threads, write_job_record
from attnlens.tasks import get_task, output_labels, task_of

log = logging.getLogger(__name__)


BASE_MODEL_SCHEMA = "base_model/v1"


@stage("model")
def run_build_base_model(cfg: ModelConfig, manifest_path: StrPath, out_dir: StrPath) -> None:
    """Rule ``build_base_model``: the model fine-tuning starts from, with the head of the dataset's task
    (``problem_type``, so that its loss is the task's) and the names of its outputs (the class names)."""
    manifest = load_json(manifest_path, MANIFEST_SCHEMA)
    task = get_task(manifest.get("task"))
    names = task.output_names(manifest["classes"])
    model, tokenizer = build_base_model(cfg, task.n_outputs(len(names)), task.head)
    model.config.problem_type = task.problem_type
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {c: i for i, c in enumerate(names)}
    n_params = sum(p.numel() for p in model.parameters())
    log.info("base model: %s from %s, %d parameters", cfg.source, cfg.name_or_path, n_params)
    log.info("max_length %d; %s", tokenizer.model_max_length, architecture(model).describe(model.config))
    save_pretrained(model, tokenizer, out_dir, provenance(BASE_MODEL_SCHEMA, cfg.to_dict(), cfg.seed))


@stage("model")
def run_import_classifier(cfg: ModelConfig, manifest_path: StrPath, out_dir: StrPath) -> dict:
    """Rule ``import_classifier`` (``model.source: classifier``): an already fine-tuned classifier,
    saved as ``results/models/finetuned`` with its weights unchanged, in place of fine-tuning.

    The log and the model's provenance say where its length and window came from (config or checkpoint);
    a config value that replaces a different checkpoint value is also a run note.
    """
    manifest = load_json(manifest_path, MANIFEST_SCHEMA)
    names = list(get_task(manifest.get("task")).output_names(manifest["classes"]))
    model, tokenizer, shape = import_classifier(cfg, names)
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "existing classifier %s: %d parameters, labels %s",
        cfg.name_or_path,
        n_params,
        list(model.config.id2label.values()),
    )
    log.info("%s", shape.describe())
    notes = [f"{line}: the classifier sees inputs unlike those it was fine-tuned on" for line in shape.overrides()]
    for note in notes:
        log.warning("%s", note)
    shape_record = {
        "max_length": shape.max_length,
        "attention_window": shape.windows,
        "origin": shape.origin,
        "checkpoint": shape.checkpoint,
    }
    prov = provenance(
        MODEL_SCHEMA, cfg.to_dict(), None, imported_from=cfg.name_or_path, shape=shape_record, notes=notes
    )
    save_pretrained(model, tokenizer, out_dir, prov)
    return shape_record


def run_train_classifier(
    cfg: TrainConfig,
    base_dir: StrPath,
    train_path: StrPath,
    test_path: StrPath,
    model_dir: StrPath,
    metrics_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``train_classifier``: fine-tune the base model; save it (safetensors) and ``train_metrics.json``."""
    model, tokenizer = load_classifier(base_dir)
    train_df, _ = load_examples(train_path)
    test_df, _ = load_examples(test_path)
    model, metrics = train_classifier(model, tokenizer, train_df, test_df, cfg, device)

    state = PartialState()
    if state.is_main_process:  # under `accelerate launch`, one process writes
        prov = provenance(MODEL_SCHEMA, cfg.to_dict(), cfg.seed, base_model=str(base_dir))
        save_pretrained(model, tokenizer, model_dir, prov)
        save_json(metrics, metrics_path, provenance(METRICS_SCHEMA, cfg.to_dict(), cfg.seed))
    state.wait_for_everyone()
    return metrics


def train_classifier_command(argv: list[str] | None = None) -> None:
    """Rule ``train_classifier`` as a command (``workflow/scripts/train_classifier.py``), for ``accelerate launch``.
    One process per GPU when launched by ``accelerate launch --multi_gpu --num_processes N``; a plain
    ``python`` call is the single-device run. Logging and errors go to ``--log-file`` (rank 0; other
    ranks append to ``<log-file>.rank<k>``).
    """
    clock = JobClock()
    doc = train_classifier_command.__doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="train_classifier.py", description=doc)
    # option names no launcher abbreviates to its own (accelerate's --config_file, torchrun's --log-dir)
    parser.add_argument(
        "--train-config", required=True, help='the keys it reads as JSON: {"train": {...}, "model": {"device": "auto"}}'
    )
    for name in ("base-dir", "train-data", "test-data", "model-dir", "metrics-file", "log-file"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--n-threads", type=int, default=1)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    section = json.loads(args.train_config)
    # a shell rule sees only its own section: the run configuration's hash stays unknown here
    cfg = rule_section(section, "train")
    device = rule_section(section, "model").device if "model" in section else "auto"  # the rule passes it
    set_job(Job("train_classifier", section, first_seed(section), None))
    with log_to(args.log_file if rank == 0 else f"{args.log_file}.rank{rank}"):
        use_threads(args.n_threads)
        run_train_classifier(
            cfg, args.base_dir, args.train_data, args.test_data, args.model_dir, args.metrics_file, device
        )
    if rank == 0:
        inputs = [args.base_dir, args.train_data, args.test_data]
        write_job_record("train_classifier", inputs, [args.model_dir, args.metrics_file], args.log_file, clock=clock)


@stage("predict")
def run_predict(
    cfg: PredictConfig,
    model_dir: StrPath,
    test_path: StrPath,
    predictions_path: StrPath,
    metrics_path: StrPath,
    selection_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``predict``: test-split predictions (parquet), metrics (JSON) and ``selection.json``."""
    model, tokenizer = load_classifier(model_dir)
    place(model, device)
    examples, _ = load_examples(test_path)
    task = task_of(model.config)
    encoded = encode_examples(tokenizer, examples, task)
    logits = predict_logits(model, encoded, cfg.batch_size)
    frame = task.predictions(examples, logits, encoded)
    names = output_labels(model.config)
    metrics = {
        "task": task.name,
        **task.metrics(examples["label"].to_numpy(), logits, encoded, names),
        "n_examples": len(frame),
    }
    log.info("test: %s", metrics)
    selection = select_examples(frame, cfg.seed, cfg.extra_ids, task, names)
    left_out = roles_left_out(frame, cfg.seed, task, names)
    notes = [f"showcase role {r['role']} left out: {r['why']}" for r in left_out]
    metric_notes = task.metric_notes(metrics)
    for note in notes + metric_notes:
        log.warning("%s", note)
    prov = provenance(PREDICTIONS_SCHEMA, cfg.to_dict(), cfg.seed, model=str(model_dir))
    save_parquet(frame, predictions_path, prov)
    save_json(
        metrics,
        metrics_path,
        provenance(PREDICTIONS_SCHEMA, cfg.to_dict(), cfg.seed, model=str(model_dir), notes=metric_notes),
    )
    save_json(
        {"task": task.name, "examples": selection, "left_out": left_out},
        selection_path,
        provenance(SELECTION_SCHEMA, cfg.to_dict(), cfg.seed, notes=notes),
    )
    return metrics
