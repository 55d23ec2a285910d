#!/usr/bin/env python3
"""bfc-replay --json/--svg/--html/--summary-json in one run: each file is
written and parses, and the summary agrees with the report.

Then the same trace under a hostile file name (markup, "<!--<script>", a
byte that is not UTF-8): the JSON is strict UTF-8 and names the trace with
U+FFFD for the bad byte, the SVG parses as XML, and the page's data element
holds no "<!--", "<script" or "</script".

Last, --compare-policies --compare-svg under both names: the SVG parses as
XML with one panel per policy row of the JSON.

usage: check_replay_outputs.py BFC_REPLAY TRACE OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_svg  # noqa: E402


def check_hostile_name(replay, trace, out):
    problems = []
    hostile_dir = os.path.join(out, "hostile")
    shutil.rmtree(hostile_dir, ignore_errors=True)
    os.makedirs(hostile_dir)
    name = b"h<!--<script>'\"&]]>\xff\x01z"
    hostile = os.path.join(os.fsencode(hostile_dir), name + b".csv")
    shutil.copyfile(trace, hostile)
    outputs = {k: os.path.join(hostile_dir, "report." + k)
               for k in ("json", "svg", "html")}
    run = subprocess.run([os.fsencode(replay), hostile,
                          b"--json", os.fsencode(outputs["json"]),
                          b"--svg", os.fsencode(outputs["svg"]),
                          b"--html", os.fsencode(outputs["html"])],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if run.returncode != 0:
        return ["bfc-replay on a hostile file name exited %d: %r" %
                (run.returncode, run.stdout[-500:])]
    with open(outputs["json"], "rb") as f:
        raw = f.read()
    try:
        report = json.loads(raw.decode("utf-8", errors="strict"))
        want = "h<!--<script>'\"&]]>\ufffd\x01z"
        if not report["trace"].startswith(want):
            problems.append("the JSON names the trace %r, not %r..." %
                            (report["trace"], want))
    except (UnicodeDecodeError, ValueError) as e:
        problems.append("the JSON of a hostile name is not UTF-8 JSON: %s" % e)
    try:
        ET.parse(outputs["svg"])
    except ET.ParseError as e:
        problems.append("the SVG of a hostile name is not XML: %s" % e)
    with open(outputs["html"], "rb") as f:
        html = f.read().decode("utf-8", errors="strict")
    tag = '<script id="bfc-data" type="application/json">'
    start = html.find(tag) + len(tag)
    data = html[start:html.find("</script", start)].lower()
    for bad in ("<!--", "<script"):
        if bad in data:
            problems.append("the page's data element holds %r" % bad)
    return problems


def check_compare(replay, trace, out):
    """--compare-policies --compare-svg: the SVG parses as XML and has one
    panel (a <g> with a pool and a live polyline) per policy row of the JSON,
    titled with the policy; under a hostile trace name too."""
    problems = []
    hostile_dir = os.path.join(out, "compare")
    shutil.rmtree(hostile_dir, ignore_errors=True)
    os.makedirs(hostile_dir)
    for name in (b"plain", b"h<!--<script>'\"&]]>\xff\x01z"):
        copy = os.path.join(os.fsencode(hostile_dir), name + b".csv")
        shutil.copyfile(trace, copy)
        svg = os.path.join(hostile_dir, "policies.svg")
        rows = os.path.join(hostile_dir, "policies.json")
        run = subprocess.run([os.fsencode(replay), b"--compare-policies", copy,
                              b"--compare-svg", os.fsencode(svg),
                              b"--summary-json", os.fsencode(rows)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if run.returncode != 0:
            problems.append("--compare-policies on %r exited %d: %r" %
                            (name, run.returncode, run.stdout[-500:]))
            continue
        with open(rows, "rb") as f:
            policies = [r["policy"] for r in json.loads(f.read().decode("utf-8"))
                        if r["kind"] == "policy"]
        try:
            root = ET.parse(svg).getroot()
        except ET.ParseError as e:
            problems.append("--compare-svg of %r is not XML: %s" % (name, e))
            continue
        if root.tag != check_svg.SVG + "svg":
            problems.append("--compare-svg root is %s" % root.tag)
        panels = list(root.iter(check_svg.SVG + "g"))
        if len(panels) != len(policies) or len(policies) < 2:
            problems.append("%d panels for %d policies" %
                            (len(panels), len(policies)))
        for g, policy in zip(panels, policies):
            title = "".join(g.find(check_svg.SVG + "text").itertext())
            if title != policy:
                problems.append("panel titled %r, expected %r" % (title, policy))
            if len(list(g.iter(check_svg.SVG + "polyline"))) != 2:
                problems.append("panel %r lacks its pool and live lines" % policy)
    return problems


def main():
    replay, trace, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    paths = {k: os.path.join(out, "report." + k) for k in ("json", "svg", "html")}
    paths["summary"] = os.path.join(out, "summary.json")
    for p in paths.values():
        if os.path.exists(p):
            os.remove(p)
    subprocess.run([replay, trace, "--json", paths["json"],
                    "--svg=" + paths["svg"], "--html", paths["html"],
                    "--summary-json", paths["summary"]], check=True)
    problems = []
    with open(paths["json"]) as f:
        report = json.load(f)
    if report.get("format") != "bfc-replay-report":
        problems.append("JSON format is %r" % report.get("format"))
    tl = report["timeline"]
    n = len(tl["event_index"])
    if n == 0 or any(len(tl[k]) != n for k in tl):
        problems.append("timeline series are empty or differ in length")
    labels = [s["label"] for s in report["snapshots"]]
    if labels != ["peak", "end"]:
        problems.append("snapshots are %r" % labels)
    peak = report["snapshots"][0]["dump"]
    if peak["stats"]["bytes_in_use"] != report["summary"]["peak_bytes_in_use"]:
        problems.append("the peak snapshot is not at the peak")
    with open(paths["summary"]) as f:
        summary = json.load(f)
    for key in ("trace", "events", "failures", "peak_live_bytes",
                "peak_pool_bytes", "footprint", "ns_per_op", "options"):
        if key not in summary:
            problems.append("the summary JSON has no %r" % key)
    if summary.get("peak_bytes_in_use") != report["summary"]["peak_bytes_in_use"]:
        problems.append("the summary and the report disagree on the peak")
    if not check_svg.check(paths["svg"], min_chunks=10):
        problems.append("SVG check failed")
    root = ET.parse(paths["svg"]).getroot()
    if len(list(root.iter(check_svg.SVG + "svg"))) != 3:  # outer + 2 maps
        problems.append("the SVG does not hold the peak and end maps")
    with open(paths["html"]) as f:
        html = f.read()
    if "/*BFC_REPORT_JSON*/" in html or "bfc-replay-report" not in html:
        problems.append("the HTML page has no data")
    if "http://" in html.replace("http://www.w3.org", "") or "https://" in html:
        problems.append("the HTML page refers to the network")
    problems += check_hostile_name(replay, trace, out)
    problems += check_compare(replay, trace, out)
    for p in problems:
        print("FAIL:", p)
    print("ok" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
