#!/usr/bin/env bash
# The main job: set up and build (scripts/setup.sh), then run the shipped what-if scenario: 64
# simulated H100s (8 DGX-H100 nodes, 400G rail-optimized fabric) against 800G NICs behind PCIe Gen5
# and Gen6, all_reduce / all_gather / reduce_scatter from 8 B to 16 GiB with ring, tree, nvls and
# auto. The report goes to stdout (exit 0 when every expectation of the scenario holds);
# results.json and results.csv go to out/what-if-64xh100/.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
build/release/app/tandem run scenarios/what-if-64xh100.yaml --out out/what-if-64xh100
