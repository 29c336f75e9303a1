#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests (no browser download by Playwright: it is pointed at
# /usr/bin/chromium). Idempotent; needs root and apt-get. `apt-get update` only when the plain install fails.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null | head -1)"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends chromium; then
    apt-get update
    apt-get install -y --no-install-recommends chromium
fi
/usr/bin/chromium --version 2>/dev/null | head -1
