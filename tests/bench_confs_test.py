#!/usr/bin/env python3
"""BFC_BENCH_CONFS: trace rows for configurations of one's own (stdlib only).

  bench_confs_test.py BFC_BENCHMARKS

Each entry NAME=CONF adds BM_Trace/TRACE/{cold,warm}_NAME_{sim,addr,pages}
rows built from CONF (BFC_ALLOC_CONF's grammar); a row spelled as a preset
measures what that preset's own row measures, and one with other options
measures something else. Malformed entries, taken names, backend and memory
keys and keys BFC_ALLOC_CONF would only ignore stop the binary with exit
status 2 and a message naming the entry, before anything runs.
"""
import json
import os
import subprocess
import sys

TRACE = "resnet18-train"


def run(binary, confs, *args):
    env = dict(os.environ)
    env["BFC_BENCH_CONFS"] = confs
    return subprocess.run([binary, *args], env=env, capture_output=True,
                          text=True, timeout=600)


def listed(binary, confs):
    r = run(binary, confs, "--benchmark_list_tests")
    if r.returncode != 0:
        sys.exit("listing with %r failed (%d): %s" % (confs, r.returncode,
                                                       r.stderr))
    return set(r.stdout.split())


def check_refused(binary, confs, words):
    r = run(binary, confs, "--benchmark_list_tests")
    if r.returncode != 2:
        sys.exit("%r: exit status %d, expected 2 (stdout %r)" %
                 (confs, r.returncode, r.stdout[:200]))
    if "BM_" in r.stdout:
        sys.exit("%r: benchmarks listed although refused" % confs)
    for w in words:
        if w not in r.stderr:
            sys.exit("%r: message %r lacks %r" % (confs, r.stderr, w))


def pool_live(binary, confs, names):
    """Runs the warm _addr rows `names` once each; pool/live by row name."""
    flt = "BM_Trace/%s/warm_(%s)_addr$" % (TRACE, "|".join(names))
    r = run(binary, confs, "--benchmark_filter=" + flt,
            "--benchmark_min_time=0.01", "--benchmark_format=json")
    if r.returncode != 0:
        sys.exit("running %s failed (%d): %s" % (flt, r.returncode, r.stderr))
    out = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        row = b["name"].split("/")[2][len("warm_"):-len("_addr")]
        out[row] = b["pool/live"]
    if sorted(out) != sorted(names):
        sys.exit("ran %s, expected rows %s" % (sorted(out), sorted(names)))
    return out


def main():
    binary = sys.argv[1]
    base = listed(binary, "")
    if "BM_Trace/%s/warm_tf_sim" % TRACE not in base:
        sys.exit("no %s trace rows to extend: %s" % (TRACE, sorted(base)[:5]))
    confs = ("same_tf=preset:tf; same_lf = preset:low_footprint ;"
             "tf_exact=preset:tf,growth_policy:same_as_requested")
    rows = listed(binary, confs)
    added = rows - base
    expected = {"BM_Trace/%s/%s_%s_%s" % (TRACE, when, name, backing)
                for when in ("cold", "warm")
                for name in ("same_tf", "same_lf", "tf_exact")
                for backing in ("sim", "addr", "pages")}
    missing = expected - rows
    if missing:
        sys.exit("rows missing: %s" % sorted(missing))
    if any(not r.startswith("BM_Trace/") for r in added):
        sys.exit("rows other than BM_Trace added: %s" %
                 sorted(r for r in added if not r.startswith("BM_Trace/")))

    # The options reach the allocator: the preset spelled again measures
    # what the preset's row does; other options give another pool.
    fp = pool_live(binary, confs,
                   ["tf", "low_footprint", "same_tf", "same_lf", "tf_exact"])
    if fp["same_tf"] != fp["tf"] or fp["same_lf"] != fp["low_footprint"]:
        sys.exit("a preset spelled in BFC_BENCH_CONFS measured another "
                 "pool than its own row: %s" % fp)
    if fp["tf"] == fp["low_footprint"] or fp["tf_exact"] == fp["tf"]:
        sys.exit("different options, the same pool: %s" % fp)

    check_refused(binary, "nameless", ["nameless", "NAME=CONF"])
    check_refused(binary, "a b=preset:tf", ["a b=preset:tf", "NAME=CONF"])
    check_refused(binary, "=preset:tf", ["NAME=CONF"])
    check_refused(binary, "tf=preset:low_footprint", ["\"tf\" is taken"])
    check_refused(binary, "x=preset:tf;x=preset:tf", ["\"x\" is taken"])
    check_refused(binary, "x=preset:nope", ["(x)", "nope", "low_footprint"])
    check_refused(binary, "x=growth_policy:sometimes", ["(x)", "sometimes"])
    check_refused(binary, "x=backend:virtual", ["(x)", "backend", "_sim"])
    check_refused(binary, "x=memory_limit:1GiB", ["(x)", "memory_limit"])
    check_refused(binary, "x=expandable_segments:true",
                  ["(x)", "expandable_segments"])
    check_refused(binary, "x=roundup_power2_divisions:4",
                  ["(x)", "roundup_power2_divisions"])
    print("BFC_BENCH_CONFS: %d rows added, options applied (pool/live %s), "
          "11 bad settings refused" % (len(added), fp))


if __name__ == "__main__":
    main()
