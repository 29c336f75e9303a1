import dataclasses
import typing

import pytest
import yaml

from attnlens.errors import InputError
from attnlens.pipeline.config import (
    SECTIONS,
    STUDIES,
    TOP_LEVEL_VALUES,
    AttributionConfig,
    ExplanationsConfig,
    ModelConfig,
    PairTopologyConfig,
    PersistenceConfig,
    TopologyConfig,
    load_config,
    load_schema,
    read_config_file,
    schema_markdown,
    validate_config,
)
from attnlens.pipeline.config.markdown import readers, rule_keys
from attnlens.pipeline.config.sections import _Section, _section_classes
from attnlens.pipeline.config.validation import RENAMED_KEYS
from attnlens.pipeline.startup import start_workflow
from attnlens.sharding import (
    PLANNED_CPUS_ENV,
    SHARDED_SECTIONS,
    machine_cpus,
    planned_cpus,
    resolve_shards,
    shard_count,
)
from tests.support.helpers import ROOT, merged


def _walk(schema_section: dict, cls: type, path: str):
    props = schema_section["properties"]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(props) == set(fields), f"{path}: schema {sorted(props)} vs dataclass {sorted(fields)}"
    assert schema_section.get("additionalProperties") is False, f"{path} must forbid unknown keys"
    hints = typing.get_type_hints(cls)
    defaults = cls()
    for name, sub in props.items():
        assert sub.get("description"), f"{path}.{name} has no description"
        hint = hints[name]
        if isinstance(hint, type) and issubclass(hint, _Section):
            _walk(sub, hint, f"{path}.{name}")
            continue
        value = getattr(defaults, name)
        expected = sub["default"]
        assert (list(value) if isinstance(value, tuple) else value) == expected, f"{path}.{name} default differs"


def test_sections_are_generated_from_the_schema():
    """One declaration: each section's dataclass has the schema's keys, defaults and types, nothing else."""
    schema = load_schema()
    assert set(schema["properties"]) == set(SECTIONS) | set(TOP_LEVEL_VALUES)
    assert schema["properties"]["studies"]["items"]["enum"] == list(STUDIES)
    for key, cls in SECTIONS.items():
        _walk(schema["properties"][key], cls, key)
    hints = typing.get_type_hints(AttributionConfig)
    assert (
        hints["n_shards"] == int | typing.Literal["auto"]
        and hints["target"] == typing.Literal["predicted", "true", "class_1", "all"]
        and hints["showcase_steps"] == int | None
    )
    assert typing.get_type_hints(ModelConfig)["attention_window"] == int | tuple[int, ...] | None
    methods = typing.get_type_hints(ExplanationsConfig)["methods"]  # list items with an enum: a tuple of literals
    assert typing.get_origin(methods) is tuple and "rollout" in typing.get_args(typing.get_args(methods)[0])
    assert issubclass(TopologyConfig, PersistenceConfig) and issubclass(PairTopologyConfig, PersistenceConfig)
    assert PairTopologyConfig().pooling == "none" and TopologyConfig().pooling == "chunks"  # each its own default
    assert AttributionConfig.__doc__ == schema["properties"]["attribution"]["description"]


def test_a_schema_section_without_a_class_name_fails_loudly():
    schema = load_schema()
    schema["properties"]["extra"] = {"type": "object", "description": "x", "properties": {}}
    with pytest.raises(KeyError, match="SECTION_CLASSES"):
        _section_classes(schema)


@pytest.mark.parametrize("path", ["config/config.yaml", "config/paper.yaml", ".test/config/config.yaml"])
def test_shipped_configs_validate(root, path):
    """Every section of a shipped config builds its class, which keeps every value as the file (plus the schema's
    defaults) gave it: YAML lists arrive as tuples, nothing else changes."""

    def as_lists(value):
        if isinstance(value, dict):
            return {k: as_lists(v) for k, v in value.items()}
        return [as_lists(v) for v in value] if isinstance(value, tuple | list) else value

    config = load_config(root / path)
    for key, cls in SECTIONS.items():
        assert as_lists(cls.from_dict(config[key], strict=True).to_dict()) == as_lists(config[key]), key


def test_the_default_config_sets_only_what_differs_from_the_schema(root):
    """Defaults are declared once, in the schema: config/config.yaml holds only the embedded default's own choices,
    so a changed default reaches the default run, and the file says what the default run chose."""

    def leaves(node: dict, prefix: str = ""):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    shipped = read_config_file(root / "config/config.yaml")
    defaults = validate_config({})
    restated = []
    for dotted, value in leaves(shipped):
        default = defaults
        for part in dotted.split("."):
            default = default[part]
        if value == default:
            restated.append(dotted)
    assert not restated, f"config/config.yaml restates the schema's defaults: {restated}"
    assert len(list(leaves(shipped))) >= 10  # the file is read: the run's own choices are there


