"""Artifact I/O: one atomic-write helper, parquet / safetensors / JSON with provenance, model folders.

Every file the pipeline writes goes through :func:`atomic_path` (or :func:`atomic_dir` for
``save_pretrained`` folders): the writer fills a temporary sibling that is renamed over the final
name only when the writer returned, so a crash, a walltime kill or bad input never leaves a
half-written artifact. Every artifact carries provenance — the schema id, the config section that
made it, the package version, the git commit and the seed — in its own metadata (parquet schema
metadata, safetensors metadata, a ``provenance`` key in JSON, ``provenance.json`` in model folders).
No pickle anywhere.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from safetensors import SafetensorError, safe_open

from attnlens.errors import InputError
from attnlens.version import __version__

if TYPE_CHECKING:
    import torch

#: A path argument: a string or any ``os.PathLike`` (what ``run_*`` functions accept).
StrPath = str | os.PathLike[str]

PROVENANCE_KEY = "attnlens"


def _remove_stale(folder: Path, prefix: str, suffix: str) -> None:
    """Delete temporaries ``<prefix><pid><suffix>`` left by writers that were killed (their PID is gone)."""
    for tmp in folder.glob(f"{prefix}*{suffix}"):
        pid = tmp.name[len(prefix) : len(tmp.name) - len(suffix) if suffix else None]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # the writer is dead: its half-written file can go
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)
        except PermissionError:  # alive, another user's
            continue


@contextmanager
def atomic_path(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``final``; rename it onto ``final`` when the block succeeds.

    The temporary name keeps the suffix, so writers that infer the format from it still work.
    On an exception the temporary file is removed and ``final`` is left untouched.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(final.parent, f".{final.stem}.tmp-", final.suffix)
    tmp = final.with_name(f".{final.stem}.tmp-{os.getpid()}{final.suffix}")
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Like :func:`atomic_path` for a folder (``save_pretrained`` output): fill a temporary folder, then rename."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(final.parent, f".{final.name}.tmp-", "")
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def file_stem(name: str) -> str:
    """A file-name-safe form of an example id (``class/stem`` ids of the folders source contain ``/``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))


@functools.lru_cache(maxsize=1)
def git_commit() -> str:
    """The commit of the checkout the package runs from, ``+dirty`` when it has local changes, else ``unknown``."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def config_sha256(config: Mapping[str, Any] | None) -> str | None:
    """SHA-256 of a configuration (section) as canonical JSON: equal settings, equal hash."""
    if config is None:
        return None
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Job:
    """The Snakemake job a process runs for (set by :func:`attnlens.pipeline.runtime.rule_job`)."""

    rule: str
    config: Mapping[str, Any] | None  # the rule's ``params.cfg``, or all its params by name
    seed: int | None
    run_config_sha256: str | None  # hash of the whole run configuration


_JOB: Job | None = None


def set_job(job: Job | None) -> None:
    """Make ``job`` the current job (``None`` outside a rule)."""
    global _JOB
    _JOB = job


def provenance(schema: str, config: Mapping[str, Any] | None = None, seed: int | None = None, **extra: Any) -> dict:
    """The provenance record stored with an artifact.

    It names the schema, the package version, the git commit, the creation time, the seed, the
    config section and its SHA-256; inside a rule also the rule and the hash of the whole run
    configuration.
    """
    config = dict(config) if config is not None else None
    record = {
        "schema": schema,
        "attnlens_version": __version__,
        "git_commit": git_commit(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "config": config,
        "config_sha256": config_sha256(config),
    }
    if _JOB is not None:
        record["rule"] = _JOB.rule
        record["run_config_sha256"] = _JOB.run_config_sha256
    record.update(extra)
    return record


def artifact_provenance(kind: str) -> dict:
    """Provenance of a figure or table: the job's section, hash and seed; no time, so files stay reproducible."""
    job = _JOB
    record = provenance(f"{kind}/v1", job.config if job else None, job.seed if job else None)
    del record["created"]
    return record


def sidecar_path(stem: str | os.PathLike) -> Path:
    """``<stem>.provenance.json``: the provenance of every file ``<stem>.*`` that cannot hold metadata itself."""
    stem = Path(stem)
    return stem.with_name(stem.name + ".provenance.json")


