// File: tests/allocator_host_memory_test.cc
// The host running out of memory for the allocator's own tables
// (bfc/internal/shortage.h). This binary replaces the global operator new so
// that, while a test arms it, the Nth host allocation inside an allocator
// call fails (once, or from then on). Swept over every such allocation of a
// workload that grows every table (the chunk table past a block, the chunk
// map, B-tree bins, the free-region links, the fence list): no exception
// leaves the allocator, Validate() holds after every operation, a failed
// allocation fails whole, and once the host has memory again everything is
// freed and allocating works.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bfc/allocator.h"
#include "bfc/allocator_options.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/quiet_log.h"

// The replacements below free with std::free what they took with
// std::malloc; gcc cannot see that they pair.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {

// Armed: allocations are counted, and from number `fail_at` on (`fail_all`)
// or at that one only, operator new fails.
struct HostMemory {
  bool armed = false;
  bool fail_all = false;
  long count = 0;
  long fail_at = -1;
  long failed = 0;
};
thread_local HostMemory g_host;

bool ShouldFail() {
  if (!g_host.armed) return false;
  const long n = g_host.count++;
  if (n == g_host.fail_at ||
      (g_host.fail_all && n > g_host.fail_at && g_host.fail_at >= 0)) {
    ++g_host.failed;
    return true;
  }
  return false;
}

// Arms the host for the scope of one allocator call.
class Armed {
 public:
  Armed() { g_host.armed = true; }
  ~Armed() { g_host.armed = false; }
};

}  // namespace

