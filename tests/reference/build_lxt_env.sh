#!/usr/bin/env bash
# The reference environment of tests/reference/lxt_reference.py: lxt 2.1 with the transformers it was tested with
# (4.52), beside the project's CPU torch. Not part of the suite (its output is committed under tests/reference/lxt).
# Usage: tests/reference/build_lxt_env.sh [folder, default /tmp/lxt-env]
set -euo pipefail
env="${1:-/tmp/lxt-env}"
python3 -m venv "$env"
"$env/bin/pip" install --quiet "torch==2.13.0" "transformers==4.52.4" "numpy<3" safetensors
# lxt's declared needs (bitsandbytes, open_clip_torch, zennit, torchvision through them) serve its other models:
# the decoders' rules need none, so lxt goes in without them
"$env/bin/pip" install --quiet --no-deps "lxt==2.1"
"$env/bin/python" -c "import transformers, torch; print('lxt reference environment:', transformers.__version__, torch.__version__)"
