// File: tests/allocator_host_memory_test.cc
// The host running out of memory for the allocator's own tables
// (bfc/internal/shortage.h). This binary replaces the global operator new
// (testing/failing_new.h) so that, while a test arms it, the Nth host
// allocation inside an allocator call fails (once, or from then on). Swept
// over the host allocations of workloads that grow every table (the chunk
// table past a block, the chunk map, B-tree bins, the free-region links, the
// fence list; the stream table, other streams' uses, multi-fences, events and
// waits; the allocation sites): no exception leaves the allocator,
// Validate() holds after every operation, a failed call fails whole (an
// allocation nullptr, a stream call ResourceExhausted with nothing changed),
// and once the host has memory again everything is freed and allocating
// works.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/allocator_options.h"
#include "bfc/internal/check.h"
#include "bfc/internal/chunk.h"
#include "bfc/internal/shortage.h"
#include "bfc/shared_counter.h"
#include "bfc/stream_ops.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/failing_new.h"
#include "testing/quiet_log.h"

namespace bfc {
namespace {

using ::bfc::testing::Armed;
using ::bfc::testing::g_host;
using ::bfc::testing::HostMemory;

// The tables every setup grows, plus: kStreams the stream table, fences
// over several streams (multi-fences), events and the other streams' uses of
// live memory; kSites the allocation sites' stacks; kTimestamps TF's
// timestamped reuse (the free counts, the queue of stamped chunks).
enum class Setup { kTf, kLowFootprint, kStreams, kSites, kTimestamps };

// Events that need no host memory (the fake of testing/fake_stream_ops.h
// allocates, which would move the failures into it): an event is its
// number, complete once the workload has let the device run past it.
class CountingStreamOps : public StreamOps {
 public:
  absl::StatusOr<Event> RecordEvent(StreamId) override {
    if (fail_record) return absl::UnavailableError("RecordEvent: failed");
    return reinterpret_cast<Event>(++recorded_);
  }
  absl::StatusOr<bool> QueryEvent(Event e) override {
    return reinterpret_cast<uintptr_t>(e) <= done_;
  }
  absl::Status StreamWaitEvent(StreamId, Event) override {
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event e) override {
    if (fail_sync) return absl::UnavailableError("SynchronizeEvent: failed");
    done_ = std::max(done_, reinterpret_cast<uintptr_t>(e));
    return absl::OkStatus();
  }
  void ReleaseEvent(Event) override {}
  // Everything recorded so far completes.
  void RunAll() { done_ = recorded_; }
  // StreamOps failing (not the host): the calls return errors.
  bool fail_record = false;
  bool fail_sync = false;

