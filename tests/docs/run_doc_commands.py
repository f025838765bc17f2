#!/usr/bin/env python3
"""Runs every shell command in the documentation, so that the docs cannot drift from the code.

Usage: run_doc_commands.py REPO TANDEM [--list] [FILE ...]

Reads README.md, notebooks/README.md and docs/**/*.md (or the FILEs given) and runs every fenced
block whose language is `sh`, `bash` or `shell`, in a scratch folder that looks like the
repository (scenarios/, bench/, tests/, notebooks/, scripts/, build/ linked in, and ../shared
beside it), with TANDEM first
on PATH as `tandem`. Outputs (`--out out/...`) land in the scratch folder. The rules, which
docs/README.md repeats for writers:

  * A block runs as one bash script, so variables set in it hold for the rest of it. Each command
    (a line, with `\\` continuations joined; comments and blank lines skipped) must exit 0.
  * `<!-- docs-test: exit N -->` just before a block: its last command must exit N instead (e.g. 1
    for `tandem fr analyze` on dumps with findings).
  * A command whose comment says `exit N` (`tandem fr analyze D   # exit 1: finds rank 5`) must
    exit N.
  * `<!-- docs-test: skip: REASON -->` just before a block: not run, and counted with its reason
    (a GPU, a user's own files, the test command itself). Nothing else skips.
  * `<!-- docs-test: expect: TEXT -->` (any number) just before a block: the block's output must
    contain TEXT.
  * A `console` block (or one without a language whose first line starts with `$ `) is a session:
    its `$ ` lines are the commands, and the lines after each are its output as the docs show it;
    every shown line must appear in the real output (whitespace runs compared as one space; a line
    `...` stands for lines left out).
  * Other blocks (no language, yaml, json, text) are examples, not commands. A line in one that
    reads as a complete tandem command (`tandem <subcommand> ...` without `[...]` or CAPITAL
    placeholders, as a synopsis has) fails the test: commands go in sh blocks, where they run.

Prints one line per block and a summary; exits 1 when a block fails, 0 otherwise.
Standard library only.
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import time

RUN_LANGUAGES = {"sh", "bash", "shell", "console"}
# A complete command in an example block: `tandem <subcommand> ...`, not a synopsis.
UNRUN_COMMAND = re.compile(r"^(\$ )?tandem [a-z]+( |$)")


def looks_like_command(line):
    line = line.strip()
    if not UNRUN_COMMAND.match(line) or "[" in line or "..." in line:
        return False
    return not re.search(r"\b[A-Z][A-Z_]{2,}\b", line.split("#")[0])
MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|exit|expect)\s*:?\s*(.*?)\s*-->")
LINKED = ["scenarios", "bench", "tests", "notebooks", "scripts", "build", "docs", "README.md"]
TIMEOUT_S = 450  # per block: the README's long block runs ~180 s alone and nearly 300 s beside other tests on 2 cores


UNRUN = []  # commands found outside runnable blocks


class Block:
    def __init__(self, path, line, language, text, markers):
        self.path, self.line, self.language, self.text = path, line, language, text
        self.skip = next((v for k, v in markers if k == "skip"), None)
        exits = [v for k, v in markers if k == "exit"]
        self.exit = int(exits[-1]) if exits else 0
        self.expect = [v for k, v in markers if k == "expect"]
        self.shown = []  # console blocks: output lines the docs show
        if language == "console" or (language == "" and text.lstrip().startswith("$ ")):
            self.language, commands = "console", []
            for line in text.splitlines():
                if line.startswith("$ "):
                    commands.append(line[2:])
                elif line.strip() and line.strip() != "...":
                    self.shown.append(" ".join(line.split()))
            self.text = "\n".join(commands)

    def where(self):
        return f"{self.path}:{self.line}"

    def commands(self):
        """The block's commands: continuation lines joined, comments and blank lines dropped."""
        out, current = [], ""
        for raw in self.text.splitlines():
            line = raw.rstrip()
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            out.append(current + line)
            current = ""
        if current:
            out.append(current)
        return out


