"""Checks captured traces and adds their figures to meta/NAME.run.json.

Usage: python3 verify.py OUTDIR NAME...

Every free must name a live pointer with the size it was allocated with, no
pointer may be allocated twice while live, and the phases file must end at
the last event; OUTDIR/SUMMARY.txt gets one row per trace.
"""
import csv, json, sys, os
D = sys.argv[1]
rows = []
for name in sys.argv[2:]:
    live = {}; cur = peak = peak_i = largest = 0; na = nf = 0; errs = {"free_unknown": 0, "alloc_live": 0, "size_mismatch": 0}
    threads = {}; tprev = -1; nonmono = 0
    with open(f"{D}/{name}.csv") as f:
        r = csv.reader(f); hdr = next(r)
        assert hdr == ["Thread","Time","Action","Pointer","Size","Stream"], hdr
        for i, (th, t, a, p, s, st) in enumerate(r):
            s = int(s); threads[th] = threads.get(th, 0) + 1; assert st == "0"
            if float(t) < tprev: nonmono += 1
            tprev = float(t)
            if a == "allocate":
                na += 1
                if p in live: errs["alloc_live"] += 1
                live[p] = s; cur += s; largest = max(largest, s)
                if cur > peak: peak, peak_i = cur, i
            elif a == "free":
                nf += 1
                if p not in live: errs["free_unknown"] += 1; continue
                if live[p] != s: errs["size_mismatch"] += 1
                cur -= live.pop(p)
            else: raise ValueError(a)
    ph = list(csv.reader(open(f"{D}/meta/{name}.phases.csv")))[1:]
    assert int(ph[-1][1]) == na + nf
    info = {"events": na + nf, "allocations": na, "frees": nf, "peak_live_bytes": peak, "peak_at_event": peak_i,
            "largest_allocation": largest, "live_at_end": len(live), "live_bytes_at_end": cur,
            "threads": threads, "consistency_errors": errs, "time_non_monotonic": nonmono}
    rj = f"{D}/meta/{name}.run.json"
    meta = json.load(open(rj)); meta.update(info); json.dump(meta, open(rj, "w"), indent=1)
    rows.append((name, info)); print(name, info)
with open(f"{D}/SUMMARY.txt", "w") as f:
    f.write("New real allocation traces (PyTorch 1.13 Debian, CPU, float32, 2 threads; c10::alloc_cpu storages + their frees)\n\n")
    f.write(f"| {'trace':<28}| {'events':>7} | {'peak live bytes':>15} | {'largest allocation':>18} | {'live at end':>11} | description\n")
    f.write("|" + "-"*29 + "|" + "-"*9 + "|" + "-"*17 + "|" + "-"*20 + "|" + "-"*13 + "|---\n")
    for name, i in rows:
        desc = json.load(open(f"{D}/meta/{name}.run.json"))["description"]
        lab = f"{i['live_at_end']} ({i['live_bytes_at_end']} B)"
        f.write(f"| {name+'.csv':<28}| {i['events']:>7} | {i['peak_live_bytes']:>15} | {i['largest_allocation']:>18} | {lab:>11} | {desc}\n")
    f.write("\nAll traces: every free matches a live earlier allocate (consistency errors 0 unless listed in meta/NAME.run.json).\n")
print(open(f"{D}/SUMMARY.txt").read())
