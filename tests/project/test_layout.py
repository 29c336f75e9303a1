"""The house rules: where code lives, who may import whom, and how a rule finds its function."""

import ast
import importlib
import re
import subprocess
import sys
import tomllib

import pytest

from attnlens.families import FAMILIES
from attnlens.pipeline.entry import stage_module
from tests.support.helpers import REQUIRED, USE_RULE


def _modules(root):
    package = root / "src" / "attnlens"
    return {p.relative_to(package).with_suffix("").as_posix().replace("/", "."): p for p in package.rglob("*.py")}


def test_import_contracts_hold(root):
    """import-linter's contracts in pyproject.toml (numerics never import stages or render; …)."""
    out = subprocess.run(
        [sys.executable, "-m", "importlinter.cli", "--no-cache"], cwd=root, capture_output=True, text=True
    )
    if out.returncode and "No module named" in out.stderr:
        pytest.fail("import-linter is not installed (envs/requirements-test.txt)")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


#: Top-level modules that are doors onto the package, not numerics: the one-document API and its command line.
DOORS = ("api", "cli", "__main__")


def test_every_numeric_module_is_under_contract(root):
    contracts = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    numeric = set(next(c for c in contracts["contracts"] if c["name"].startswith("numerics"))["source_modules"])
    modules = _modules(root)
    packages = {m.split(".")[0] for m in modules if m.endswith(".__init__") and m.count(".") == 1}
    top = {f"attnlens.{m}" for m in modules if "." not in m and m not in ("__init__", *DOORS)}
    top |= {f"attnlens.{p}" for p in packages - {"stages", "render", *DOORS}}
    assert numeric == top, f"add to or remove from the numerics contract: {sorted(numeric ^ top)}"
    # and none of them but the pipeline itself imports the pipeline: a config section reaches a numeric function as data
    upward = next(c for c in contracts["contracts"] if c["name"].startswith("the numerics never import the pipeline"))
    assert set(upward["source_modules"]) == numeric - {"attnlens.pipeline"}
    # the one-document doors sit above everything: their own contract keeps the rest from importing them
    api = next(c for c in contracts["contracts"] if "attnlens.api" in c.get("forbidden_modules", []))
    assert {"attnlens.stages", "attnlens.render"} <= set(api["source_modules"])


def test_the_seam_contract_names_every_architecture_package(root):
    """Every package under ``attnlens/models/`` (one per architecture) is forbidden outside the seam, and nothing
    else is: the list is read from the folders, so a new architecture package joins the contract or fails here."""
    contracts = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    seam = next(c for c in contracts["contracts"] if c["name"].startswith("an architecture is reached"))
    folders = {f"attnlens.models.{p.parent.name}" for p in (root / "src/attnlens/models").glob("*/__init__.py")}
    assert set(seam["forbidden_modules"]) == folders
    numeric = next(c for c in contracts["contracts"] if c["name"].startswith("numerics"))["source_modules"]
    outside = {m for m in numeric if m != "attnlens.models"} | {"attnlens.stages", "attnlens.render"}
    assert set(seam["source_modules"]) == outside, sorted(set(seam["source_modules"]) ^ outside)


