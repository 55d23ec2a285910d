#!/usr/bin/env python3
"""A PyTorch memory snapshot, from pickle to replay, in one command.

Writes a snapshot in the schema torch.cuda.memory._dump_snapshot uses (plain
dicts and lists: segments, device_traces with alloc / free_requested /
free_completed / segment_* / oom / snapshot entries, two streams, frames),
converts it with tools/snapshot_to_csv.py piped into bfc-replay, and checks:
the replay succeeds; its peak live bytes equal the peak of the snapshot's own
events (computed here from the events, completion semantics); the OOM entry
is a failure row; a free of a block allocated before recording is dropped;
bfc-replay given the pickle itself names it and the converter.

  snapshot_convert_test.py BFC_REPLAY CONVERTER WORK_DIR
"""
import json
import os
import pickle
import stat
import subprocess
import sys


def snapshot():
    frames = [{"filename": "model.py", "line": 42, "name": "forward"}]
    events = []
    t = 1000

    def ev(action, addr, size, stream=0, **extra):
        nonlocal t
        t += 7
        e = {"action": action, "addr": addr, "size": size, "stream": stream,
             "time_us": t, "frames": frames}
        e.update(extra)
        events.append(e)

    base = 0x7F0000000000
    ev("segment_alloc", base, 20 << 20)
    ev("free_requested", base - 0x1000, 512)     # allocated before recording
    ev("free_completed", base - 0x1000, 512)
    ev("alloc", base, 4 << 20)                   # A
    ev("alloc", base + (4 << 20), 1 << 20)       # B
    ev("alloc", base + (5 << 20), 3 << 20, stream=0x55D0C1A2B3C0)  # C
    ev("free_requested", base, 4 << 20)          # A requested ...
    ev("alloc", base + (8 << 20), 2 << 20)       # D while A is pending
    ev("free_completed", base, 4 << 20)          # ... A completed
    ev("oom", 0, 64 << 30, device_free=1 << 30)
    ev("snapshot", 0, 0)
    ev("free_requested", base + (4 << 20), 1 << 20)   # B, never completed
    ev("alloc", base, 6 << 20)                   # E reuses A's address
    ev("free_requested", base + (5 << 20), 3 << 20, stream=0x55D0C1A2B3C0)
    ev("free_completed", base + (5 << 20), 3 << 20, stream=0x55D0C1A2B3C0)
    ev("free_requested", base + (8 << 20), 2 << 20)
    ev("free_completed", base + (8 << 20), 2 << 20)
    ev("free_requested", base, 6 << 20)
    ev("free_completed", base, 6 << 20)
    ev("segment_free", base, 20 << 20)
    segments = [{"device": 0, "address": base, "total_size": 20 << 20,
                 "allocated_size": 0, "active_size": 0, "stream": 0,
                 "segment_type": "large", "blocks": []}]
    return {"segments": segments, "device_traces": [events]}


def peak_of(events):
    """Peak live bytes by the snapshot's own events: a block is live from its
    alloc to its free_completed, or to its free_requested when it has none."""
    completed = {e["addr"] for e in events if e["action"] == "free_completed"}
    live, peak, sizes = 0, 0, {}
    for e in events:
        a = e["action"]
        if a == "alloc":
            sizes[e["addr"]] = e["size"]
            live += e["size"]
            peak = max(peak, live)
        elif e["addr"] in sizes and (
                a == "free_completed" or
                (a == "free_requested" and e["addr"] not in completed)):
            live -= sizes.pop(e["addr"])
    return peak