def blocks_of(path, repo):
    blocks, markers, fence, language, start, body = [], [], None, None, 0, []
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is None:
            match = re.match(r"^(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if match:
                fence, language, start, body = match.group(1), match.group(2).lower(), number, []
                continue
            found = MARKER.findall(stripped)
            if found:
                markers.extend(found)
            elif stripped:
                markers = []  # markers belong to the block right after them
        elif stripped.startswith(fence):
            block = Block(os.path.relpath(path, repo), start, language, "\n".join(body), markers)
            if block.language in RUN_LANGUAGES:
                blocks.append(block)
            else:
                for offset, text in enumerate(body):
                    if looks_like_command(text):
                        UNRUN.append(f"{block.path}:{start + 1 + offset}: a command outside a sh block: {text.strip()}")
            fence, markers = None, []
        else:
            body.append(line)
    return blocks


def script_for(block):
    commands = block.commands()
    parts = ["set -o pipefail", 'fail() { echo "docs-test: command exited $1, expected $2: $3" >&2; exit 99; }']
    for i, command in enumerate(commands):
        expected = block.exit if i == len(commands) - 1 else 0
        said = re.search(r"#.*\bexits? (\d+)\b", command)  # "... # (exit 1: finds rank 5)"
        if said:
            expected = int(said.group(1))
        parts.append(f"{command}\nrc=$?; [ $rc -eq {expected} ] || fail $rc {expected} {shlex.quote(command)}")
    return "\n".join(parts) + "\nexit 0\n"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) < 2:
        sys.exit(__doc__)
    repo, tandem = map(os.path.abspath, args[:2])
    files = args[2:] or sorted(
        [os.path.join(repo, "README.md"), os.path.join(repo, "notebooks", "README.md")]
        + [str(p) for p in pathlib.Path(repo, "docs").rglob("*.md")])
    blocks = [b for f in files if os.path.exists(f) for b in blocks_of(f, repo)]
    if "--list" in sys.argv:
        for b in blocks:
            print(f"{b.where()}: {'skip: ' + b.skip if b.skip is not None else 'exit ' + str(b.exit)}")
            for c in b.commands():
                print("    " + c)
        return 0

    # The scratch repository sits in a folder of its own beside a link to the project's reference
    # data, so that `../shared/reference/...` reads as it does from the repository.
    outer = tempfile.mkdtemp(prefix="tandem-docs-")
    scratch = os.path.join(outer, "repo")
    os.makedirs(scratch)
    shared = os.path.join(os.path.dirname(os.path.abspath(repo)), "shared")
    if os.path.isdir(shared):
        os.symlink(shared, os.path.join(outer, "shared"))
    for name in LINKED:
        if os.path.exists(os.path.join(repo, name)):
            os.symlink(os.path.join(repo, name), os.path.join(scratch, name))
    bin_dir = os.path.join(scratch, ".bin")
    os.makedirs(bin_dir)
    os.symlink(tandem, os.path.join(bin_dir, "tandem"))
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))

    ran, skipped, failed, commands = 0, [], [], 0
    started = time.time()
    for block in blocks:
        if block.skip is not None:
            skipped.append(f"{block.where()}: {block.skip or '(no reason given)'}")
            print(f"skip {block.where()}: {block.skip}")
            if not block.skip:
                failed.append(f"{block.where()}: a skip marker needs a reason")
            continue
        t0 = time.time()
        try:
            result = subprocess.run(["bash", "-c", script_for(block)], cwd=scratch, env=env, capture_output=True,
                                    text=True, timeout=TIMEOUT_S)
            output, code = result.stdout + result.stderr, result.returncode
        except subprocess.TimeoutExpired:
            output, code = f"timed out after {TIMEOUT_S} s", -1
        ran += 1
        commands += len(block.commands())
        problems = []
        if code != 0:
            problems.append(output.strip().splitlines()[-1] if output.strip() else f"exit {code}")
        for text in block.expect:
            if text not in output:
                problems.append(f"output lacks {text!r}")
        flat = " ".join(output.split())
        for text in block.shown:
            if text not in flat:
                problems.append(f"the docs show {text!r}, the command does not print it")
        status = "FAIL" if problems else "ok  "
        print(f"{status} {block.where()} ({len(block.commands())} commands, {time.time() - t0:.1f} s)")
        if problems:
            failed.append(f"{block.where()}: {'; '.join(problems)}")
            print("\n".join("    " + line for line in output.strip().splitlines()[-15:]))
    print(f"\n{ran} blocks run ({commands} commands) in {time.time() - started:.0f} s, {len(skipped)} skipped:")
    for s in skipped:
        print("  skipped " + s)
    failed += UNRUN
    for f in failed:
        print("  FAILED " + f)
    subprocess.run(["rm", "-rf", outer])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
