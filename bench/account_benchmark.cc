// File: bench/account_benchmark.cc
// -----------------------------------------------------------------------------
//
// What an account costs (bfc/account.h): one allocate + free of 256 B
//
//   AccountPair/bare            Allocator::Allocate + Deallocate, no account
//   AccountPair/raw             AllocateRaw + DeallocateRaw (the fast path)
//   AccountPair/<depth>/<res>   Account::Allocate + Deallocate from an
//                               account `depth` levels deep (1: the root),
//                               every level with a reservation (res = 1,
//                               so the charge stays in the leaf) or none
//                               (res = 0, every level is charged)
//
// ns/op counts the allocate and the free as one op each; the overhead is the
// difference to `bare` in the same run (and to `raw`, the fast path an
// uncharged AllocateRaw takes). The same pairs at a fixed count, for
// callgrind: bfc_instruction_count account:DEPTH:RESERVED.
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "bfc/account.h"
#include "bfc/virtual_sub_allocator.h"

namespace bfc::bench {
namespace {

std::unique_ptr<Allocator> MakeAllocator() {
  Allocator::Options o;
  // A small range: valgrind (callgrind) caps the address space.
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30), size_t{1} << 29,
      "bench", o);
}

void BM_AccountPairBare(benchmark::State& state) {
  std::unique_ptr<Allocator> a = MakeAllocator();
  for (auto _ : state) {
    void* p = *a->Allocate(256);
    benchmark::DoNotOptimize(p);
    (void)a->Deallocate(p);
  }
  SetOpCounters(state, 2);
}

void BM_AccountPairRaw(benchmark::State& state) {
  std::unique_ptr<Allocator> a = MakeAllocator();
  for (auto _ : state) {
    void* p = a->AllocateRaw(256, 256);
    benchmark::DoNotOptimize(p);
    a->DeallocateRaw(p);
  }
  SetOpCounters(state, 2);
}

void BM_AccountPair(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  const bool reserved = state.range(1) != 0;
  std::unique_ptr<Allocator> a = MakeAllocator();
  std::vector<std::shared_ptr<Account>> chain;
  AccountOptions root;
  root.name = "root";
  root.limit_bytes = int64_t{1} << 40;
  chain.push_back(*Account::CreateRoot(a.get(), root));
  for (int d = 1; d < depth; ++d) {
    AccountOptions o;
    o.name = "level" + std::to_string(d);
    o.limit_bytes = int64_t{1} << 39;
    o.reservation_bytes = reserved ? int64_t{1} << 20 : 0;
    chain.push_back(*chain.back()->CreateChild(o));
  }
  Account& leaf = *chain.back();
  for (auto _ : state) {
    void* p = *leaf.Allocate(256);
    benchmark::DoNotOptimize(p);
    (void)leaf.Deallocate(p);
  }
  SetOpCounters(state, 2);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    (void)(*it)->Close();
  }
}

BENCHMARK(BM_AccountPairBare)->Name("BM_AccountPair/bare");
BENCHMARK(BM_AccountPairRaw)->Name("BM_AccountPair/raw");
BENCHMARK(BM_AccountPair)
    ->ArgNames({"depth", "reserved"})
    ->Args({1, 0})
    ->Args({3, 0})
    ->Args({3, 1})
    ->Args({8, 0})
    ->Args({8, 1});

}  // namespace
}  // namespace bfc::bench