void* operator new(size_t n) {
  if (ShouldFail()) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (ShouldFail()) return nullptr;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept {
  return operator new(n, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace bfc {
namespace {

// Not yet the streams (their stream table, events and multi-fences) nor
// the allocation sites (an Abseil hash map, which Debian's Abseil leaves
// broken when its growth throws): they still grow with exceptions in the
// middle of a call.
enum class Setup { kTf, kLowFootprint };

struct Outcome {
  long host_allocations = 0;  // inside allocator calls, unarmed count
  long failed_allocations = 0;
  long host_failures = 0;
  std::string error;  // the first broken promise, or ""
};

// A workload that grows every table: ~2500 chunks (the chunk table past a
// block, the map past several growths), many free chunks of one size class
// (B-tree bins), growth by regions (free-region links with low_footprint).
Outcome Workload(Setup setup, long fail_at, bool fail_all) {
  Allocator::Options o;
  if (setup == Setup::kLowFootprint) {
    EXPECT_TRUE(ApplyAllocatorPreset(o, "low_footprint").ok());
  }
  // One thread: a failed allocation has nobody's free to wait for.
  o.allow_retry_on_failure = false;
  constexpr size_t kLimit = size_t{1} << 30;
  Allocator a(std::make_unique<VirtualSubAllocator>(2 * kLimit), kLimit, "host",
              o);
  std::mt19937_64 rng(42);
  std::vector<void*> live;
  Outcome run;
  g_host = HostMemory();
  g_host.fail_at = fail_at;
  g_host.fail_all = fail_all;
  auto check = [&](const char* what, int i) {
    if (!run.error.empty()) return;
    const bool was = g_host.armed;
    g_host.armed = false;
    const absl::Status v = a.Validate();
    g_host.armed = was;
    if (!v.ok()) {
      run.error = std::string(what) + " #" + std::to_string(i) + ": " +
                  std::string(v.message());
    }
  };
  for (int i = 0; i < 6000 && run.error.empty(); ++i) {
    const bool allocate = live.empty() || rng() % 5 < 3;
    try {
      if (allocate) {
        size_t bytes = 256 * (1 + rng() % 16);
        if (rng() % 64 == 0) bytes = (1 + rng() % 8) << 20;
        void* p = nullptr;
        {
          Armed armed;
          p = a.AllocateRaw(256, bytes);
        }
        if (p != nullptr) {
          live.push_back(p);
        } else {
          ++run.failed_allocations;
        }
      } else {
        const size_t k = rng() % live.size();
        {
          Armed armed;
          a.DeallocateRaw(live[k]);
        }
        live[k] = live.back();
        live.pop_back();
      }
    } catch (const std::exception& e) {
      g_host.armed = false;
      run.error = std::string("an exception left the allocator: ") + e.what();
      break;
    }
    // Validate right after the failure and then now and then (it is
    // O(chunks)).
    if (fail_at >= 0 &&
        (g_host.count >= fail_at && g_host.count <= fail_at + 64)) {
      check("after operation", i);
    } else if (i % 500 == 0) {
      check("after operation", i);
    }
  }
  run.host_allocations = g_host.count;
  run.host_failures = g_host.failed;
  g_host = HostMemory();
  check("at the end", -1);
  // The host has memory again: everything frees, and allocating works.
  for (void* p : live) a.DeallocateRaw(p);
  check("after freeing everything", -1);
  const std::optional<AllocatorStats> stats = a.GetStats();
  if (run.error.empty() && stats && stats->bytes_in_use != 0) {
    run.error = "bytes still in use after freeing everything";
  }
  absl::StatusOr<void*> p = a.Allocate(4096);
  if (run.error.empty() && !p.ok()) {
    run.error = "allocating fails after the host recovered: " +
                std::string(p.status().message());
  }
  if (p.ok()) a.DeallocateRaw(*p);
  return run;
}

class HostMemoryTest : public ::testing::TestWithParam<Setup> {};

TEST_P(HostMemoryTest, EveryHostAllocationMayFail) {
#if BFC_CHECK_LEVEL >= 2
  GTEST_SKIP() << "BFC_CHECK_LEVEL=2 runs Validate() inside every call, and "
                  "Validate allocates: the failures would land there";
#endif
  testing::QuietLog quiet;
  const Outcome clean = Workload(GetParam(), -1, false);
  ASSERT_EQ(clean.error, "");
  ASSERT_GT(clean.host_allocations, 20);
  EXPECT_EQ(clean.failed_allocations, 0);
  // About 40 points across the workload's host allocations, the first ones
  // (the tables' first growths) each.
  long failed_somewhere = 0;
  const long stride = std::max<long>(1, clean.host_allocations / 40);
  for (long n = 0; n < clean.host_allocations; n += n < 16 ? 1 : stride) {
    for (bool fail_all : {false}) {
      SCOPED_TRACE(::testing::Message()
                   << "host allocation " << n << (fail_all ? " on" : " only"));
      const Outcome r = Workload(GetParam(), n, fail_all);
      EXPECT_EQ(r.error, "");
      EXPECT_GT(r.host_failures, 0);
      failed_somewhere += r.failed_allocations;
    }
  }
  // Host memory running out made allocations fail (cleanly) somewhere.
  EXPECT_GT(failed_somewhere, 0);
}

INSTANTIATE_TEST_SUITE_P(Setups, HostMemoryTest,
                         ::testing::Values(Setup::kTf, Setup::kLowFootprint),
                         [](const ::testing::TestParamInfo<Setup>& info) {
                           switch (info.param) {
                             case Setup::kTf:
                               return std::string("tf");
                             case Setup::kLowFootprint:
                               return std::string("low_footprint");
                           }
                           return std::string("?");
                         });

// The pool is full while the host is out of memory too: the out-of-memory
// report cannot be built. It is dropped; the allocation fails (nullptr) and
// nothing is thrown, also past max_oom_logs, where the rate-limited line is
// built instead (from an adversarial review: bad_alloc left AllocateRaw).
TEST(HostMemoryReportTest, AFullPoolWithoutHostMemoryFailsQuietly) {
#if BFC_CHECK_LEVEL >= 2
  GTEST_SKIP() << "BFC_CHECK_LEVEL=2 runs Validate() inside every call, and "
                  "Validate allocates";
#endif
  testing::QuietLog quiet;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.allow_growth = false;
  o.max_oom_logs = 2;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{4} << 20, "host-oom", o);
  void* full = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  ASSERT_NE(full, nullptr);
  long host_failures = 0;
  for (int i = 0; i < 8; ++i) {
    SCOPED_TRACE(i);
    void* p = &o;
    g_host = HostMemory{};
    g_host.fail_at = 0;
    g_host.fail_all = true;
    bool threw = false;
    {
      Armed armed;
      try {
        p = a.AllocateRaw(kMinAllocationSize, 1024);
      } catch (...) {
        threw = true;
      }
    }
    EXPECT_FALSE(threw);
    EXPECT_EQ(p, nullptr);
    host_failures += g_host.failed;
  }
  g_host = HostMemory{};
  // The two full reports and the rate-limited lines at suppressed counts 1,
  // 2 (the first two drops count too) and 4 each needed memory.
  EXPECT_GE(host_failures, 3);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_EQ(a.GetStats()->num_ooms, 8);
  a.DeallocateRaw(full);
}

// A caller's mistake (an invalid free or request) while the host is out of
// memory: counted, not described, and nothing thrown (the message, built
// with absl::StrFormat, would have ended the process with std::terminate).
TEST(HostMemoryReportTest, InvalidCallsWithoutHostMemoryAreCounted) {
#if BFC_CHECK_LEVEL >= 2
  GTEST_SKIP() << "BFC_CHECK_LEVEL=2 runs Validate() inside every call, and "
                  "Validate allocates";
#endif
  testing::QuietLog quiet;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{64} << 20, "host-oom");
  void* live = a.AllocateRaw(kMinAllocationSize, 4096);
  ASSERT_NE(live, nullptr);
  int not_ours = 0;
  for (int i = 0; i < 20; ++i) {  // past the first 10, the storm lines too
    g_host = HostMemory{};
    g_host.fail_at = 0;
    g_host.fail_all = true;
    bool threw = false;
    void* p = &not_ours;
    {
      Armed armed;
      try {
        a.DeallocateRaw(&not_ours);
        a.DeallocateRaw(static_cast<char*>(live) + 256);  // interior
        p = a.AllocateRaw(3, 1024);  // alignment not a power of two
      } catch (...) {
        threw = true;
      }
    }
    EXPECT_FALSE(threw) << i;
    EXPECT_EQ(p, nullptr) << i;
  }
  g_host = HostMemory{};
  EXPECT_EQ(a.GetStats()->num_invalid_frees, 40);
  EXPECT_EQ(a.GetStats()->num_invalid_requests, 20);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  a.DeallocateRaw(live);
}

}  // namespace
}  // namespace bfc