def test_render_never_reads_artifacts(root):
    """Rendering gets data, never paths to read: no artifact reader (``load_*``) is imported in attnlens.render."""
    for name, path in _modules(root).items():
        if not name.startswith("render."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlens"):
                readers = [a.name for a in node.names if a.name.startswith(("load_", "read_"))]
                assert not readers, f"{name} imports artifact readers {readers} from {node.module}"


def test_internal_imports_are_at_the_top(root):
    """No function-level ``from attnlens …`` (ruff PLC0415 checks third-party ones too); an ``if TYPE_CHECKING:``
    block, which never runs, may name a heavy module for an annotation; a method's scorer
    (``@METHOD.explains(scope)`` in ``attnlens/attribution/methods/``) imports the numerics it calls, torch with them,
    inside itself: the config reads the method's card without torch (tests/project/test_startup.py)."""

    def typing_only(top) -> bool:
        return isinstance(top, ast.If) and isinstance(top.test, ast.Name) and top.test.id == "TYPE_CHECKING"

    def scorer(top) -> bool:
        return isinstance(top, ast.FunctionDef) and any(
            isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr.startswith("explains")
            for d in top.decorator_list
        )

    for name, path in _modules(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        method = name.startswith("attribution.methods.")
        nested = [
            n.lineno
            for top in tree.body
            if not typing_only(top) and not (method and scorer(top))
            for n in ast.walk(top)
            if top is not n and isinstance(n, ast.ImportFrom) and (n.module or "").startswith("attnlens")
        ]
        assert not nested, f"{name}: imports inside functions at lines {nested}"


def test_no_two_modules_share_a_name(root):
    """A module's name says which one it is: no two modules of src/ share a basename (a package's __init__ and
    __main__ aside), so a traceback, a grep or a doc that names ``x.py`` means one file."""
    seen: dict[str, list[str]] = {}
    for path in (root / "src" / "attnlens").rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(root / "src")))
    assert not {n: p for n, p in seen.items() if len(p) > 1}


def test_rule_function_convention(root):
    """Rule X is `use rule <kind> as X` of a kind in workflow/rules/kinds.smk and runs
    attnlens.stages.<rule file>.run_X (marked with the sections it takes) through the one script; train_classifier,
    a command, is the one rule of its own; no `run_` outside attnlens.stages."""
    kinds_smk = (root / "workflow/rules/kinds.smk").read_text(encoding="utf-8")
    kinds = set(re.findall(r"^rule (\w+):", kinds_smk, re.M))
    assert kinds and set(re.findall(r"script:\n\s+\"(.+)\"", kinds_smk)) == {"../scripts/stage.py"}
    assert {p.name for p in (root / "workflow/scripts").glob("*.py")} == {"stage.py", "train_classifier.py"}
    seen = 0
    for smk in (root / "workflow/rules").glob("*.smk"):
        text = smk.read_text(encoding="utf-8")
        own = set(re.findall(r"^\s*rule (\w+):", text, re.M))
        assert own == (kinds if smk.stem == "kinds" else ({"train_classifier"} if smk.stem == "model" else set()))
        for kind, rule in USE_RULE.findall(text):
            assert kind in kinds, f"{rule}: {kind} is no kind of workflow/rules/kinds.smk"
            module = stage_module(rule)
            assert module == f"attnlens.stages.{smk.stem}" or module.startswith(f"attnlens.stages.{smk.stem}.")
            assert hasattr(getattr(importlib.import_module(module), f"run_{rule}"), "sections"), f"{rule}: @stage"
            seen += 1
    assert seen > 40
    assert callable(importlib.import_module("attnlens.stages.model").train_classifier_command)
    for path in (root / "src/attnlens").rglob("*.py"):
        if "stages" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("run_")]
        assert not defined, f"{path}: rule functions belong in attnlens.stages ({defined})"


def _cited_files(root):
    for folder in ("src", "tests", "workflow", "config", "docs", "benchmarks"):
        yield from (p for p in (root / folder).rglob("*") if p.suffix in {".py", ".smk", ".yaml", ".md", ".rst"})
    yield root / "README.md"


