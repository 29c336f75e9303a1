"""The latest answer to each question the benchmarks answer, one committed record a question, and the docs' figures
generated from them.

A record (``benchmarks/records/<id>.json``) holds a question, its latest answer (a sentence, written by the bench
from the numbers it measured, which the record keeps beside it in ``figures``), what it was measured on (the
machine, its CPU kernels or card, the versions), the commit and the date, the section of docs/benchmarks.md that
holds its tables, and the bench that writes it (:func:`write_record`). A record whose bench has not run since
records began says so in ``written`` ("transcribed …": the figure and provenance the docs gave then); the bench's
next run replaces it.

What the docs print of a record is generated, never typed:

* docs/benchmarks.md's question table (:func:`question_table`), between ``<!-- records: questions -->`` and
  ``<!-- records: end -->``;
* a section's table of measured figures, between ``<!-- records: table ID.NAME -->`` and ``<!-- records: end -->``:
  the record's ``tables[NAME]`` with a line saying when and on what it was measured (:func:`section_table`);
* a figure quoted elsewhere, ``<!-- record: ID.FIELD -->text<!-- /record -->``: ``text`` is the record's
  ``figures[FIELD]`` (or ``answer``), as :func:`quoted` writes it.

``python -m benchmarks.records`` rewrites both in every doc; ``--check`` exits 1 and names what differs
(``tests/project/test_records.py`` runs it, and checks that every record names a bench that writes it).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

#: The checkout: where the records and the docs are.
ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "benchmarks" / "records"
#: The documents whose generated parts :func:`main` rewrites.
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "config" / "README.md")

#: The question table's rows, in order (each id a file of :data:`RECORDS`).
QUESTIONS = (
    "default_run",
    "task_defaults",
    "generation_seeds",
    "generation_default",
    "generation_scratch",
    "generation_kernel_sets",
    "exact_truth",
    "long_contexts",
    "long_contexts_gemma",
    "hierarchy_gemma",
    "beside",
    "grid",
    "gpu_proof",
    "gpu_run",
    "slurm_study",
    "job_start",
    "gguf_read",
    "prompt_cut",
    "cite_gemma",
    "attention_summaries",
    "architectures",
    "explanation_methods",
    "ig_step",
    "targets",
    "similarity",
    "topology",
    "pairs",
    "explorer",
    "decoders",
    "attnlrp_vs_ig",
    "documents_per_pass",
    "paper_shape",
)
#: What a measurement runs: a record's commit says "+ uncommitted changes" where these differ from it.
MEASURED = ("src", "workflow", "config", "envs", "pyproject.toml")
TABLE_START, TABLE_END = "<!-- records: questions -->", "<!-- records: end -->"
#: A section's table of a record: the lines between the two comments are generated.
SECTION_TABLE = re.compile(r"<!-- records: table (?P<id>\w+)\.(?P<name>\w+) -->\n.*?<!-- records: end -->", re.S)
#: A quoted figure: its text on one line, between the two comments.
QUOTE = re.compile(r"<!-- record: (?P<id>\w+)\.(?P<field>\w+) -->(?P<text>[^<\n]*)<!-- /record -->")


@dataclass
class Record:
    """One question's latest answer and where it comes from."""

    id: str
    question: str
    answer: str  # the sentence the question table prints
    measured_on: str  # the machine and the software, in words
    commit: str  # the commit(s) that measured it; "–" where nothing was measured yet
    date: str
    section: str  # the table's link to the section that holds its tables: "[text](#anchor)"
    bench: str  # the bench that writes it: benchmarks.<module>, one that calls write_record with this id
    written: str = "bench"  # "bench", or "transcribed from …" (its bench has not run since records began)
    figures: dict = field(default_factory=dict)  # the measured numbers the answer states, by name
    tables: dict = field(default_factory=dict)  # a section's tables, by name: {"header": [...], "rows": [[...]]}

    @classmethod
    def load(cls, path: Path) -> Record:
        return cls(**json.loads(path.read_text(encoding="utf-8")))


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def machine() -> str:
    """This machine and its software in words: CPU model and cores (its CPU kernels), torch's version."""
    from attnlens.device import cpu_kernels  # noqa: PLC0415 (torch: only a bench writing a record needs it)

    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(encoding="utf-8"), re.M)
        model = names[0].strip() if names else model
    cores = len(re.findall(r"^processor\s*:", cpuinfo.read_text(encoding="utf-8"), re.M)) if cpuinfo.exists() else 0
    return f"{cores}-core {model} ({cpu_kernels()}), torch {metadata.version('torch')}"


