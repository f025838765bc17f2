#!/usr/bin/env python3
"""Checks that the scenario and plan references document every key the loaders accept: each key of
the k...Keys tables in app/scenario/scenario.cc and its scenario_*.cc section readers must appear in
docs/scenarios.md, in backticks or as `key:` in a YAML example, and each of app/plan/plan.cc's in
docs/plan.md; each cluster key of app/common/cluster_keys.cc in docs/scenarios.md and its flag in
docs/cli.md.

Usage: check_scenario_keys.py REPO      exit 0 when every key is documented, 1 with the missing ones.
Standard library only.
"""

import re
import sys

# The scenario loader's files that hold k...Keys tables (app/scenario/scenario_internal.h).
SCENARIO_READERS = [
    "scenario",
    "scenario_cluster",
    "scenario_faults",
    "scenario_collectives",
    "scenario_training",
    "scenario_startup",
]


def tables(source):
    """{table name: [keys]} of the `constexpr std::array<std::string_view, N> kNameKeys{...};` tables."""
    out = {}
    for match in re.finditer(r"std::array<std::string_view,\s*\d+>\s+(k\w+Keys)\s*\{(.*?)\};", source, re.S):
        out[match.group(1)] = re.findall(r'"([^"]+)"', match.group(2))
    return out


def cluster_keys(source):
    """[(key, flag)] of app/common/cluster_keys.cc's table: entries {"nodes", "--nodes", ...}."""
    return re.findall(r'\{"(\w+)",\s*"(--[\w-]+)"', source)


def documented(text, word):
    backticked = re.search(r"`[^`\n]*(?<![\w-])" + re.escape(word) + r"(?![\w-])[^`\n]*`", text)
    in_example = re.search(r"(^|[\s{,])" + re.escape(word) + r":", text, re.M)  # a YAML example
    return backticked or in_example


def main():
    repo = sys.argv[1]
    missing, checked = [], 0
    scenarios_doc = open(f"{repo}/docs/scenarios.md", encoding="utf-8").read()
    cli_doc = open(f"{repo}/docs/cli.md", encoding="utf-8").read()
    pairs = cluster_keys(open(f"{repo}/app/common/cluster_keys.cc", encoding="utf-8").read())
    if len(pairs) < 10:
        missing.append(f"app/common/cluster_keys.cc: found {len(pairs)} cluster keys; the table's form changed?")
    for key, flag in pairs:
        checked += 2
        if not documented(scenarios_doc, key):
            missing.append(f"docs/scenarios.md: cluster key '{key}' (app/common/cluster_keys.cc) is not documented")
        if not documented(cli_doc, flag):
            missing.append(f"docs/cli.md: cluster flag '{flag}' (app/common/cluster_keys.cc) is not documented")
    for source, doc in [(f"app/scenario/{name}.cc", "docs/scenarios.md") for name in SCENARIO_READERS] + [
        ("app/plan/plan.cc", "docs/plan.md")
    ]:
        text = open(f"{repo}/{doc}", encoding="utf-8").read()
        for table, keys in tables(open(f"{repo}/{source}", encoding="utf-8").read()).items():
            for key in keys:
                checked += 1
                backticked = re.search(r"`[^`\n]*\b" + re.escape(key) + r"\b[^`\n]*`", text)
                in_example = re.search(r"(^|[\s{,])" + re.escape(key) + r":", text, re.M)  # a YAML example
                if not (backticked or in_example):
                    missing.append(f"{doc}: key '{key}' ({source} {table}) is not documented")
    for m in missing:
        print("FAIL " + m)
    print(f"{checked} keys checked: {len(missing)} undocumented")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
