#!/usr/bin/env bash
# Everything that needs a real GPU, in one command, for the day a machine has
# one. NOT YET RUN ON A GPU: no machine of this project has had one; every
# CUDA path has only run against the fake driver (tests/fake_cuda).
#
#   tools/gpu-check.sh [REPORT]          default report: gpu-check-report.md
#
# 1. builds (Release) with the cuda tests pointed at the machine's driver
#    (-DBFC_TEST_REAL_CUDA=ON) and runs `ctest -L cuda`: the sub-allocators,
#    the CCCL resources, the conformance suites and the .so from a C host
#    (the fake's control-call cases skip there, with the reason);
# 2. the bfc-vs-cudaMalloc micro-benchmarks (bfc_benchmarks: cudaMalloc,
#    cudaMallocAsync and bfc on the same sizes and traces);
# 3. when python3 can import torch: a short training loop on several streams
#    with bfc as PyTorch's CUDAPluggableAllocator, then with PyTorch's own
#    caching allocator (separate processes), peak memory and time of each;
# 4. when python3 can import cupy: the same comparison for CuPy.
# Each step's result goes into one markdown report; the exit status is 1 if
# any step that ran failed.
set -uo pipefail
cd "$(dirname "$0")/.."
report=${1:-gpu-check-report.md}
build=build-gpu
status=0
exec 3> "$report"
note() { echo "$*" >&3; echo "$*"; }

note "# bfc GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null)"
note ""
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  note "No GPU visible (nvidia-smi -L failed): nothing to check."
  exit 2
fi
note '```'
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >&3
note '```'

note "## 1. cuda tests against the real driver"
bash tools/deps.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DBFC_TEST_REAL_CUDA=ON > /dev/null &&
  cmake --build "$build" -j"$(nproc)" > "$build/build.log" 2>&1
if ctest --test-dir "$build" -L cuda --output-on-failure > "$build/ctest-cuda.log" 2>&1; then
  note "passed: $(grep -E 'tests passed' "$build/ctest-cuda.log")"
else
  status=1
  note "FAILED:"; note '```'; tail -40 "$build/ctest-cuda.log" >&3; note '```'
fi
note "skipped (needs the fake's controls):"
note '```'
grep -E '\(Skipped\)' "$build/ctest-cuda.log" >&3 || true
note '```'

note "## 2. bfc vs cudaMalloc"
note '```'
"$build/bench/bfc_benchmarks" --benchmark_filter='cuda|bfc' \
  --benchmark_counters_tabular=true --benchmark_min_time=0.2 >&3 2>&1 || status=1
note '```'

cat > "$build/torch_loop.py" <<'PY'
import os, sys, time
import torch
use_bfc = sys.argv[1] == "bfc"
if use_bfc:
    alloc = torch.cuda.memory.CUDAPluggableAllocator(sys.argv[2], "bfc_malloc_or_throw", "bfc_free")
    torch.cuda.memory.change_current_allocator(alloc)
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
streams = [torch.cuda.Stream() for _ in range(4)]
torch.cuda.synchronize(); start = time.time()
for step in range(50):
    s = streams[step % len(streams)]
    with torch.cuda.stream(s):
        x = torch.randn(512, 4096, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()
elapsed = time.time() - start
peak = torch.cuda.max_memory_reserved() if not use_bfc else -1
print(f"{sys.argv[1]}: {elapsed:.3f} s, torch max_memory_reserved {peak}")
PY
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  note "## 3. PyTorch: 50 steps, 4 streams"
  note '```'
  for which in torch bfc; do
    BFC_ALLOC_CONF=backend:cuda python3 "$build/torch_loop.py" "$which" "$build/src/c_api/libbfc_alloc.so" >&3 2>&1 || status=1
    nvidia-smi --query-gpu=memory.used --format=csv,noheader >&3
  done
  note '```'
else
  note "## 3. PyTorch: not run (python3 cannot import torch with CUDA)"
fi

cat > "$build/cupy_loop.py" <<'PY'
import sys, time, ctypes
import cupy
if sys.argv[1] == "bfc":
    lib = ctypes.CDLL(sys.argv[2])
    alloc = cupy.cuda.memory.CFunctionAllocator(
        0, ctypes.cast(lib.bfc_cupy_malloc, ctypes.c_void_p).value,
        ctypes.cast(lib.bfc_cupy_free, ctypes.c_void_p).value, None)
    cupy.cuda.set_allocator(alloc.malloc)
start = time.time()
for i in range(200):
    a = cupy.random.random((2048, 2048)); b = a @ a; del a, b
cupy.cuda.Device().synchronize()
print(f"{sys.argv[1]}: {time.time() - start:.3f} s")
PY
if python3 -c 'import cupy' 2>/dev/null; then
  note "## 4. CuPy: 200 matmuls"
  note '```'
  for which in cupy bfc; do
    BFC_ALLOC_CONF=backend:cuda python3 "$build/cupy_loop.py" "$which" "$build/src/c_api/libbfc_alloc.so" >&3 2>&1 || status=1
  done
  note '```'
else
  note "## 4. CuPy: not run (python3 cannot import cupy)"
fi
note ""
note "exit status $status"
exit $status
