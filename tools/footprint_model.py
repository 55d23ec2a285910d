#!/usr/bin/env python3
"""A model of preset:low_footprint over a cudaMalloc-like sub-allocator.

  footprint_model.py [--phases PATH] [--set KEY=VALUE ...] TRACE...

Replays RMM-log traces (plain or gzip) through a few hundred lines of Python
that make the same decisions as bfc::Allocator with preset:low_footprint
over bfc-replay's sim-cudamalloc backend, and prints one JSON object per
trace: footprint (peak pool / peak live bytes), sub-allocator allocs and
frees over the whole trace and over its last iteration. It exists to try
growth and release policies in seconds on every trace before building one
in C++: change a rule here, run it over the traces, and build only what
pays. tests/footprint_model_test.py holds it to bfc-replay's figures on
every shared and captured trace, so it cannot drift from the allocator
unnoticed.

What it models: exact best fit by (size, address) over every free chunk
(what TF's bins pick), TF's split rule plus min_split_remainder_bytes,
coalescing inside a region, growth by the request (same_as_requested) with
min_growth_step_bytes for requests of at most
min_growth_step_max_request_bytes, release_before_extend (wholly free
regions, least recently freed first, until the pool grown is no larger than
its peak), grow_below_peak_ratio, and the sub-allocator's first-fit
addresses with a 256-byte gap after each region. Not modelled: alignment
above 256 bytes, the memory limit, streams, accounts, TF's doubling.

--set takes the knobs by their option names: min_growth_step_bytes,
min_growth_step_max_request_bytes, grow_below_peak_ratio,
release_before_extend (0 or 1), min_split_remainder_bytes.
"""
import argparse
import bisect
import csv
import gzip
import json
import os
import sys

GRANULE = 256
MIB = 1 << 20
# TF's split cap: a rest this large is always split (fragmentation_fraction 0).
SPLIT_CAP = 128 << 20


def load_trace(path):
    """[(is_free, allocation index, size)] in trace order."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    events = []
    live = {}
    with opener(path, "rt", newline="") as f:
        rows = csv.reader(f)
        header = next(rows)
        col = {name: i for i, name in enumerate(header)}
        missing = {"Action", "Pointer", "Size"} - set(col)
        if missing:
            raise ValueError("no %s column" % ", ".join(sorted(missing)))
        n = 0
        for line, row in enumerate(rows, start=2):
            try:
                action, ptr = row[col["Action"]], row[col["Pointer"]]
                size = int(row[col["Size"]])
            except (IndexError, ValueError):
                raise ValueError("line %d: not an RMM log row" % line)
            if action == "allocate":
                if ptr in live or size < 0:
                    raise ValueError("line %d: %s allocated again, or a negative size"
                                     % (line, ptr))
                live[ptr] = n
                events.append((False, n, size))
                n += 1
            elif action == "free":
                if ptr not in live:
                    raise ValueError("line %d: free of %s, which is not live" % (line, ptr))
                events.append((True, live.pop(ptr), size))
    return events


def default_phases(path):
    name = os.path.basename(path).split(".")[0]
    return os.path.join(os.path.dirname(path), "meta", name + ".phases.csv")


def load_phases(path):
    """[(phase name, first event index)], or [] without a file."""
    if not path or not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        rows = csv.reader(f)
        next(rows)
        return [(r[0], int(r[1])) for r in rows if r]


class SubAllocator:
    """First fit in address order, a 256-byte gap after every region (never
    adjacent, so never merged), freed ranges reused (sim-cudamalloc)."""

    def __init__(self):
        self.free = [(0, 1 << 46)]  # (address, bytes), ascending addresses
        self.allocs = 0
        self.frees = 0

    def alloc(self, size):
        need = size + GRANULE
        for i, (a, s) in enumerate(self.free):
            if s >= need:
                if s == need:
                    self.free.pop(i)
                else:
                    self.free[i] = (a + need, s - need)
                self.allocs += 1
                return a
        raise MemoryError("address space exhausted")

    def release(self, addr, size):
        self.frees += 1
        i = bisect.bisect(self.free, (addr, 0))
        self.free.insert(i, (addr, size + GRANULE))
        if i + 1 < len(self.free) and sum(self.free[i]) == self.free[i + 1][0]:
            self.free[i] = (self.free[i][0], self.free[i][1] + self.free[i + 1][1])
            self.free.pop(i + 1)
        if i > 0 and sum(self.free[i - 1]) == self.free[i][0]:
            self.free[i - 1] = (self.free[i - 1][0], self.free[i - 1][1] + self.free[i][1])
            self.free.pop(i)


class Chunk:
    __slots__ = ("addr", "size", "used", "prev", "next", "region", "requested")

    def __init__(self, addr, size, region):
        self.addr, self.size, self.region = addr, size, region
        self.used, self.prev, self.next, self.requested = False, None, None, 0

    def whole_region(self):
        return self.prev is None and self.next is None


PRESET = {
    "min_growth_step_bytes": 2 * MIB,
    "min_growth_step_max_request_bytes": 1 * MIB,
    "grow_below_peak_ratio": 4,
    "release_before_extend": 1,
    "min_split_remainder_bytes": 256,
}


class Pool:
    def __init__(self, knobs):
        self.k = knobs
        self.sub = SubAllocator()
        self.free_keys = []  # sorted (size, address) of free chunks
        self.free_chunks = {}  # address -> free chunk
        # Wholly free regions, least recently freed first (insertion order).
        self.free_regions = {}
        self.pool = self.peak_pool = 0
        self.live = self.peak_live = 0

    def bin_insert(self, c):
        bisect.insort(self.free_keys, (c.size, c.addr))
        self.free_chunks[c.addr] = c
        if c.whole_region():
            self.free_regions[c.region] = c

    def bin_remove(self, c):
        i = bisect.bisect_left(self.free_keys, (c.size, c.addr))
        self.free_keys.pop(i)
        del self.free_chunks[c.addr]
        self.free_regions.pop(c.region, None)

    def best_fit(self, size):
        i = bisect.bisect_left(self.free_keys, (size, 0))
        return None if i == len(self.free_keys) else self.free_chunks[self.free_keys[i][1]]

    def growth_step(self, size):
        floor = self.k["min_growth_step_bytes"]
        bound = self.k["min_growth_step_max_request_bytes"]
        if floor and (bound == 0 or size <= bound):
            return max(size, floor)
        return size

    def grow(self, step):
        addr = self.sub.alloc(step)
        c = Chunk(addr, step, addr)
        self.pool += step
        self.peak_pool = max(self.peak_pool, self.pool)
        self.bin_insert(c)
        return c

    def release_before_extend(self, step):
        if not self.k["release_before_extend"]:
            return
        target = self.peak_pool
        room = target - step if step <= target else 0
        for region in list(self.free_regions):
            if step <= target and self.pool <= room:
                break
            c = self.free_regions[region]
            self.bin_remove(c)
            self.sub.release(c.addr, c.size)
            self.pool -= c.size

    def prefer_growth(self, c, size):
        """grow_below_peak_ratio: a best fit at least the ratio times the
        region the request would grow stays whole while the grown pool stays
        within its peak."""
        ratio = self.k["grow_below_peak_ratio"]
        if not ratio or self.pool + size > self.peak_pool or c.size < size * ratio:
            return False
        step = self.growth_step(size)
        return c.size // ratio >= step and self.pool + step <= self.peak_pool

    def allocate(self, requested):
        size = max(GRANULE, (requested + GRANULE - 1) // GRANULE * GRANULE)
        c = self.best_fit(size)
        if c is None or self.prefer_growth(c, size):
            step = self.growth_step(size)
            self.release_before_extend(step)
            c = self.grow(step)
        self.bin_remove(c)
        rest = c.size - size
        if rest > 0 and (c.size >= 2 * size or rest >= SPLIT_CAP or
                         (self.k["min_split_remainder_bytes"] and
                          rest >= self.k["min_split_remainder_bytes"])):
            n = Chunk(c.addr + size, rest, c.region)
            n.prev, n.next = c, c.next
            if c.next:
                c.next.prev = n
            c.next = n
            c.size = size
            self.bin_insert(n)
        c.used = True
        c.requested = requested
        self.live += requested
        self.peak_live = max(self.peak_live, self.live)
        return c

    @staticmethod
    def merge(a, b):
        """Joins b, a's next neighbour, into a (both out of their bins)."""
        a.size += b.size
        a.next = b.next
        if b.next:
            b.next.prev = a

    def deallocate(self, c):
        c.used = False
        self.live -= c.requested
        n, p = c.next, c.prev
        if n is not None and not n.used:
            self.bin_remove(n)
            self.merge(c, n)
        if p is not None and not p.used:
            self.bin_remove(p)
            self.merge(p, c)
            c = p
        self.bin_insert(c)