 private:
  uintptr_t recorded_ = 0;
  uintptr_t done_ = 0;
};

struct Outcome {
  long host_allocations = 0;  // inside allocator calls, unarmed count
  long failed_allocations = 0;
  long host_failures = 0;
  StreamStats streams;  // what the stream paths did
  std::string error;    // the first broken promise, or ""
};

// A workload that grows every table: ~2500 chunks (the chunk table past a
// block, the map past several growths), many free chunks of one size class
// (B-tree bins), growth by regions (free-region links with low_footprint).
Outcome Workload(Setup setup, long fail_at, bool fail_all) {
  Allocator::Options o;
  if (setup == Setup::kLowFootprint) {
    EXPECT_TRUE(ApplyAllocatorPreset(o, "low_footprint").ok());
  }
  o.record_allocation_sites = setup == Setup::kSites;
  if (setup == Setup::kStreams) {
    // Its largest requests get regions of their own, which wait for their
    // stream when freed; and the sites go with the streams.
    o.huge_allocation_bytes = size_t{4} << 20;
    o.record_allocation_sites = true;
  }
  // One thread: a failed allocation has nobody's free to wait for.
  o.allow_retry_on_failure = false;
  constexpr size_t kLimit = size_t{1} << 30;
  Allocator a(std::make_unique<VirtualSubAllocator>(2 * kLimit), kLimit, "host",
              o);
  SharedCounter counter;
  if (setup == Setup::kTimestamps) a.SetTimingCounter(&counter);
  uint64_t freed_before = 0;
  std::function<uint64_t()> freed_by = [&] { return freed_before; };
  CountingStreamOps* ops = nullptr;
  if (setup == Setup::kStreams) {
    auto owned = std::make_unique<CountingStreamOps>();
    ops = owned.get();
    EXPECT_TRUE(a.SetStreamOps(std::move(owned)).ok());
  }
  // Streams 1-4 at a time; a forgotten one is replaced by a new handle.
  uintptr_t streams[4] = {1, 2, 3, 4};
  uintptr_t next_stream = 5;
  auto stream = [&](uint64_t r) {
    const uintptr_t s = r % 5 == 0 ? 0 : streams[r % 4];
    return reinterpret_cast<StreamId>(s);
  };
  std::mt19937_64 rng(42);
  std::vector<void*> live;
  Outcome run;
  g_host = HostMemory();
  g_host.fail_at = fail_at;
  g_host.fail_all = fail_all;
  auto check = [&](const char* what, int i) {
    if (!run.error.empty()) return;
    testing::Disarmed disarmed;
    const absl::Status v = a.Validate();
    if (!v.ok()) {
      run.error = std::string(what) + " #" + std::to_string(i) + ": " +
                  std::string(v.message());
    }
  };
  // A stream call may fail for want of host memory, and then only so.
  auto expect_ok_or_short = [&](const absl::Status& s, const char* what) {
    if (s.ok() || !run.error.empty()) return;
    if (s.code() != absl::StatusCode::kResourceExhausted ||
        g_host.failed == 0) {
      testing::Disarmed disarmed;
      run.error = std::string(what) + ": " + std::string(s.message());
    }
  };
  for (int i = 0; i < 6000 && run.error.empty(); ++i) {
    const uint64_t roll = rng() % 20;
    const bool allocate = live.empty() || roll < 12;
    try {
      if (allocate) {
        size_t bytes = 256 * (1 + rng() % 16);
        if (rng() % 64 == 0) bytes = (1 + rng() % 8) << 20;
        void* p = nullptr;
        if (setup == Setup::kStreams) {
          const StreamId s = stream(rng());
          Armed armed;
          absl::StatusOr<void*> r = a.AllocateOnStream(s, bytes);
          if (r.ok()) p = *r;
        } else if (setup == Setup::kTimestamps) {
          // Some allocations may take only what was freed long enough ago;
          // now and then what was freed before a recent count is safe.
          if (i % 64 == 0 && counter.get() > 16) {
            Armed armed;
            a.SetSafeFrontier(static_cast<uint64_t>(counter.get()) - 16);
          }
          AllocationAttributes attr;
          if (rng() % 2 == 0) {
            freed_before = counter.get() - rng() % 64;
            attr.freed_by_func = &freed_by;
          }
          Armed armed;
          p = a.AllocateRaw(256, bytes, attr);
        } else {
          Armed armed;
          p = a.AllocateRaw(256, bytes);
        }
        if (p != nullptr) {
          live.push_back(p);
        } else {
          ++run.failed_allocations;
        }
      } else if (setup == Setup::kStreams && roll < 14) {
        // Another stream uses live memory, or waits for one; the device
        // runs; a stream ends and a new one takes its place.
        const uint64_t r = rng();
        void* p = live[r % live.size()];
        const StreamId s = stream(r >> 8);
        const StreamId t = stream(r >> 16);
        absl::Status st;
        {
          Armed armed;
          switch (roll) {
            case 12:
              st = a.RecordStreamUse(p, s);
              break;
            default:
              if ((r >> 24) % 4 == 0) {
                st = a.NotifyStreamWait(s, t);
              } else if ((r >> 24) % 4 == 1 && s != kImplicitStream) {
                st = a.ForgetStream(s);
                streams[(r >> 8) % 4] = next_stream++;
              } else if ((r >> 24) % 4 == 2) {
                // Synchronizing fails for a while: a dedicated region freed
                // then waits for its stream (pending_dedicated_).
                ops->fail_sync = !ops->fail_sync;
              } else {
                ops->RunAll();
              }
              break;
          }
        }
        expect_ok_or_short(st, "a stream call");
      } else {
        const size_t k = rng() % live.size();
        if (setup == Setup::kStreams) {
          const StreamId s = stream(rng());
          absl::Status st;
          {
            Armed armed;
            st = a.DeallocateOnStream(live[k], s);
          }
          expect_ok_or_short(st, "DeallocateOnStream");
          if (!st.ok()) continue;  // not freed: it stays live
        } else {
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
  run.streams = a.GetStreamStats();
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
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "BFC_CHECK_LEVEL=2 runs Validate() inside every call, and "
                    "Validate allocates: the failures would land there";
  }
  testing::QuietLog quiet;
  const Outcome clean = Workload(GetParam(), -1, false);
  ASSERT_EQ(clean.error, "");
  ASSERT_GT(clean.host_allocations, 20);
  EXPECT_EQ(clean.failed_allocations, 0);
  if (GetParam() == Setup::kStreams) {
    // The workload reaches what it is meant to: streams replaced (slots
    // recycled), events, waits on the device, failed synchronizations.
    EXPECT_GT(clean.streams.streams, 50);
    EXPECT_GT(clean.streams.stream_op_errors, 0);
    EXPECT_GT(clean.streams.events_recorded, 50);
    EXPECT_GT(clean.streams.waits_inserted + clean.streams.synchronizations, 0);
  }
  // About 40 points across the workload's host allocations, the first ones
  // (the tables' first growths) each; at each, that allocation fails alone,
  // or it and every later one (a host that stays short: the emergency
  // arena's nodes, which pools give back when destroyed, carry it).
  long failed_somewhere = 0;
  const long stride = std::max<long>(1, clean.host_allocations / 40);
  for (long n = 0; n < clean.host_allocations; n += n < 16 ? 1 : stride) {
    for (bool fail_all : {false, true}) {
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
                         ::testing::Values(Setup::kTf, Setup::kLowFootprint,
                                           Setup::kStreams, Setup::kSites,
                                           Setup::kTimestamps),
                         [](const ::testing::TestParamInfo<Setup>& info) {
                           switch (info.param) {
                             case Setup::kTf:
                               return std::string("tf");
                             case Setup::kLowFootprint:
                               return std::string("low_footprint");
                             case Setup::kStreams:
                               return std::string("streams");
                             case Setup::kSites:
                               return std::string("sites");
                             case Setup::kTimestamps:
                               return std::string("timestamps");
                           }
                           return std::string("?");
                         });

// The pool is full while the host is out of memory too: the out-of-memory
// report cannot be built. It is dropped; the allocation fails (nullptr) and
// nothing is thrown, also past max_oom_logs, where the rate-limited line is
// built instead (from an adversarial review: bad_alloc left AllocateRaw).
TEST(HostMemoryReportTest, AFullPoolWithoutHostMemoryFailsQuietly) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "BFC_CHECK_LEVEL=2 runs Validate() inside every call, and "
                    "Validate allocates";
  }
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
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "BFC_CHECK_LEVEL=2 runs Validate() inside every call, and "
                    "Validate allocates";
  }
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

// --- Single calls while the host is short, from a review of the stream
// paths (each threw, aborted the process or broke Validate before its fix) --

StreamId S(uintptr_t s) { return reinterpret_cast<StreamId>(s); }

std::unique_ptr<Allocator> MakeAllocator(Allocator::Options o = {}) {
  o.allow_retry_on_failure = false;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 31), size_t{1} << 30,
      "host-short", o);
}

// Every host allocation fails from the next one on (until g_host is reset).
void FailFromNowOn() {
  g_host = HostMemory();
  g_host.fail_at = 0;
  g_host.fail_all = true;
}

// Runs `call` armed, catching what escapes; true when something did.
template <typename F>
bool Threw(F&& call) {
  Armed armed;
  try {
    call();
  } catch (...) {
    return true;
  }
  return false;
}

// The invalid-pointer reports of the status calls were built unguarded
// (absl::StrFormat without memory ends the process).
TEST(HostMemoryCallTest, InvalidPointersOfTheStatusCalls) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  int not_ours = 0;
  absl::Status used, freed;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] {
    used = a->RecordStreamUse(&not_ours, S(1));
    freed = a->Deallocate(&not_ours);
  }));
  g_host = HostMemory();
  EXPECT_EQ(used.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(freed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
}

// The chunk table takes its memory by committing blocks of a reserved range
// (bfc/internal/chunk.h), not through operator new; testing/failing_new.cc
// refuses such a commit by its length. A block that cannot be committed
// fails the allocation that needed it, whole, and nothing else: the
// allocations before it stand, Validate() holds, and once the host has
// memory again allocating works and everything frees.
TEST(HostMemoryCallTest, AChunkTableBlockThatCannotBeCommitted) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  if (sysconf(_SC_PAGESIZE) != 4096) {
    GTEST_SKIP() << "a block's commit length is counted in 4 KiB pages here";
  }
  testing::QuietLog quiet;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{1} << 29, "commit", o);
  constexpr size_t kBlock = internal::ChunkTable::kBlockChunks;
  const size_t block_bytes = kBlock * sizeof(internal::Chunk);
  ASSERT_EQ(block_bytes % 4096, 0u);
  // The first block: the first allocation needs it.
  g_host = HostMemory{};
  g_host.fail_size = block_bytes;
  {
    Armed armed;
    EXPECT_EQ(a.AllocateRaw(kMinAllocationSize, 256), nullptr);
  }
  EXPECT_EQ(g_host.failed, 1);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  // With memory, the first block comes. Then the second: granules until the
  // table must grow past the first.
  g_host = HostMemory{};
  std::vector<void*> live = {a.AllocateRaw(kMinAllocationSize, 256)};
  ASSERT_NE(live[0], nullptr);
  long failed = 0;
  g_host.fail_size = block_bytes;
  for (size_t i = 0; i < 2 * kBlock && failed == 0; ++i) {
    void* p = nullptr;
    {
      Armed armed;
      p = a.AllocateRaw(kMinAllocationSize, 256);
    }
    if (p == nullptr) {
      ++failed;
    } else {
      live.push_back(p);
    }
  }
  EXPECT_EQ(failed, 1);
  EXPECT_GE(g_host.failed, 1);
  // Every slot of the first block but the one a region's rest holds went to
  // an allocation before the refusal, none after it.
  EXPECT_GE(live.size(), kBlock - internal::kSpareEntries - 1);
  EXPECT_LT(live.size(), kBlock);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  g_host = HostMemory{};
  for (int i = 0; i < 8; ++i) {
    void* p = a.AllocateRaw(kMinAllocationSize, 256);
    ASSERT_NE(p, nullptr);
    live.push_back(p);
  }
  for (void* p : live) a.DeallocateRaw(p);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_EQ(a.GetStats()->bytes_in_use, 0);
}

