"""Every `make` target and `python -m` command the documentation names still exists (the benchmarks among them, a
package run as ``python -m benchmarks.<name>``), and so
does every ``attnlens.…`` module, class or function that the docs or the package's own docstrings name.

The commands are read from the README, ``docs/``, ``config/README.md`` and ``tests/README.md`` (inline code
and code blocks); each ``make`` target is dry-run (``make -n``) and each Python command is run with
``--help``, so a renamed target or a module that was never written fails here instead of in a reader's shell.
The Python commands run in one fresh process, one after another as ``runpy`` runs ``python -m``: torch is
imported once, not once a module (about 55 s of a 2-core machine's CI spent on imports otherwise).
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest

from tests.support.helpers import ROOT

DOCS = [
    ROOT / "README.md",
    ROOT / "config" / "README.md",
    ROOT / "tests" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
_CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
_MAKE = re.compile(r"(?:^|[\s;(&|])make ((?:[A-Z_]+=\S+ )*)([a-z][\w-]*)")
#: A module's whole dotted name; ``python -m benchmarks.<name>`` names none.
_PY_MODULE = re.compile(r"python -m ([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?!\w|\.[\w<])")
#: The benchmarks' old form, run as a script: they import each other as a package now, so it fails.
_PY_SCRIPT = re.compile(r"python (benchmarks/[\w/]+\.py)")


def _code_spans() -> list[tuple[str, str]]:
    spans = []
    for doc in DOCS:
        for block, inline in _CODE.findall(doc.read_text(encoding="utf-8")):
            spans.append((doc.relative_to(ROOT).as_posix(), block or inline))
    return spans


def _named(pattern: re.Pattern, group: int) -> dict[str, str]:
    """``command → first doc naming it`` for every match of ``pattern`` in the docs' code."""
    found: dict[str, str] = {}
    for doc, code in _code_spans():
        for match in pattern.finditer(code):
            found.setdefault(match.group(group), doc)
    return found


MAKE_TARGETS = _named(_MAKE, 2)
PY_MODULES = _named(_PY_MODULE, 1)
PY_SCRIPTS = _named(_PY_SCRIPT, 1)


def test_the_docs_name_commands():
    """The extraction itself works: the README's two commands and the benchmarks' modules are found."""
    assert {"run", "test", "lint", "bench", "gpu-proof"} <= set(MAKE_TARGETS)
    assert "benchmarks.rule_times" in PY_MODULES and "attnlens.pipeline.config" in PY_MODULES


@pytest.mark.parametrize("target", sorted(MAKE_TARGETS))
def test_make_target_exists(target):
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{MAKE_TARGETS[target]} names `make {target}`: {out.stderr.strip()}"


#: Runs each module of argv as ``python -m <module> --help`` would, in this one process; prints
#: ``{module: [exit code, the end of its stderr]}``.
_HELP_EACH = """
import contextlib, io, json, runpy, sys, traceback
out = {}
for module in sys.argv[1:]:
    sys.argv = [module, "--help"]
    err = io.StringIO()
    code = 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    out[module] = [code, err.getvalue()[-400:]]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def module_help() -> dict[str, list]:
    modules = sorted(PY_MODULES)
    out = subprocess.run(
        [sys.executable, "-c", _HELP_EACH, *modules], cwd=ROOT, capture_output=True, text=True, check=False, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", sorted(PY_MODULES))
def test_python_module_runs(module, module_help):
    code, stderr = module_help[module]
    assert code == 0, f"{PY_MODULES[module]} names `python -m {module}`: {stderr.strip()}"


def test_no_doc_runs_a_benchmark_as_a_script():
    assert not PY_SCRIPTS, f"run them as modules from the checkout (python -m benchmarks.<name>): {PY_SCRIPTS}"


#: A dotted name in the package: ``attnlens.render.explorer``, ``attnlens.pipeline.runtime.rule_job``.
_DOTTED = re.compile(r"(?<![\w/.])attnlens(?:\.[A-Za-z_]\w*)+")


#: The same, quoted in a docstring or comment of the package (``attnlens.x``, :func:`attnlens.x.f`): a string
#: the code uses as a name (a module spec's name) is not a reference.
_QUOTED = re.compile(r"(?<=`)attnlens(?:\.[A-Za-z_]\w*)+(?=`)")


def _dotted_names() -> dict[str, str]:
    """``name → first file naming it``: the docs' text and the package's docstrings and comments."""
    found: dict[str, str] = {}
    sources = [(p, _DOTTED) for p in DOCS] + [(p, _QUOTED) for p in sorted((ROOT / "src" / "attnlens").rglob("*.py"))]
    for path, pattern in sources:
        for match in pattern.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match.group(0), path.relative_to(ROOT).as_posix())
    return found


def _resolves(name: str) -> bool:
    """The longest importable module of ``name``, then the rest as attributes."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


DOTTED = _dotted_names()


def test_every_named_module_and_function_exists():
    assert {"attnlens.models.architecture", "attnlens.render.explorer"} <= set(DOTTED)  # the extraction works
    missing = {name: where for name, where in DOTTED.items() if not _resolves(name)}
    assert not missing, f"named but not in the package: {missing}"
