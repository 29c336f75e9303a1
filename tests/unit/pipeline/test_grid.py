"""A grid of runs: naming, the runs' configs, which jobs they share, and the DAG a grid plans."""

from __future__ import annotations

import copy

import pytest

from attnlens.errors import InputError
from attnlens.pipeline.config import validate_config
from attnlens.pipeline.grid import expand_grid, grid_path, has_grid, resolve_path, scope_of
from tests.support.helpers import ROOT, TEST_GRID, tiny_config


def _config(grid: dict, **sections) -> dict:
    cfg = tiny_config(ROOT)
    cfg.update(copy.deepcopy(sections))
    cfg["grid"] = copy.deepcopy(grid)
    return validate_config(cfg)


def test_a_config_without_a_grid_is_one_run():
    assert not has_grid(validate_config(tiny_config(ROOT)))


def test_runs_are_named_by_their_place_and_share_what_they_can():
    grid = expand_grid(_config(TEST_GRID))
    assert grid.names == [
        "default__minilm_w32__s7",
        "default__minilm_w32__s8",
        "default__bigbird__s7",
        "default__bigbird__s8",
    ]
    # one tokenizer and length: one prepared dataset; one base model per model
    assert {r.dataset_group for r in grid.runs} == {"default"}
    assert [r.base_group for r in grid.runs] == ["minilm_w32", "minilm_w32", "bigbird", "bigbird"]
    run = grid.run("default__bigbird__s8")
    assert run.config["train"]["seed"] == 8 and run.config["model"]["architecture"] == "bigbird"
    assert run.config["data"]["seed"] == tiny_config(ROOT)["data"]["seed"]  # the split does not follow the seed
    assert run.config["model"]["max_length"] == tiny_config(ROOT)["model"]["max_length"]  # the rest is the base
    assert not has_grid(run.config)  # a run is one run


def test_the_split_follows_the_seed_when_asked():
    grid = expand_grid(_config({**TEST_GRID, "split_follows_seed": True}))
    assert [r.dataset_group for r in grid.runs] == ["default__s7", "default__s8", "default__s7", "default__s8"]
    assert [r.config["data"]["seed"] for r in grid.runs] == [7, 8, 7, 8]
    # a base model reads the dataset's classes, the same in every split: still one per model
    assert [r.base_group for r in grid.runs] == ["minilm_w32", "minilm_w32", "bigbird", "bigbird"]


def test_models_of_other_tokenizers_prepare_their_own_data():
    grid = expand_grid(_config({"models": {"short": {"model": {"max_length": 64}}, "long": {}}, "seeds": [1]}))
    assert [r.dataset_group for r in grid.runs] == ["default__short", "default__long"]


def test_a_classifier_of_ones_own_runs_once_per_dataset(tmp_path):
    grid = expand_grid(
        _config(
            {
                "models": {"mine": {"model": {"source": "classifier", "name_or_path": str(tmp_path)}}, "lf": {}},
                "seeds": [1, 2],
                "exclude": [{"model": "lf", "seed": 2}],
            }
        )
    )
    assert grid.names == ["default__mine", "default__lf__s1"]
    assert grid.run("default__mine").base_group is None and not grid.run("default__mine").trains_classifier


#: A generation run of the `.test` corpus with a Llama drawn from its configuration (what differs from `.test`).
GENERATION = {
    "studies": ["generation"],
    "model": {"source": "from_config", "architecture": "llama", "max_length": 128},
    "attribution": {"target": "true"},
}


def test_a_generation_grids_seed_is_its_decoders_training_seed_and_a_pretrained_one_runs_once():
    data = {**tiny_config(ROOT)["data"], "task": "generation"}
    drawn = expand_grid(_config({"seeds": [3, 4]}, data=data, **GENERATION))
    assert drawn.names == ["default__default__s3", "default__default__s4"]
    assert [r.config["generation"]["train"]["seed"] for r in drawn.runs] == [3, 4]
    assert {r.config["train"]["seed"] for r in drawn.runs} == {7}  # the classifier's seed is not the generator's
    pretrained = {"source": "pretrained", "name_or_path": "Qwen/Qwen2.5-0.5B-Instruct", "max_length": 128}
    grid = {"seeds": [3, 4], "models": {"qwen": {"model": pretrained}, "drawn": {}}}
    both = expand_grid(_config(grid, data=data, **GENERATION))
    assert both.names == ["default__qwen", "default__drawn__s3", "default__drawn__s4"]  # nothing to train: one run
    drawn_data = expand_grid(_config({**grid, "split_follows_seed": True}, data=data, **GENERATION))
    assert drawn_data.names == ["default__qwen__s3", "default__qwen__s4", "default__drawn__s3", "default__drawn__s4"]
    assert [r.config["data"]["seed"] for r in drawn_data.runs] == [3, 4, 3, 4]  # each seed's contexts its own
    no_axis = expand_grid(_config({"models": {"a": {}}}, data=data, **GENERATION))
    assert no_axis.names == ["default__a__s0"]  # no seed axis: the run's own generation.train.seed


def test_paths_keep_the_one_run_layout_under_their_scope():
    grid = expand_grid(_config(TEST_GRID))
    run = grid.run("default__bigbird__s7")
    assert resolve_path("results/attributions/shard{shard}.parquet", run) == (
        "results/runs/default__bigbird__s7/attributions/shard{shard}.parquet"
    )
    assert resolve_path("results/data/test.parquet", run) == "results/datasets/default/data/test.parquet"
    assert resolve_path("results/models/base", run) == "results/base_models/bigbird/models/base"
    assert grid_path("results/logs/prepare_dataset/prepare_dataset.log") == (
        "results/datasets/{dataset_group}/logs/prepare_dataset/prepare_dataset.log"
    )
    assert scope_of("results/pairs/tables") == scope_of("results/findings/findings.csv") == "global"
    assert grid_path("results/data/pairs_test.parquet") == "results/data/pairs_test.parquet"


@pytest.mark.parametrize(
    ("grid", "field"),
    [
        ({"seeds": [3, 3]}, "grid.seeds"),
        ({"models": {"a": {}, "A": {}}}, "grid.models"),
        ({"models": {"a": {}}, "exclude": [{"dataset": "nope"}]}, "grid.exclude[0].dataset"),
        ({"models": {"a": {}}, "exclude": [{"model": "a"}]}, "grid.exclude"),
        ({"datasets": {"d": {"seed": 3}}, "seeds": [1], "split_follows_seed": True}, "grid.datasets.d.seed"),
        ({"split_follows_seed": True}, "grid"),
    ],
)
def test_a_grid_that_cannot_be_run_is_one_error(grid, field):
    with pytest.raises(InputError) as err:
        expand_grid(_config(grid))
    assert err.value.field == field
