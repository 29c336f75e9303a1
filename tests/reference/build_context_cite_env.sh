#!/usr/bin/env bash
# The reference environment of tests/reference/context_cite_reference.py: context-cite 0.0.4 (PyPI, the authors'
# code) with the libraries it declares, beside the project's CPU torch and at the project's scikit-learn, so that
# the Lasso it calls is the one attnlens calls. Not part of the suite (its output is committed under
# tests/reference/context_cite). Usage: tests/reference/build_context_cite_env.sh [folder, default /tmp/cc-env]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
env="${1:-/tmp/cc-env}"
sklearn="$(grep -i '^scikit-learn==' "$here/envs/requirements.txt")"
numpy="$(grep -i '^numpy==' "$here/envs/requirements.txt")"
python3 -m venv "$env"
"$env/bin/pip" install --quiet "torch==2.13.0" "$sklearn" "$numpy" "transformers==4.57.6" datasets pandas nltk spacy tqdm
"$env/bin/pip" install --quiet --no-deps "context-cite==0.0.4"
"$env/bin/pip" install --quiet gguf accelerate  # Gemma 3 270M from its GGUF file (the Gemma case)
"$env/bin/python" -c "import context_cite, sklearn, torch; print('context-cite reference environment:', sklearn.__version__, torch.__version__)"
