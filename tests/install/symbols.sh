#!/usr/bin/env bash
# The symbols libteraio exports are its ABI: every one starts with tio_ (docs/style.md), and
# the list equals tests/install/symbols.txt, so that no public function appears or disappears
# unannounced. To change the API on purpose, update the list in the same commit:
#     bash tests/install/symbols.sh --update build/libteraio.so
set -euo pipefail
list="$(dirname "$0")/symbols.txt"
update=0
if [ "${1:-}" = "--update" ]; then
    update=1
    shift
fi
lib=$1
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' \
           | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' | LC_ALL=C sort -u)
bad=$(grep -v '^tio_' <<<"$exported" || true)
if [ -n "$bad" ]; then
    echo "exported symbols without the tio_ prefix:"; echo "$bad"; exit 1
fi
if [ "$update" = 1 ]; then
    printf '%s\n' "$exported" >"$list"
    echo "wrote $(wc -l <"$list") symbols to $list"
    exit 0
fi
if ! diff_out=$(diff -u --label "$list (checked in)" --label "$lib (built)" "$list" - <<<"$exported"); then
    echo "the symbols exported by $lib differ from $list:"
    echo "$diff_out"
    echo
    echo "'+' lines are exported but not listed, '-' lines are listed but not exported."
    echo "If the change to the public API is deliberate, update the list in the same commit:"
    echo "    bash tests/install/symbols.sh --update $lib"
    echo "and say in the commit message what was added or removed (docs/style.md, 'API shape')."
    exit 1
fi
echo "exported symbols: the $(wc -l <<<"$exported") tio_ symbols match $list"
