#!/usr/bin/env python3
"""PyTorch memory snapshots written by bfc, checked as PyTorch's viewer reads them.

  pytorch_snapshot_test.py BFC_REPLAY LIBBFC_ALLOC|- CONVERTER TRACE WORK_DIR

1. `bfc-replay TRACE --pytorch-snapshot` (growth on, and again with a limit
   that makes allocations fail): the file loads with Python's pickle refusing
   every class (plain data only, as torch's memory_viz unpickler needs), has
   every field memory_viz reads, its blocks tile each segment in address
   order, and its trace agrees with the replay's own numbers, computed here
   from the trace entries alone: replaying alloc/free_completed/segment_*
   forward gives the end state's blocks and segments exactly, the peak of
   bytes asked equals bfc-replay's peak_live_bytes, the number of oom
   entries its failures; every event carries its trace line as its frame.
2. The snapshot goes back in through tools/snapshot_to_csv.py into bfc-replay.
3. The C ABI (ctypes on libbfc_alloc.so): bfc_record_memory_history +
   bfc_malloc/bfc_free + bfc_dump_snapshot write a snapshot with the same
   properties; a NULL path or a device never used is -1 with a message, and
   a failed dump leaves an earlier file untouched.
"""
import ctypes
import json
import os
import pickle
import subprocess
import sys

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc",
           "segment_free", "segment_map", "segment_unmap", "oom", "snapshot"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    return cond


class PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot names a class: {module}.{name}")


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    check(data[:2] == b"\x80\x04", f"{path}: starts with PROTO 4")
    import io
    return PlainUnpickler(io.BytesIO(data)).load()


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**53


def check_schema(snap, where):
    if not check(isinstance(snap, dict), f"{where}: top level is a dict"):
        return
    for key in ("segments", "device_traces"):
        check(key in snap, f"{where}: has {key}")
    check(isinstance(snap.get("allocator_settings", {}), dict),
          f"{where}: allocator_settings is a dict")
    for i, seg in enumerate(snap["segments"]):
        w = f"{where}: segments[{i}]"
        for key in ("device", "address", "total_size", "stream", "blocks",
                    "allocated_size", "active_size", "requested_size",
                    "segment_type", "frames"):
            check(key in seg, f"{w} has {key}")
        check(is_int(seg["address"]) and is_int(seg["total_size"]),
              f"{w}: address and total_size are exact integers")
        at = seg["address"]
        allocated = 0
        for j, b in enumerate(seg["blocks"]):
            for key in ("address", "size", "requested_size", "state", "frames"):
                check(key in b, f"{w}.blocks[{j}] has {key}")
            check(b["address"] == at, f"{w}.blocks[{j}] starts where the "
                  f"previous ends ({b['address']:#x} vs {at:#x})")
            check(b["state"] in ("active_allocated", "inactive"),
                  f"{w}.blocks[{j}].state is a viewer state")
            if b["state"] == "active_allocated":
                allocated += b["size"]
                check(0 < b["requested_size"] <= b["size"],
                      f"{w}.blocks[{j}]: 0 < requested_size <= size")
            at += b["size"]
        check(at == seg["address"] + seg["total_size"],
              f"{w}: blocks cover the segment")
        check(allocated == seg["allocated_size"],
              f"{w}: allocated_size is the active blocks' sum")
    traces = snap["device_traces"]
    check(isinstance(traces, list) and all(isinstance(t, list) for t in traces),
          f"{where}: device_traces is a list of lists")
    for t in traces:
        for k, e in enumerate(t):
            w = f"{where}: trace[{k}]"
            check(e.get("action") in ACTIONS, f"{w}.action is known")
            for key in ("addr", "size", "stream", "time_us", "frames"):
                check(key in e, f"{w} has {key}")
            if e.get("action") == "oom":
                check("device_free" in e, f"{w} (oom) has device_free")
            check("category" not in e, f"{w} has no category")
            for fr in e.get("frames", []):
                check(set(fr) == {"filename", "line", "name"},
                      f"{w}: frames have filename, line, name")


