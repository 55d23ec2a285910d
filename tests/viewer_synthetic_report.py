#!/usr/bin/env python3
"""A synthetic bfc-replay report of OPS ops, spliced into the viewer page.

  viewer_synthetic_report.py TEMPLATE OPS OUT.html

The viewer must stay responsive for traces of a million ops, and no trace that
long is checked in (nor could bfc-replay write one in a test's time), so this
makes one: a toy allocator (exact-size reuse, else a bump pointer; the pool
grows by extending its last region or by a new region; failures when the limit
is reached, plus a huge request now and then) whose history, timeline and
peak/end dumps agree with each other, as bfc-replay's do. Some allocations have
a site in the dumps, so the viewer's site lookup has something to find.

The page is spliced the way bfc::RenderReplayReportHtml does it: the JSON
replaces the placeholder, with "</" written "<\\/" so it cannot end the
<script> element.
"""
import json
import math
import random
import sys

MIB = 1 << 20
GROW = 256 * MIB
LIMIT = 3 * 1024 * MIB
SIZES = [256, 512, 1024, 4096, 16384, 65536, 262144, MIB, 4 * MIB]
WEIGHTS = [30, 20, 15, 12, 8, 6, 4, 3, 2]
BASE = 0x7F0000000000


def simulate(ops):
    rng = random.Random(1)
    h = {k: [] for k in ("action", "op_index", "address", "size",
                         "requested_size", "allocation_id", "line", "pointer")}

    def event(action, op, address, size, requested=0, aid=-1):
        h["action"].append(action)
        h["op_index"].append(op)
        h["address"].append(address)
        h["size"].append(size)
        h["requested_size"].append(requested)
        h["allocation_id"].append(aid)
        h["line"].append(op + 2)  # a header row, then one row per op
        h["pointer"].append("0x%x" % (0x10000000 + op * 64)
                            if action in (0, 1) else "")

    tl = {k: [] for k in ("event_index", "live_bytes", "in_use_bytes",
                          "pool_bytes", "fragmentation")}
    free_lists = {s: [] for s in SIZES}
    live = []   # [address, size, requested, id]
    slot = {}   # address -> index in live
    bump = end = BASE
    pool = in_use = requested = cached = 0
    next_id = 1
    allocs = frees = failures = 0
    region_count = 0
    sizes_choice = rng.choices

    for op in range(ops):
        target = 5000 + int(15000 * abs(math.sin(op / 100000.0)))
        if live and len(live) > target:
            k = rng.randrange(len(live))
            a, s, r, aid = live[k]
            last = live.pop()
            if k < len(live):
                live[k] = last
                slot[last[0]] = k
            del slot[a]
            free_lists[s].append(a)
            in_use -= s
            requested -= r
            cached += s
            frees += 1
            event(1, op, a, s, r, aid)
        if op % 125000 == 62500:
            failures += 1
            event(5, op, 0, 64 * 1024 * MIB)
        else:
            s = sizes_choice(SIZES, WEIGHTS)[0]
            r = s - rng.randrange(0, s // 8 + 1)
            if free_lists[s]:
                a = free_lists[s].pop()
                cached -= s
            else:
                if bump + s > end:
                    if pool + GROW > LIMIT:
                        a = None
                    elif region_count and op % 3:
                        event(3, op, end, GROW)  # joins the last region
                        end += GROW
                        pool += GROW
                    else:
                        base = end + (1 << 30) if region_count else BASE
                        event(2, op, base, GROW)
                        region_count += 1
                        bump, end = base, base + GROW
                        pool += GROW
                a = bump if bump + s <= end else None
                if a is not None:
                    bump += s
            if a is None:
                failures += 1
                event(5, op, 0, s)
            else:
                aid = next_id
                next_id += 1
                slot[a] = len(live)
                live.append([a, s, r, aid])
                in_use += s
                requested += r
                allocs += 1
                event(0, op, a, s, r, aid)
        tl["event_index"].append(op)
        tl["live_bytes"].append(requested)
        tl["in_use_bytes"].append(in_use)
        tl["pool_bytes"].append(pool)
        free = pool - in_use
        tl["fragmentation"].append(round(cached / free, 4) if free else 0.0)
    counts = dict(allocations=allocs, frees=frees, failures=failures,
                  live_at_end=len(live), live_bytes_at_end=requested,
                  regions=region_count)
    return h, tl, counts


def dump_at(h, op, options):
    """The pool after `op`, rebuilt from the history like a MemoryDump."""
    regions, chunks = [], {}
    for i in range(len(h["action"])):
        if h["op_index"][i] > op:
            break
        a, addr, size = h["action"][i], h["address"][i], h["size"][i]
        if a == 0:
            chunks[addr] = (size, h["requested_size"][i], h["allocation_id"][i])
        elif a == 1:
            del chunks[addr]
        elif a == 2:
            regions.append([addr, size])
        elif a == 3:
            next(r for r in regions if r[0] + r[1] == addr)[1] += size
    regions.sort()
    out, ri = [], 0
    largest = in_use = req = 0
    cursor = regions[0][0] if regions else 0
    for addr in sorted(chunks):
        size, r, aid = chunks[addr]
        while addr >= regions[ri][0] + regions[ri][1]:
            largest = max(largest, regions[ri][0] + regions[ri][1] - cursor)
            ri += 1
            cursor = regions[ri][0]
        if addr > cursor:
            out.append(dict(address=cursor, size=addr - cursor, requested_size=0,
                            in_use=False, bin=0, allocation_id=-1, region=ri,
                            site=[]))
            largest = max(largest, addr - cursor)
        site = (["train.py:%d in step" % (40 + aid % 9), "model.py:%d in forward"
                 % (100 + aid % 13)] if aid % 7 == 0 else [])
        out.append(dict(address=addr, size=size, requested_size=r, in_use=True,
                        bin=-1, allocation_id=aid, region=ri, site=site))
        in_use += size
        req += r
        cursor = addr + size
    pool = sum(r[1] for r in regions)
    return dict(format="bfc-memory-dump", version=1, allocator="synthetic",
                limit=LIMIT, options=options,
                stats=dict(pool_bytes=pool, bytes_in_use=in_use,
                           bytes_requested_in_use=req,
                           largest_free_block_bytes=largest,
                           fragmentation=1 - largest / (pool - in_use)
                           if pool > in_use else 0.0),
                regions=[dict(base=b, size=s) for b, s in regions],
                chunks=out, bins=[])


def main():
    template, ops, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    h, tl, counts = simulate(ops)
    peak_op = max(range(ops), key=tl["in_use_bytes"].__getitem__)
    options = dict(allow_growth=True, garbage_collection=False,
                   fragmentation_fraction=0)
    snaps = [dict(label=label, op_index=op, event_index=op,
                  dump=dump_at(h, op, options))
             for label, op in (("peak", peak_op), ("end", ops - 1))]
    summary = dict(trace_name="synthetic-%d" % ops, events=ops, ops=ops,
                   skipped_frees=0,
                   peak_live_bytes=max(tl["live_bytes"]),
                   peak_bytes_in_use=max(tl["in_use_bytes"]),
                   peak_pool_bytes=max(tl["pool_bytes"]),
                   pool_bytes_at_end=tl["pool_bytes"][-1],
                   footprint_ratio=max(tl["pool_bytes"]) /
                   max(1, max(tl["live_bytes"])),
                   wall_seconds=0.0, ns_per_op=0.0, **counts)
    report = {"format": "bfc-replay-report", "version": 1,
              "trace": summary["trace_name"], "summary": summary,
              "timeline": tl, "snapshots": snaps, "history": h}
    data = json.dumps(report, separators=(",", ":")).replace("</", "<\\/")
    with open(template, encoding="utf-8") as f:
        page = f.read()
    placeholder = "/*BFC_REPORT_JSON*/null"
    if placeholder not in page:
        sys.exit("no %s in %s" % (placeholder, template))
    with open(out, "w", encoding="utf-8") as f:
        f.write(page.replace(placeholder, data, 1))
    print("%s: %d ops, %d history events, %d failures, %.0f MB" %
          (out, ops, len(h["action"]), counts["failures"],
           len(data) / 1e6))


if __name__ == "__main__":
    main()