// Validate allocates for its checks; without host memory it says so and
// throws nothing (a bad_alloc escaped it).
TEST(HostMemoryCallTest, ValidateWithoutHostMemory) {
  auto a = MakeAllocator();
  void* p = a->AllocateRaw(kMinAllocationSize, 4096);
  ASSERT_NE(p, nullptr);
  absl::Status v;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] { v = a->Validate(); }));
  g_host = HostMemory();
  EXPECT_EQ(v.code(), absl::StatusCode::kResourceExhausted) << v;
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
  a->DeallocateRaw(p);
}

// A freed_by_func that throws, and no memory for the report of it.
TEST(HostMemoryCallTest, AThrowingFreedByFunc) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  SharedCounter counter;
  a->SetTimingCounter(&counter);
  a->DeallocateRaw(a->AllocateRaw(256, 4096));
  std::function<uint64_t()> f = []() -> uint64_t { throw std::bad_alloc(); };
  AllocationAttributes attr;
  attr.freed_by_func = &f;
  void* p = nullptr;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] { p = a->AllocateRaw(256, 4096, attr); }));
  g_host = HostMemory();
  EXPECT_NE(p, nullptr);  // from the pool, without a free-count limit
  a->DeallocateRaw(p);
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
}

// The status calls on a full pool: their failure's message needs memory.
TEST(HostMemoryCallTest, TheStatusCallsOnAFullPool) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.allow_growth = false;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{4} << 20, "host-short", o);
  void* full = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  ASSERT_NE(full, nullptr);
  absl::StatusOr<void*> plain = nullptr, on_stream = nullptr;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] {
    plain = a.Allocate(1024);
    on_stream = a.AllocateOnStream(kImplicitStream, 1024);
  }));
  g_host = HostMemory();
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(on_stream.status().code(), absl::StatusCode::kResourceExhausted);
  a.DeallocateRaw(full);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// A dedicated (huge) allocation: its region's entry was inserted after the
