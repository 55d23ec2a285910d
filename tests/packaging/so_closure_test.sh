#!/usr/bin/env bash
# libbfc_alloc.so is self-contained (issue: "a .so that loads where its users
# are"): it needs only the C/C++ runtime, exports only bfc_*, needs no newer
# glibc than the README states, and loads and serves in a process that can
# see no Abseil library and no CUDA library.
#
#   so_closure_test.sh LIBBFC_ALLOC_SO SO_LOAD_CHECK README ABSEIL_LINKED_EXE
#
# ABSEIL_LINKED_EXE is any program linked against Abseil's shared libraries:
# it must fail to start where Abseil is hidden, or the hiding proves nothing.
set -uo pipefail
so=$1 loader=$2 readme=$3 control=$4
fail=0
say() { echo "so_closure_test: $*"; }

echo "--- readelf -d (NEEDED)"
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "$needed"
allowed='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1)$'
for n in $needed; do
  [[ $n =~ $allowed ]] || { say "FAIL: needs $n (only the C/C++ runtime is allowed)"; fail=1; }
done

echo "--- nm -D --defined-only"
exports=$(nm -D --defined-only "$so" | awk 'NF >= 3 {print $3}')
echo "$exports"
for e in $exports; do
  [[ $e == bfc_* ]] || { say "FAIL: exports $e (only bfc_* may be exported)"; fail=1; }
done
[[ -n $exports ]] || { say "FAIL: exports nothing"; fail=1; }

echo "--- glibc"
glibc=$(objdump -T "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V | tail -1)
say "highest GLIBC symbol version needed: $glibc"
grep -q "$glibc" "$readme" ||
  { say "FAIL: the README does not state $glibc as the glibc the .so needs"; fail=1; }

echo "--- load with no Abseil and no CUDA library visible"
run_loader() {
  env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH= "$loader" "$so"
}
# In a private mount namespace every Abseil and CUDA runtime library on the
# system is covered by an empty file, so a dependency on one cannot be
# satisfied by accident. Without the rights for that (not root, no
# namespaces), the loader runs plainly and the dynamic loader's trace must
# show that no such library was opened.
libs=$(ls /usr/lib/*/libabsl_*.so* /usr/local/cuda/lib64/libcudart.so* 2>/dev/null)
if unshare -m true 2>/dev/null; then
  export -f run_loader
  export so loader libs
  export control
  unshare -m bash -c '
    for f in $libs; do mount --bind /dev/null "$f" || exit 3; done
    if "$control" --help > /dev/null 2>&1; then
      echo "so_closure_test: FAIL: $control still starts: Abseil is not hidden"
      exit 4
    fi
    run_loader' || { say "FAIL: the .so does not load and serve without Abseil"; fail=1; }
else
  say "no mount namespace here: checking the loader trace instead"
  trace=$(env -i PATH=/usr/bin:/bin LD_DEBUG=libs "$loader" "$so" 2>&1) ||
    { echo "$trace" | tail -20; say "FAIL: the loader failed"; fail=1; }
  if echo "$trace" | grep -E 'calling init: .*(libabsl|libcudart)'; then
    say "FAIL: Abseil or the CUDA runtime was loaded"; fail=1
  fi
fi
if [[ $fail -eq 0 ]]; then say "ok"; fi
exit $fail
