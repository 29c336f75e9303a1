"""Each rule receives only the config keys it reads, so changing a key re-plans exactly its readers.

On a finished ``.test`` run, every job record lists the keys the job was given (its ``keys(...)``
params) and the keys it read; reading a key it was not given fails the job, so read ⊆ given. Then,
for every key of the config schema, a dry run with that key changed must plan exactly the rules that
were given it and every rule downstream of them — nothing before, nothing beside.
"""

from __future__ import annotations

import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from attnlens.pipeline.config import load_schema, validate_config
from attnlens.sharding import planned_cpus, resolve_shards
from tests.support.helpers import ForkedSnakemake, merged, run_snakemake

pytestmark = pytest.mark.workflow

#: Keys that decide which jobs exist rather than what a job computes: who re-runs when they change.
DAG_KEYS = {
    "pairs.exact.enabled": {"attribute_pairs", "pair_convergence", "pair_tables"},
    "studies": {"manifest"},  # a study fewer: the manifest lists fewer targets, every kept artifact stands
    "explanations.targets": {"target_agreement"},  # every target explained: it reads the explain shards too
}

#: Keys that turn one run into a grid of runs, each under results/runs/{run}/: a change re-lays the whole
#: run out rather than re-running a reader (tests/unit/pipeline/test_grid.py covers them).
GRID_KEYS = {"grid.datasets", "grid.models", "grid.seeds", "grid.split_follows_seed", "grid.exclude"}
#: Keys only a generation run may set (a classification run refuses them in one line): the generation run's jobs
#: are checked by tests/e2e/test_generation_run.py.
GENERATION_ONLY_KEYS = {"data.sources_column", "data.synthetic.structures"}

#: Keys a rule is given but reads only in another configuration than .test's (so its params track them).
CONDITIONAL = {
    "attribute": {"attribution.n_steps"},  # the fixed step count, when attribution.adaptive is false
    "build_base_model": {"model.block_size", "model.num_random_blocks"},  # a BigBird's (model.architecture)
    "prepare_dataset": {  # the file, folder and hub sources
        "data.classes",
        "data.id_column",
        "data.label_column",
        "data.label_columns",
        "data.path",
        "data.text_column",
        "data.question_column",  # a question-answering file's or hub dataset's
        "data.sources_column",  # a generation file's given sources
        "data.synthetic.hops",  # the question-answering and generation corpora's
        "data.synthetic.distractor_relation",
        "data.synthetic.structures",  # the generation corpus's planted structures
        "data.synthetic.n_sentences",
        "data.hub.config",
        "data.hub.name",
        "data.hub.revision",
        "data.hub.test_split",
        "data.hub.train_split",
    },
    "target_agreement": {  # the agreement between targets: a run with several targets a document (.test has one)
        "similarity.legacy_mask",
        "similarity.rbo_p",
        "similarity.top_fraction",
    },
    "prepare_pairs": {  # the file and hub sources
        "pairs.data.hub.config",
        "pairs.data.hub.name",
        "pairs.data.hub.revision",
        "pairs.data.hub.split",
        "pairs.data.id_column",
        "pairs.data.path",
        "pairs.data.score_column",
        "pairs.data.text_a_column",
        "pairs.data.text_b_column",
    },
}

#: Keys whose changed value (:data:`OVERRIDES`) leaves a study out: its rules are planned no more.
WITHOUT = {
    key: {"topology", "bottleneck_distances", "plot_topology"}
    for key in ("data.task", "data.label_columns", "data.layout")
}

#: Values for keys whose generic change would be rejected by a cross-field check of the config.
OVERRIDES = {
    "generation.template": ("Q: {question}\nC: {context}\nA:", {}),  # null by default: a template of the pattern
    "data.source": ("file", {"data": {"path": "elsewhere.csv"}}),
    "data.classes": (["a", "b"], {}),
    "data.label_columns": (
        ["a", "b"],
        {
            "data": {"task": "multilabel", "source": "file", "path": "elsewhere.csv"},
            "studies": ["classification", "pairs"],
        },
    ),
    "data.layout": (
        "hotpot_qa",
        {"data": {"task": "qa", "source": "file", "path": "elsewhere.json"}, "studies": ["classification", "pairs"]},
    ),
    "pairs.data.source": ("file", {"pairs": {"data": {"path": "elsewhere.csv"}}}),
    "model.attention_window": (16, {}),
    "findings.min_share": (0.9, {}),  # half the default would be under its exclusive minimum of 0.5
    "model.device": ("cpu", {}),  # a CUDA device would be refused where the test runs
    "model.source": ("longformer", {}),
    "attribution.target": ("class_1", {}),
    "explanations.baseline": ("ig", {}),
    "data.task": ("regression", {"studies": ["classification", "pairs"]}),  # a regression has no topology study
    "explanations.methods": (  # every ranked method stays explained
        ["attention_all", "value_norm", "rollout", "grad_attention", "saliency", "grad_input", "attnlrp", "occlusion"],
        {},
    ),
}


