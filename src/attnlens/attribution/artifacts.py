"""What the attribution rules write and read back: the shards of ``attribute``, ``attribute_embeddings`` and
``explain``, and the generation study's ablations, answer scores and judgements — their schemas and columns, and the
readers (the methods' names, labels and signs: :mod:`attnlens.attribution.methods`).

Plain pandas and pyarrow: the rules that tabulate and draw attributions read them without loading a model
(the computations: :mod:`attnlens.attribution.ig`, :mod:`attnlens.attribution.explanations`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.io import load_json, load_parquet, load_shards
from attnlens.tasks import Task

# --- integrated gradients (attribute, attribute_embeddings) -------------------------------------------

ATTRIBUTION_SCHEMA = "attributions/v2"


EMBEDDING_SCHEMA = "embedding_attributions/v1"


EMBEDDING_LAYERS = ("word", "position", "token_type")


#: Columns of an ``attribute`` shard, one row per example and explained target (an empty shard has them too):
#: ``target`` is the column of ``F`` explained, ``target_rank`` its place among the document's targets (0: the
#: headline target, the only one of a classification or a regression; :meth:`attnlens.tasks.Task.targets`).
ATTRIBUTION_TYPES = pa.schema(
    [
        ("example_id", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("scores", pa.list_(pa.float64())),
        ("delta", pa.float64()),
        ("gap", pa.float64()),
        ("relative_delta", pa.float64()),
        ("n_steps", pa.int64()),
        ("converged", pa.bool_()),
        ("rounds_steps", pa.list_(pa.int32())),
        ("rounds_delta", pa.list_(pa.float64())),
        ("target", pa.int64()),
        ("target_rank", pa.int64()),
        ("target_kind", pa.string()),
        ("label", pa.int64()),
        ("probs", pa.list_(pa.float64())),
        ("probs_baseline", pa.list_(pa.float64())),
        ("showcased", pa.bool_()),
        ("seconds", pa.float64()),
    ]
)


ATTRIBUTION_COLUMNS = tuple(ATTRIBUTION_TYPES.names)


def attribution_types(task: Task) -> pa.Schema:
    """:data:`ATTRIBUTION_TYPES` with ``label`` typed as the task's labels (a regression's are float64);
    ``probs`` and ``probs_baseline`` hold ``F(x)`` and ``F(x′)``, every output of the task's readout."""
    at = ATTRIBUTION_TYPES.get_field_index("label")
    return ATTRIBUTION_TYPES.set(at, pa.field("label", task.label_type()))