def write_record(
    id: str,
    question: str,
    answer: str,
    section: str,
    bench: str,
    figures: dict,
    measured_on: str | None = None,
    tables: dict | None = None,
    provenance: dict | None = None,
    commit: str | None = None,
) -> Path:
    """``benchmarks/records/<id>.json``: what a bench measured, as the latest answer to its question, with this
    checkout's commit, today's date and (unless given) :func:`machine`. A bench calls it with its own module name.
    ``provenance``: a result's own (``results/bench/<suite>.json``), for a record written from a result measured
    before (``python -m benchmarks.bench --record DIR``): its commit and date are the result's (a result's "+dirty"
    counts any change to the checkout; where the record of that commit said what its measured paths were, it stays).
    ``commit``: the commits of a record whose parts were measured apart (a CPU's and a card's), in words."""
    path = RECORDS / f"{id}.json"
    stamped, date = stamp(provenance, Record.load(path).commit if path.exists() else "")
    record = Record(
        id=id,
        question=question,
        answer=answer,
        measured_on=measured_on or machine(),
        commit=commit or stamped,
        date=date,
        section=section,
        bench=bench,
        figures=figures,
        tables=tables or {},
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(record), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def stamp(provenance: dict | None = None, before: str = "") -> tuple[str, str]:
    """The commit and date of a measurement: this checkout's now (" + uncommitted changes" where what it measures
    differs from the commit), or a result's own ``provenance``; for a result that did not record whether what it
    measured was uncommitted, ``before``, the commit a record of it said, stays where it names the same commit."""
    if provenance:
        commit, dirty = provenance["git_commit"].partition("+")[::2]
        exact = "measured_paths_changed" in provenance  # else "+dirty" counts a change anywhere in the checkout
        commit = commit[:7] + (" + uncommitted changes" if provenance.get("measured_paths_changed", dirty) else "")
        return (before if not exact and before.startswith(commit[:7]) else commit), provenance["created"][:10]
    commit = _git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if measured_paths_changed() else "")
    return commit, datetime.now(UTC).date().isoformat()


def measured_paths_changed() -> bool:
    """Whether what a measurement runs (:data:`MEASURED`) differs from the checkout's commit: a result's provenance
    keeps it, since its ``git_commit``'s "+dirty" counts a change anywhere (a bench's own, a doc's)."""
    return bool(_git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED))


def thousands(n: int) -> str:
    """``2 048``: an integer with a space between thousands, as the docs print token counts."""
    return f"{n:,}".replace(",", " ")


def span(values, digits: int | None = None) -> str:
    """``0.21–0.26`` (one value where they round alike): ``digits`` decimals, or three significant digits."""
    fmt = f".{digits}f" if digits is not None else ".3g"
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}–{hi}"


def seconds(value: float) -> str:
    """``0.035 s``, ``2.99 s``, ``598 s``, ``1 227 s``: three significant digits, whole seconds from 100 on."""
    return f"{thousands(round(value))} s" if value >= 100 else f"{value:.3g} s"


def scientific(value: float) -> str:
    """``−4·10⁻⁷``: one significant digit and a power of ten, as the docs print an error."""
    mantissa, exponent = f"{value:.0e}".split("e")
    power = str(int(exponent)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa}·10{power}".replace("-", "−")


