#!/usr/bin/env bash
# The whole paper matrix against its replay (docs/bench/plan.md, "Plans against their replay"):
# every cell of `teraio compare --paper` planned for both pipeline stages with every planned
# policy, each plan checked by tio_plan_verify and the cell replayed coupled in the simulator.
# Fails when a plan reported feasible is rejected by the verifier, or a cell whose plans are
# feasible replays with a late move or an out-of-memory. CI runs the smallest cell per model
# (tests/unit/test_plan_replay.c); this runs all 15 (about 30 s of CPU in a Release build).
#
#   bash bench/plan_matrix.sh [BUILD]     (default: build; needs test_plan_replay built)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
if [ ! -x "$build/test_plan_replay" ]; then
    echo "plan_matrix.sh: $build/test_plan_replay not found: cmake --build $build first" >&2
    exit 2
fi
TIO_PLAN_MATRIX=full "$build/test_plan_replay"