def replay_entries(trace):
    """Forward replay of the entries: (live blocks, live segments, peak
    bytes asked, ooms, segment_alloc entries)."""
    live, segs = {}, {}
    in_use = peak = ooms = seg_allocs = 0
    expandable = False
    for e in trace:
        a, addr, size = e["action"], e["addr"], e["size"]
        if a == "alloc":
            check(addr not in live, f"alloc at a live address {addr:#x}")
            check(any(s <= addr and addr + size <= s + n
                      for s, n in segs.items()),
                  f"alloc {addr:#x}+{size} inside a live segment")
            live[addr] = size
            in_use += size
            peak = max(peak, in_use)
        elif a == "free_completed":
            check(live.get(addr) == size, f"free_completed of a live block {addr:#x}")
            in_use -= live.pop(addr, 0)
        elif a == "segment_alloc":
            check(not any(s < addr + size and addr < s + n
                          for s, n in segs.items()),
                  f"segment_alloc {addr:#x}+{size} overlaps no live segment")
            segs[addr] = size
            seg_allocs += 1
            check(not expandable, "segment_alloc only without segment_map")
        elif a == "segment_map":
            # PyTorch's expandable segments, as its viewer's state history
            # reads them: the range joins the segments it touches.
            check(not any(s < addr + size and addr < s + n
                          for s, n in segs.items()),
                  f"segment_map {addr:#x}+{size} overlaps no live segment")
            before = [s for s, n in segs.items() if s + n == addr]
            if before:
                addr, size = before[0], segs.pop(before[0]) + size
            if addr + size in segs:
                size += segs.pop(addr + size)
            segs[addr] = size
            seg_allocs += 1
            expandable = True
        elif a == "segment_unmap":
            holder = [s for s, n in segs.items()
                      if s <= addr and addr + size <= s + n]
            check(len(holder) == 1, f"segment_unmap {addr:#x} inside a segment")
            if holder:
                s0 = holder[0]
                n0 = segs.pop(s0)
                check(not any(addr <= b < addr + size for b in live),
                      f"segment_unmap {addr:#x} holds no live block")
                if addr > s0:
                    segs[s0] = addr - s0
                if addr + size < s0 + n0:
                    segs[addr + size] = s0 + n0 - addr - size
        elif a == "segment_free":
            check(segs.get(addr) == size, f"segment_free of a live segment {addr:#x}")
            check(not any(addr <= b < addr + size for b in live),
                  f"segment_free {addr:#x} holds no live block")
            segs.pop(addr, None)
        elif a == "oom":
            ooms += 1
    return live, segs, peak, ooms, seg_allocs


def check_against_state(snap, where):
    trace = snap["device_traces"][-1]
    live, segs, peak, ooms, seg_allocs = replay_entries(trace)
    # Entries carry the bytes asked (PyTorch's orig_size), blocks both.
    blocks = {b["address"]: b["requested_size"] for s in snap["segments"]
              for b in s["blocks"] if b["state"] == "active_allocated"}
    check(live == blocks, f"{where}: the trace's live blocks are the "
          f"segments' active blocks ({len(live)} vs {len(blocks)})")
    state_segs = {s["address"]: s["total_size"] for s in snap["segments"]}
    maps = any(e["action"] == "segment_map" for e in trace)
    check(all(s["is_expandable"] == maps for s in snap["segments"]),
          f"{where}: segments are expandable exactly when the trace maps")
    check(segs == state_segs, f"{where}: the trace's segments are the state's")
    return peak, ooms, seg_allocs