def test_defaults_are_filled():
    config = validate_config({})
    assert config["model"]["max_length"] is None and config["model"]["attention_window"] is None  # the checkpoint's
    assert config["studies"] == [s for s in STUDIES if s != "generation"]  # the default task's studies
    assert config["data"]["synthetic"]["n_documents"] == 240


@pytest.mark.parametrize(
    ("snippet", "field"),
    [
        ({"train": {"n_epochz": 3}}, "train.n_epochz"),
        ({"studies": ["classification", "tpology"]}, "studies.1"),
        ({"studies": []}, "studies"),
        ({"model": {"source": "finetuned"}}, "model.source"),
        ({"tran": {}}, "tran"),
        ({"model": {"max_length": 0}}, "model.max_length"),
        ({"model": {"max_length": -5}}, "model.max_length"),
        ({"model": {"attention_window": 63}}, "model.attention_window"),
        ({"model": {"max_length": 100, "attention_window": 128}}, "model.attention_window"),
        ({"data": {"source": "file"}}, "data.path"),
        ({"data": {"source": "folders", "path": "x"}}, "data.classes"),
        ({"data": {"source": "hub"}}, "data.hub.name"),
        ({"data": {"test_fraction": 1.5}}, "data.test_fraction"),
        ({"train": {"lr": "fast"}}, "train.lr"),
        ({"attribution": {"min_steps": 64, "max_steps": 32}}, "attribution.min_steps"),
        ({"attribution": {"target": "label"}}, "attribution.target"),
        ({"faithfulness": {"fractions": [0.1, 1.5]}}, "faithfulness.fractions.1"),
        ({"similarity": {"rbo_p": [0.9, 1.0]}}, "similarity.rbo_p.1"),
        ({"topology": {"estimators": ["pooled_pmi", "entropy"]}}, "topology.estimators.1"),
        ({"topology": {"chunk_size": 0}}, "topology.chunk_size"),
        ({"topology": {"max_dimension": 3}}, "topology.max_dimension"),
        ({"similarity": {"legacy_sort": "quick"}}, "similarity.legacy_sort"),
        ({"similarity": {"extra_datasets": [{"name": "notes"}]}}, "similarity.extra_datasets.0"),
        ({"similarity": {"extra_datasets": [{"name": "synthetic papers", "path": "x"}]}}, "similarity.extra_datasets"),
    ],
)
def test_bad_config_names_the_key(snippet, field):
    with pytest.raises(InputError) as err:
        validate_config(yaml.safe_load(yaml.safe_dump(snippet)), "my.yaml")
    assert err.value.field == field
    assert str(err.value).startswith(f"my.yaml: {field}: ")
    assert "\n" not in str(err.value)


def test_load_config_reports_bad_yaml(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(InputError, match="expected valid YAML"):
        load_config(bad)


def test_config_readme_documents_every_key(root):
    text = (root / "config" / "README.md").read_text(encoding="utf-8")

    def keys(section, prefix):
        for name, sub in section["properties"].items():
            yield prefix + name
            if sub.get("type") == "object":
                yield from keys(sub, prefix + name + ".")

    missing = [k for k in keys(load_schema(), "") if f"`{k}`" not in text]
    assert not missing, f"config/README.md lacks {missing}"
    assert text == schema_markdown(), "config/README.md is stale: python -m attnlens.pipeline.config > config/README.md"


def test_schema_enums_hold_values_of_their_type():
    """An unquoted `true` in a YAML enum is a boolean: the string option could never be chosen."""
    kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "null": type(None)}

    def walk(node, prefix=""):
        for key, prop in node.get("properties", {}).items():
            yield f"{prefix}{key}", prop
            yield from walk(prop, f"{prefix}{key}.")
            yield from walk(prop.get("items", {}), f"{prefix}{key}[].")

    for key, prop in walk(load_schema()):
        types = prop.get("type")
        for option in prop.get("enum", []):
            allowed = [kinds[t] for t in ([types] if isinstance(types, str) else types or []) if t in kinds]
            assert any(isinstance(option, k) for k in allowed), f"{key}: enum value {option!r} is not a {types}"


def test_the_true_class_target_is_accepted():
    config = load_config(ROOT / "config" / "config.yaml")
    config["attribution"]["target"] = "true"
    assert validate_config(config)["attribution"]["target"] == "true"


