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
import math
import os
import pickle
import stat
import sys
import tempfile

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
        if not isinstance(e, dict):
            raise ValueError(f"device trace entry {i} is not a dict")
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
        size = e.get("size", 0) or 0
        stream = e.get("stream", 0) or 0
        for what, v in (("addr", addr), ("size", size), ("stream", stream)):
            # bfc-replay would refuse the row; say which entry it came from.
            if (not isinstance(v, int) or isinstance(v, bool) or v < 0 or
                    v >= 1 << 64):
                raise ValueError(f"device trace entry {i}: {what} {v!r} is "
                                 "not an integer in [0, 2^64)")
        time = e.get("time_us")
        t = (f"{time / 1e6:.6f}" if isinstance(time, (int, float)) and
             not isinstance(time, bool) and math.isfinite(time) else f"{i}")
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


class SameFileError(Exception):
    pass


def write_atomically(source, path, text):
    """Writes `text` to `path` (through a symlink, keeping an existing file's
    permissions) via a temporary file renamed into place, so a failed write
    leaves the old file whole; refuses to write over `source`. A path that
    is not a regular file (/dev/stdout, a FIFO, >(...), a device) is written
    to directly: renaming over it would replace it with a file (a review:
    as root, -o /dev/null replaced /dev/null for everyone)."""
    target = os.path.realpath(path)
    if os.path.exists(target) and os.path.samefile(source, target):
        raise SameFileError(f"the output {path} is the snapshot {source}; "
                            "refusing to write over it")
    if os.path.isdir(target):
        raise IsADirectoryError(f"{path} is a directory")
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        with open(path, "w", encoding="ascii") as f:
            f.write(text)
        return
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise PermissionError(f"{path} is not writable")
    if os.path.exists(target):
        mode = os.stat(target).st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, temp = tempfile.mkstemp(dir=os.path.dirname(target) or ".",
                                prefix="." + os.path.basename(target) + ".")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(temp, target)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


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
            AttributeError, TypeError, KeyError, IndexError, MemoryError,
            RecursionError, OverflowError, UnicodeDecodeError) as e:
        print(f"snapshot_to_csv.py: {args.snapshot}: {type(e).__name__}: {e}",
              file=sys.stderr)
        return 1
    text = HEADER + "\n" + "".join(r + "\n" for r in rows)
    if args.output == "-":
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as e:  # a full disk, a reader that went away
            print(f"snapshot_to_csv.py: cannot write to standard output: {e}",
                  file=sys.stderr)
            # Python would try to flush again at exit.
            sys.stdout = None
            return 1
    else:
        try:
            write_atomically(args.snapshot, args.output, text)
        except SameFileError as e:
            print(f"snapshot_to_csv.py: {e}", file=sys.stderr)
            return 2
        except OSError as e:
            print(f"snapshot_to_csv.py: cannot write {args.output}: {e}",
                  file=sys.stderr)
            return 1
    if dropped:
        print(f"snapshot_to_csv.py: dropped {dropped} frees of blocks allocated "
              "before recording began", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
