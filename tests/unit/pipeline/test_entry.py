"""The one entry of every rule's job: rule X finds attnlens.stages.<module>.run_X and binds its arguments by name."""

import inspect
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from snakemake.iocontainers import InputFiles, OutputFiles, Params, Wildcards

from attnlens.pipeline import entry
from attnlens.pipeline.entry import arguments, stage, stage_function, stage_module


def _job(cfg, inputs=None, outputs=None, params=None, wildcards=None):
    """A job as a rule script sees it: Snakemake's own containers, named entries."""
    return SimpleNamespace(
        params=Params(fromdict={"cfg": cfg, **(params or {})}),
        input=InputFiles(fromdict=inputs or {}),
        output=OutputFiles(fromdict=outputs or {}),
        wildcards=Wildcards(fromdict=wildcards or {}),
        config={"data": {"seed": 3}},
    )


@stage("figures", "report.explorer")
def run_toy(
    figures, explorer, model_dir, table_stem, tables_dir, out_dir, shard, device, dpi, learned_path=None, **inputs
):
    return figures, explorer, model_dir, table_stem, tables_dir, out_dir, shard, device, dpi, learned_path, inputs


def test_arguments_are_bound_by_name():
    cfg = {"figures": {"dpi": 99}, "report": {"explorer": {"top_k": 4}}, "model": {"device": "cpu"}}
    job = _job(
        cfg,
        inputs={"model_dir": "m", "learned_path": [], "a": ["a0", "a1"], "b": "b0"},
        outputs={"table_stem": ["t/x.csv", "t/x.tex", "t/x.md"], "tables_dir": ["u/y.csv"], "out_dir": "o"},
        wildcards={"shard": "2"},
    )
    positional, named = arguments(run_toy, job)
    assert positional[0].dpi == 99 and positional[1].top_k == 4
    assert named["model_dir"] == "m" and named["out_dir"] == "o"  # a folder as the rule names it
    assert str(named["table_stem"]) == "t/x" and str(named["tables_dir"]) == "u"  # a table's stem; files' folder
    assert named["shard"] == 2 and named["device"] == "cpu" and named["dpi"] == 99
    assert "learned_path" not in named  # an empty input: the default
    assert {k: list(v) if isinstance(v, list) else v for k, v in named.items() if k in "ab"} == {
        "a": ["a0", "a1"],
        "b": "b0",
    }


def test_a_key_the_rule_does_not_list_is_not_read():
    """The shared keys come from the rule's own `keys(...)`: a rule that does not list model.device cannot read it."""

    @stage()
    def run_toy_device(device):
        return device

    with pytest.raises(Exception, match="device"):
        arguments(run_toy_device, _job({"figures": {"dpi": 1}}))


def test_a_rule_finds_its_function_without_importing_the_others():
    """A light job imports its own stage module only, and never torch (tests/project/test_startup.py)."""
    code = textwrap.dedent("""
        import sys
        from attnlens.pipeline.entry import stage_module
        print(stage_module("plot_similarity"))
        print(sorted(m for m in sys.modules if m.startswith("attnlens.stages")), "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["attnlens.stages.report.similarity_report", "[] False"]


def test_an_unknown_rule_is_one_clear_line():
    with pytest.raises(LookupError, match=r"rule nope: no function run_nope in attnlens\.stages"):
        stage_module("nope")


def _rule_blocks(root):
    """Each `use rule <kind> as <rule> with:` block of workflow/rules: (rule, the names it gives its files)."""
    for smk in (root / "workflow/rules").glob("*.smk"):
        text = smk.read_text(encoding="utf-8")
        for m in re.finditer(r"^( *)use rule \w+ as (\w+) with:\n((?:\1 {4}.*\n|\n)*)", text, re.M):
            indent = len(m.group(1)) + 8
            yield m.group(2), re.findall(rf"^ {{{indent}}}(\w+)=", m.group(3), re.M)


def test_every_rule_gives_its_function_what_it_needs(root):
    """Each parameter a rule's function needs (no default) is a section its mark names, a file, param or wildcard
    the rule names, or a key the entry reads from the config: a renamed file fails here, not in a run; and one name
    means one thing in a rule (the entry binds input, output and params by name alike)."""
    blocks = dict(_rule_blocks(root))
    assert len(blocks) > 40
    from_config = {"shard", "run_config", *entry.SHARED_KEYS}
    for rule, names in blocks.items():
        fn = stage_function(rule)
        needed = [
            name
            for name, p in list(inspect.signature(fn).parameters.items())[len(fn.sections) :]
            if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        ]
        assert len(names) == len(set(names)), f"rule {rule}: a name given twice (input, output, params) in {names}"
        missing = [n for n in needed if n not in {*names, *from_config}]
        assert not missing, f"rule {rule}: run_{rule} needs {missing}, which the rule does not name"