def test_auto_shards_follow_the_planned_cpus(monkeypatch):
    assert [shard_count("auto", c) for c in (1, 2, 3, 16)] == [1, 1, 1, 8]
    assert shard_count(5, 16) == 5  # an integer pins it
    cfg = validate_config({"attribution": {"n_shards": 3}})
    assert cfg["topology"]["n_shards"] == "auto"  # the schema's default
    resolve_shards(cfg, 8)
    assert cfg["attribution"]["n_shards"] == 3
    assert [
        cfg["attention"]["n_shards"],
        cfg["explanations"]["n_shards"],
        cfg["topology"]["n_shards"],
        cfg["pairs"]["attribution"]["n_shards"],
        cfg["generation"]["n_shards"],
    ] == [4, 4, 4, 4, 4]
    assert len(SHARDED_SECTIONS) == 6
    monkeypatch.delenv(PLANNED_CPUS_ENV, raising=False)
    assert planned_cpus() == machine_cpus()
    loaded = load_config(ROOT / "config" / "config.yaml")
    assert loaded["attribution"]["n_shards"] == max(1, machine_cpus() // 2)
    monkeypatch.setenv(PLANNED_CPUS_ENV, "12")  # what a cluster job inherits from the process that planned it
    assert load_config(ROOT / "config" / "config.yaml")["explanations"]["n_shards"] == 6
    monkeypatch.setenv(PLANNED_CPUS_ENV, "many")
    with pytest.raises(InputError, match=PLANNED_CPUS_ENV):
        planned_cpus()


def test_the_workflow_starts_with_one_call(tmp_path, monkeypatch):
    """``start_workflow`` (workflow/rules/common.smk's start-up): the config validated in place with its defaults,
    ``n_shards: auto`` a count of the planned CPUs, no grid for one run; a bad key is one InputError line."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(PLANNED_CPUS_ENV, "4")
    config = {"attribution": {"n_shards": "auto"}}
    assert start_workflow(config, ["config/config.yaml"], tmp_path, dry_run=False) is None
    assert config["attribution"]["n_shards"] == 2 and config["attribution"]["n_steps"] == 50
    with pytest.raises(InputError, match=r"^a\.yaml \+ b\.yaml: attribution\.n_stepz: unknown key"):
        start_workflow({"attribution": {"n_stepz": 3}}, ["a.yaml", "b.yaml"], tmp_path, dry_run=True)


def test_a_renamed_key_still_runs_under_its_old_name_with_a_notice(capsys):
    """One release of grace: ``attribution.internal_batch_size``, ``explanations.batch_size`` and
    ``faithfulness.batch_size`` are read as their new names with one notice line each; both names at once are
    refused in one line."""
    config = {
        "attribution": {"internal_batch_size": 4},
        "explanations": {"batch_size": "auto"},
        "faithfulness": {"batch_size": 2},
    }
    validate_config(config, where="old.yaml")
    assert config["attribution"]["steps_per_pass"] == 4 and "internal_batch_size" not in config["attribution"]
    assert config["explanations"]["copies_per_pass"] == "auto" and config["faithfulness"]["copies_per_pass"] == 2
    said = capsys.readouterr().err.splitlines()
    assert said == [
        f"attnlens: notice: old.yaml: {old} is now {old.rsplit('.', 1)[0]}.{new}; the old name is read until the "
        "next release"
        for old, new in RENAMED_KEYS.items()
    ]
    with pytest.raises(InputError, match=r"^old\.yaml: faithfulness\.batch_size: expected one of faithfulness\.batch"):
        validate_config({"faithfulness": {"batch_size": 2, "copies_per_pass": 2}}, where="old.yaml")
    validate_config({"attribution": {"steps_per_pass": 4}}, where="new.yaml")
    assert capsys.readouterr().err == ""


def test_every_key_a_rule_lists_is_in_the_schema_and_read_by_shows_it(root):
    """The rules' keys(...) are the one place a rule's keys are said: each names a key (or section) of the schema, and
    config/README.md's "read by" column is drawn from them (prepare_dataset's come from shared_keys)."""
    schema = load_schema()
    listed = readers(rule_keys(root / "workflow" / "rules"))
    for key in listed:
        node = schema
        for part in key.split("."):
            assert part in node.get("properties", {}), f"a rule lists {key}, which the schema does not have"
            node = node["properties"][part]
    assert sorted(listed["data.seed"]) == ["prepare_dataset"]
    assert {"explain", "extract_attention", "predict"} <= set(listed["model.device"])
    row = next(line for line in schema_markdown().splitlines() if line.startswith("| `report.explorer.top_k`"))
    assert row.endswith("| `build_explorers` |")


@pytest.mark.parametrize(
    "overlays",
    [
        ["generation.yaml"],
        ["generation.yaml", "generation_smollm2.yaml"],
        ["generation.yaml", "generation_large.yaml"],
        ["generation.yaml", "generation_seeds.yaml"],
        ["generation.yaml", "generation_gpu.yaml"],
        ["generation_scratch.yaml", "generation_grid.yaml"],
    ],
)
def test_the_generation_overlays_validate_in_the_order_their_headers_give(root, overlays):
    """Each generation configuration, laid over config/config.yaml as its header's command lays it: the default on
    Gemma 3 270M, SmolLM2, the larger contexts, six corpora and a card over it; the from-scratch control, its grid."""
    config = read_config_file(root / "config/config.yaml")
    for name in overlays:
        config = merged(config, read_config_file(root / "config" / name))
        assert f"--configfile config/{' config/'.join(overlays[: overlays.index(name) + 1])}" in (
            root / "config" / name
        ).read_text(encoding="utf-8")
    checked = validate_config(config, overlays[-1])
    assert checked["model"]["source"] == ("from_config" if "generation_scratch.yaml" in overlays else "pretrained")
