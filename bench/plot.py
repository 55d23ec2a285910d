#!/usr/bin/env python3
"""Tables and SVG plots from a Google Benchmark JSON file (stdlib only).

  python3 bench/plot.py bench/results/bench.json bench/results

Writes tables.md (ns/op with ratios against the glibc, no-pool and
std::map best-fit reference baselines of the same run, and the footprint
counters), scaling.svg (ns/op against live chunks, bfc and the reference,
log-log), traces.svg (ns/op per trace: cold, warm, baselines) and
threads.svg (all threads' throughput against threads, bfc and glibc).
Uses the 'median' aggregate when repetitions were run.
"""
import json
import math
import os
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data["benchmarks"]:
        agg = b.get("aggregate_name")
        if agg not in (None, "median"):
            continue
        name = b.get("run_name", b["name"])
        rows[name] = b
    return data.get("context", {}), rows


def split(name):
    """(workload, pool) from a run name."""
    parts = name.split("/")
    if parts[0] == "BM_Trace":
        pool = parts[2]
        return "/".join(parts[:2]), pool.replace("_warm", "").replace("_cold", ""), pool
    return "/".join([parts[0]] + parts[2:]), parts[1], parts[1]


def ns(b):
    if b.get("error_occurred"):
        return None
    v = b.get("time/op")
    if v is not None:
        return v * 1e9
    return b.get("ns/op/thread")  # BM_TraceThreads: already in ns


def fmt_bytes(v):
    if v is None:
        return ""
    for unit, s in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= s:
            return "%.2f %s" % (v / s, unit)
    return "%d B" % v


