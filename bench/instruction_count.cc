// File: bench/instruction_count.cc
// -----------------------------------------------------------------------------
//
// bfc_instruction_count: the benchmark workloads at a fixed number of
// operations, for counting instructions (and simulated cache misses) under
// callgrind instead of timing them. On a shared VM wall-clock A/B runs move by
// +-20 %; instruction counts are the same from run to run, so they show what a
// change did. tools/count-instructions.sh runs it and prints per-op figures;
// only the calls inside Measure() are counted (--toggle-collect).
//
//   bfc_instruction_count WORKLOAD [PASSES]
//   WORKLOAD: pair256 | random10k | random100k | trace:NAME |
//             cold:NAME:PRESET | warm:NAME:PRESET (BM_Trace's *_sim pools) |
//             account:DEPTH:RESERVED (BM_AccountPair; DEPTH 0: no account)
//
// Prints "ops N" (allocate and free calls inside Measure) on stdout.
//
// The pool's sub-allocator hands out addresses only (a bump pointer, nothing
// mapped): valgrind cannot reserve the tens of GiB of address space that
// VirtualSubAllocator takes, and a failed reservation would send every
// allocation into the OOM retry wait.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "bfc/account.h"
#include "bfc/allocator_options.h"
#include "bfc/sub_allocator.h"

namespace bfc::bench {
namespace {

std::unique_ptr<Allocator> MakePool(size_t limit) {
  Allocator::Options options;
  options.allow_growth = true;
  return std::make_unique<Allocator>(
      std::make_unique<AddressOnlySubAllocator>(), limit, "count", options);
}

// Everything callgrind counts runs inside this call.
template <typename F>
[[gnu::noinline]] void Measure(F f) {
  f();
}

size_t RunPair(size_t passes) {
  std::unique_ptr<Allocator> a = MakePool(64 * kGiB);
  BfcPool pool{a.get()};
  pool.Free(pool.Alloc(256), 256);  // growth outside the count
  const size_t n = 100000 * passes;
  Measure([&] {
    for (size_t i = 0; i < n; ++i) pool.Free(pool.Alloc(256), 256);
  });
  return 2 * n;
}

// BM_AccountPair's work: Allocate + Deallocate of 256 B, bare (depth 0) or
// through an account `depth` levels deep, each level below the root with a
// reservation (`reserved`) or none.
size_t RunAccountPair(int depth, bool reserved, size_t passes) {
  std::unique_ptr<Allocator> a = MakePool(64 * kGiB);
  std::vector<std::shared_ptr<Account>> chain;
  if (depth > 0) {
    AccountOptions root;
    root.name = "root";
    chain.push_back(*Account::CreateRoot(a.get(), root));
  }
  for (int d = 1; d < depth; ++d) {
    AccountOptions o;
    o.name = "level" + std::to_string(d);
    o.reservation_bytes = reserved ? int64_t{1} << 20 : 0;
    chain.push_back(*chain.back()->CreateChild(o));
  }
  (void)a->Deallocate(*a->Allocate(256));  // growth outside the count
  const size_t n = 100000 * passes;
  if (chain.empty()) {
    Measure([&] {
      for (size_t i = 0; i < n; ++i) (void)a->Deallocate(*a->Allocate(256));
    });
  } else {
    Account& leaf = *chain.back();
    Measure([&] {
      for (size_t i = 0; i < n; ++i) (void)leaf.Deallocate(*leaf.Allocate(256));
    });
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) (void)(*it)->Close();
  return 2 * n;
}

size_t RunRandom(size_t k, size_t hi, size_t passes) {
  const RandomWorkload w = MakeRandomWorkload(k, 256, hi, 42);
  std::unique_ptr<Allocator> a = MakePool(1024 * kTiB);
  BfcPool pool{a.get()};
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  for (size_t i = 0; i < k; ++i) {
    live_size[i] = w.initial[i];
    live[i] = pool.Alloc(live_size[i]);
  }
  const size_t warm = RandomWarmupSteps(w);  // as BM_Random
  for (size_t i = 0; i < warm; ++i) RandomStep(pool, w, i, live, live_size);
  const size_t n = 50000 * passes;
  Measure([&] {
    for (size_t i = warm; i < warm + n; ++i) {
      RandomStep(pool, w, i, live, live_size);
    }
  });
  for (size_t j = 0; j < k; ++j) pool.Free(live[j], live_size[j]);
  return 2 * n;
}

size_t RunTrace(const PhasedTrace& t, size_t passes) {
  std::unique_ptr<Allocator> a = MakePool(64 * kGiB);
  BfcPool pool{a.get()};
  std::vector<void*> setup(t.all.num_slots, nullptr);
  std::vector<void*> slots(t.all.num_slots, nullptr);
  ReplayOps(t.prefix, pool, setup.data());
  ReplayOps(t.iterations, pool, slots.data());  // warm-up pass, as bfc_warm
  Measure([&] {
    for (size_t i = 0; i < passes; ++i)
      ReplayOps(t.iterations, pool, slots.data());
  });
  for (void* p : setup) pool.Free(p, 0);
  return passes * t.iterations.ops.size();
}

// BM_Trace/NAME/{cold,warm}_PRESET_sim: a whole replay from an empty pool,
// or passes over the iteration phases of a warmed one.
size_t RunPresetTrace(const PhasedTrace& t, const std::string& preset,
                      bool cold, size_t passes) {
  std::vector<void*> setup(t.all.num_slots, nullptr);
  std::vector<void*> slots(t.all.num_slots, nullptr);
  if (cold) {
    size_t ops = 0;
    for (size_t i = 0; i < passes; ++i) {
      std::unique_ptr<Allocator> a =
          MakeBfcPreset(64 * kGiB, preset.c_str(), /*address_only=*/true);
      BfcPool pool{a.get()};
      Measure([&] { ReplayOps(t.all, pool, slots.data()); });
      for (void*& p : slots) {
        if (p != nullptr) pool.Free(p, 0);
        p = nullptr;
      }
      ops += t.all.ops.size();
    }
    return ops;
  }
  std::unique_ptr<Allocator> a =
      MakeBfcPreset(64 * kGiB, preset.c_str(), /*address_only=*/true);
  BfcPool pool{a.get()};
  ReplayOps(t.prefix, pool, setup.data());
  ReplayOps(t.iterations, pool, slots.data());  // warm-up pass
  Measure([&] {
    for (size_t i = 0; i < passes; ++i)
      ReplayOps(t.iterations, pool, slots.data());
  });
  for (void* p : setup) {
    if (p != nullptr) pool.Free(p, 0);
  }
  return passes * t.iterations.ops.size();
}

}  // namespace
}  // namespace bfc::bench