// sub-allocator's memory was taken, without room made for it.
TEST(HostMemoryCallTest, DedicatedAllocationsAndFrees) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  Allocator::Options o;
  o.huge_allocation_bytes = size_t{1} << 20;
  for (long n = 0;; ++n) {
    SCOPED_TRACE(n);
    auto a = MakeAllocator(o);
    void* first = a->AllocateRaw(256, size_t{2} << 20);
    ASSERT_NE(first, nullptr);
    g_host = HostMemory();
    g_host.fail_at = n;
    void* p = nullptr;
    EXPECT_FALSE(Threw([&] { p = a->AllocateRaw(256, size_t{2} << 20); }));
    const long failed = g_host.failed;
    g_host = HostMemory();
    ASSERT_TRUE(a->Validate().ok()) << a->Validate();
    // Freed while the host stays short: the sub-allocator's Free may fail
    // (the region is then given up, counted), nothing escapes.
    FailFromNowOn();
    EXPECT_FALSE(Threw([&] {
      a->DeallocateRaw(p);
      a->DeallocateRaw(first);
    }));
    g_host = HostMemory();
    EXPECT_TRUE(a->Validate().ok()) << a->Validate();
    EXPECT_EQ(a->GetStats()->bytes_in_use, 0);
    if (failed == 0) break;  // past the call's last host allocation
  }
}

