#!/usr/bin/env bash
# The environment in which `python -m benchmarks.beside` times inseq 0.7.1 (PyPI, the authors' code, Apache 2.0):
# the libraries its modules import, beside the project's CPU torch, at context-cite's environment's transformers (4,
# which writes the models both read); inseq without its declared CUDA 11 wheels, which a CPU run never loads. Not
# part of the suite. Usage: tests/reference/build_inseq_env.sh [folder, default /tmp/inseq-env]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
env="${1:-/tmp/inseq-env}"
numpy="$(grep -i '^numpy==' "$here/envs/requirements.txt")"
captum="$(grep -i '^captum==' "$here/envs/requirements.txt")"
python3 -m venv "$env"
"$env/bin/pip" install --quiet "torch==2.13.0" "$numpy" "$captum" "transformers[sentencepiece,tokenizers]==4.57.6" \
  "jaxtyping==0.3.11" "typeguard==2.13.3" "treescope==0.1.10" rich matplotlib tqdm protobuf
"$env/bin/pip" install --quiet --no-deps "inseq==0.7.1"
"$env/bin/python" -c "import inseq, torch, transformers; print('inseq environment:', torch.__version__, transformers.__version__)"