#: Columns of ``attribute_embeddings``, one row per showcased example (``token_type``: legacy mode only).
EMBEDDING_TYPES = pa.schema(
    [
        ("example_id", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("mode", pa.string()),
        ("target", pa.int64()),
        ("word", pa.list_(pa.float64())),
        ("position", pa.list_(pa.float64())),
        ("token_type", pa.list_(pa.float64())),
        ("delta", pa.float64()),
        ("gap", pa.float64()),
        ("relative_delta", pa.float64()),
        ("converged", pa.bool_()),
    ]
)


def l2_normalise(scores: np.ndarray) -> np.ndarray:
    """``a / ‖a‖₂`` (recipes §9.1 step 6); all-zero vectors stay zero."""
    norm = float(np.linalg.norm(scores))
    return scores / norm if norm > 0 else np.zeros_like(scores)


def load_attributions(paths: Sequence, every_target: bool = False) -> pd.DataFrame:
    """Every shard of ``attribute``, concatenated: one row per example, its headline target's (``target_rank``
    0); with ``every_target``, one row per example and explained target, in target order."""
    frame = load_shards(paths, ATTRIBUTION_SCHEMA, ATTRIBUTION_TYPES)
    if not every_target:
        frame = frame[frame["target_rank"] == 0]
    return frame.sort_values(["example_id", "target_rank"], kind="stable").reset_index(drop=True)


def load_embedding_attributions(path) -> dict[str, dict]:
    """``{example_id: {"scores": {layer: (n,)}, "delta", "gap", "mode", "target", "converged"}}``."""
    frame, _ = load_parquet(path, EMBEDDING_SCHEMA)
    out = {}
    for row in frame.itertuples(index=False):
        scores = {name: np.asarray(getattr(row, name), dtype=np.float64) for name in EMBEDDING_LAYERS}
        scores = {k: v for k, v in scores.items() if v is not None and v.ndim == 1 and len(v)}
        out[row.example_id] = {
            "scores": scores,
            "delta": float(row.delta),
            "gap": float(row.gap),
            "mode": row.mode,
            "target": int(row.target),
            "converged": bool(getattr(row, "converged", True)),
        }
    return out


# --- the explanation methods (explain) ---------------------------------------------------------------

EXPLANATIONS_SCHEMA = "explanations/v3"


#: Columns of an ``explain`` shard, one row per example, explained target and method (an empty shard has them too):
#: ``target_rank`` as in :data:`ATTRIBUTION_TYPES` (0: the headline target, the only one unless
#: ``explanations.targets`` is ``every``).
EXPLANATION_TYPES = pa.schema(
    [
        ("example_id", pa.string()),
        ("method", pa.string()),
        ("input_ids", pa.list_(pa.int32())),
        ("scores", pa.list_(pa.float64())),
        ("target", pa.int64()),
        ("target_rank", pa.int64()),
        ("seconds", pa.float64()),
        ("forward_seconds", pa.float64()),
        ("n_forwards", pa.int64()),
        ("explained", pa.float64()),
        ("delta", pa.float64()),
    ]
)


def load_explanations(paths: Sequence, every_target: bool = False) -> pd.DataFrame:
    """Every shard of ``explain``, concatenated: one row per example and method, its headline target's
    (``target_rank`` 0); with ``every_target``, one row per example, explained target and method."""
    frame = load_shards(paths, EXPLANATIONS_SCHEMA, EXPLANATION_TYPES)
    if not every_target:
        frame = frame[frame["target_rank"] == 0]
    return frame.sort_values(["example_id", "target_rank", "method"], kind="stable").reset_index(drop=True)


def scores_by_example(frame: pd.DataFrame, order: Sequence[str] = ()) -> dict[str, dict[str, np.ndarray]]:
    """``{example_id: {method: (n,) scores}}`` of a :func:`load_explanations` frame, the methods in ``order`` (the
    stages pass the registry's, :func:`attnlens.attribution.methods.method_names`), any other after them."""
    out: dict[str, dict[str, np.ndarray]] = {}
    rank = {m: i for i, m in enumerate(order)}
    order = sorted(range(len(frame)), key=lambda r: rank.get(str(frame["method"].iloc[r]), len(rank)))
    for r in order:
        out.setdefault(str(frame["example_id"].iloc[r]), {})[str(frame["method"].iloc[r])] = np.asarray(
            frame["scores"].iloc[r], dtype=np.float64
        )
    return out


# --- answers (ablate_contexts, explain_answers, judge_answers) ----------------------------------------------------

ABLATIONS_SCHEMA = "generation_ablations/v2"
ANSWER_SCORES_SCHEMA = "answer_scores/v1"
JUDGED_SCHEMA = "answer_judgements/v1"
LEARNED_SCHEMA = "learned_attention/v1"

#: Columns of ``ablations/shard{k}.parquet``, one row an answer and kind of ablation: ``random`` (the surrogate's),
#: ``heldout`` (the linear datamodeling score's, none of them fitted), ``leave_one_out``, and ``every`` (all ``2ⁿ``,
#: for an answer of at most ``generation.exact_sources`` sources); each mask's answer token log-probabilities, then
#: its end token's where the answer has one (the response's ``end_id``), leave-one-out's Jensen–Shannon divergence
#: of each of those tokens' distributions from the whole context's (ARC-JSD's; empty for the other kinds), and the
#: kind's wall seconds.
ABLATION_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("kind", pa.string()),
        ("masks", pa.list_(pa.list_(pa.bool_()))),
        ("token_log_probs", pa.list_(pa.list_(pa.float64()))),
        ("token_jsd", pa.list_(pa.list_(pa.float64()))),
        ("seconds", pa.float64()),
    ]
)

#: Columns of ``scores/shard{k}.parquet``, one row an answer and method: its source scores and what they cost.
ANSWER_SCORE_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("method", pa.string()),
        ("scores", pa.list_(pa.float64())),
        ("seconds", pa.float64()),
        ("forward_seconds", pa.float64()),
        ("n_forwards", pa.int64()),
        ("n_backwards", pa.int64()),
        ("peak_bytes", pa.int64()),
        ("explained", pa.float64()),
        ("delta", pa.float64()),
    ]
)


#: Columns of ``judged/shard{k}.parquet``, one row an answer, method and metric (:data:`~.leaderboard.EXAMPLE_COLUMNS`).
JUDGED_COLUMNS = pa.schema(
    [
        ("example_id", pa.string()),
        ("method", pa.string()),
        ("metric", pa.string()),
        ("value", pa.float64()),
        ("chance", pa.float64()),
    ]
)


def load_answer_shards(paths, schema: str, columns: pa.Schema, answers) -> pd.DataFrame:
    """The shards of one answer artifact (``ablations``, ``scores``, ``judged``) as one frame, its rows in the order
    of ``answers`` (the responses' example ids) and, within an answer, as its shard wrote them: the frame one job
    writes, whatever the number of shards, so every reader's bootstrap draws the same answers."""
    frame = load_shards(paths, schema, columns)
    order = {str(eid): k for k, eid in enumerate(answers)}
    rank = frame["example_id"].map(order)
    if rank.isna().any():
        unknown = frame.loc[rank.isna(), "example_id"].iloc[0]
        raise InputError(str(paths[0]), "example_id", f"expected an answer of the responses, found {unknown!r}")
    return frame.iloc[np.argsort(rank.to_numpy(), kind="stable")].reset_index(drop=True)


def load_head_weights(path) -> np.ndarray:
    """Learned attention's ``(layers, heads)`` weights from ``fit_learned_attention``'s JSON."""
    record = load_json(path, LEARNED_SCHEMA)
    return np.asarray(record["weights"], dtype=np.float64)