def _leaves(node: dict, prefix: str = "") -> dict[str, dict]:
    out = {}
    for key, prop in node.get("properties", {}).items():
        if prop.get("type") == "object" and "properties" in prop:
            out |= _leaves(prop, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = prop
    return out


def _get(config: dict, dotted: str):
    for part in dotted.split("."):
        config = config[part]
    return config


def _nested(dotted: str, value) -> dict:
    out: dict = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def _changed(prop: dict, current):
    """A valid value different from ``current`` for a schema property."""
    if "oneOf" in prop:  # n_shards, the batch sizes: an integer, or auto
        if isinstance(current, str):  # auto: an integer instead
            return prop["oneOf"][0].get("minimum", 1) + 1
        prop = prop["oneOf"][0]
    types = prop.get("type", "integer")
    types = [types] if isinstance(types, str) else [t for t in types if t != "null"]
    if "enum" in prop:
        return next(v for v in prop["enum"] if v != current and isinstance(v, str))
    kind = types[0]
    if kind == "boolean":
        return not current
    if kind == "integer":
        value = (current if current is not None else prop.get("minimum", 1)) + 1
        return value - 2 if "maximum" in prop and value > prop["maximum"] else value
    if kind == "number":
        return current / 2 if current else 0.5
    if kind == "string":
        return f"{current}_changed" if current else "changed"
    if kind == "array":
        items = prop.get("items", {})
        current = list(current or [])
        if "enum" in items:
            return current[:-1] if len(current) > 1 else [*current, next(v for v in items["enum"] if v not in current)]
        if items.get("type") == "object":
            return [*current, {"name": "other", "path": "elsewhere"}]
        if items.get("type") == "number":
            return current[:-1] if len(current) > 1 else [*current, 0.3]
        if items.get("type") == "integer":
            if current and len(current) >= prop.get("maxItems", len(current) + 1):  # a [least, most] pair
                return [*current[:-1], current[-1] + 1]
            return [*current, max(current, default=0) + 1]
        return [*current, "changed"]
    raise AssertionError(f"no change rule for {prop}")


def _rule_graph(root, work) -> dict[str, set[str]]:
    """Rule → the rules that consume its outputs (from ``snakemake --rulegraph``)."""
    out = run_snakemake(root, "--directory", str(work), "--rulegraph", "--forceall")
    assert out.returncode == 0, out.stderr[-3000:]
    names = dict(re.findall(r"^\s*(\d+)\[label = \"(\w+)\"", out.stdout, re.M))
    children: dict[str, set[str]] = {name: set() for name in names.values()}
    for a, b in re.findall(r"^\s*(\d+) -> (\d+)", out.stdout, re.M):
        children[names[a]].add(names[b])
    return children


def _downstream(rules: set[str], children: dict[str, set[str]]) -> set[str]:
    seen, todo = set(rules), list(rules)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen - {"all"}


def _records(run) -> dict[str, tuple[set[str], set[str]]]:
    records: dict[str, tuple[set[str], set[str]]] = {}
    for path in (run / "results" / "logs").rglob("*.job.json"):
        record = json.loads(path.read_text(encoding="utf-8"))
        given, read = records.setdefault(record["rule"], (set(), set()))
        given.update(record["config_keys"])
        read.update(record["config_keys_read"])
    return records


def test_jobs_read_only_keys_they_are_given(tiny_run):
    records = _records(tiny_run)
    assert {"prepare_dataset", "attribute", "compare", "plot_pairs", "train_classifier"} <= set(records)
    for rule, (given, read) in records.items():
        assert read <= given, f"{rule} read keys it was not given: {sorted(read - given)}"
        unread = given - read - CONDITIONAL.get(rule, set())
        assert not unread, f"{rule} is given keys it never reads (it would re-run for nothing): {sorted(unread)}"
    assert "similarity.n_boot" not in records["compare"][0], "compare must not re-run when n_boot changes"
    assert "attribution.embeddings_steps" not in records["attribute"][0]


def test_each_key_replans_exactly_its_readers(root, tiny_run, tmp_path):
    records = _records(tiny_run)
    children = _rule_graph(root, tiny_run)
    config = yaml.safe_load((tiny_run / "config" / "config.yaml").read_text(encoding="utf-8"))
    config = resolve_shards(validate_config(config), planned_cpus())  # as the Snakefile: n_shards auto -> a count
    leaves = _leaves(load_schema())

    servers, local = [], threading.local()  # one fork server per thread: a dry run in ~0.6 s instead of ~1.7 s

    def plan(key: str) -> tuple[str, set[str], set[str], str]:
        if not hasattr(local, "snakemake"):
            local.snakemake = ForkedSnakemake(root)
            servers.append(local.snakemake)
        value, extra = OVERRIDES.get(key, (None, {}))
        if key not in OVERRIDES:
            value = _changed(leaves[key], _get(config, key))
        override = merged(_nested(key, value), extra)
        path = tmp_path / f"{key}.yaml"
        path.write_text(yaml.safe_dump(override), encoding="utf-8")
        out = local.snakemake.run("--directory", tiny_run, "-n", "--configfile", path)
        planned = set(re.findall(r"^(?:local)?rule (\w+):", out.stdout, re.M)) - {"all"}
        readers = {rule for rule, (given, _) in records.items() if key in given} | DAG_KEYS.get(key, set())
        expected = _downstream(readers, children) - WITHOUT.get(key, set())
        return key, planned, expected, out.stderr[-1500:] if out.returncode else ""

    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(plan, sorted(set(leaves) - GRID_KEYS - GENERATION_ONLY_KEYS)))
    finally:
        for server in servers:
            server.close()
    problems = []
    for key, planned, expected, error in results:
        if error:
            problems.append(f"{key}: dry run failed: {error}")
        elif planned != expected:
            problems.append(f"{key}: extra {sorted(planned - expected)}, missing {sorted(expected - planned)}")
    assert not problems, "\n".join(problems)
