#!/usr/bin/env python3
"""The report page of the rank-hang scenario, rendered by a real browser (Debian's Chromium, headless).

Usage: browser_report_check.py TANDEM SCENARIO WORKDIR

Runs `tandem run SCENARIO --out WORKDIR/run`, `tandem report WORKDIR/run -o WORKDIR/report.html`,
then loads the page from disk in headless Chromium twice: --dump-dom (the DOM after rendering) and
--screenshot. Checks the DOM (the verdict, a row per rank, the culprit rank 5 marked, the fault and
recovery markers, the per-iteration table, no external resource) and the screenshot (a PNG of the
window's size, decoded here, not blank, showing the fault colour and the completed colour).
Exit 0 when all hold, 1 when one does not, 77 (CTest's skip) when Chromium is not installed.
Standard library only.
"""

import html.parser
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

WIDTH, HEIGHT = 1280, 1600
FAULT_RGB = (0xD6, 0x27, 0x28)      # kFault / kFailed in app/report/report_html.h
COMPLETED_RGB = (0x4C, 0x78, 0xA8)  # kCompleted
SKIP = 77

failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def chromium(binary, profile, *args):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={WIDTH},{HEIGHT}"]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=90)


class Dom(html.parser.HTMLParser):
    """The elements of the rendered DOM, as (tag, attributes) in document order, and its text."""

    def __init__(self):
        super().__init__()
        self.elements = []
        self.text = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def with_class(self, name):
        return [(t, a) for t, a in self.elements if name in (a.get("class") or "").split()]


def decode_png(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), f"unexpected PNG depth {depth} colour type {colour}"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, at = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[at], bytearray(raw[at + 1:at + 1 + stride])
        at += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + pred) & 0xFF
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, channels)])
        previous = line
    return width, height, rows


def near(pixel, rgb, tolerance=24):
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    tandem, scenario, workdir = sys.argv[1:]
    binary = chromium_binary()
    if binary is None:
        print("chromium is not installed (apt-get install chromium): skipped")
        return SKIP
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    run_dir, page = os.path.join(workdir, "run"), os.path.join(workdir, "report.html")
    run = subprocess.run([tandem, "run", scenario, "--out", run_dir], capture_output=True, text=True)
    check(run.returncode == 0, f"tandem run {scenario} exits 0 ({run.returncode}: {run.stderr.strip()})")
    report = subprocess.run([tandem, "report", run_dir, "-o", page], capture_output=True, text=True)
    check(report.returncode == 0, f"tandem report exits 0 ({report.returncode}: {report.stderr.strip()})")
    if failures:
        return 1
    source = open(page, encoding="utf-8").read()
    check("<script" not in source.lower(), "the page has no script")
    for pattern in ('src="http', "src='http", '<link', "@import", "url(http"):
        check(pattern not in source, f"the page loads nothing from outside ({pattern!r} absent)")

    with tempfile.TemporaryDirectory() as profile:
        dumped = chromium(binary, profile, "--dump-dom", "file://" + os.path.abspath(page))
    check(dumped.returncode == 0 and "<svg" in dumped.stdout, "chromium rendered the page (--dump-dom)")
    dom = Dom()
    dom.feed(dumped.stdout)
    text = " ".join(dom.text)
    rows = dom.with_class("rank-row")
    check(len(rows) == 64, f"the timeline has a row per rank (64; found {len(rows)})")
    culprits = [a.get("data-rank") for _, a in dom.with_class("culprit") if "rank-row" in a.get("class", "")]
    check(culprits == ["5"], f"rank 5, and only rank 5, is marked as the culprit ({culprits})")
    check("rank 5 (culprit)" in text, "the culprit's row is labelled")
    check(len(dom.with_class("fault-marker")) == 1, "one fault marker (the hang, in iteration 2)")
    recoveries = [a.get("data-outcome") for _, a in dom.with_class("recovery-marker")]
    check(recoveries == ["aborted"], f"one recovery marker: the abort ({recoveries})")
    check(len(dom.with_class("slice")) >= 2 * 64, "every rank has its completed attempts as slices")
    waiting = [t for t in dom.text if "iteration 2 attempt 0" in t and "(failed)" in t]
    check(len(waiting) == 63, f"63 ranks wait in iteration 2 until the watchdog ({len(waiting)} failed slices)")
    check(not any(t.startswith("rank 5 iteration 2") for t in dom.text), "rank 5 has no slice in iteration 2")
    iterations = [a for t, a in dom.elements if t == "tr" and "iteration" in (a.get("class") or "")]
    check(len(iterations) == 3, f"the table has the 3 iterations that ran ({len(iterations)})")
    check("rank 5 never joined nccl:all_reduce #3" in text, "the flight-recorder verdict is on the page")
    check("the loop ABORTED" in text and "expectations PASS" in text, "the outcome badges")

    shot = os.path.join(workdir, "report.png")
    with tempfile.TemporaryDirectory() as profile:
        taken = chromium(binary, profile, f"--screenshot={shot}", "file://" + os.path.abspath(page))
    check(taken.returncode == 0 and os.path.exists(shot), "chromium took a screenshot")
    if os.path.exists(shot):
        width, height, pixels = decode_png(open(shot, "rb").read())
        check((width, height) == (WIDTH, HEIGHT), f"the screenshot is {WIDTH}x{HEIGHT} ({width}x{height})")
        flat = [p for row in pixels[::2] for p in row[::2]]
        colours = len(set(flat))
        check(colours > 50, f"the screenshot is not blank ({colours} colours)")
        fault = sum(1 for p in flat if near(p, FAULT_RGB))
        completed = sum(1 for p in flat if near(p, COMPLETED_RGB))
        check(fault > 200, f"the fault / abort colour is on screen ({fault} sampled pixels)")
        # Two completed iterations of ~0.46 ms each on a ~101 ms axis (the watchdog's 100 ms wait
        # fills the rest) are slivers: the iterations band and 64 rank rows still show ~900 samples.
        check(completed > 400, f"the completed slices' colour is on screen ({completed} sampled pixels)")
        print(f"screenshot: {shot}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