def figures_beside(id: str, key: str, new: dict) -> dict:
    """Record ``id``'s figures with ``key`` (a device kind, a length) set to ``new`` and the others kept: a bench that
    measures one part of an answer (a CPU's, a card's) at a time keeps the latest of each part."""
    path = RECORDS / f"{id}.json"
    old = Record.load(path).figures if path.exists() else {}
    return {**old, key: new}


def records() -> dict[str, Record]:
    """Every committed record, by id."""
    return {p.stem: Record.load(p) for p in sorted(RECORDS.glob("*.json"))}


def question_table(found: dict[str, Record]) -> str:
    """docs/benchmarks.md's question table: one row a question of :data:`QUESTIONS`, its latest answer, what and
    when it was measured on, and its section."""
    rows = ["| Question | Answer | Measured on | Commit | Section |", "|---|---|---|---|---|"]
    for rid in QUESTIONS:
        r = found[rid]
        rows.append(f"| {r.question} | {r.answer} | {r.measured_on} | {r.commit} | {r.section} |")
    return "\n".join(rows)


def section_table(found: dict[str, Record], rid: str, name: str) -> str:
    """Record ``rid``'s table ``name`` in Markdown, after a line saying what, where and when it was measured (and,
    for a record transcribed from the docs, that its bench has not written it yet)."""
    if rid not in found or name not in found[rid].tables:
        have = sorted(found[rid].tables) if rid in found else sorted(found)
        raise ValueError(f"<!-- records: table {rid}.{name} -->: no such record table (there are {have})")
    r, table = found[rid], found[rid].tables[name]
    when = f", {r.date} (`{r.bench}`)" if r.written == "bench" else f" (`{r.bench}`; transcribed until it runs again)"
    lines = [f"Measured on {r.measured_on}, commit {r.commit}{when}:", ""]
    lines += ["| " + " | ".join(table["header"]) + " |", "|" + "---|" * len(table["header"])]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in table["rows"]]
    return "\n".join(lines)


def quoted(found: dict[str, Record], rid: str, name: str) -> str:
    """What a doc prints of record ``rid``'s figure ``name`` (``answer``: its answer)."""
    if rid not in found or (name != "answer" and name not in found[rid].figures):
        have = sorted(found[rid].figures) if rid in found else sorted(found)
        raise ValueError(f"<!-- record: {rid}.{name} -->: no such record figure (there are {have})")
    r = found[rid]
    return str(r.answer if name == "answer" else r.figures[name])


def rendered(text: str, found: dict[str, Record]) -> str:
    """``text`` with its question table and its quoted figures generated from ``found``."""
    if TABLE_START in text:
        head, rest = text.split(TABLE_START, 1)
        _, tail = rest.split(TABLE_END, 1)
        text = f"{head}{TABLE_START}\n{question_table(found)}\n{TABLE_END}{tail}"
    text = SECTION_TABLE.sub(
        lambda m: f"{m.group(0).split(chr(10))[0]}\n{section_table(found, m['id'], m['name'])}\n{TABLE_END}", text
    )
    return QUOTE.sub(
        lambda m: f"<!-- record: {m['id']}.{m['field']} -->{quoted(found, m['id'], m['field'])}<!-- /record -->", text
    )


def stale(found: dict[str, Record] | None = None) -> list[str]:
    """The docs whose generated parts differ from the records (none: the docs say what the records say)."""
    found = records() if found is None else found
    return [
        str(p.relative_to(ROOT))
        for p in DOCS
        if p.read_text(encoding="utf-8") != rendered(p.read_text(encoding="utf-8"), found)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a doc differs from the records; write nothing")
    args = parser.parse_args(argv)
    found = records()
    try:
        differ = stale(found)
    except ValueError as err:
        sys.exit(f"records: error: {err}")
    if args.check:
        print("\n".join(f"{p}: differs from benchmarks/records (python -m benchmarks.records)" for p in differ))
        sys.exit(1 if differ else 0)
    for rel in differ:
        path = ROOT / rel
        path.write_text(rendered(path.read_text(encoding="utf-8"), found), encoding="utf-8")
        print(f"{rel}: rewritten from benchmarks/records")


if __name__ == "__main__":
    main()