def test_every_deviation_id_and_recipe_section_resolves_in_docs(root):
    """The repository stands alone: each B-n and each "recipes §n" it cites is explained under docs/."""
    deviations = (root / "docs" / "deviations.md").read_text(encoding="utf-8")
    recipes = (root / "docs" / "recipes.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"^\*\*(B-\d+) —", deviations, re.M))
    headings = re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", recipes, re.M)
    sections = set(headings) | set(re.findall(r"§(\d+(?:\.\d+)?)", recipes))
    for path in _cited_files(root):
        text = path.read_text(encoding="utf-8")
        for bug in set(re.findall(r"\bB-\d+\b", text)):
            assert bug in defined, f"{path.relative_to(root)} cites {bug}, which docs/deviations.md does not explain"
        for section in set(re.findall(r"recipes §(\d+(?:\.\d+)?)", text)):
            assert section in sections, f"{path.relative_to(root)} cites recipes §{section}, not in docs/recipes.md"
        outside = "paper" + "_spec"  # the team's own specification, not part of the repository
        assert outside not in text, f"{path.relative_to(root)} cites a document outside the repository"
    assert defined == {f"B-{i}" for i in range(1, 27)}


def test_readme_is_a_front_door_and_links_resolve(root):
    readme = root / "README.md"
    assert len(readme.read_text(encoding="utf-8").splitlines()) <= 250
    for page in [readme, *(root / "docs").glob("*.md"), root / "config" / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(root)} links to missing {target}"


def test_ci_requires_the_tests_that_guard_a_claim(root):
    """CI turns the skip of the SLURM and browser tests into a failure (a machine without them stays red)."""
    ci = (root / ".ci/run").read_text(encoding="utf-8")
    assert all(f"{switch}=1" in ci for switch in REQUIRED.values()) and "make test" in ci


def test_benchmarks_reach_architectures_through_the_seam(root):
    """import-linter's seam contract covers the package; the benchmarks are scripts, so their imports are read here:
    none names an architecture's module (``attnlens.models.<family>``), every one asks ``attnlens.models``."""
    behind = tuple(f"attnlens.models.{name}" for name in FAMILIES)
    scripts = sorted((root / "benchmarks").rglob("*.py"))
    assert len(scripts) > 10
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            past = [n for n in names if n.startswith(behind)]
            assert not past, f"{path.relative_to(root)}:{node.lineno} imports {past} past the model seam"


def test_the_benchmark_driver_is_thin(root):
    """One module per suite under benchmarks/suites/, each named by the driver; the driver holds no measurement."""
    bench = (root / "benchmarks" / "bench.py").read_text(encoding="utf-8")
    suites = {p.stem for p in (root / "benchmarks" / "suites").glob("*.py")} - {"__init__"}
    assert suites and all(f"{s}." in bench for s in suites), suites
    assert len(bench.splitlines()) < 120 and "perf_counter" not in bench


def test_no_private_name_is_imported_from_another_module(root):
    """A name with a leading underscore stays in its module: what another module needs is public where it lives."""
    for name, path in _modules(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        private = [
            (node.lineno, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlens")
            for alias in node.names
            if alias.name.startswith("_") and not alias.name.startswith("__")
        ]
        assert not private, f"{name} imports private names {private}"


def test_no_stage_imports_another_stage(root):
    """A stage is one rule file's functions: what two stages share lives below them (a package's numerics), so no
    module of ``attnlens.stages`` imports another, a package's ``__init__`` (its rules' index) aside."""
    for name, path in _modules(root).items():
        if not name.startswith("stages.") or name.endswith("__init__"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stages = [
            (node.lineno, node.module)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnlens.stages")
        ]
        assert not stages, f"{name} imports stages {stages}"


#: The longest a function may be, in lines with its docstring: a door's (``attnlens.api``, ``attnlens.cli``) a thin
#: front over the functions the stages call, a stage's a rule's steps in order.
LONGEST = {"api.": 60, "cli": 60, "stages.": 80}


def test_doors_and_stages_are_short(root):
    for name, path in _modules(root).items():
        limit = next((n for prefix, n in LONGEST.items() if name.startswith(prefix)), None)
        if limit is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        long = [
            (node.name, node.end_lineno - node.lineno + 1)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= limit
        ]
        assert not long, f"{name}: functions over {limit} lines {long}"


def test_no_test_module_imports_another(root):
    """What two test modules share — runs, fixtures, configs — lives in ``tests/support`` or conftest, so a test
    module can be read, moved or deleted alone."""
    for path in sorted((root / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        shared = [
            (node.lineno, node.module)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("tests.")
            and node.module.rsplit(".", 1)[-1].startswith("test_")
        ]
        assert not shared, f"{path.relative_to(root)} imports test modules {shared}"
