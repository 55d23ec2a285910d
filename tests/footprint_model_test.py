#!/usr/bin/env python3
"""tools/footprint_model.py against bfc-replay on every real trace.

  footprint_model_test.py BFC_REPLAY FOOTPRINT_MODEL DATA_DIR

For each shared trace (DATA_DIR/*.csv with phases in DATA_DIR/phases) and each
captured one (DATA_DIR/captured/*.csv.gz, phases beside them in meta/), the
model's footprint, peak pool bytes and sub-allocator calls (whole trace and
last iteration) must equal what `bfc-replay --backend=sim-cudamalloc --conf
preset:low_footprint --summary-json -` reports; and a knob set away from the
preset must move the model as it moves bfc-replay (the floor at 0 on one
trace), so the comparison is not of two constants. A trace that frees what it never
allocated gets one line and exit status 1.
"""
import glob
import json
import os
import subprocess
import sys


def replay(binary, trace, phases, conf):
    cmd = [binary, "--backend=sim-cudamalloc", "--conf", conf, "--summary-json", "-",
           "--quiet", trace]
    if phases:
        cmd[1:1] = ["--phases", phases]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("bfc-replay failed on %s:\n%s" % (trace, r.stderr))
    return json.loads(r.stdout)


def model(script, trace, phases, sets):
    cmd = [sys.executable, script, trace]
    if phases:
        cmd += ["--phases", phases]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("footprint_model.py failed on %s:\n%s" % (trace, r.stderr))
    return json.loads(r.stdout)


def compare(name, want, got):
    errors = []
    for key in ("peak_pool_bytes", "peak_live_bytes", "sub_allocator_allocs",
                "sub_allocator_frees"):
        if want[key] != got[key]:
            errors.append("%s: %s %s, model %s" % (name, key, want[key], got[key]))
    if abs(want["footprint"] - got["footprint"]) > 1e-9:
        errors.append("%s: footprint %.6f, model %.6f" % (name, want["footprint"],
                                                           got["footprint"]))
    wl, gl = want.get("last_iteration"), got.get("last_iteration")
    if (wl is None) != (gl is None):
        errors.append("%s: last iteration %s, model %s" % (name, wl, gl))
    elif wl is not None:
        for key in ("sub_allocator_allocs", "sub_allocator_frees"):
            if wl[key] != gl[key]:
                errors.append("%s: last iteration %s %s, model %s" % (name, key, wl[key], gl[key]))
    return errors


def main():
    binary, script, data = sys.argv[1], sys.argv[2], sys.argv[3]
    traces = []
    for t in sorted(glob.glob(os.path.join(data, "*.csv"))):
        name = os.path.basename(t)[:-len(".csv")]
        phases = os.path.join(data, "phases", name + ".phases.csv")
        if os.path.exists(phases):  # the shared traces; not the synthetic ones
            traces.append((t, phases))
    for t in sorted(glob.glob(os.path.join(data, "captured", "*.csv.gz"))):
        traces.append((t, None))  # meta/ beside it, found by both
    if len(traces) < 20:
        sys.exit("expected the 4 shared and the captured traces under %s, found %d"
                 % (data, len(traces)))
    errors = []
    for trace, phases in traces:
        want = replay(binary, trace, phases, "preset:low_footprint")
        if "last_iteration" not in want:
            errors.append("%s: bfc-replay found no iterations" % trace)
        errors += compare(trace, want, model(script, trace, phases, []))
    # Away from the preset: the floor off moves both, the same way.
    trace, phases = traces[0]
    want = replay(binary, trace, phases, "preset:low_footprint,min_growth_step_bytes:0")
    base = replay(binary, trace, phases, "preset:low_footprint")
    if want["sub_allocator_allocs"] == base["sub_allocator_allocs"]:
        errors.append("%s: the floor at 0 did not change bfc-replay's calls" % trace)
    errors += compare(trace + " (floor 0)", want,
                      model(script, trace, phases, ["min_growth_step_bytes=0"]))
    # A trace that frees what it never allocated: one line that says so,
    # exit status 1, no traceback.
    bad = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                       "footprint_model_test_%d.csv" % os.getpid())
    with open(bad, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n1,0,free,0x10,5,0\n")
    r = subprocess.run([sys.executable, script, bad], capture_output=True, text=True)
    os.remove(bad)
    if r.returncode != 1 or "line 2: free of 0x10" not in r.stderr or "Traceback" in r.stderr:
        errors.append("a bad trace: exit %d, %r" % (r.returncode, r.stderr))
    if errors:
        sys.exit("\n".join(errors))
    print("ok: %d traces" % len(traces))


if __name__ == "__main__":
    main()
