#!/usr/bin/env python3
"""The size rule of tandem's sources: no file over 700 lines, no function over 80.

    check_sizes.py ROOT            fails (exit 1) on a file or function over its limit that is neither
                                   a named exception (docs/architecture.md, "Exceptions to the size
                                   rule") nor on the list still to split ("Not yet within the size
                                   rule") at no more than its recorded size, and on an entry of that
                                   list that is within the rule now; prints the ten largest files and
                                   functions
    check_sizes.py ROOT --report   the ten largest files and functions, never fails
    check_sizes.py ROOT --debt-list  what is over the rule today, as lines for the docs' list
    check_sizes.py --self-test     proves the function finder on a planted source

Sources are the .h, .cc and .cu files of the layers (core, models, sim, backend, app); tests,
benchmarks and fuzzers are not held to it. A function is a definition whose body opens a brace at
the end of its head line and whose head starts at the namespace's or a class's indentation (two
spaces); its length runs from the head to the closing brace. Lambdas and local classes count as part
of the function they are in.
"""
import os
import re
import sys

MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 80
LAYERS = ("core", "models", "sim", "backend", "app")
EXTENSIONS = (".h", ".cc", ".cu")
EXCEPTIONS = "Exceptions to the size rule"
DEBT = "Not yet within the size rule"

NOT_A_FUNCTION = re.compile(r"^\s*(?:if|for|while|switch|return|else|do|try|catch|namespace|class|struct|enum|union|"
                            r"case|default|using|typedef|template\s*<[^>]*>\s*(?:class|struct))\b")


def strip_code(line):
    """The line without string and character literals and comments (braces in them do not count)."""
    line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(?:\\.|[^'\\])*'", "''", line)
    return line.split("//", 1)[0]


def head_end(lines, i):
    """The line that ends the function head starting at line i (its "{"), or None when none does."""
    code = ""
    for j in range(i, min(i + 8, len(lines))):
        code += " " + strip_code(lines[j]).strip()
        if code.rstrip().endswith(";") or "}" in code:
            return None
        if code.rstrip().endswith("{"):
            before = code.rstrip()[:-1]
            first_paren = before.find("(")
            if first_paren < 0 or ")" not in before or "=" in before[:first_paren]:
                return None
            return j
    return None


def functions(lines):
    """(name, first line number, length) of every function definition in `lines`."""
    found = []
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        indent = len(line) - len(line.lstrip(" "))
        code = strip_code(line)
        if indent <= 4 and code.strip() and "(" in code and not NOT_A_FUNCTION.match(code) and \
                re.match(r"\s*[A-Za-z_~]", code):
            j = head_end(lines, i)
            if j is not None:
                depth = 0
                end = n - 1
                for k in range(j, n):
                    body = strip_code(lines[k])
                    depth += body.count("{") - body.count("}")
                    if depth <= 0 and "}" in body:
                        end = k
                        break
                name = re.search(r"([A-Za-z_~][\w:~<>]*)\s*\(", code)
                found.append((name.group(1) if name else "?", i + 1, end - i + 1))
                i = end + 1
                continue
        i += 1
    return found


def sources(root):
    for layer in LAYERS:
        for folder, _, files in os.walk(os.path.join(root, layer)):
            for f in sorted(files):
                if f.endswith(EXTENSIONS):
                    path = os.path.join(folder, f)
                    yield os.path.relpath(path, root), path


def listed(root, heading):
    """{`path` or `path:function`: recorded lines} of the list under `heading` in docs/architecture.md:
    lines "- `NAME` (N lines): why"."""
    items = {}
    doc = os.path.join(root, "docs", "architecture.md")
    in_section = False
    with open(doc, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                in_section = line.strip().lstrip("#").strip() == heading
                continue
            match = re.match(r"- `([^`]+)` \((\d+) lines\)", line) if in_section else None
            if match:
                items[match.group(1)] = int(match.group(2))
    return items


def measure(root):
    files, funcs = [], []
    for rel, path in sources(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        files.append((len(lines), rel))
        for name, first, length in functions(lines):
            funcs.append((length, f"{rel}:{first}", rel, name))
    return sorted(files, reverse=True), sorted(funcs, reverse=True)


def report(files, funcs):
    print("largest source files:")
    for count, rel in files[:10]:
        print(f"  {count:6d}  {rel}")
    print("longest functions:")
    for length, where, _, name in funcs[:10]:
        print(f"  {length:6d}  {where}  {name}")


def self_test():
    planted = """namespace x {

int short_one(int a) {
  if (a) {
    return 1;
  }
  return 2;
}

Widget::Widget(int a,
               int b)
    : a_(a) {
  const char* s = "{{{";
  auto f = [] { return 0; };
}

}  // namespace x
""".split("\n")
    found = functions(planted)
    names = [(name, length) for name, _, length in found]
    expected = [("short_one", 6), ("Widget::Widget", 6)]
    if names != expected:
        print(f"self-test: found {names}, expected {expected}")
        return 1
    print("self-test: the function finder measures a planted source right")
    return 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    root = argv[0]
    files, funcs = measure(root)
    if "--report" in argv:
        report(files, funcs)
        return 0
    if "--debt-list" in argv:
        # Today's entries over the rule, in the docs' format, for the list under DEBT.
        allowed = listed(root, EXCEPTIONS)
        for count, rel in files:
            if count > MAX_FILE_LINES and rel not in allowed:
                print(f"- `{rel}` ({count} lines)")
        for length, _, rel, name in funcs:
            if length > MAX_FUNCTION_LINES and f"{rel}:{name}" not in allowed and rel not in allowed:
                print(f"- `{rel}:{name}` ({length} lines)")
        return 0
    # Exceptions keep their reason; the debt list records what is still to split, at its size when
    # listed: an entry may shrink, never grow, and leaves the list once it is within the rule.
    allowed = listed(root, EXCEPTIONS)
    debt = listed(root, DEBT)
    over = [(rel, count, MAX_FILE_LINES, f"{rel}: {count} lines") for count, rel in files if count > MAX_FILE_LINES]
    over += [(f"{rel}:{name}", length, MAX_FUNCTION_LINES, f"{where}: {name} is {length} lines")
             for length, where, rel, name in funcs if length > MAX_FUNCTION_LINES]
    bad = []
    seen = set()
    for key, size, limit, text in over:
        seen.add(key)
        if key in allowed:
            continue
        if key in debt:
            if size > debt[key]:
                bad.append(f"{text}: grew past the {debt[key]} lines recorded under '{DEBT}'")
            continue
        bad.append(f"{text} (limit {limit})")
    for key in debt:
        if key not in seen:
            bad.append(f"{key}: within the rule now (or gone): take it off the list under '{DEBT}'")
    report(files, funcs)
    owed = sum(1 for key, *_ in over if key in debt)
    print(f"\n{len(allowed)} named exceptions; {owed} files and functions still to split (docs/architecture.md)")
    if bad:
        print(f"{len(bad)} against the size rule (split by responsibility, or name an exception with its reason "
              "in docs/architecture.md):")
        for line in bad:
            print("  " + line)
        return 1
    print("sizes: nothing new over the rule, nothing on the debt list grew")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