def replay(path, knobs, phases_path=None):
    events = load_trace(path)
    phases = load_phases(phases_path or default_phases(path))
    iterations = [first for name, first in phases if name.startswith("iter")]
    last_start = iterations[-1] if iterations else None
    # The last iteration ends where the next phase (teardown, end) begins.
    later = [first for name, first in phases
             if last_start is not None and first > last_start]
    last_end = min(later) if later else len(events)
    pool = Pool(knobs)
    live = {}
    at_start = at_end = None
    for i, (is_free, n, size) in enumerate(events):
        if i == last_start:
            at_start = (pool.sub.allocs, pool.sub.frees)
        if i == last_end:
            at_end = (pool.sub.allocs, pool.sub.frees)
        if is_free:
            pool.deallocate(live.pop(n))
        else:
            live[n] = pool.allocate(size)
    if at_start is not None and at_end is None:
        at_end = (pool.sub.allocs, pool.sub.frees)
    result = {
        "trace": os.path.basename(path).split(".")[0],
        "footprint": pool.peak_pool / pool.peak_live if pool.peak_live else 0.0,
        "peak_pool_bytes": pool.peak_pool,
        "peak_live_bytes": pool.peak_live,
        "sub_allocator_allocs": pool.sub.allocs,
        "sub_allocator_frees": pool.sub.frees,
    }
    if at_start is not None:
        result["last_iteration"] = {
            "sub_allocator_allocs": at_end[0] - at_start[0],
            "sub_allocator_frees": at_end[1] - at_start[1],
        }
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", metavar="TRACE")
    parser.add_argument("--phases", help="the phases file (one trace only); "
                        "default: <trace dir>/meta/<name>.phases.csv")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a knob other than the preset's (bytes or a count)")
    args = parser.parse_args()
    knobs = dict(PRESET)
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in knobs or not value.isdigit():
            parser.error("--set %s: expected one of %s with a non-negative integer"
                         % (item, ", ".join(sorted(knobs))))
        knobs[key] = int(value)
    if args.phases and len(args.traces) > 1:
        parser.error("--phases takes one trace")
    for path in args.traces:
        try:
            result = replay(path, knobs, args.phases)
        except (OSError, ValueError, EOFError) as e:
            sys.exit("footprint_model.py: %s: %s" % (path, e))
        print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
