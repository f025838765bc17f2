#!/usr/bin/env bash
# The main job: set up and build (scripts/setup.sh), then run tandem's main job and print its
# result on stdout. For now: the nccl-tests-style all_reduce sweep on the host backend (8 ranks as
# threads, 8 B to 64 MiB by factors of 4), with every result checked (#wrong).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build/release/app/tandem bench all_reduce --backend host -b 8 -e 64M -f 4 -g 8
