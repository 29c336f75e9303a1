"""``results/manifest.json``: every artifact of a run, the rule that made it and the hashes of its inputs.

Each rule job leaves a record next to its log (:func:`attnlens.pipeline.runtime.write_job_record`: rule,
wildcards, input and output paths). The manifest starts from the run's final targets and follows
the records back through every input, so it lists exactly the artifacts the current run depends
on — stale records of files no longer produced are never reached. For every artifact it gives the
SHA-256 (a directory's hash covers the sorted names and hashes of its files, which are listed
too), its size, the producing rule and job, the SHA-256 of each input, and the provenance the file
carries (schema, package version, git commit, config hash, seed) when it has any. Inputs no rule
produced (a user's data file, say) appear with ``rule: null``.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from PIL import Image
from safetensors import safe_open

from attnlens.io import PROVENANCE_KEY, sidecar_path

MANIFEST_SCHEMA = "manifest/v1"
#: Files inside output folders that are bookkeeping, not results.
IGNORED = (".snakemake_timestamp",)
#: Figures and tables: every one must carry provenance (embedded, or in its ``<stem>.provenance.json``).
REPORTED = (".png", ".pdf", ".csv", ".tex", ".md", ".html")
#: Provenance fields copied into the manifest.
SUMMARY_KEYS = (
    "schema",
    "attnlens_version",
    "git_commit",
    "config_sha256",
    "run_config_sha256",
    "seed",
    "rule",
    "notes",
)
#: The run notes' row when no artifact has a note.
NO_NOTES = "nothing was cut, left out or outside its tolerance"


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def tree_files(path: Path) -> list[Path]:
    """Files of a directory artifact, sorted, bookkeeping and temporaries left out."""
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name not in IGNORED and ".tmp-" not in p.name)


def sha256_tree(path: str | Path) -> tuple[str, list[dict[str, Any]]]:
    """A directory's hash (over ``relative path NUL file hash`` lines) and its files' entries."""
    path = Path(path)
    files = []
    digest = hashlib.sha256()
    for f in tree_files(path):
        rel = f.relative_to(path).as_posix()
        h = sha256_file(f)
        digest.update(f"{rel}\0{h}\n".encode())
        files.append({"path": rel, "sha256": h, "bytes": f.stat().st_size})
    return digest.hexdigest(), files


def _pdf_subject(path: Path) -> str | None:
    """The ``/Subject`` string of a PDF's info dictionary (as matplotlib writes it: a literal string)."""
    raw = path.read_bytes()
    at = raw.rfind(b"/Subject (")
    if at < 0:
        return None
    out, i = bytearray(), at + len(b"/Subject (")
    depth = 0
    while i < len(raw):
        c = raw[i]
        if c == 0x5C:  # backslash escape
            out.append(raw[i + 1])
            i += 2
            continue
        if c == 0x28:
            depth += 1
        elif c == 0x29:
            if depth == 0:
                break
            depth -= 1
        out.append(c)
        i += 1
    return out.decode("latin-1")


def read_provenance(path: str | Path) -> dict[str, Any] | None:
    """The provenance an artifact carries: embedded metadata, ``provenance.json`` or a sidecar; ``None`` if none."""
    path = Path(path)
    try:
        if path.is_dir():
            f = path / "provenance.json"
            return json.loads(f.read_text(encoding="utf-8")) if f.exists() else None
        suffix = path.suffix
        if suffix == ".parquet":
            raw = (pq.read_schema(path).metadata or {}).get(PROVENANCE_KEY.encode())
            return json.loads(raw) if raw else None
        if suffix == ".safetensors":
            with safe_open(str(path), "np") as fh:
                raw = (fh.metadata() or {}).get(PROVENANCE_KEY)
            return json.loads(raw) if raw else None
        if suffix == ".png":
            with Image.open(path) as img:
                raw = img.text.get(PROVENANCE_KEY)
            return json.loads(raw) if raw else None
        if suffix == ".pdf":
            raw = _pdf_subject(path)
            return json.loads(raw) if raw and raw.startswith("{") else None
        if suffix == ".json":
            payload = json.loads(path.read_text(encoding="utf-8"))
            prov = payload.get("provenance") if isinstance(payload, dict) else None
            return prov if isinstance(prov, dict) else None
        if suffix == ".html":
            found = re.search(r'<meta name="attnlens-provenance" content="([^"]*)"', path.read_text(encoding="utf-8"))
            if found:
                return json.loads(html.unescape(found[1]))
        side = sidecar_path(path.with_suffix(""))
        return json.loads(side.read_text(encoding="utf-8")) if side.exists() else None
    except (OSError, ValueError, KeyError):
        return None


