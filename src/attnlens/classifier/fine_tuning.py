"""Fine-tuning the classifier with accelerate (multi-GPU ready, fp16 on CUDA, fp32 on CPU).

The recipe is the paper's (§2.1 of ``docs/recipes.md``) with the Trainer's implicit defaults made
explicit: AdamW (β = 0.9/0.999, ε = 1e-8), weight decay on every weight but biases and normalisation layers,
linear warm-up then linear decay to zero, gradient clipping, gradient accumulation, optional
gradient checkpointing, and an explicit global-attention mask on CLS (fixed behaviour: never rely
on the model's implicit default). Everything random — head initialisation was done by
``build_base_model``; dropout and shuffling here — is seeded, so two runs on one CPU give identical weights
(a CPU with other vector kernels orders float sums differently, so its weights can differ in their last
bits, and each training step carries such differences on).

A ``cfg`` is the ``train`` config section as the stage builds it (:class:`~attnlens.pipeline.config.TrainConfig`): the
numerics take it as data and never import the pipeline.
"""

from __future__ import annotations

import logging
import random
import time

import numpy as np
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from attnlens.classifier.prediction import encode_examples, predict_logits
from attnlens.device import autocast_dtype, resolve_device
from attnlens.models import architecture
from attnlens.tasks import output_labels, task_of

log = logging.getLogger(__name__)

METRICS_SCHEMA = "train_metrics/v1"
MODEL_SCHEMA = "classifier/v1"


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch, and ask torch for deterministic kernels where they exist.

    Deterministic mode would also fill every new tensor with NaN (``fill_uninitialized_memory``), a
    debugging aid that writes each activation twice; it is switched off, since no kernel here reads memory
    it has not written (the same numbers, 3–4 % less time per training step on a CPU).
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False


#: torch's normalisation layers; an architecture's own (Llama's ``LlamaRMSNorm``, …) are known by their class name.
NORM_LAYERS = (
    torch.nn.LayerNorm,
    torch.nn.RMSNorm,
    torch.nn.GroupNorm,
    torch.nn.LocalResponseNorm,
    torch.nn.modules.batchnorm._NormBase,  # batch and instance norms
)


def is_norm_layer(module: torch.nn.Module) -> bool:
    """A normalisation layer, by its kind: one of torch's, or a class of its own whose name ends in ``Norm``."""
    return isinstance(module, NORM_LAYERS) or type(module).__name__.lower().endswith("norm")


def no_decay_names(model: torch.nn.Module) -> set[str]:
    """The trainable parameters left out of weight decay: every bias, and every parameter of a normalisation layer
    (:func:`is_norm_layer`), whatever the architecture names them (BERT's ``LayerNorm``, ModernBERT's ``attn_norm``
    and ``mlp_norm``, a decoder's ``input_layernorm``), as the paper's Trainer meant for its biases and LayerNorms."""
    out = set()
    for prefix, module in model.named_modules():
        norm = is_norm_layer(module)
        for name, param in module.named_parameters(prefix=prefix, recurse=False):
            if param.requires_grad and (norm or name.rsplit(".", 1)[-1] == "bias"):
                out.add(name)
    return out


def _param_groups(model, weight_decay: float) -> list[dict]:
    left_out = no_decay_names(model)
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if name in left_out else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _checkpointing(model, enabled: bool) -> None:
    """Switch gradient (activation) checkpointing; transformers 5 renamed the methods."""
    kwargs = {"use_reentrant": False}
    if enabled and hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif enabled:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        disable = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
        disable()


def mixed_precision(device: torch.device, cfg) -> str:
    """accelerate's ``mixed_precision`` for training on ``device``: ``bf16`` where ``train.bf16`` asks for it and
    ``fp16`` where ``train.fp16`` does, on CUDA only (bf16 first); else ``no`` (float32)."""
    if cfg.bf16 and torch.device(device).type == "cuda":
        return "bf16"
    return "fp16" if autocast_dtype(device, cfg.fp16) is not None else "no"


