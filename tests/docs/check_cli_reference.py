#!/usr/bin/env python3
"""Checks docs/cli.md against `tandem --help`: every subcommand has its section, and every option
a subcommand's --help lists appears in that section (the cluster options, which several commands
share, may be documented once, in `tandem topo`'s section); and every option a section documents is
one its --help has.

Usage: check_cli_reference.py REPO TANDEM      exit 0 when they agree, 1 with the differences.
Standard library only.
"""

import re
import subprocess
import sys

SHARED_IN = "topo"  # where the cluster options (add_cluster_options) are documented in full


def help_of(tandem, *args):
    return subprocess.run([tandem, *args, "--help"], capture_output=True, text=True, check=True).stdout


def subcommands(text):
    part = text.split("Subcommands:", 1)[1] if "Subcommands:" in text else ""
    return [m.group(1) for m in re.finditer(r"^  ([a-z][\w-]*)\s", part, re.M)]


def options(text):
    part = text.split("Options:", 1)[1].split("Subcommands:", 1)[0] if "Options:" in text else ""
    found = set()
    for line in part.splitlines():
        match = re.match(r"^\s+((?:-{1,2}[\w-]+,?)+)", line)
        if match:
            found.update(o for o in match.group(1).split(",") if o.startswith("--"))
    found.discard("--help")
    return found


def sections(markdown):
    out, name = {}, None
    for line in markdown.splitlines():
        match = re.match(r"^## `tandem ([a-z][\w -]*)`", line)
        if match:
            name = match.group(1).strip()
            out[name] = ""
        elif line.startswith("## "):
            name = None
        elif name:
            out[name] += line + "\n"
    return out


def main():
    repo, tandem = sys.argv[1:3]
    doc = sections(open(f"{repo}/docs/cli.md", encoding="utf-8").read())
    problems = []
    commands = []
    for sub in subcommands(help_of(tandem)):
        nested = subcommands(help_of(tandem, sub))
        commands += [f"{sub} {n}" for n in nested] if nested else [sub]
    cluster = options(help_of(tandem, SHARED_IN))
    for command in commands:
        opts = options(help_of(tandem, *command.split()))
        if command not in doc:
            problems.append(f"docs/cli.md has no section '## `tandem {command}`'")
            continue
        text = doc[command]
        for opt in sorted(opts):
            documented = re.search(re.escape(opt) + r"(?![\w-])", text)
            if not documented and not (opt in cluster and command != SHARED_IN):
                problems.append(f"tandem {command}: {opt} (in --help) is not in its docs/cli.md section")
        for opt in sorted(set(re.findall(r"`(--[a-zA-Z][\w-]*)", text))):
            if opt not in opts and opt != "--help":
                problems.append(f"tandem {command}: docs/cli.md documents {opt}, which --help does not list")
    for name in doc:
        if name not in commands:
            problems.append(f"docs/cli.md has a section for 'tandem {name}', which --help does not list")
    for p in problems:
        print("FAIL " + p)
    print(f"{len(commands)} commands checked against docs/cli.md: {len(problems)} differences")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