def main():
    replay, converter, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    snap = snapshot()
    path = os.path.join(work, "snapshot.pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    failed = []

    cmd = (f"'{sys.executable}' '{converter}' '{path}' | "
           f"'{replay}' --summary-json - --quiet -")
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        failed.append(f"pipeline exit {r.returncode}: {r.stderr}")
    else:
        summary = json.loads(r.stdout)
        want = peak_of(snap["device_traces"][0])
        got = summary["traces"][0]["peak_live_bytes"] if "traces" in summary \
            else summary["peak_live_bytes"]
        if got != want:
            failed.append(f"peak live bytes {got}, the snapshot's events say {want}")
    if "dropped 1 frees" not in r.stderr:
        failed.append(f"the free from before recording was not reported: {r.stderr!r}")

    csv = subprocess.run([sys.executable, converter, path], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL).stdout
    if csv.count("allocate failure,(nil),68719476736") != 1:
        failed.append("the oom entry is not one failure row:\n" + csv)
    if csv.count(",allocate,") != 5 or csv.count(",free,") != 5:
        failed.append("expected 5 allocations and 5 frees:\n" + csv)

    r = subprocess.run([replay, path], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 1 or "Python pickle" not in r.stderr or \
            "snapshot_to_csv.py" not in r.stderr:
        failed.append(f"bfc-replay on the pickle: exit {r.returncode}, {r.stderr!r}")

    not_snapshot = os.path.join(work, "list.pickle")
    with open(not_snapshot, "wb") as f:
        pickle.dump([1, 2, 3], f, protocol=4)
    r = subprocess.run([sys.executable, converter, not_snapshot],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 1 or "not a PyTorch memory snapshot" not in r.stderr:
        failed.append(f"converter on a non-snapshot: exit {r.returncode}, {r.stderr!r}")

    # From a review: -o naming the snapshot by another path (./x, a link)
    # replaced it with the CSV; now refused, the snapshot untouched.
    before = open(path, "rb").read()
    link = os.path.join(work, "link.csv")
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink("snapshot.pickle", link)
    for out in (os.path.join(work, ".", "snapshot.pickle"), link):
        r = subprocess.run([sys.executable, converter, path, "-o", out],
                           capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 2 or "refusing to write over" not in r.stderr:
            failed.append(f"-o {out}: exit {r.returncode}, {r.stderr!r}")
    if open(path, "rb").read() != before:
        failed.append("the snapshot was written over")

    # Values bfc-replay would refuse are named here instead of written out.
    bad = os.path.join(work, "bad.pickle")
    with open(bad, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [[
            {"action": "alloc", "addr": -16, "size": 512, "stream": 0}]]},
            f, protocol=4)
    r = subprocess.run([sys.executable, converter, bad], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 1 or "addr -16 is not an integer in [0, 2^64)" not in \
            r.stderr:
        failed.append(f"a negative address: exit {r.returncode}, {r.stderr!r}")
    with open(bad, "wb") as f:
        pickle.dump({"segments": [], "device_traces": [[
            {"action": "alloc", "addr": 16, "size": 1 << 65, "stream": 0}]]},
            f, protocol=4)
    r = subprocess.run([sys.executable, converter, bad], capture_output=True,
                       text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 1 or "device trace entry 0: size" not in r.stderr:
        failed.append(f"a size of 2^65: exit {r.returncode}, {r.stderr!r}")

    # From a review: -o renamed a temporary file over whatever it named, so a
    # FIFO (or, as root, /dev/null) became a plain file and /dev/stdout
    # failed. What is not a regular file is written to directly.
    fifo = os.path.join(work, "out.fifo")
    if os.path.lexists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL,
                              stdin=subprocess.DEVNULL)
    r = subprocess.run([sys.executable, converter, path, "-o", fifo],
                       capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, timeout=60)
    try:
        got = reader.communicate(timeout=20)[0].decode()
    except subprocess.TimeoutExpired:
        # Nothing opened the FIFO for writing: the reader still waits.
        reader.kill()
        reader.communicate()
        got = ""
    if r.returncode != 0 or not stat.S_ISFIFO(os.lstat(fifo).st_mode) or \
            got != csv:
        failed.append(f"-o a FIFO: exit {r.returncode}, still a FIFO: "
                      f"{stat.S_ISFIFO(os.lstat(fifo).st_mode)}, "
                      f"{len(got)} of {len(csv)} bytes read, {r.stderr!r}")
    r = subprocess.run([sys.executable, converter, path, "-o", "/dev/stdout"],
                       capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0 or r.stdout != csv:
        failed.append(f"-o /dev/stdout: exit {r.returncode}, "
                      f"{len(r.stdout)} of {len(csv)} bytes, {r.stderr!r}")

    # Output that cannot be written is a message and exit 1, not a traceback.
    if os.access("/dev/full", os.W_OK):
        with open("/dev/full", "w") as full:
            r = subprocess.run([sys.executable, converter, path], stdout=full,
                               stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL)
        if r.returncode != 1 or "cannot write to standard output" not in \
                r.stderr or "Traceback" in r.stderr:
            failed.append(f"stdout on /dev/full: exit {r.returncode}, "
                          f"{r.stderr!r}")
    r = subprocess.run([sys.executable, converter, path, "-o",
                        os.path.join(work, "no", "such", "dir.csv")],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 1 or "Traceback" in r.stderr:
        failed.append(f"-o in a missing directory: exit {r.returncode}, "
                      f"{r.stderr!r}")

    for f in failed:
        print("snapshot_convert_test: FAIL:", f)
    if not failed:
        print("snapshot_convert_test: ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