def train_classifier(model, tokenizer, train_df, eval_df, cfg, device: str = "auto") -> tuple[object, dict]:
    """Fine-tune ``model`` on ``train_df`` (``text, label``); evaluate on ``eval_df`` after each epoch.

    ``device`` (``model.device``) goes through the one device policy (:func:`attnlens.device.resolve_device`);
    accelerate then places the model (one process per GPU under ``accelerate launch``), in mixed precision where
    the device is CUDA and ``cfg.bf16`` (bfloat16) or ``cfg.fp16`` (float16, with loss scaling) asks for it
    (:func:`mixed_precision`).

    Returns:
        The trained (unwrapped) model and the metrics: per epoch ``train_loss``, ``eval_loss`` (the head's loss:
        the task's, :func:`attnlens.tasks.task_of`), the task's metrics (``accuracy``, ``macro_f1`` …; ``mse``,
        ``pearson`` …) and ``seconds``; plus device, precision and optimiser steps.
    """
    seed_everything(cfg.seed)
    model_device = resolve_device(device)
    precision = mixed_precision(model_device, cfg)
    if model_device.type == "cuda" and model_device.index is not None:
        torch.cuda.set_device(model_device)  # accelerate's single process takes the current device
    accelerator = Accelerator(
        mixed_precision=precision,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        cpu=model_device.type == "cpu",  # several CPU processes (torchrun) then train as one, over gloo
    )
    if cfg.gradient_checkpointing:
        _checkpointing(model, True)
    task = task_of(model.config)
    train_enc = encode_examples(tokenizer, train_df, task)
    eval_enc = encode_examples(tokenizer, eval_df, task)
    train_labels = {
        k: torch.from_numpy(np.array(v, copy=True))  # writable: a frame's column may not be
        for k, v in task.head_labels(train_df["label"].to_numpy(), train_enc).items()
    }
    eval_labels = eval_df["label"].to_numpy().copy()
    n = len(train_df)
    # one process per GPU under `accelerate launch`: each step, process k takes the k-th of P consecutive
    # batches of the shuffled order; at the epoch's end a process with nothing left repeats one example,
    # so all processes step together (P = 1 is the single-device loop, number for number)
    n_proc, rank = accelerator.num_processes, accelerator.process_index
    batches_per_epoch = -(-n // (cfg.batch_size * n_proc))
    steps_per_epoch = -(-batches_per_epoch // cfg.gradient_accumulation_steps)
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.999), eps=1e-8)
    scheduler = get_linear_schedule_with_warmup(optimizer, round(cfg.warmup_ratio * total_steps), total_steps)
    arch, names = architecture(model), output_labels(model.config)  # before accelerate wraps the model
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    generator = torch.Generator().manual_seed(cfg.seed)
    history = []
    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        model.train()
        t0 = time.perf_counter()
        order = torch.randperm(n, generator=generator).tolist()
        losses = []
        bar = tqdm(range(batches_per_epoch), desc=f"epoch {epoch + 1}/{cfg.epochs}", mininterval=5)
        for b in bar:
            start_at = (b * n_proc + rank) * cfg.batch_size
            index = [order[i % n] for i in range(start_at, min(start_at + cfg.batch_size, n))] or [order[start_at % n]]
            batch = train_enc.batch(index, accelerator.device, arch)
            with accelerator.accumulate(model):
                out = model(**batch, **{k: v[index].to(accelerator.device) for k, v in train_labels.items()})
                accelerator.backward(out.loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            losses.append(out.loss.item())
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}")
        logits = predict_logits(accelerator.unwrap_model(model), eval_enc, cfg.eval_batch_size)
        row = {
            "epoch": epoch + 1,
            "train_loss": float(np.mean(losses)),
            "eval_loss": task.eval_loss(logits, eval_labels, eval_enc),
            **task.metrics(eval_labels, logits, eval_enc, names),
            "seconds": round(time.perf_counter() - t0, 2),
        }
        history.append(row)
        log.info("epoch %d: %s", epoch + 1, row)
    model = accelerator.unwrap_model(model)
    if cfg.gradient_checkpointing:
        _checkpointing(model, False)
    metrics = {
        "epochs": history,
        "train_seconds": round(time.perf_counter() - start, 2),
        "optimizer_steps": total_steps,
        "n_train": n,
        "n_eval": len(eval_labels),
        "device": str(accelerator.device),
        "processes": n_proc,
        "mixed_precision": "fp32" if precision == "no" else precision,
        "torch_threads": torch.get_num_threads(),
    }
    return model.eval(), metrics
