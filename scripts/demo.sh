#!/usr/bin/env bash
# teraio's main job on its built-in default: set up, then run the demo (python -m teraio.demo when
# it exists; until then the built-in example trace through the CLI).
set -euo pipefail
cd "$(dirname "$0")/.."
TIO_SETUP_TORCH=${TIO_SETUP_TORCH:-1} bash scripts/setup.sh
. .venv/bin/activate
if python -c "import teraio.demo" 2>/dev/null; then
    exec python -m teraio.demo "$@"
fi
build/teraio trace info tests/data/example.json
exec build/teraio analyze tests/data/example.json
