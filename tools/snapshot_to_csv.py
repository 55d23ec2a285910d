#!/usr/bin/env python3
"""Converts a PyTorch CUDA memory snapshot into the RMM log bfc-replay reads.

A snapshot is what torch.cuda.memory._dump_snapshot("snapshot.pickle") writes
after torch.cuda.memory._record_memory_history(): a pickle of plain dicts and
lists ("segments", "device_traces"), so this script needs the Python standard
library only, not torch. Each device trace entry becomes one RMM row:

  alloc            -> allocate
  free_completed   -> free (the block is reusable only then; a block whose
                      free never completed in the trace is freed at its
                      free_requested, or "free" in older snapshots)
  oom              -> allocate failure (pointer (nil))
  segment_*, snapshot and anything else -> skipped (the allocator's own
                      business, which the replay re-decides)

Frees of blocks allocated before recording began are dropped (counted on
standard error). One command from snapshot to replay:

  tools/snapshot_to_csv.py snapshot.pickle | bfc-replay -

Usage: snapshot_to_csv.py SNAPSHOT [--device N] [-o OUT.csv]
Exit status: 0 ok, 1 unreadable or not a snapshot, 2 usage.
"""

import argparse
import pickle
import sys

HEADER = "Thread,Time,Action,Pointer,Size,Stream"


class _Stub:
    """Stands in for any class a snapshot pickle might name (older PyTorch
    versions pickled a few helper objects); plain data is all we read."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        self.state = state


class _Unpickler(pickle.Unpickler):
    # Never imports or runs code named by the file: unknown classes are stubs.
    def find_class(self, module, name):
        if module == "builtins" and name in ("dict", "list", "set", "tuple",
                                             "frozenset", "int", "float",
                                             "str", "bytes", "bool"):
            return getattr(__import__("builtins"), name)
        return _Stub


def load(path):
    with open(path, "rb") as f:
        return _Unpickler(f).load()


def convert(snapshot, device):
    """Returns (rows, dropped_frees, num_devices)."""
    if not isinstance(snapshot, dict) or "device_traces" not in snapshot:
        raise ValueError("not a PyTorch memory snapshot (no 'device_traces'; "
                         "was it written by torch.cuda.memory._dump_snapshot?)")
    traces = snapshot["device_traces"]
    if not isinstance(traces, list) or not 0 <= device < len(traces):
        raise ValueError(f"no device {device} in the snapshot "
                         f"({len(traces) if isinstance(traces, list) else 0} devices)")
    trace = traces[device]
    # Which allocation (by its index) has a completed free.
    completed = set()
    live = {}
    for i, e in enumerate(trace):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live[addr] = i
        elif action == "free_completed" and addr in live:
            completed.add(live.pop(addr))
    rows = []
    live = {}
    dropped = 0
    for i, e in enumerate(trace):
        action = e.get("action")
        addr = e.get("addr", 0) or 0
        size = int(e.get("size", 0) or 0)
        stream = int(e.get("stream", 0) or 0)
        time = e.get("time_us")
        t = f"{time / 1e6:.6f}" if isinstance(time, (int, float)) else f"{i}"
        if action == "alloc":
            live[addr] = i
            rows.append(f"0,{t},allocate,{addr:#x},{size},{stream:#x}")
        elif action in ("free_requested", "free", "free_completed"):
            start = live.get(addr)
            if start is None:
                # Allocated before recording began: its request is counted
                # once, its completion ignored.
                dropped += action != "free_completed"
                continue
            # Freed where the block became reusable: at its completion when
            # the trace has one, else at the request.
            if (action == "free_completed") == (start in completed):
                del live[addr]
                rows.append(f"0,{t},free,{addr:#x},{size},{stream:#x}")
        elif action == "oom":
            rows.append(f"0,{t},allocate failure,(nil),{size},{stream:#x}")
    return rows, dropped, len(traces)


def main():
    parser = argparse.ArgumentParser(
        description="PyTorch memory snapshot -> RMM log for bfc-replay")
    parser.add_argument("snapshot")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("-o", "--output", default="-")
    args = parser.parse_args()
    try:
        snapshot = load(args.snapshot)
        rows, dropped, _ = convert(snapshot, args.device)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError,
            AttributeError, TypeError) as e:
        print(f"snapshot_to_csv.py: {args.snapshot}: {e}", file=sys.stderr)
        return 1
    text = HEADER + "\n" + "".join(r + "\n" for r in rows)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        if args.output == args.snapshot:
            print("snapshot_to_csv.py: the output would overwrite the snapshot",
                  file=sys.stderr)
            return 2
        with open(args.output, "w", encoding="ascii") as f:
            f.write(text)
    if dropped:
        print(f"snapshot_to_csv.py: dropped {dropped} frees of blocks allocated "
              "before recording began", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
