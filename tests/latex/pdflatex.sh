#!/usr/bin/env bash
# pdflatex for the LaTeX compile tests (tests/unit/render/test_hostile.py), from Debian's TeX Live, and gone again after.
#   up     install texlive-latex-base + texlive-latex-recommended (pdflatex, booktabs), recording the packages
#          that were not there before in $STATE (default /tmp/attnlens-pdflatex.packages)
#   clean  purge exactly those packages
# Idempotent; needs root and apt-get. `apt-get update` only when the plain install fails.
set -euo pipefail
STATE=${STATE:-/tmp/attnlens-pdflatex.packages}
export DEBIAN_FRONTEND=noninteractive
installed() { dpkg-query -W -f '${db:Status-Status} ${Package}\n' | awk '$1 == "installed" {print $2}' | sort; }
case "${1:-}" in
up)
    if command -v pdflatex >/dev/null; then echo "pdflatex already installed"; exit 0; fi
    installed > "$STATE.before"
    packages=(texlive-latex-base texlive-latex-recommended)
    if ! apt-get install -y --no-install-recommends "${packages[@]}"; then
        apt-get update
        apt-get install -y --no-install-recommends "${packages[@]}"
    fi
    comm -13 "$STATE.before" <(installed) > "$STATE"
    rm -f "$STATE.before"
    echo "installed $(wc -l < "$STATE") packages"
    ;;
clean)
    if [ -s "$STATE" ]; then
        xargs apt-get purge -y < "$STATE" >/dev/null
        echo "purged $(wc -l < "$STATE") packages"
    fi
    rm -f "$STATE"
    ;;
*)
    echo "usage: $0 up|clean" >&2
    exit 2
    ;;
esac
