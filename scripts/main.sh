#!/usr/bin/env bash
# The main job: set up and build the tandem binary (scripts/setup.sh tandem), then run the shipped training scenario: a
# Llama-3 70B step on 64 simulated H100s (8 DGX-H100 nodes, 400G rail-optimized fabric), FSDP and
# TP8+PP4 side by side, against 800G NICs behind PCIe Gen5 and Gen6. The report (step time and its
# breakdown per layout, memory per GPU, the most exposed collectives, 400G vs 800G) goes to stdout
# (exit 0 when every expectation of the scenario holds); results.json and results.csv go to
# out/llama3-70b-64xh100/.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh tandem  # only the command line: the tests are built by scripts/test.sh
build/release/app/tandem run scenarios/llama3-70b-64xh100.yaml --out out/llama3-70b-64xh100