// Ten 1 MiB allocations succeed and the pool stays small: no pending
// memory swallowed the regions grown for them.
void ExpectStillAllocatable(Allocator& a) {
  std::vector<void*> live;
  for (int i = 0; i < 10; ++i) {
    live.push_back(a.AllocateRaw(256, size_t{1} << 20));
    EXPECT_NE(live.back(), nullptr) << i;
  }
  EXPECT_LE(*a.GetStats()->pool_bytes, int64_t{32} << 20);
  for (void* l : live) a.DeallocateRaw(l);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// ForgetStream short of memory for the stream's last event: it forgot the
// stream all the same, so what was freed on it could never be shown
// complete, and new regions joined that memory: the pool grew to the limit
// and nothing could be allocated. Now it fails whole.
TEST(HostMemoryCallTest, ForgetStreamFailsWhole) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  ASSERT_TRUE(a->SetStreamOps(std::make_unique<CountingStreamOps>()).ok());
  absl::StatusOr<void*> p = a->AllocateOnStream(S(1), 4096);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->DeallocateOnStream(*p, S(1)).ok());  // pending on stream 1
  const int64_t streams = a->GetStreamStats().streams;
  absl::Status forgot;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] { forgot = a->ForgetStream(S(1)); }));
  g_host = HostMemory();
  EXPECT_EQ(forgot.code(), absl::StatusCode::kResourceExhausted);
  // Still known: naming it again is not a new stream; forgetting it works.
  absl::StatusOr<void*> q = a->AllocateOnStream(S(1), 4096);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(a->GetStreamStats().streams, streams);
  ASSERT_TRUE(a->DeallocateOnStream(*q, S(1)).ok());
  EXPECT_TRUE(a->ForgetStream(S(1)).ok());
  ExpectStillAllocatable(*a);
}

// A stream forgotten when StreamOps could not record its last event: what
// was freed on it stays unused for good (documented), but nothing else may
// join it. Clean neighbours and new regions joined it, and were lost too.
TEST(DeadFenceTest, AStreamForgottenWithoutItsEventSwallowsNothingElse) {
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  auto owned = std::make_unique<CountingStreamOps>();
  CountingStreamOps* ops = owned.get();
  ASSERT_TRUE(a->SetStreamOps(std::move(owned)).ok());
  absl::StatusOr<void*> p = a->AllocateOnStream(S(1), 4096);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(a->DeallocateOnStream(*p, S(1)).ok());
  ops->fail_record = true;
  EXPECT_FALSE(a->ForgetStream(S(1)).ok());
  ops->fail_record = false;
  ExpectStillAllocatable(*a);
}

// A dedicated region waiting for its stream (the synchronization failed)
// holds a freed chunk: Validate counted it as a live allocation without a
// recorded site.
TEST(HostMemoryCallTest, APendingDedicatedRegionHasNoSite) {
  testing::QuietLog quiet;
  Allocator::Options o;
  o.record_allocation_sites = true;
  o.huge_allocation_bytes = size_t{1} << 20;
  auto a = MakeAllocator(o);
  auto owned = std::make_unique<CountingStreamOps>();
  CountingStreamOps* ops = owned.get();
  ASSERT_TRUE(a->SetStreamOps(std::move(owned)).ok());
  absl::StatusOr<void*> p = a->AllocateOnStream(S(1), size_t{2} << 20);
  ASSERT_TRUE(p.ok());
  ops->fail_sync = true;
  ASSERT_TRUE(a->DeallocateOnStream(*p, S(1)).ok());
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
  EXPECT_GT(a->GetStreamStats().bytes_pending, 0);
  ops->fail_sync = false;
  ops->RunAll();
  a->DeallocateRaw(a->AllocateRaw(256, 4096));  // learns, releases
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
}