int main(int argc, char** argv) {
  using namespace bfc::bench;  // NOLINT
  using bfc::kMiB;
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s pair256|random10k|random100k|trace:NAME|"
                 "cold:NAME:PRESET|warm:NAME:PRESET [PASSES]\n",
                 argv[0]);
    return 2;
  }
  const std::string w = argv[1];
  const size_t passes = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1;
  size_t ops = 0;
  if (w == "pair256") {
    ops = RunPair(passes);
  } else if (w.rfind("account:", 0) == 0) {
    // account:DEPTH:RESERVED (DEPTH 0: no account)
    int depth = 0, reserved = 0;
    if (std::sscanf(w.c_str(), "account:%d:%d", &depth, &reserved) != 2 ||
        depth < 0 || depth > 64) {
      std::fprintf(stderr, "bad workload %s (account:DEPTH:0|1)\n", w.c_str());
      return 2;
    }
    ops = RunAccountPair(depth, reserved != 0, passes);
  } else if (w == "random10k") {
    ops = RunRandom(10000, 64 * kMiB, passes);
  } else if (w == "random100k") {
    ops = RunRandom(100000, kMiB, passes);
  } else if (w.rfind("trace:", 0) == 0) {
    const std::vector<PhasedTrace> traces =
        LoadTraces(BFC_BENCH_TRACE_DIR, BFC_BENCH_PHASE_DIR);
    for (const PhasedTrace& t : traces) {
      if (t.name == w.substr(6)) ops = RunTrace(t, passes);
    }
    if (ops == 0) {
      std::fprintf(stderr, "no trace named %s\n", w.c_str() + 6);
      return 2;
    }
  } else if (w.rfind("cold:", 0) == 0 || w.rfind("warm:", 0) == 0) {
    // cold:NAME:PRESET or warm:NAME:PRESET
    const size_t colon = w.find(':', 5);
    const std::string name = w.substr(5, colon - 5);
    const std::string preset =
        colon == std::string::npos ? "tf" : w.substr(colon + 1);
    bfc::AllocatorOptions check;
    if (!bfc::ApplyAllocatorPreset(check, preset).ok()) {
      std::fprintf(stderr, "no preset named %s\n", preset.c_str());
      return 2;
    }
    const std::vector<PhasedTrace> traces =
        LoadTraces(BFC_BENCH_TRACE_DIR, BFC_BENCH_PHASE_DIR);
    for (const PhasedTrace& t : traces) {
      if (t.name == name) ops = RunPresetTrace(t, preset, w[0] == 'c', passes);
    }
    if (ops == 0) {
      std::fprintf(stderr, "no trace named %s\n", name.c_str());
      return 2;
    }
  } else {
    std::fprintf(stderr, "unknown workload %s\n", w.c_str());
    return 2;
  }
  std::printf("ops %zu\n", ops);
  return 0;
}