def tables(rows):
    work = {}
    order = []
    for name, b in rows.items():
        w, pool, col = split(name)
        if w not in work:
            work[w] = {}
            order.append(w)
        work[w][col] = b
    out = ["| workload | pool | ns/op | vs glibc | vs no-pool | vs map best fit | in use | "
           "peak pool / peak live | metadata: heap (own count) |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for w in order:
        cols = work[w]
        base_g = next((ns(cols[c]) for c in ("glibc", "glibc_warm") if c in cols), None)
        base_n = next((ns(cols[c]) for c in ("no_pool", "no_pool_warm") if c in cols), None)
        base_m = next((ns(cols[c]) for c in ("map_best_fit", "map_best_fit_warm") if c in cols), None)
        for col, b in cols.items():
            t = ns(b)
            if t is None and not b.get("error_occurred"):
                out.append("| %s | %s | (not timed) | | | | %s | %s / %s | %s (MetadataBytes() %s) |" % (
                    w, col, fmt_bytes(b.get("in_use")), fmt_bytes(b.get("peak_pool")),
                    fmt_bytes(b.get("peak_live")), fmt_bytes(b.get("meta_bytes")),
                    fmt_bytes(b.get("MetadataBytes()"))))
                continue
            if t is None:
                msg = b.get("error_message", "")
                out.append("| %s | %s | skipped: %s | | | | | | |" % (w, col, msg))
                continue
            rg = "%.2fx" % (t / base_g) if base_g and not col.startswith("glibc") else ""
            rn = "%.2fx" % (t / base_n) if base_n and not col.startswith("no_pool") else ""
            rm = "%.3f" % (t / base_m) if base_m and not col.startswith("map_best_fit") else ""
            fp = ""
            if "pool/live" in b and "peak_pool" in b:
                fp = "%s / %s = %.2f" % (fmt_bytes(b.get("peak_pool")),
                                         fmt_bytes(b.get("peak_live")), b["pool/live"])
            elif "pool/live" in b:
                fp = "%.2f" % b["pool/live"]
            meta = fmt_bytes(b.get("meta_bytes"))
            if "MetadataBytes()" in b:
                meta += " (MetadataBytes() %s)" % fmt_bytes(b["MetadataBytes()"])
            out.append("| %s | %s | %.1f | %s | %s | %s | %s | %s | %s |" % (
                w, col, t, rg, rn, rm, fmt_bytes(b.get("in_use")), fp, meta))
    return "\n".join(out) + "\n"


def svg_axes(title, w, h, m):
    return ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
            'font-family="sans-serif" font-size="12">' % (w, h),
            '<rect width="100%" height="100%" fill="white"/>',
            '<text x="%d" y="20" font-size="15">%s</text>' % (m, title),
            '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (m, h - m, w - 20, h - m),
            '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (m, 35, m, h - m)]


def draw_lines(s, series, pts, X, Y, value_fmt, legend_step, xlabel, ylabel, W, H, M, path):
    """Adds one labelled polyline per series present in pts, the legend and
    the axis labels to the SVG lines s, and writes it to path."""
    for si, (name, color) in enumerate(series):
        if name not in pts:
            continue
        p = pts[name]
        s.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (
            color, " ".join("%.1f,%.1f" % (X(k), Y(v)) for k, v in p)))
        for k, v in p:
            s.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (X(k), Y(v), color))
            s.append(('<text x="%.1f" y="%.1f" text-anchor="middle">' + value_fmt + '</text>') % (X(k), Y(v) - 8, v))
        s.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (M + 10 + si * legend_step, 32, color))
        s.append('<text x="%d" y="%d">%s</text>' % (M + 26 + si * legend_step, 43, name))
    s.append('<text x="%d" y="%d" text-anchor="middle">%s</text>' % (W // 2, H - 15, xlabel))
    s.append('<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">%s</text>' % (H // 2, H // 2, ylabel))
    s.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(s) + "\n")


def scaling_svg(rows, path):
    # metadata_floor and harness_only are not allocators: one access to the
    # freed block's out-of-band record per step, and the workload's own loop
    # (bench/README.md, "What scaling costs any out-of-band pool").
    series = [("bfc", "#1f77b4"), ("map_best_fit", "#ff7f0e"),
              ("metadata_floor", "#7f7f7f"), ("harness_only", "#bcbd22")]
    pts = {}
    for name, b in rows.items():
        parts = name.split("/")
        if parts[0] == "BM_Scaling" and len(parts) == 3 and ns(b) is not None:
            pts.setdefault(parts[1], []).append((int(parts[2]), ns(b)))
    pts = {k: sorted(v) for k, v in pts.items() if k in dict(series)}
    if not pts:
        return
    ks = sorted({k for v in pts.values() for k, _ in v})
    W, H, M = 640, 400, 60
    vmax = max(v for s_ in pts.values() for _, v in s_)
    vmin = min(v for s_ in pts.values() for _, v in s_)
    # Log y: the reference is several times slower than bfc.
    y0, y1 = math.log10(vmin / 1.3), math.log10(vmax * 1.3)
    x0, x1 = math.log10(ks[0]), math.log10(ks[-1])
    X = lambda k: M + (math.log10(k) - x0) / max(x1 - x0, 1e-9) * (W - M - 40)
    Y = lambda v: H - M - (math.log10(v) - y0) / (y1 - y0) * (H - M - 60)
    s = svg_axes("ns/op vs live chunks (random 256 B-1 MiB), log-log", W, H, M)
    for k in ks:
        s.append('<text x="%.0f" y="%d" text-anchor="middle">1e%d</text>' % (X(k), H - M + 18, round(math.log10(k))))
    for e in range(int(math.floor(y0)), int(math.ceil(y1)) + 1):
        for m in (1, 2, 5):
            v = m * 10 ** e
            if 10 ** y0 <= v <= 10 ** y1:
                s.append('<text x="%d" y="%.0f" text-anchor="end">%g</text>' % (M - 5, Y(v) + 4, v))
                s.append('<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>' % (M, Y(v), W - 20, Y(v)))
    draw_lines(s, series, pts, X, Y, "%.0f", 140, "live chunks", "ns/op", W, H, M, path)


def threads_svg(rows, path):
    """Total throughput (Mops/s) against threads, bfc and glibc."""
    series = [("bfc", "#1f77b4"), ("glibc", "#2ca02c")]
    pts = {}
    for name, b in rows.items():
        parts = name.split("/")
        if parts[0] != "BM_TraceThreads" or b.get("error_occurred"):
            continue
        n = int(parts[-1].split(":")[1])
        pts.setdefault(parts[1], []).append((n, b.get("Mops/s")))
    pts = {k: sorted(v) for k, v in pts.items() if all(x[1] for x in v)}
    if not pts:
        return
    ns_ = sorted({n for v in pts.values() for n, _ in v})
    W, H, M = 640, 400, 60
    ymax = max(v for p in pts.values() for _, v in p) * 1.15
    X = lambda n: M + ns_.index(n) / max(len(ns_) - 1, 1) * (W - M - 40)
    Y = lambda v: H - M - v / ymax * (H - M - 60)
    s = svg_axes("all threads' throughput, one pool, every trace warm (Mops/s)", W, H, M)
    for n in ns_:
        s.append('<text x="%.0f" y="%d" text-anchor="middle">%d</text>' % (X(n), H - M + 18, n))
    for i in range(5):
        v = ymax * i / 4
        s.append('<text x="%d" y="%.0f" text-anchor="end">%.0f</text>' % (M - 5, Y(v) + 4, v))
        s.append('<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>' % (M, Y(v), W - 20, Y(v)))
    draw_lines(s, series, pts, X, Y, "%.1f", 150, "threads", "Mops/s", W, H, M, path)


def traces_svg(rows, path):
    series = ["bfc_cold", "bfc_warm", "map_best_fit_warm", "glibc_warm", "no_pool_warm"]
    colors = ["#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f"]
    traces = sorted({n.split("/")[1] for n in rows if n.startswith("BM_Trace/")})
    if not traces:
        return
    vals = {(t, s): ns(rows.get("BM_Trace/%s/%s" % (t, s), {})) for t in traces for s in series}
    if not any(vals.values()):
        return  # e.g. a filter that kept only the preset benchmarks
    ymax = max(v for v in vals.values() if v) * 1.15
    W, H, M = 760, 420, 60
    group = (W - M - 20) / len(traces)
    bw = group / (len(series) + 1)
    Y = lambda v: H - M - v / ymax * (H - M - 60)
    s = svg_axes("ns/op per trace: bfc cold and warm, the map best-fit reference, baselines", W, H, M)
    for i in range(5):
        v = ymax * i / 4
        s.append('<text x="%d" y="%.0f" text-anchor="end">%.0f</text>' % (M - 5, Y(v) + 4, v))
        s.append('<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>' % (M, Y(v), W - 20, Y(v)))
    for ti, t in enumerate(traces):
        gx = M + ti * group + bw / 2
        for si, ser in enumerate(series):
            v = vals[(t, ser)]
            if not v:
                continue
            x = gx + si * bw
            s.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>' % (x, Y(v), bw * 0.9, H - M - Y(v), colors[si]))
            s.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.0f</text>' % (x + bw * 0.45, Y(v) - 3, v))
        s.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (gx + bw * len(series) / 2, H - M + 18, t))
    for si, ser in enumerate(series):
        s.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>' % (M + 10 + si * 135, 32, colors[si]))
        s.append('<text x="%d" y="%d">%s</text>' % (M + 26 + si * 135, 43, ser))
    s.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(s) + "\n")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ctx, rows = load(sys.argv[1])
    os.makedirs(sys.argv[2], exist_ok=True)
    md = tables(rows)
    with open(os.path.join(sys.argv[2], "tables.md"), "w") as f:
        f.write("Machine: %s, %s CPUs @ %s MHz; %s; libbenchmark build: %s\n\n" % (
            ctx.get("host_name", "?"), ctx.get("num_cpus", "?"), ctx.get("mhz_per_cpu", "?"),
            ctx.get("date", "?"), ctx.get("library_build_type", "?")))
        f.write(md)
    scaling_svg(rows, os.path.join(sys.argv[2], "scaling.svg"))
    traces_svg(rows, os.path.join(sys.argv[2], "traces.svg"))
    threads_svg(rows, os.path.join(sys.argv[2], "threads.svg"))
    sys.stdout.write(md)


if __name__ == "__main__":
    main()