// SetTimingCounter without memory for the free counts: its report of that
// needed memory too, outside any try.
TEST(HostMemoryCallTest, SetTimingCounter) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  a->DeallocateRaw(a->AllocateRaw(256, 4096));
  SharedCounter counter;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] { a->SetTimingCounter(&counter); }));
  g_host = HostMemory();
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
  // Timestamped reuse stayed off: a free takes no count.
  a->DeallocateRaw(a->AllocateRaw(256, 4096));
  EXPECT_EQ(counter.get(), 0);
}

// Garbage collection's warning on the out-of-memory path.
TEST(HostMemoryCallTest, GarbageCollection) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.garbage_collection = true;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 31),
              size_t{4} << 20, "host-short", o);
  void* p = a.AllocateRaw(256, size_t{1} << 20);
  void* q = a.AllocateRaw(256, size_t{1} << 20);  // one 2 MiB region
  a.DeallocateRaw(p);
  a.DeallocateRaw(q);
  void* big = nullptr;
  FailFromNowOn();
  EXPECT_FALSE(Threw([&] { big = a.AllocateRaw(256, size_t{3} << 20); }));
  g_host = HostMemory();
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  if (big != nullptr) a.DeallocateRaw(big);
}

// Events that complete only when the test says: those recorded on the
// stalled stream stay incomplete (and cannot be waited for) until Unstall.
class StallingStreamOps : public StreamOps {
 public:
  absl::StatusOr<Event> RecordEvent(StreamId s) override {
    if (fail_record) return absl::UnavailableError("RecordEvent: failed");
    ++recorded_;
    if (s == stalled) stalled_events_.push_back(recorded_);
    return reinterpret_cast<Event>(recorded_);
  }
  absl::StatusOr<bool> QueryEvent(Event e) override { return !Stalled(e); }
  absl::Status StreamWaitEvent(StreamId, Event) override {
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event e) override {
    if (Stalled(e)) return absl::UnavailableError("SynchronizeEvent: stalled");
    return absl::OkStatus();
  }
  void ReleaseEvent(Event) override {}
  void Unstall() {
    stalled_events_.clear();
    stalled = nullptr;
  }
  StreamId stalled = nullptr;
  bool fail_record = false;

 private:
  bool Stalled(Event e) const {
    return std::find(stalled_events_.begin(), stalled_events_.end(),
                     reinterpret_cast<uintptr_t>(e)) != stalled_events_.end();
  }
  uintptr_t recorded_ = 0;
  std::vector<uintptr_t> stalled_events_;
};

// From the second review: memory behind a point that will complete joined
// a neighbour behind a dead point of the same stream (two points of one
// stream merge), and clean memory that had joined the first went with it.
// Layout X Z Y: X freed on stream 1 and covered by an event; Y freed on
// stream 1 after, the stream then forgotten without its last event (Y
// dead); Z freed on stream 2, clean once that completes.
TEST(DeadFenceTest, ASameStreamNeighbourDoesNotCarryMemoryIntoIt) {
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  auto owned = std::make_unique<StallingStreamOps>();
  StallingStreamOps* ops = owned.get();
  ASSERT_TRUE(a->SetStreamOps(std::move(owned)).ok());
  constexpr size_t k = size_t{256} << 10;
  void* x = *a->AllocateOnStream(S(1), k);
  void* z = *a->AllocateOnStream(S(2), k);
  void* y = *a->AllocateOnStream(S(1), k);
  void* w = *a->AllocateOnStream(S(1), k);
  ASSERT_EQ(static_cast<char*>(z), static_cast<char*>(x) + k);
  ASSERT_EQ(static_cast<char*>(y), static_cast<char*>(z) + k);
  // No clean memory left in the pool.
  const int64_t rest = *a->GetStats()->pool_bytes - a->GetStats()->bytes_in_use;
  void* fill =
      rest > 0 ? a->AllocateRaw(256, static_cast<size_t>(rest)) : nullptr;
  ops->stalled = S(1);
  ASSERT_TRUE(a->DeallocateOnStream(x, S(1)).ok());
  // A request larger than the limit records an event covering X's point
  // (and fails to wait for it).
  EXPECT_EQ(a->AllocateRaw(256, size_t{1} << 31), nullptr);
  ASSERT_TRUE(a->DeallocateOnStream(y, S(1)).ok());
  ops->fail_record = true;
  EXPECT_FALSE(a->ForgetStream(S(1)).ok());  // Y's point is dead
  ops->fail_record = false;
  ASSERT_TRUE(a->DeallocateOnStream(z, S(2)).ok());
  EXPECT_EQ(a->AllocateRaw(256, size_t{1} << 31), nullptr);  // Z clean
  ops->Unstall();  // X's point completes
  const int64_t pool = *a->GetStats()->pool_bytes;
  absl::StatusOr<void*> r = a->AllocateOnStream(S(3), 2 * k);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, x) << "X and Z were lost with Y";
  EXPECT_EQ(*a->GetStats()->pool_bytes, pool);
  EXPECT_EQ(a->GetStreamStats().bytes_pending, static_cast<int64_t>(k));
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
  a->DeallocateRaw(w);
  if (fill != nullptr) a->DeallocateRaw(fill);
  EXPECT_TRUE(a->DeallocateOnStream(*r, S(3)).ok());
}

