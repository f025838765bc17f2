#!/usr/bin/env python3
"""The layering check: every #include in a library's sources names a header of its own layer or
of a layer below it (docs/architecture.md draws the stack), and the heavy third-party headers
(nlohmann/json.hpp, Boost, yaml-cpp, CLI11, SimGrid) stay out of headers except the few listed in
HEAVY_HOMES: each costs one to seven seconds of every file that parses it (docs/architecture.md,
"Build time").

    core  <-  models  <-  sim
    core  <-  backend/host, backend/launch, backend/kernels
    backend/kernels  <-  backend/cuda;  backend/kernels, backend/launch  <-  backend/nccl
    everything  <-  app;  bench, tests, fuzz may include anything
    inside app, rooms form one stack: common < run < calibrate < scenario < replay < plan < report < cli

Usage: check_layers.py ROOT       prints each upward include, exits 1 if there is any
       check_layers.py --self-test  proves the check fails on a wrong include and passes a right one
"""
import os
import re
import sys
import tempfile

# app's rooms, bottom to top: what every room shares, the executors by name, calibration, the
# scenario loader and its workload kinds (with their reports and traces), replay, plan, tandem
# report's page, and the command line on top.
APP_ROOMS = ["common", "run", "calibrate", "scenario", "replay", "plan", "report", "cli"]

# Folder -> the folders its sources may include from (its own first). The longest matching folder
# applies, so backend/cuda's rule is not backend's.
LAYERS = {
    "core": ["core"],
    "models": ["core", "models"],
    "sim": ["core", "models", "sim"],
    "backend/host": ["core", "backend/host"],
    "backend/launch": ["core", "backend/launch"],
    "backend/kernels": ["core", "backend/kernels"],
    "backend/cuda": ["core", "backend/kernels", "backend/cuda"],
    "backend/nccl": ["core", "backend/kernels", "backend/launch", "backend/nccl"],
    "app": ["core", "models", "sim", "backend", "app"],
    # app's rooms, a one-way stack (docs/architecture.md): each includes its own room and those below it.
    **{f"app/{room}": ["core", "models", "sim", "backend"] + [f"app/{r}" for r in APP_ROOMS[:i + 1]]
       for i, room in enumerate(APP_ROOMS)},
}
# Folders whose sources are not checked (they sit on top of everything).
UNCHECKED = ("bench", "tests", "fuzz", "build", "notebooks", "out", ".git")
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cuh")
HEADER_SUFFIXES = (".h", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
HEAVY_INCLUDE = re.compile(r'^\s*#\s*include\s+<(nlohmann/json\.hpp|boost/|yaml-cpp/|CLI/|simgrid/)')
# The headers that may include a heavy third-party header, and why. Any other header declares with
# <nlohmann/json_fwd.hpp>, forward declarations or models::Graph's opaque name.
HEAVY_HOMES = {
    "models/topology_graph.h": "Boost.Graph, for the few files that build or index a graph",
    "sim/simulator_internal.h": "SimGrid, shared by the simulator's own .cc files only",
    "sim/isolated.h": "nlohmann/json: its templates serialize any request type",
    "app/common/yaml_reader.h": "yaml-cpp, for the YAML readers",
    "app/scenario/workload_kind.h": "nlohmann/json: WorkloadOutput holds a trace document",
    "app/cli/cli_paths.h": "CLI11: validators for the command line, included by app/cli only",
}


def layer_of(path):
    best = None
    for folder in LAYERS:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def allowed(layer, header):
    return any(header.startswith(folder + "/") for folder in LAYERS[layer])


def violations(root):
    found = []
    for directory, subdirs, files in os.walk(root):
        relative_dir = os.path.relpath(directory, root)
        if relative_dir != "." and relative_dir.split(os.sep)[0] in UNCHECKED:
            subdirs[:] = []
            continue
        for file in sorted(files):
            if not file.endswith(SOURCE_SUFFIXES):
                continue
            path = os.path.normpath(os.path.join(relative_dir, file)).replace(os.sep, "/")
            layer = layer_of(path)
            if layer is None:
                continue
            is_header = file.endswith(HEADER_SUFFIXES)
            with open(os.path.join(directory, file), encoding="utf-8", errors="replace") as source:
                for number, line in enumerate(source, 1):
                    heavy = HEAVY_INCLUDE.match(line)
                    if heavy and is_header and path not in HEAVY_HOMES:
                        found.append(f"{path}:{number}: a header may not include <{heavy.group(1)}...> (it "
                                     "costs every file that includes this header; declare with json_fwd.hpp or "
                                     "a forward declaration, or list the header in HEAVY_HOMES with its reason)")
                    match = INCLUDE.match(line)
                    if not match:
                        continue
                    header = match.group(1)
                    if "/" not in header or allowed(layer, header):
                        continue  # a same-folder header or a system / third-party one in quotes
                    found.append(f"{path}:{number}: {layer} may not include \"{header}\" "
                                 f"(it may include {', '.join(LAYERS[layer])})")
    return found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        write("core/a.h", '#include "core/b.h"\n')
        write("sim/s.cc", '#include "models/m.h"\n#include "core/a.h"\n')
        write("app/x.cc", '#include "backend/nccl/n.h"\n')
        write("tests/t.cc", '#include "app/x.h"\n')
        write("app/report/r.cc", '#include "app/scenario/s.h"\n#include "app/common/c.h"\n')
        if violations(root):
            print("self-test: a correct tree was refused:", violations(root))
            return 1
        write("core/bad.h", '#include "sim/simulator.h"\n')
        write("backend/nccl/bad.cc", '#include "backend/cuda/cuda_executor.h"\n')
        write("app/scenario/bad.cc", '#include "app/report/report_page.h"\n')  # a back-edge between rooms
        write("app/replay/heavy.h", '#include <nlohmann/json.hpp>\n')  # a heavy header in a header
        write("app/replay/heavy.cc", '#include <nlohmann/json.hpp>\n')  # fine in a .cc
        found = violations(root)
        if len(found) != 4 or not any(f.startswith("core/bad.h:1") for f in found) or \
                not any(f.startswith("app/scenario/bad.cc:1") for f in found) or \
                not any(f.startswith("app/replay/heavy.h:1") for f in found):
            print("self-test: the wrong includes were not all caught:", found)
            return 1
    print("self-test: ok (a correct tree passes; two upward includes, a back-edge between app rooms and "
          "a heavy header in a header are caught)")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    found = violations(sys.argv[1])
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} include(s) cross a layer upward or put a heavy header in a header")
        return 1
    print("layers: every include stays in its layer or below; heavy headers stay out of headers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
