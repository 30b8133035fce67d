#!/usr/bin/env bash
# Every symbol libteraio exports must start with tio_ (docs/style.md).
set -euo pipefail
bad=$(nm -D --defined-only "$1" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep -v '^tio_' \
      | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' || true)
if [ -n "$bad" ]; then
    echo "exported symbols without the tio_ prefix:"; echo "$bad"; exit 1
fi
echo "exported symbols: all $(nm -D --defined-only "$1" | grep -c ' T tio_') functions start with tio_"