def write_sidecar(stem: str | os.PathLike, files: list[str], prov: Mapping[str, Any] | None = None) -> Path:
    """Write the provenance sidecar of ``<stem>.*`` (tables: CSV, TeX, Markdown), naming the files it covers."""
    record = {**(prov or artifact_provenance("table")), "files": sorted(files)}
    path = sidecar_path(stem)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


#: First characters that make a spreadsheet read a cell as a formula (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _inert_cell(value: Any) -> Any:
    if (
        isinstance(value, str)
        and value.startswith(_FORMULA_START)
        and value not in ("-", "+", "@")
        and not _NUMBER.fullmatch(value)
    ):
        return "'" + value
    return value


def spreadsheet_safe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell (and column name) that a spreadsheet would run as a formula — ``=cmd|…``,
    ``+1+1``, ``-2+3``, ``@SUM(…)`` — prefixed with ``'``, which spreadsheets show as text. Numbers, numeric
    strings and a lone ``-``, ``+`` or ``@`` token are left as they are. Every CSV attnlens writes goes
    through it."""
    out = df.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = out[column].map(_inert_cell)
    out.columns = [_inert_cell(c) for c in out.columns]
    return out


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """``df`` as CSV (index dropped), formula cells neutralised (:func:`spreadsheet_safe`)."""
    spreadsheet_safe(df).to_csv(path, index=False)


def read_csv_table(path: str | os.PathLike) -> pd.DataFrame:
    """A CSV table attnlens wrote (:func:`write_csv`): numbers as numbers, an empty cell as NaN.

    Raises:
        InputError: no such file, or not a CSV table.
    """
    path = Path(path)
    try:
        return pd.read_csv(path, encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "file", "expected a CSV table written by attnlens, found nothing") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise InputError(str(path), "file", f"expected a CSV table ({str(err).splitlines()[0]})") from None


def save_csv(df: pd.DataFrame, path: str | os.PathLike, prov: Mapping[str, Any] | None = None) -> Path:
    """A CSV table (index dropped, formula cells neutralised), atomically, with its provenance sidecar."""
    path = Path(path)
    with atomic_path(path) as tmp:
        write_csv(df, tmp)
    write_sidecar(path.with_suffix(""), [path.name], prov)
    return path


def _check_schema(found: Mapping[str, Any] | None, schema: str | None, path: Path) -> dict:
    if found is None:
        raise InputError(str(path), "provenance", "expected an attnlens artifact with provenance metadata")
    if schema is not None and found.get("schema") != schema:
        raise InputError(str(path), "schema", f"expected {schema!r}, got {found.get('schema')!r}")
    return dict(found)


def save_parquet(
    df: pd.DataFrame, path: str | os.PathLike, prov: Mapping[str, Any], columns: pa.Schema | None = None
) -> None:
    """Write ``df`` (index dropped) with ``prov`` as JSON in the schema metadata.

    With ``columns`` (the artifact's arrow schema) the file holds exactly those columns with those types,
    also when ``df`` has no rows: an empty shard is a normal, typed artifact that every reader concatenates.
    """
    if columns is None:
        table = pa.Table.from_pandas(df, preserve_index=False)
    elif len(df) == 0:
        table = columns.empty_table()
    else:
        missing = [name for name in columns.names if name not in df.columns]
        if missing:
            raise ValueError(f"{path}: the frame lacks the artifact's columns {missing}")
        table = pa.Table.from_pandas(df[columns.names], schema=columns, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[PROVENANCE_KEY.encode()] = json.dumps(prov, sort_keys=True).encode()
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def load_parquet(
    path: str | os.PathLike, schema: str | None = None, columns: pa.Schema | None = None
) -> tuple[pd.DataFrame, dict]:
    """Read a parquet artifact and its provenance; check the schema id, and the columns when given."""
    path = Path(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(str(path), "file", f"expected a parquet file ({str(err).splitlines()[0]})") from None
    raw = (table.schema.metadata or {}).get(PROVENANCE_KEY.encode())
    prov = _check_schema(json.loads(raw) if raw else None, schema, path)
    if columns is not None:
        missing = [name for name in columns.names if name not in table.column_names]
        if missing:
            raise InputError(
                str(path),
                "columns",
                f"expected the columns {missing} of {schema or 'the artifact'} (an older attnlens wrote it: "
                "re-run the rule that writes it with --forcerun)",
            )
    return table.to_pandas(), prov


def load_shards(paths: Sequence[str | os.PathLike], schema: str, columns: pa.Schema) -> pd.DataFrame:
    """The shards of one sharded artifact, concatenated: empty shards add nothing, and no shard with a
    row still gives a frame with every column, typed as ``columns`` says."""
    frames = [load_parquet(p, schema, columns)[0] for p in paths]
    frames = [f for f in frames if len(f)]
    if not frames:
        return columns.empty_table().to_pandas()
    return pd.concat(frames, ignore_index=True)


def save_json(obj: Mapping[str, Any], path: str | os.PathLike, prov: Mapping[str, Any]) -> None:
    """Write a small dictionary as indented JSON with a ``provenance`` key."""
    payload = {"provenance": dict(prov), **obj}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def load_json(path: str | os.PathLike, schema: str | None = None) -> dict:
    """Read a JSON artifact written by :func:`save_json`; check the schema id when given."""
    path = Path(path)
    payload = json.loads(path.read_text(encoding="utf-8"))
    _check_schema(payload.get("provenance"), schema, path)
    return payload


def save_tensors(tensors: Mapping[str, Any], path: str | os.PathLike, prov: Mapping[str, Any]) -> None:
    """Write torch tensors to safetensors, provenance JSON under the metadata key ``attnlens``."""
    from safetensors.torch import save_file  # noqa: PLC0415 (torch: the tensor writers only; light jobs never load it)

    with atomic_path(path) as tmp:
        save_file(
            {k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata={PROVENANCE_KEY: json.dumps(prov)}
        )


def pack_strings(strings: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Strings as tensors a safetensors file can hold: UTF-8 bytes ``(B,)`` uint8 and offsets ``(n + 1,)`` int64."""
    import torch  # noqa: PLC0415 (torch: the tensor writers only; light jobs never load it)

    encoded = [str(s).encode("utf-8") for s in strings]
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()
    offsets = np.cumsum([0, *map(len, encoded)]).astype(np.int64)
    return torch.from_numpy(data), torch.from_numpy(offsets)


def unpack_strings(data: torch.Tensor | np.ndarray, offsets: torch.Tensor | np.ndarray) -> list[str]:
    """The inverse of :func:`pack_strings` (torch tensors or, as :func:`load_tensors` reads them for light jobs,
    numpy arrays)."""
    raw = np.asarray(data).tobytes()
    return [raw[a:b].decode("utf-8") for a, b in itertools.pairwise(np.asarray(offsets).tolist())]


def load_tensors(path: str | os.PathLike, schema: str | None = None, framework: str = "pt") -> tuple[dict, dict]:
    """Read a safetensors artifact and its provenance: as torch tensors, or with ``framework="np"`` as numpy arrays
    (the same values; a light job reads them so without importing torch)."""
    path = Path(path)
    try:
        with safe_open(str(path), framework) as fh:
            meta = fh.metadata() or {}
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not a mapping)
    except SafetensorError as err:
        raise InputError(
            str(path), "file", f"expected a complete safetensors file, it is truncated or corrupt ({err})"
        ) from None
    raw = meta.get(PROVENANCE_KEY)
    return tensors, _check_schema(json.loads(raw) if raw else None, schema, path)


def save_pretrained(model, tokenizer, path: str | os.PathLike, prov: Mapping[str, Any]) -> None:
    """``save_pretrained`` model (safetensors) + tokenizer + ``provenance.json``, atomically."""
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        (tmp / "provenance.json").write_text(json.dumps(dict(prov), indent=2) + "\n", encoding="utf-8")


def load_model_provenance(path: str | os.PathLike, schema: str | None = None) -> dict:
    path = Path(path)
    file = path / "provenance.json"
    found = json.loads(file.read_text(encoding="utf-8")) if file.exists() else None
    return _check_schema(found, schema, path)
