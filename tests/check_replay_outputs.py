#!/usr/bin/env python3
"""bfc-replay --json/--svg/--html/--summary-json in one run: each file is
written and parses, and the summary agrees with the report.

usage: check_replay_outputs.py BFC_REPLAY TRACE OUT_DIR
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_svg  # noqa: E402


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
    for p in problems:
        print("FAIL:", p)
    print("ok" if not problems else "FAILED")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
