#!/usr/bin/env python3
"""bench/plot.py on Google Benchmark JSON of chosen shapes (stdlib only).

  bench_plot_test.py PLOT_PY OUT_DIR

A run a benchmark filter cut down (only the presets' trace benchmarks, or
nothing but a random benchmark) still gets its table, and a picture is
written only where its rows exist; a full set of rows gets all three, each
one well-formed XML; a bfc row's metadata shows the measured heap beside
the allocator's own count.
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def bench(name, ns, **counters):
    b = {"name": name, "run_name": name, "run_type": "iteration",
         "iterations": 10, "real_time": ns, "cpu_time": ns, "time_unit": "ns",
         "time/op": ns * 1e-9}  # the suite's per-operation counter, seconds
    b.update(counters)
    return b


def run(plot, out, benchmarks):
    os.makedirs(out, exist_ok=True)
    src = os.path.join(out, "in.json")
    with open(src, "w") as f:
        json.dump({"context": {"date": "2026-12-03"}, "benchmarks": benchmarks}, f)
    r = subprocess.run([sys.executable, plot, src, out], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("plot.py failed on %s:\n%s" % (out, r.stderr))
    return sorted(f for f in os.listdir(out) if f != "in.json")


def main():
    plot, out = sys.argv[1], sys.argv[2]
    presets_only = [bench("BM_Trace/lstm-train/warm_tf_addr", 5e5),
                    bench("BM_Trace/lstm-train/warm_low_footprint_addr", 6e5)]
    got = run(plot, os.path.join(out, "presets_only"), presets_only)
    if got != ["tables.md"]:
        sys.exit("presets only: expected just tables.md, got %s" % got)
    with open(os.path.join(out, "presets_only", "tables.md")) as f:
        if "warm_tf_addr" not in f.read():
            sys.exit("presets only: tables.md lacks the benchmark")
    full = [bench("BM_Trace/lstm-train/bfc_warm", 5e5),
            bench("BM_Trace/lstm-train/bfc_cold", 5.5e5),
            bench("BM_Trace/lstm-train/map_best_fit_warm", 3e6),
            bench("BM_Scaling/bfc/100", 50),
            bench("BM_Scaling/bfc/1000", 60, meta_bytes=1024.0,
                  **{"MetadataBytes()": 4096.0}),
            bench("BM_Scaling/map_best_fit/100", 300),
            bench("BM_Scaling/map_best_fit/1000", 400),
            bench("BM_Scaling/metadata_floor/100", 2),
            bench("BM_Scaling/metadata_floor/1000", 3),
            bench("BM_TraceThreads/bfc/threads:1", 1e6, **{"Mops/s": 40.0}),
            bench("BM_TraceThreads/bfc/threads:2", 1e6, **{"Mops/s": 60.0}),
            bench("BM_TraceThreads/glibc/threads:1", 1e6, **{"Mops/s": 30.0}),
            bench("BM_TraceThreads/glibc/threads:2", 1e6, **{"Mops/s": 50.0})]
    got = run(plot, os.path.join(out, "full"), full)
    want = ["scaling.svg", "tables.md", "threads.svg", "traces.svg"]
    if got != want:
        sys.exit("full: expected %s, got %s" % (want, got))
    # The heap the harness measured beside the allocator's own count, which
    # also holds what lies outside the heap (the chunk table's range).
    with open(os.path.join(out, "full", "tables.md")) as f:
        if "1.00 KiB (MetadataBytes() 4.00 KiB)" not in f.read():
            sys.exit("full: the metadata column lacks the allocator's own count")
    for svg in want:
        if svg.endswith(".svg"):
            ET.parse(os.path.join(out, "full", svg))
    # The floor is drawn beside the two pools.
    with open(os.path.join(out, "full", "scaling.svg")) as f:
        if ">metadata_floor<" not in f.read():
            sys.exit("full: scaling.svg lacks the metadata_floor series")
    print("ok")


if __name__ == "__main__":
    main()
