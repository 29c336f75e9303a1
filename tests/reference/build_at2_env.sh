#!/usr/bin/env bash
# The reference environment of tests/reference/at2_reference.py: at2 0.0.1 (PyPI, the authors' code, MIT licence)
# with the libraries its modules import, beside the project's CPU torch and transformers, so that the models it reads
# are the ones attnlens reads. Not part of the suite (its output is committed under tests/reference/at2).
# Usage: tests/reference/build_at2_env.sh [folder, default /tmp/at2-env]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
env="${1:-/tmp/at2-env}"
transformers="$(grep -i '^transformers==' "$here/envs/requirements.txt")"
numpy="$(grep -i '^numpy==' "$here/envs/requirements.txt")"
safetensors="$(grep -i '^safetensors==' "$here/envs/requirements.txt")"
python3 -m venv "$env"
"$env/bin/pip" install --quiet "torch==2.13.0" "$transformers" "$numpy" "$safetensors" datasets pandas nltk spacy tqdm \
  huggingface-hub
"$env/bin/pip" install --quiet --no-deps "at2==0.0.1"
"$env/bin/python" -c "import at2, torch, transformers; print('at2 reference environment:', torch.__version__, transformers.__version__)"
