#!/usr/bin/env python3
"""Parses SVG memory maps as XML and checks what they must show.

usage: check_svg.py SAMPLE_BINARY OUT_DIR [EXTRA.svg ...]
Runs SAMPLE_BINARY OUT_DIR (writing small.svg, large.svg and hostile.svg, the
small map under a name of bytes that are not UTF-8, control characters and
markup), then checks those and any EXTRA files (e.g. bfc-replay --svg output)
with a strict XML parser. Exit 1 on failure.
"""
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def check(path, min_chunks=0, max_rects=20000):
    root = ET.parse(path).getroot()  # raises on malformed XML
    problems = []
    if root.tag != SVG + "svg":
        problems.append("root element is %s, not svg" % root.tag)
    rects = list(root.iter(SVG + "rect"))
    texts = " ".join("".join(t.itertext()) for t in root.iter(SVG + "text"))
    titles = list(root.iter(SVG + "title"))
    if len(rects) > max_rects:
        problems.append("%d rects: small chunks were not pooled" % len(rects))
    if len(titles) < min_chunks:
        problems.append("%d tooltips, expected at least %d" % (len(titles), min_chunks))
    for needle in ("Memory map", "region 0", "requested bytes", "free"):
        if needle not in texts:
            problems.append("no text %r" % needle)
    for p in problems:
        print("%s: %s" % (path, p))
    print("%s: %d rects, %d tooltips, %s" % (path, len(rects), len(titles),
                                           "ok" if not problems else "FAILED"))
    return not problems


def check_hostile(path):
    """The hostile name comes back as text: markup as characters, the bytes
    that are not UTF-8 or not XML characters as U+FFFD."""
    root = ET.parse(path).getroot()
    texts = " ".join("".join(t.itertext()) for t in root.iter(SVG + "text"))
    tips = " ".join("".join(t.itertext()) for t in root.iter(SVG + "title"))
    want = "<!--]]>&\"'\ufffd\ufffd\r"  # then 0xFF 0xC0 0x80 ...
    problems = []
    if want not in texts:
        problems.append("heading lacks the escaped name %r" % want)
    if "\ufffd" * 7 + "\u2028</svg>" not in texts:
        problems.append("bad bytes are not one U+FFFD each")
    if "allocated at <!--" not in tips:
        problems.append("the allocation site is not in a tooltip")
    for p in problems:
        print("%s: %s" % (path, p))
    return not problems


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([binary, out_dir], check=True)
    ok = check(os.path.join(out_dir, "small.svg"), min_chunks=10)
    ok = check(os.path.join(out_dir, "large.svg"), min_chunks=100) and ok
    ok = check(os.path.join(out_dir, "hostile.svg"), min_chunks=10) and ok
    ok = check_hostile(os.path.join(out_dir, "hostile.svg")) and ok
    for extra in sys.argv[3:]:
        ok = check(extra, min_chunks=1) and ok
    # The checker itself must catch a broken file.
    broken = os.path.join(out_dir, "broken.svg")
    with open(os.path.join(out_dir, "small.svg")) as f:
        text = f.read()
    with open(broken, "w") as f:
        f.write(text.replace("</svg>", ""))
    try:
        ET.parse(broken)
        print("check_svg.py: a truncated SVG parsed; the check is broken")
        ok = False
    except ET.ParseError:
        pass
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
