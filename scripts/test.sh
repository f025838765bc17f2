#!/usr/bin/env bash
# All tests: set up and build (scripts/setup.sh), then run every CTest suite of the release build.
# Prints ctest's summary ("100% tests passed, 0 tests failed out of N") and exits non-zero when a
# test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
ctest --preset release --parallel "$(nproc)"