def replay(tool, trace, out_dir, name, extra):
    snap_path = os.path.join(out_dir, name + ".pickle")
    summary_path = os.path.join(out_dir, name + ".json")
    cmd = [tool, trace, "--growth", "--pytorch-snapshot", snap_path,
           "--summary-json", summary_path, "--quiet"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    # 3: some allocations failed (the limited run).
    check(r.returncode in (0, 3), f"{name}: bfc-replay ran ({r.returncode}: "
          f"{r.stderr[-300:]})")
    with open(summary_path) as f:
        return snap_path, json.load(f)


def tool_part(tool, converter, trace, out_dir):
    for name, extra in (("growth", []), ("limited", ["--memory-limit", "24MiB"]),
                        ("sim", ["--backend=sim-cudamalloc",
                                 "--conf=preset:low_footprint"])):
        path, summary = replay(tool, trace, out_dir, name, extra)
        snap = load(path)
        check_schema(snap, name)
        peak, ooms, seg_allocs = check_against_state(snap, name)
        check(peak == summary["peak_live_bytes"],
              f"{name}: peak bytes asked from the trace ({peak}) is "
              f"bfc-replay's peak_live_bytes ({summary['peak_live_bytes']})")
        check(seg_allocs >= summary["sub_allocator_allocs"],
              f"{name}: a segment_alloc or segment_map for each of the "
              f"{summary['sub_allocator_allocs']} regions taken "
              f"({seg_allocs})")
        check(ooms == summary["failures"], f"{name}: {ooms} oom entries for "
              f"{summary['failures']} failures")
        if name == "limited":
            check(ooms > 0, "limited: the limit made allocations fail")
        actions = {e["action"] for e in snap["device_traces"][-1]}
        if name == "growth":
            check("segment_map" in actions, "growth: the coalescing backend's "
                  "regions grow as expandable segments")
        if name == "sim":
            check("segment_alloc" in actions and "segment_map" not in actions,
                  "sim: regions that never join are segment_alloc'ed")
        entries = snap["device_traces"][-1]
        check(all(e["frames"] and e["frames"][0]["line"] > 1
                  for e in entries if e["action"] in ("alloc", "free_completed")),
              f"{name}: every alloc and free names its trace line")
        # Back in: the converter and a replay of its output.
        conv = subprocess.run([sys.executable, converter, path],
                              capture_output=True, text=True)
        check(conv.returncode == 0, f"{name}: snapshot_to_csv.py read it "
              f"({conv.stderr[-200:]})")
        back = subprocess.run([tool, "-", "--quiet", "--summary-json", "-"],
                              input=conv.stdout, capture_output=True, text=True)
        check(back.returncode == 0, f"{name}: the converted snapshot replays "
              f"({back.stderr[-200:]})")


def c_api_part(lib_path, out_dir):
    os.environ["BFC_ALLOC_CONF"] = "backend:virtual,memory_limit:1GiB"
    lib = ctypes.CDLL(lib_path)
    lib.bfc_malloc.restype = ctypes.c_void_p
    lib.bfc_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.bfc_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                             ctypes.c_void_p]
    lib.bfc_record_memory_history.argtypes = [ctypes.c_int, ctypes.c_size_t]
    lib.bfc_dump_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p]
    lib.bfc_last_error.restype = ctypes.c_char_p
    check(lib.bfc_record_memory_history(0, 10000) == 0,
          "bfc_record_memory_history: 0")
    ptrs = [lib.bfc_malloc(n, 0, None) for n in (1000, 3 << 20, 256, 70000)]
    check(all(ptrs), "bfc_malloc served")
    lib.bfc_free(ptrs[1], 3 << 20, 0, None)
    huge = lib.bfc_malloc(8 << 30, 0, None)
    check(not huge, "a request over the limit fails")
    path = os.path.join(out_dir, "c_api.pickle")
    check(lib.bfc_dump_snapshot(0, path.encode()) == 0,
          f"bfc_dump_snapshot: 0 ({lib.bfc_last_error()})")
    snap = load(path)
    check_schema(snap, "c_api")
    peak, ooms, _ = check_against_state(snap, "c_api")
    check(peak == 1000 + (3 << 20) + 256 + 70000,
          f"c_api: peak bytes asked ({peak}) is the four requests' sum")
    check(ooms == 1, "c_api: one oom entry")
    trace = snap["device_traces"][0]
    check([e["action"] for e in trace if e["action"] in ("alloc", "free_completed")]
          == ["alloc"] * 4 + ["free_completed"], "c_api: the calls in order")
    check(lib.bfc_dump_snapshot(0, None) == -1 and b"NULL" in lib.bfc_last_error(),
          "bfc_dump_snapshot(NULL) is -1 with a message")
    check(lib.bfc_dump_snapshot(5, path.encode()) == -1,
          "bfc_dump_snapshot of a device never used is -1")
    before = open(path, "rb").read()
    bad = os.path.join(out_dir, "no_such_dir", "x.pickle")
    check(lib.bfc_dump_snapshot(0, bad.encode()) == -1,
          "bfc_dump_snapshot into a missing directory is -1")
    check(open(path, "rb").read() == before, "the earlier snapshot is whole")
    for p in (ptrs[0], ptrs[2], ptrs[3]):
        lib.bfc_free(p, 0, 0, None)


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    tool, lib, converter, trace, out_dir = sys.argv[1:]
    os.makedirs(out_dir, exist_ok=True)
    tool_part(tool, converter, trace, out_dir)
    # "-": a sanitizer build, whose .so an uninstrumented Python cannot load
    # (c_api_test's HistoryAndSnapshotFromC covers the calls there).
    if lib == "-":
        print("note: the C ABI part is skipped (sanitizer build)")
    else:
        c_api_part(lib, out_dir)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
