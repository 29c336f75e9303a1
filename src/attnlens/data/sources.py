"""Datasets: load a source, check it, split it, write ``{train,test}.parquet`` and a manifest.

Sources (``data.source``):

* ``synthetic`` — the generated long-document corpus of :mod:`attnlens.data.corpus` (default);
* ``hub`` — a Hugging Face dataset (``data.hub.name``/``config``/``revision``), using its own
  ``train_split`` / ``test_split`` when ``test_split`` is set;
* ``file`` — one CSV, JSONL or parquet file with text and label columns (and optionally a
  ``split`` column with ``train``/``test`` values, taken as the source's own split);
* ``folders`` — one folder of UTF-8 ``.txt`` files per class (``data.classes`` in label order),
  like the paper's arXiv ``cs.AI``/``cs.PL`` folders; ``<path>/train/<class>`` and
  ``<path>/test/<class>`` are taken as the source's own split.

Without a split of its own, a source is split by a seeded stratified draw of
``round(test_fraction · n_c)`` test examples per class. Example ids are stable: the
``id_column`` when configured, else derived from the source position (``syn00042``,
``row000042``, ``train-000042``, ``cs.AI/paper17``). Every check raises one
:class:`~attnlens.errors.InputError` naming the file and the field.

A ``cfg`` is the ``data`` config section as the stage builds it (:class:`~attnlens.pipeline.config.DataConfig`): the
numerics take it as data and never import the pipeline.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.data.corpus import GENERATORS
from attnlens.data.layouts import Columns, get_layout, source_name
from attnlens.errors import InputError
from attnlens.io import load_parquet
from attnlens.registry import Registry
from attnlens.tasks import CLASSIFICATION, Task, get_task

log = logging.getLogger(__name__)

SPLITS = ("train", "test")
EXAMPLES_SCHEMA = "examples/v1"
RATIONALES_SCHEMA = "rationales/v1"
MANIFEST_SCHEMA = "split_manifest/v1"
_RATIONALE_COLUMNS = {
    "example_id": "object",
    "phrase": "object",
    "char_start": "int64",
    "char_end": "int64",
    "phrase_label": "int64",
    "evidence": "bool",
}


@dataclass(frozen=True)
class Source:
    """What a loader returns: examples (``example_id, text, label[, split]``), class names, rationales, and the
    rows its layout left out (:mod:`attnlens.data.layouts`)."""

    examples: pd.DataFrame
    classes: tuple[str, ...]
    where: str
    rationales: pd.DataFrame | None = None
    left_out: dict[str, int] = field(default_factory=dict)  # rows a layout left out, by reason
    #: how an error names the label field (a file's or hub dataset's column: :func:`label_column`)
    label_field: str = "label"


# --------------------------------------------------------------------------------------------- loaders


def _load_synthetic(cfg) -> Source:
    corpus = GENERATORS.get(cfg.task)(cfg.synthetic, cfg.seed)
    log.info("synthetic corpus: %d documents, %d labels flipped", len(corpus.documents), len(corpus.flipped))
    return Source(corpus.documents, corpus.classes, "synthetic corpus", corpus.rationales)


def read_table(path: Path) -> pd.DataFrame:
    suffix = "".join(path.suffixes[-1:]).lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path, encoding="utf-8-sig", keep_default_na=False, na_values=[""])
        if suffix in (".jsonl", ".json"):
            return pd.read_json(path, lines=not _json_array(path), encoding="utf-8-sig", dtype=False)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except UnicodeDecodeError as err:
        raise InputError(
            str(path),
            "(encoding)",
            f"expected UTF-8 text, found byte {err.object[err.start]:#04x} at offset {err.start}",
        ) from None
    except ValueError as err:
        raise InputError(str(path), "(format)", f"expected valid {suffix[1:]}: {str(err).splitlines()[0]}") from None
    raise InputError(str(path), "(suffix)", f"expected .csv, .json, .jsonl or .parquet, got {suffix or 'none'!r}")


def _json_array(path: Path) -> bool:
    """Whether a JSON file is one array of records (HotpotQA's, SQuAD-like dumps) rather than one record a line."""
    with open(path, encoding="utf-8-sig", errors="replace") as fh:
        while chunk := fh.read(4096):
            if stripped := chunk.lstrip():
                return stripped.startswith("[")
    return False


def label_column(df: pd.DataFrame, cfg):
    """``cfg`` reading the labels from the column the dataset has: where ``data.label_column`` is not a column of
    ``df`` and the task's own name for its labels is (:attr:`~attnlens.tasks.Task.dataset_label_column`: SQuAD's
    ``answers`` for question answering), that column."""
    own = get_task(cfg.task).dataset_label_column
    if cfg.label_columns or cfg.label_column in df.columns or own is None or own not in df.columns:
        return cfg
    log.info("data.label_column %r is not a column: the labels are read from %r", cfg.label_column, own)
    return dataclasses.replace(cfg, label_column=own)


def label_cells(df: pd.DataFrame, cfg, where: str) -> pd.Series:
    """A table's label column, or, with ``data.label_columns`` (a multi-label dataset with one 0/1 column per
    label), each row's labels as the list of those columns it has set (named by ``data.classes`` when given).
    A missing column, or a cell of a label column that is not 0, 1 or a boolean, names its row."""
    columns = cfg.label_columns or [cfg.label_column]
    for column in (cfg.text_column, *columns):
        if column not in df.columns:
            raise InputError(where, column, f"expected a column {column!r}; found {list(map(str, df.columns))}")
    if not cfg.label_columns:
        return df[cfg.label_column]
    names = list(label_names(cfg))
    flags = []
    for column in cfg.label_columns:
        values = df[column].map(lambda v: v.strip().lower() if isinstance(v, str) else v)
        flag = values.map(
            lambda v: True if v in (1, True, "1", "true") else False if v in (0, False, "0", "false") else None
        )
        if flag.isna().any():
            i = int(np.flatnonzero(flag.isna().to_numpy())[0])
            raise InputError(
                where,
                column,
                "expected 0 or 1 (or false / true: this label absent or present) in every "
                f"row, row {i + 1} has {df[column].iloc[i]!r}",
            )
        flags.append(flag.to_numpy(dtype=bool))
    hot = np.stack(flags, axis=1) if len(df) else np.zeros((0, len(names)), dtype=bool)
    return pd.Series([[n for n, on in zip(names, row, strict=True) if on] for row in hot], index=df.index, dtype=object)


def extra_columns(df: pd.DataFrame, cfg, where: str) -> dict[str, pd.Series]:
    """The columns the task reads beyond text and label (:attr:`attnlens.tasks.Task.extra_columns`: a question),
    each from the column ``data.<name>_column`` names; a missing one names the column. The task's optional columns
    (:attr:`attnlens.tasks.Task.optional_columns`) where their key names one, each cell read by its parser."""
    out = {}
    task = get_task(cfg.task)
    optional = {n: parse for n, parse in task.optional_columns.items() if getattr(cfg, f"{n}_column") is not None}
    for name in (*task.extra_columns, *optional):
        column = getattr(cfg, f"{name}_column")
        if column not in df.columns:
            raise InputError(
                where,
                column,
                f"expected a {name} column {column!r} for data.task {cfg.task!r}; found {list(map(str, df.columns))}",
            )
        out[name] = df[column].to_numpy()
    for name, parse in optional.items():
        cells = []
        for i, cell in enumerate(out[name]):
            try:
                cells.append(parse(cell))
            except ValueError as err:
                raise InputError(where, getattr(cfg, f"{name}_column"), f"row {i + 1}: {err}") from None
        out[name] = pd.Series(cells, dtype=object).to_numpy()
    return out


def label_names(cfg) -> list[str] | None:
    """The labels' names a file or hub source declares: ``data.classes``, else its label columns (one column per
    label), else none (the labels name themselves)."""
    return cfg.classes or cfg.label_columns


def label_field(cfg) -> str:
    """How an error names the label field of a file or hub source: its column, or its label columns."""
    return "|".join(cfg.label_columns) if cfg.label_columns else cfg.label_column


def paragraphs_joined(texts: pd.Series) -> pd.Series:
    """A text column in which a document may be a list of paragraphs (ECtHR's facts, a note's sections: a JSONL or
    parquet list, a hub dataset's sequence) as text: the paragraphs joined by a blank line. Other cells as they are
    (an empty list becomes an empty text, which :func:`check_examples` refuses)."""

    def join(cell):
        if isinstance(cell, list | tuple | np.ndarray) and all(isinstance(p, str) for p in cell):
            return "\n\n".join(cell)
        return cell

    return texts.map(join)


def _table_examples(df: pd.DataFrame, cfg, where: str, id_of) -> tuple[pd.DataFrame, list[dict], dict]:
    """A file's or a hub split's rows as examples (``example_id, text, label`` and the task's extra columns), laid
    out by ``data.layout`` (:mod:`attnlens.data.layouts`): with the rationales it annotates and the rows it left out, by
    reason. The result's index is the source's rows kept (their positions); ``id_of(i)`` names the source's row ``i``
    without ``data.id_column``."""
    columns = Columns(cfg.text_column, cfg.label_column, cfg.question_column, cfg.sources_column, cfg.task)
    laid = get_layout(cfg.layout).lay_out(df, columns, where)
    df = laid.frame
    labels = label_cells(df, cfg, where)
    if cfg.id_column is not None and cfg.id_column not in df.columns:
        raise InputError(where, cfg.id_column, f"expected an id column {cfg.id_column!r}")
    ids = df[cfg.id_column].astype(str).tolist() if cfg.id_column else [id_of(i) for i in df.index]
    extra = {name: np.asarray(values) for name, values in extra_columns(df, cfg, where).items()}
    out = pd.DataFrame(
        {
            "example_id": ids,
            "text": paragraphs_joined(df[cfg.text_column]).to_numpy(),
            "label": labels.to_numpy(),
            **extra,
        },
        index=df.index,
    )
    rationales = [{**{k: v for k, v in r.items() if k != "row"}, "example_id": ids[r["row"]]} for r in laid.rationales]
    return out, rationales, laid.left_out


def _rationale_frame(rows: list[dict] | None) -> pd.DataFrame | None:
    if not rows:
        return None
    return pd.DataFrame(rows)[list(_RATIONALE_COLUMNS)].astype(_RATIONALE_COLUMNS)


def _load_file(cfg) -> Source:
    path = Path(cfg.path)
    if not path.is_file():
        raise InputError(str(path), "data.path", "expected an existing CSV, JSON(L) or parquet file")
    df = read_table(path)
    cfg = label_column(df, cfg)
    out, rationales, left_out = _table_examples(df, cfg, str(path), lambda i: f"row{i:06d}")
    if "split" in df.columns:
        split = df["split"].astype(str).to_numpy()[out.index]  # the kept rows' own split
        bad = sorted(set(split) - set(SPLITS))
        if bad:
            raise InputError(str(path), "split", f"expected values 'train' or 'test', got {bad[:3]}")
        out["split"] = split
    out = out.reset_index(drop=True)
    out["label"], classes = get_task(cfg.task).resolve_labels(
        out["label"], out["example_id"], label_names(cfg), str(path), label_field(cfg)
    )
    return Source(out, classes, str(path), _rationale_frame(rationales), left_out, label_field(cfg))


def _read_text(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8-sig")  # a byte-order mark is not text
    except UnicodeDecodeError as err:
        raise InputError(
            str(file),
            "(encoding)",
            f"expected UTF-8 text, found byte {err.object[err.start]:#04x} at offset {err.start}",
        ) from None


def inside(root: Path, path: Path, field: str) -> Path:
    """``path`` if it resolves (links followed, ``..`` applied) inside ``root``; else one :class:`InputError`.

    A class named ``../outside`` or a file linked to ``/etc/passwd`` would otherwise be read as data.
    """
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise InputError(
            str(path), field, f"expected a path inside data.path {str(root)!r}, it resolves to {str(resolved)!r}"
        )
    return path


def _load_folders(cfg) -> Source:
    root = Path(cfg.path)
    if not root.is_dir():
        raise InputError(str(root), "data.path", "expected a folder with one sub-folder of .txt files per class")
    own_split = (root / "train").is_dir() and (root / "test").is_dir()
    rows = []
    for split in SPLITS if own_split else (None,):
        base = root / split if split else root
        for label, name in enumerate(cfg.classes):
            folder = inside(root, base / name, f"data.classes[{label}]")
            if not folder.is_dir():
                raise InputError(
                    str(folder), f"data.classes[{label}]", "expected a folder of .txt files for this class"
                )
            files = sorted(folder.glob("*.txt"))
            if not files:
                raise InputError(str(folder), f"data.classes[{label}]", "expected at least one .txt file, found none")
            for file in files:
                prefix = f"{split}/" if split else ""
                text = _read_text(inside(root, file, f"data.classes[{label}]"))
                if not text.strip():
                    raise InputError(str(file), "text", "expected non-empty text, the file is empty or whitespace")
                row = {"example_id": f"{prefix}{name}/{file.stem}", "text": text, "label": label}
                if split:
                    row["split"] = split
                rows.append(row)
    return Source(pd.DataFrame(rows), tuple(cfg.classes), str(root))


def _load_hub(cfg) -> Source:
    import datasets  # noqa: PLC0415 (only the hub source needs it, and it is slow to import)

    hub = cfg.hub
    where = f"hub:{hub.name}"
    splits = [hub.train_split] + ([hub.test_split] if hub.test_split else [])
    frames, rationales, left_out = [], [], Counter()
    for split in splits:
        try:
            ds = datasets.load_dataset(hub.name, hub.config, split=split, revision=hub.revision)
        except Exception as err:
            raise InputError(
                "config",
                "data.hub.name",
                f"could not load {hub.name!r} split {split!r} from the Hugging Face Hub "
                f"({type(err).__name__}; offline or unknown id); use data.source 'file' or 'folders' offline",
            ) from None
        frame = ds.to_pandas()
        cfg = label_column(frame, cfg)
        part, found, dropped = _table_examples(
            frame, cfg, f"{where}[{split}]", lambda i, split=split: f"{split}-{i:06d}"
        )
        if hub.test_split:
            part["split"] = "train" if split == hub.train_split else "test"
        frames.append(part)
        rationales += found
        left_out.update(dropped)
    out = pd.concat(frames, ignore_index=True)
    out["label"], classes = get_task(cfg.task).resolve_labels(
        out["label"], out["example_id"], label_names(cfg), where, label_field(cfg)
    )
    return Source(out, classes, where, _rationale_frame(rationales), dict(left_out), label_field(cfg))


#: The loader of each ``data.source``.
LOADERS: Registry[Callable[..., Source]] = Registry("data sources", "data.source")
LOADERS.register(_load_synthetic, "synthetic")
LOADERS.register(_load_file, "file")
LOADERS.register(_load_folders, "folders")
LOADERS.register(_load_hub, "hub")


# --------------------------------------------------------------------------------------------- checks


def check_examples(
    source: Source,
    label_field: str = "label",
    text_field: str = "text",
    task: Task = CLASSIFICATION,
    fields: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Check ids, texts and labels; return the examples with the task's labels (int64 classes; float64 values).

    Raises:
        InputError: duplicate ids, missing/empty/whitespace-only text, labels the task rejects (a classification's:
            non-integer labels, labels outside ``0..K-1`` for ``K`` classes, or fewer than two classes; a
            regression's: values that are not finite numbers).
    """
    df = source.examples.reset_index(drop=True)
    where = source.where
    if df.empty:
        raise InputError(where, text_field, "expected at least one example, found none")
    dup = df["example_id"][df["example_id"].duplicated()]
    if len(dup):
        raise InputError(where, "example_id", f"expected unique ids, {dup.iloc[0]!r} occurs more than once")
    texts = df["text"]
    missing = texts.isna()
    if missing.any():
        i = int(np.flatnonzero(missing.to_numpy())[0])
        raise InputError(where, text_field, f"expected non-empty text, example {df['example_id'].iloc[i]!r} has none")
    not_str = texts.map(lambda t: not isinstance(t, str))
    if not_str.any():
        i = int(np.flatnonzero(not_str.to_numpy())[0])
        raise InputError(
            where, text_field, f"expected text, got {texts.iloc[i]!r} for example {df['example_id'].iloc[i]!r}"
        )
    blank = texts.str.strip() == ""
    if blank.any():
        i = int(np.flatnonzero(blank.to_numpy())[0])
        raise InputError(
            where, text_field, f"expected non-empty text, example {df['example_id'].iloc[i]!r} is empty or whitespace"
        )
    df["label"] = task.check_labels(df["label"], source.classes, where, label_field)
    task.check_rows(df, where, {"label": label_field, "text": text_field, **(fields or {})})
    return df


def compute_split(labels: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """Seeded stratified split: ``True`` marks the test examples.

    Each class ``c`` with ``n_c`` examples contributes ``round(test_fraction · n_c)`` test examples
    (at least one, and at least one left for training), chosen by a permutation drawn from ``seed``.
    """
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        n_test = min(max(1, round(test_fraction * len(idx))), len(idx) - 1)
        is_test[rng.permutation(idx)[:n_test]] = True
    return is_test


def _assign_splits(df: pd.DataFrame, cfg, where: str, label_field: str, task: Task) -> pd.DataFrame:
    if "split" in df.columns:
        return df
    strata = task.strata(df["label"].to_numpy(), where, label_field)
    df = df.copy()
    df["split"] = np.where(compute_split(strata, cfg.test_fraction, cfg.seed), "test", "train")
    return df


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------- run


def prepare_dataset(cfg) -> tuple[dict[str, pd.DataFrame], pd.DataFrame, dict]:
    """Load, check and split the configured source (pure: no files written).

    Returns:
        ``({"train": df, "test": df}, rationales, manifest)`` — frames with ``example_id, text, label`` (the
        labels of ``data.task``: :mod:`attnlens.tasks`); rationales (empty unless the source plants them); the split
        manifest dictionary, which names the task.
    """
    source = LOADERS.get(cfg.source)(cfg)
    task = get_task(cfg.task)
    label_name = source.label_field
    text_field = cfg.text_column if cfg.source in ("file", "hub") else "text"
    given = [n for n in task.optional_columns if cfg.source in ("file", "hub") and getattr(cfg, f"{n}_column")]
    fields = {
        n: getattr(cfg, f"{n}_column") if cfg.source in ("file", "hub") else n for n in (*task.extra_columns, *given)
    }
    df = _assign_splits(
        check_examples(source, label_name, text_field, task, fields), cfg, source.where, label_name, task
    )
    task.check_splits(
        df["label"].to_numpy(), (df["split"] == "train").to_numpy(), source.classes, source.where, label_name
    )
    if (df["split"] == "test").sum() == 0:
        raise InputError(source.where, "split", "expected at least one test example")
    columns = ["example_id", "text", "label", *task.extra_columns, *given]
    columns += [c for c in task.kept_if_given if c in df.columns]
    frames = {s: df[df["split"] == s][columns].reset_index(drop=True) for s in SPLITS}
    rationales = source.rationales
    if rationales is None:
        rationales = pd.DataFrame({c: pd.Series(dtype=t) for c, t in _RATIONALE_COLUMNS.items()})
    manifest = {
        "source": source.where,
        "name": source_name(cfg.source, cfg.path, cfg.hub.name),
        "seed": cfg.seed,
        "task": task.name,
        "classes": list(source.classes),
        "left_out": dict(source.left_out),
        "counts": {s: task.summary(frames[s]["label"].to_numpy(), source.classes) for s in SPLITS},
        "examples": [
            {"example_id": r.example_id, "split": s, "label": task.label_value(r.label), "sha256": sha256_text(r.text)}
            for s in SPLITS
            for r in frames[s].itertuples(index=False)
        ],
    }
    return frames, rationales, manifest


def load_examples(path) -> tuple[pd.DataFrame, dict]:
    """Read a split written by :func:`run_prepare_dataset` (``example_id, text, label``) and its provenance."""
    return load_parquet(path, EXAMPLES_SCHEMA)