// --- A report that loses its memory after the probe ----------------------
//
// A report is built only when HostHasRoomFor finds memory, but another
// thread can take that memory before the report is formatted. Simulated
// here by failing exactly one host allocation, each in turn, after the
// probe has passed: formatting with absl::StrFormat then ended the process
// (std::terminate); internal::Format throws std::bad_alloc, which the
// report's guard catches.

// Runs `call` once armed to count its host allocations, then once per
// allocation with only that one failing: nothing escapes, and `check`
// holds after each run.
template <typename F, typename G>
void FailEachAllocationInTurn(F&& call, G&& check) {
  g_host = HostMemory();
  {
    Armed armed;
    call();
  }
  const long count = g_host.count;
  ASSERT_GT(count, 1) << "the call allocated nothing to fail";
  for (long k = 0; k < count; ++k) {
    SCOPED_TRACE(k);
    g_host = HostMemory();
    g_host.fail_at = k;
    EXPECT_FALSE(Threw(call));
    g_host = HostMemory();
    check();
  }
}

TEST(HostMemoryRaceTest, InvalidFreesAndRequests) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  auto a = MakeAllocator();
  void* live = a->AllocateRaw(kMinAllocationSize, 4096);
  ASSERT_NE(live, nullptr);
  int not_ours = 0;
  absl::Status freed, used;
  FailEachAllocationInTurn(
      [&] {
        a->DeallocateRaw(&not_ours);
        a->DeallocateRaw(static_cast<char*>(live) + 256);  // interior
        freed = a->Deallocate(&not_ours);
        used = a->RecordStreamUse(&not_ours, S(1));
        void* p = a->AllocateRaw(3, 1024);  // alignment not a power of two
        if (p != nullptr) a->DeallocateRaw(p);
      },
      [&] {
        EXPECT_EQ(freed.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_EQ(used.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_TRUE(a->Validate().ok()) << a->Validate();
      });
  a->DeallocateRaw(live);
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
}

TEST(HostMemoryRaceTest, OutOfMemoryReports) {
  if (internal::ValidateEveryCall()) {
    GTEST_SKIP() << "Validate allocates inside every call at level 2";
  }
  testing::QuietLog quiet;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.allow_growth = false;
  o.max_oom_logs = 1 << 20;  // every failure builds its full report
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{4} << 20, "host-race", o);
  void* full = a.AllocateRaw(kMinAllocationSize, size_t{3} << 20);
  ASSERT_NE(full, nullptr);
  absl::StatusOr<void*> plain = nullptr, on_stream = nullptr;
  void* raw = &o;
  FailEachAllocationInTurn(
      [&] {
        raw = a.AllocateRaw(kMinAllocationSize, size_t{2} << 20);
        plain = a.Allocate(size_t{2} << 20);
        on_stream = a.AllocateOnStream(kImplicitStream, size_t{2} << 20);
      },
      [&] {
        EXPECT_EQ(raw, nullptr);
        EXPECT_EQ(plain.status().code(), absl::StatusCode::kResourceExhausted);
        EXPECT_EQ(on_stream.status().code(),
                  absl::StatusCode::kResourceExhausted);
        EXPECT_TRUE(a.Validate().ok()) << a.Validate();
      });
  a.DeallocateRaw(full);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

}  // namespace
}  // namespace bfc