def load_job_records(logs_dir: str | Path) -> dict[str, dict[str, Any]]:
    """Output path → the newest job record that lists it (records of files that no longer exist are dropped)."""
    by_output: dict[str, tuple[float, dict[str, Any]]] = {}
    for file in Path(logs_dir).rglob("*.job.json"):
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        stamp = file.stat().st_mtime
        for out in record.get("output", []):
            key = _norm(out)
            if Path(key).exists() and (key not in by_output or by_output[key][0] < stamp):
                by_output[key] = (stamp, {**record, "record": file.as_posix()})
    return {k: v[1] for k, v in by_output.items()}


def _norm(path: str | Path) -> str:
    return Path(path).as_posix().rstrip("/")


def _producer(path: str, producers: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The record whose output is ``path`` or a directory containing it."""
    probe = Path(path)
    for candidate in (probe, *probe.parents):
        key = candidate.as_posix()
        if key in producers:
            return key, producers[key]
    return None


def _entry(path: str, hashes: dict[str, str]) -> dict[str, Any]:
    p = Path(path)
    entry: dict[str, Any] = {"path": path}
    if p.is_dir():
        digest, files = sha256_tree(p)
        entry.update(kind="directory", sha256=digest, bytes=sum(f["bytes"] for f in files), files=files)
    elif p.exists():
        entry.update(kind="file", sha256=sha256_file(p), bytes=p.stat().st_size)
    else:
        entry.update(kind="missing", sha256=None, bytes=None)
    hashes[path] = entry["sha256"]
    prov = read_provenance(p) if p.exists() else None
    if entry["kind"] == "directory":
        for f in entry["files"]:
            if f["path"].endswith(REPORTED):
                found = read_provenance(p / f["path"])
                f["provenance"] = found is not None
                prov = prov or found
    entry["provenance"] = {k: prov.get(k) for k in SUMMARY_KEYS if k in prov} if prov else None
    return entry


def artifact_notes(artifacts: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """Every note the run's artifacts carry in their provenance (``notes``): ``{"artifact", "rule", "note"}``."""
    return [
        {"artifact": a["path"], "rule": a["rule"] or "", "note": note}
        for a in artifacts
        for note in ((a.get("provenance") or {}).get("notes") or [])
    ]


def lacking_provenance(artifacts: Sequence[dict[str, Any]]) -> list[str]:
    """Made-by-a-rule files, and figures and tables inside output folders, that carry no provenance."""
    out = []
    for a in artifacts:
        if a["rule"] is None:
            continue
        if a["kind"] == "file" and a["provenance"] is None:
            out.append(a["path"])
        out += [f"{a['path']}/{f['path']}" for f in a.get("files", []) if f.get("provenance") is False]
    return out


def build_manifest(targets: Iterable[str], logs_dir: str | Path) -> list[dict[str, Any]]:
    """Every artifact reachable from ``targets`` through the job records, sorted by path."""
    producers = load_job_records(logs_dir)
    hashes: dict[str, str] = {}
    entries: dict[str, dict[str, Any]] = {}
    queue = [_norm(t) for t in targets]
    while queue:
        path = queue.pop()
        found = _producer(path, producers)
        artifact = found[0] if found else path
        if artifact in entries:
            continue
        entry = _entry(artifact, hashes)
        if found:
            record = found[1]
            inputs = [_norm(i) for i in record["input"]]
            entry.update(
                rule=record["rule"],
                wildcards=record.get("wildcards", {}),
                log=record.get("log"),
                job_record=record["record"],
                finished=record.get("finished"),
                inputs=inputs,
            )
            queue.extend(inputs)
        else:
            entry.update(rule=None, inputs=[])
        entries[artifact] = entry
    for entry in entries.values():
        entry["inputs"] = [{"path": i, "sha256": hashes.get(i) or _entry(i, hashes)["sha256"]} for i in entry["inputs"]]
    return [entries[k] for k in sorted(entries)]
