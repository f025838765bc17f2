#!/usr/bin/env python3
"""Checks that the scenario and plan references document every key the loaders accept: each key of
the k...Keys tables in app/scenario/scenario.cc must appear in docs/scenarios.md, in backticks or as `key:`
in a YAML example, and each of app/plan/plan.cc's in docs/plan.md.

Usage: check_scenario_keys.py REPO      exit 0 when every key is documented, 1 with the missing ones.
Standard library only.
"""

import re
import sys


def tables(source):
    """{table name: [keys]} of the `constexpr std::array<std::string_view, N> kNameKeys{...};` tables."""
    out = {}
    for match in re.finditer(r"std::array<std::string_view,\s*\d+>\s+(k\w+Keys)\s*\{(.*?)\};", source, re.S):
        out[match.group(1)] = re.findall(r'"([^"]+)"', match.group(2))
    return out


def main():
    repo = sys.argv[1]
    missing, checked = [], 0
    for source, doc in [("app/scenario/scenario.cc", "docs/scenarios.md"), ("app/plan/plan.cc", "docs/plan.md")]:
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
