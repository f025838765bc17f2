#!/usr/bin/env bash
# Prepares a build of tandem on Debian 12: installs the Debian packages that are missing (as root,
# or through sudo), configures the `release` CMake preset and builds it. Idempotent: a second run
# installs nothing and rebuilds only what changed. Progress goes to stderr, so that the callers'
# stdout carries only their results. Used by scripts/main.sh and scripts/test.sh.
#
#   scripts/setup.sh            builds everything (the tests, benchmarks, fuzz replays)
#   scripts/setup.sh TARGET...  builds only those targets and what they need (scripts/main.sh: tandem,
#                               105 of the 197 objects)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config python3
  libsimgrid-dev libboost-graph-dev libfmt-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin
  chromium
  jupyter-nbconvert python3-matplotlib python3-pandas python3-ipykernel
)

missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
else
  echo "tandem setup: dpkg-query not found (not Debian?); assuming the build dependencies are installed" >&2
fi

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -eq 0 ]]; then
    as_root=()
  elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "tandem setup: error: missing packages (${missing[*]}) and neither root nor sudo to install them" >&2
    exit 1
  fi
  echo "tandem setup: installing ${missing[*]}" >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

targets=("$@")
echo "tandem setup: configuring and building (cmake --preset release${targets[*]:+, targets: ${targets[*]}})" >&2
cmake --preset release >&2
cmake --build --preset release -j"$(nproc)" ${targets[@]:+--target "${targets[@]}"} >&2
