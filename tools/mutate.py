#!/usr/bin/env python3
"""Mutation testing by hand: does the test suite notice a one-line bug?

Reads a catalogue of one-line mutants (tools/mutants.txt), and for each one:
copies the committed tree into a scratch git worktree, replaces one exact
line fragment in one file, rebuilds only the test executables that mutant
names, runs them, and records whether a test failed (the mutant is "killed")
or all passed (it "survived"). A mutant that no longer compiles is reported
apart ("stillborn") and left out of the kill rate, as mutation tools do.

The user's working tree is never modified: every edit happens in the scratch
worktree (by default a fresh directory under $TMPDIR, removed at the end
unless --keep). The catalogue is validated first: a fragment that is missing,
or occurs more than once in its file, is an error naming the catalogue line.

Usage:
  tools/mutate.py                       # every mutant in tools/mutants.txt
  tools/mutate.py --only core-          # the mutants whose id starts so
  tools/mutate.py --list                # print the catalogue and stop
  tools/mutate.py --check               # every mutant applies (CTest runs this)
  tools/mutate.py --work-dir DIR --keep # reuse a scratch tree between runs

Exit status: 0 when the kill rate is at least --min-kill-rate (default 95),
1 when it is lower, 2 for usage or catalogue errors (--check: 1 when a
mutant does not apply).

Not run in CI: a full run rebuilds and retests once per mutant (tens of
minutes on two cores). Run it by hand after changing tests or checks.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class CatalogueError(Exception):
    pass


def parse_catalogue(path):
    """Blocks of `key: value` lines separated by blank lines; `#` comments.

    Keys: id, file, from, to, tests (a space-separated list of test
    executables; all of them are built and run), why (optional). `from` and
    `to` keep their text verbatim after the first ": " (leading spaces of
    code are not needed: `from` is matched as a substring); `\\n` in them
    stands for a line break, for a fragment that spans two lines.
    """
    mutants, block, start = [], {}, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, line in enumerate(lines + [""], start=1):
        if line.startswith("#"):
            continue
        if not line.strip():
            if block:
                block["_line"] = start
                mutants.append(block)
                block, start = {}, None
            continue
        key, sep, value = line.partition(": ")
        if not sep and line.endswith(":"):
            key, value = line[:-1], ""
        elif not sep:
            raise CatalogueError(f"{path}:{number}: expected 'key: value', got {line!r}")
        if key not in ("id", "file", "from", "to", "tests", "why"):
            raise CatalogueError(f"{path}:{number}: unknown key {key!r}")
        if key in block:
            raise CatalogueError(f"{path}:{number}: {key!r} given twice in one mutant")
        if start is None:
            start = number
        block[key] = value
    seen = set()
    for m in mutants:
        where = f"{path}:{m['_line']}"
        for key in ("id", "file", "from", "to", "tests"):
            if key not in m:
                raise CatalogueError(f"{where}: mutant lacks {key!r}")
        if m["id"] in seen:
            raise CatalogueError(f"{where}: duplicate id {m['id']!r}")
        seen.add(m["id"])
        if m["from"] == m["to"]:
            raise CatalogueError(f"{where}: 'from' equals 'to' (not a mutant)")
        m["tests"] = m["tests"].split()
        m["from"] = m["from"].replace("\\n", "\n")
        m["to"] = m["to"].replace("\\n", "\n")
    return mutants


def check_applies(mutants, tree):
    """Every fragment must occur exactly once in its file at HEAD."""
    for m in mutants:
        path = os.path.join(tree, m["file"])
        if not os.path.isfile(path):
            raise CatalogueError(f"mutant {m['id']}: no file {m['file']}")
        with open(path, encoding="utf-8") as f:
            count = f.read().count(m["from"])
        if count != 1:
            raise CatalogueError(
                f"mutant {m['id']} (catalogue line {m['_line']}): fragment occurs "
                f"{count} times in {m['file']}, must occur once: {m['from']!r}")


def check_tests_exist(mutants, tree):
    """Every test a mutant names is an executable the build defines."""
    defined = set()
    for d, _, files in os.walk(os.path.join(tree, "tests")):
        for name in files:
            if name == "CMakeLists.txt":
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    text = f.read()
                defined.update(re.findall(r"bfc_add_test\(\s*NAME\s+([A-Za-z0-9_]+)", text))
                defined.update(re.findall(r"add_executable\(\s*([A-Za-z0-9_]+)", text))
            elif name.endswith(".sh"):
                defined.add(name)
    for m in mutants:
        for t in m["tests"]:
            if t not in defined:
                raise CatalogueError(
                    f"mutant {m['id']} (catalogue line {m['_line']}): names test {t!r}, "
                    "which no tests/ CMakeLists.txt defines")


def run(cmd, cwd, log, timeout=None, env=None):
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        try:
            return subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout, env=env).returncode
        except subprocess.TimeoutExpired:
            out.write(f"timed out after {timeout} s\n")
            return 124


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogue", default=os.path.join(ROOT, "tools", "mutants.txt"))
    parser.add_argument("--only", default="", help="run only mutants whose id starts with this")
    parser.add_argument("--list", action="store_true", help="print the mutants and stop")
    parser.add_argument("--check", action="store_true",
                        help="check that every mutant applies to the working tree and names "
                             "test executables the build defines, and stop (no build; CTest "
                             "runs this so that the catalogue cannot rot unseen)")
    parser.add_argument("--work-dir", help="scratch worktree (default: a new temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch worktree")
    parser.add_argument("--min-kill-rate", type=float, default=95.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--test-timeout", type=int, default=600,
                        help="seconds per mutant's test run (a hang counts as killed)")
    args = parser.parse_args()

    try:
        mutants = [m for m in parse_catalogue(args.catalogue) if m["id"].startswith(args.only)]
    except (CatalogueError, OSError) as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2
    if not mutants:
        print(f"mutate: no mutant id starts with {args.only!r}", file=sys.stderr)
        return 2
    if args.check:
        try:
            check_applies(mutants, ROOT)
            check_tests_exist(mutants, ROOT)
        except CatalogueError as e:
            print(f"mutate: {e}", file=sys.stderr)
            return 1
        print(f"mutate: all {len(mutants)} mutants apply to the working tree")
        return 0
    if args.list:
        for m in mutants:
            print(f"{m['id']:<40} {m['file']}  [{' '.join(m['tests'])}]")
        print(f"{len(mutants)} mutants")
        return 0

    work = args.work_dir or tempfile.mkdtemp(prefix="bfc-mutate-")
    tree = os.path.join(work, "tree")
    build = os.path.join(work, "build")
    log = os.path.join(work, "mutate.log")
    os.makedirs(work, exist_ok=True)
    # A detached worktree at HEAD: committed code only, the user's files untouched.
    if not os.path.isdir(os.path.join(tree, ".git")) and not os.path.isfile(os.path.join(tree, ".git")):
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "--force", tree, "HEAD"],
                       check=True, stdout=subprocess.DEVNULL)
    else:
        subprocess.run(["git", "-C", tree, "checkout", "--detach", "--force",
                        subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], check=True,
                                       capture_output=True, text=True).stdout.strip()],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        check_applies(mutants, tree)
    except CatalogueError as e:
        print(f"mutate: {e}", file=sys.stderr)
        return 2

    print(f"mutate: {len(mutants)} mutants; scratch tree {work}; log {log}", flush=True)
    configure = ["cmake", "-S", tree, "-B", build, "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                 "-DBFC_BUILD_BENCHMARKS=OFF"]
    if shutil.which("ccache"):
        configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
    if run(configure, tree, log) != 0:
        print(f"mutate: configure failed; see {log}", file=sys.stderr)
        return 2

    # The cuda tests run on the fake driver, as CTest runs them
    # (BFC_CUDA_DRIVER_LIBRARY); it is built along when the build has it.
    fake_cuda = os.path.join(build, "tests", "fake_cuda", "libcuda.so.1")
    have_fake = os.path.isdir(os.path.join(build, "tests", "CMakeFiles", "bfc_fake_cuda.dir"))
    test_env = dict(os.environ)
    if have_fake:
        test_env.setdefault("BFC_CUDA_DRIVER_LIBRARY", fake_cuda)

    def build_and_test(tests):
        targets = sorted(set(tests)) + (["bfc_fake_cuda"] if have_fake else [])
        if run(["cmake", "--build", build, "-j", str(args.jobs), "--target", *targets], tree, log) != 0:
            return "build"
        targets = sorted(set(tests))
        # Each named executable is run whole (not through ctest's per-case
        # names), which is what a mutant's test list means.
        for t in targets:
            exe = os.path.join(build, "tests", t)
            if not os.path.isfile(exe):
                found = [os.path.join(d, t) for d, _, files in os.walk(build) if t in files]
                exe = found[0] if found else exe
            if not os.path.isfile(exe):
                return "build"
            # --gtest_fail_fast: the first failure kills the mutant; later
            # tests may hang on the broken code (a full pointer map spins).
            rc = run([exe, "--gtest_brief=1", "--gtest_fail_fast"] if not exe.endswith(".sh") else [exe],
                     os.path.dirname(exe), log, timeout=args.test_timeout, env=test_env)
            if rc != 0:
                return "failed"
        return "passed"

    # The unmutated tree must build and pass, or every mutant looks killed.
    all_tests = sorted({t for m in mutants for t in m["tests"]})
    print(f"mutate: baseline: building and running {len(all_tests)} test executables", flush=True)
    baseline = build_and_test(all_tests)
    if baseline != "passed":
        print(f"mutate: the unmutated tree does not pass ({baseline}); see {log}", file=sys.stderr)
        return 2

    results = []
    for i, m in enumerate(mutants, start=1):
        path = os.path.join(tree, m["file"])
        with open(path, encoding="utf-8") as f:
            original = f.read()
        started = time.monotonic()
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original.replace(m["from"], m["to"], 1))
            with open(log, "a", encoding="utf-8") as out:
                out.write(f"\n=== mutant {m['id']}: {m['file']}: {m['from']!r} -> {m['to']!r}\n")
            outcome = build_and_test(m["tests"])
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(original)
        verdict = {"failed": "killed", "passed": "SURVIVED", "build": "stillborn"}[outcome]
        results.append((m, verdict))
        print(f"[{i}/{len(mutants)}] {verdict:<9} {m['id']}  ({time.monotonic() - started:.0f} s)",
              flush=True)

    killed = sum(1 for _, v in results if v == "killed")
    survived = [m for m, v in results if v == "SURVIVED"]
    stillborn = [m for m, v in results if v == "stillborn"]
    viable = killed + len(survived)
    rate = 100.0 * killed / viable if viable else 0.0
    print(f"\nmutate: {killed} killed, {len(survived)} survived, {len(stillborn)} stillborn "
          f"of {len(results)}; kill rate {rate:.1f}% (of {viable} that compiled)")
    for m in survived:
        print(f"  survived: {m['id']}  {m['file']}: {m['from'].strip()!r} -> {m['to'].strip()!r}")
    for m in stillborn:
        print(f"  stillborn (does not compile; fix the catalogue): {m['id']}")

    if not args.keep and not args.work_dir:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
    return 0 if rate >= args.min_kill_rate else 1


if __name__ == "__main__":
    sys.exit(main())
