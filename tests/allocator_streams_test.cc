// File: tests/allocator_streams_test.cc
// -----------------------------------------------------------------------------
//
// Stream-ordered reuse (bfc/allocator.h, "Streams") proved race-free on a
// simulated device (testing/fake_stream_ops.h): every use of memory the
// allocator hands out again must be ordered, by the device's streams and
// events or by what the host learnt, after every use of its earlier
// lifetimes. No memory is touched (VirtualSubAllocator).
//
//   * The fake and its checker first prove they catch what they must (a
//     stream-unaware allocator races at once).
//   * Scenarios, each modelled on a report behind the design
//     (shared/research/streams.md): rapidsai/rmm#2489, a stream forgotten and
//     destroyed while its frees are pending, onnxruntime#29351's stale tag,
//     onnxruntime PR #12913's split remainder, PyTorch's record_stream;
//     waits only when needed, none for same-stream reuse; one stream places
//     as the plain calls do.
//   * Randomized schedules over 2-8 streams and every combination of the
//     three reuse rules (Validate() after every step), the same with
//     failing StreamOps calls, and a thread per stream (run it under TSan).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bfc/allocator.h"
#include "bfc/log.h"
#include "bfc/memory_dump.h"
#include "bfc/report/memory_dump_json.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/fake_stream_ops.h"
#include "testing/quiet_log.h"

namespace bfc {
namespace {

using testing::FakeStreamOps;

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

// Stream handles: small integers cast to pointers (0 is kImplicitStream).
StreamId S(uintptr_t i) { return reinterpret_cast<StreamId>(i); }
const StreamId kA = S(1), kB = S(2), kC = S(3), kD = S(4);

// The three reuse rules as bits: 1 follow dependencies, 2 opportunistic,
// 4 internal dependencies.
Allocator::Options Rules(int rules) {
  Allocator::Options o;
  o.reuse_follow_dependencies = (rules & 1) != 0;
  o.reuse_allow_opportunistic = (rules & 2) != 0;
  o.reuse_allow_internal_dependencies = (rules & 4) != 0;
  o.allow_retry_on_failure = false;
  return o;
}
std::string RulesName(int rules) {
  return absl::StrCat("follow=", rules & 1, " opportunistic=", (rules >> 1) & 1,
                      " internal=", (rules >> 2) & 1);
}

using testing::QuietLog;

// An allocator over never-touched addresses with the fake device as its
// StreamOps (owned by the allocator; `dev` drives it).
struct Rig {
  explicit Rig(Allocator::Options o = Rules(7), size_t limit = 64 * kMiB) {
    o.allow_retry_on_failure = false;
    auto sub = std::make_unique<VirtualSubAllocator>(size_t{1} << 30);
    base = reinterpret_cast<uintptr_t>(sub->base());
    alloc = std::make_unique<Allocator>(std::move(sub), limit, "streams", o);
    auto ops = std::make_unique<FakeStreamOps>(final_counters);
    dev = ops.get();
    EXPECT_TRUE(alloc->SetStreamOps(std::move(ops)).ok());
  }
  // Allocates `n` bytes on `s` and uses them there at once. nullptr when the
  // allocator refused (the status in last_status).
  void* AllocUse(StreamId s, size_t n) {
    absl::StatusOr<void*> p = alloc->AllocateOnStream(s, n);
    last_status = p.status();
    if (!p.ok()) return nullptr;
    dev->Allocated(*p, n);
    sizes[*p] = n;
    dev->Use(*p, n, s);
    return *p;
  }
  void Use(void* p, StreamId s) { dev->Use(p, sizes.at(p), s); }
  void Free(void* p, StreamId s) {
    dev->Freed(p);
    sizes.erase(p);
    EXPECT_TRUE(alloc->DeallocateOnStream(p, s).ok());
  }
  // `p` lies in [q, q + size of q's chunk).
  bool Inside(void* p, void* q, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto b = reinterpret_cast<uintptr_t>(q);
    return a >= b && a < b + n;
  }
  int64_t waits() const { return dev->counters().waits; }
  void ExpectClean() const {
    EXPECT_EQ(dev->num_races(), 0) << dev->Races();
    const FakeStreamOps::Counters c = dev->counters();
    EXPECT_EQ(c.misuses, 0) << dev->Errors();
    EXPECT_EQ(c.test_mistakes, 0) << dev->Errors();
    const absl::Status v = alloc->Validate();
    EXPECT_TRUE(v.ok()) << v;
  }

  std::shared_ptr<FakeStreamOps::Counters> final_counters =
      std::make_shared<FakeStreamOps::Counters>();
  uintptr_t base = 0;
  std::unique_ptr<Allocator> alloc;
  FakeStreamOps* dev = nullptr;
  std::map<void*, size_t> sizes;  // live: requested bytes
  absl::Status last_status;
};

// --- The fake device and its checker ---------------------------------------

TEST(FakeStreamOpsTest, OpsCompleteInOrderAfterTheirWaits) {
  FakeStreamOps dev;
  const FakeStreamOps::OpId a1 = dev.Launch(kA);
  const FakeStreamOps::OpId a2 = dev.Launch(kA);
  absl::StatusOr<StreamOps::Event> e = dev.RecordEvent(kA);
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE(dev.StreamWaitEvent(kB, *e).ok());
  const FakeStreamOps::OpId b1 = dev.Launch(kB);
  EXPECT_EQ(dev.Complete(kB, 5), 0);  // waits for a1, a2 and the marker
  EXPECT_EQ(dev.Complete(kA, 1), 1);
  EXPECT_TRUE(dev.IsDone(a1));
  EXPECT_FALSE(dev.IsDone(a2));
  EXPECT_FALSE(*dev.QueryEvent(*e));
  dev.Hold(kA);
  EXPECT_EQ(dev.CompleteAll(), 0);
  dev.Release(kA);
  EXPECT_EQ(dev.Complete(kA, 5), 2);  // a2 and the marker
  EXPECT_TRUE(*dev.QueryEvent(*e));
  EXPECT_EQ(dev.Complete(kB, 5), 1);
  EXPECT_TRUE(dev.IsDone(b1));
  EXPECT_EQ(dev.Pending(kA) + dev.Pending(kB), 0u);
  dev.ReleaseEvent(*e);
  const FakeStreamOps::Counters c = dev.counters();
  EXPECT_EQ(c.records, 1);
  EXPECT_EQ(c.waits, 1);
  EXPECT_EQ(c.queries, 2);
  EXPECT_EQ(c.live_events, 0);
  EXPECT_EQ(c.misuses, 0);
}

TEST(FakeStreamOpsTest, SynchronizeCompletesWhatTheEventNeedsUnlessHeld) {
  FakeStreamOps dev;
  dev.Launch(kA);
  absl::StatusOr<StreamOps::Event> ea = dev.RecordEvent(kA);
  ASSERT_TRUE(ea.ok());
  ASSERT_TRUE(dev.StreamWaitEvent(kB, *ea).ok());
  dev.Launch(kB);
  absl::StatusOr<StreamOps::Event> eb = dev.RecordEvent(kB);
  ASSERT_TRUE(eb.ok());
  const FakeStreamOps::OpId unrelated = dev.Launch(kC);
  dev.Hold(kA);
  const absl::Status held = dev.SynchronizeEvent(*eb);
  EXPECT_EQ(held.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(held.message().find("would deadlock: stream held"),
            std::string::npos);
  EXPECT_EQ(dev.Pending(kB), 2u);  // nothing completed
  dev.Release(kA);
  ASSERT_TRUE(dev.SynchronizeEvent(*eb).ok());
  EXPECT_TRUE(*dev.QueryEvent(*ea));
  EXPECT_EQ(dev.Pending(kB), 0u);
  EXPECT_FALSE(dev.IsDone(unrelated));  // not needed by the event
  EXPECT_EQ(dev.counters().would_deadlock, 1);
}

TEST(FakeStreamOpsTest, ReleasedEventsAndDestroyedStreamsAreMisuses) {
  FakeStreamOps dev;
  absl::StatusOr<StreamOps::Event> e = dev.RecordEvent(kA);
  ASSERT_TRUE(e.ok());
  dev.ReleaseEvent(*e);
  EXPECT_FALSE(dev.QueryEvent(*e).ok());
  EXPECT_FALSE(dev.StreamWaitEvent(kB, *e).ok());
  EXPECT_FALSE(dev.SynchronizeEvent(*e).ok());
  dev.ReleaseEvent(*e);
  EXPECT_EQ(dev.counters().misuses, 4);
  dev.DestroyStream(kA);
  EXPECT_FALSE(dev.RecordEvent(kA).ok());
  EXPECT_EQ(dev.counters().misuses, 5);
  EXPECT_NE(dev.Errors().find("destroyed after ForgetStream"),
            std::string::npos);
  dev.CreateStream(kA);  // the handle now names a new stream
  EXPECT_TRUE(dev.RecordEvent(kA).ok());
  EXPECT_EQ(dev.counters().misuses, 5);
  EXPECT_EQ(dev.counters().live_events, 1);
}

TEST(FakeStreamOpsTest, InjectedFailuresChangeNothing) {
  FakeStreamOps dev;
  dev.FailEveryNthCall(2);
  EXPECT_TRUE(dev.RecordEvent(kA).ok());
  EXPECT_EQ(dev.RecordEvent(kA).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(dev.Pending(kA), 1u);
  EXPECT_EQ(dev.counters().injected_failures, 1);
  EXPECT_EQ(dev.counters().live_events, 1);
}

TEST(StreamRaceCheckerTest, FlagsReuseNotOrderedAfterTheOldUses) {
  FakeStreamOps dev;
  int x;  // any address: nothing is touched
  const void* p = &x;
  dev.Allocated(p, 4096);
  EXPECT_TRUE(dev.Use(p, 4096, kA));
  dev.Freed(p);
  // B reuses it without any ordering: a race.
  dev.Allocated(p, 4096);
  EXPECT_FALSE(dev.Use(p, 4096, kB));
  dev.Freed(p);
  EXPECT_EQ(dev.num_races(), 1);
  EXPECT_NE(dev.Races().find("race:"), std::string::npos);
  // Completing A's work is not enough: nobody on the host learnt of it.
  dev.CompleteAll();
  dev.Allocated(p, 100);
  EXPECT_FALSE(dev.Use(p, 100, kC));
  dev.Freed(p);
  EXPECT_EQ(dev.num_races(), 2);
}

TEST(StreamRaceCheckerTest, WaitsQueriesAndSynchronizationsOrderReuse) {
  FakeStreamOps dev;
  int x[64];
  const void* p = x;
  const void* half = x + 32;
  dev.Allocated(p, 256);
  dev.Use(p, 256, kA);
  dev.Freed(p);
  // A device wait orders B after A.
  dev.Wait(kB, kA);
  dev.Allocated(p, 256);
  EXPECT_TRUE(dev.Use(p, 256, kB));
  dev.Freed(p);
  // C: the host saw an event on B complete, recorded after B's use.
  absl::StatusOr<StreamOps::Event> e = dev.RecordEvent(kB);
  ASSERT_TRUE(e.ok());
  dev.CompleteAll();
  ASSERT_TRUE(*dev.QueryEvent(*e));
  dev.Allocated(half, 64);  // part of the old range
  EXPECT_TRUE(dev.Use(half, 64, kC));
  dev.Freed(half);
  // D overlaps C's bytes only: ordered after A and B (host) but not C.
  dev.Allocated(p, 256);
  EXPECT_FALSE(dev.Use(p, 256, kD));
  dev.Freed(p);
  // After synchronizing an event recorded on C, E may use all of it.
  absl::StatusOr<StreamOps::Event> ec = dev.RecordEvent(kC);
  ASSERT_TRUE(ec.ok());
  ASSERT_TRUE(dev.SynchronizeEvent(*ec).ok());
  absl::StatusOr<StreamOps::Event> ed = dev.RecordEvent(kD);
  ASSERT_TRUE(ed.ok());
  ASSERT_TRUE(dev.SynchronizeEvent(*ed).ok());
  dev.Allocated(p, 256);
  EXPECT_TRUE(dev.Use(p, 256, S(5)));
  dev.Freed(p);
  EXPECT_EQ(dev.num_races(), 1) << dev.Races();
  EXPECT_EQ(dev.counters().test_mistakes, 0) << dev.Errors();
}

TEST(StreamRaceCheckerTest, FlagsOverlappingLiveLifetimesAndStrayUses) {
  FakeStreamOps dev;
  int x[64];
  dev.Allocated(x, 256);
  dev.Allocated(x + 8, 16);  // handed out twice
  EXPECT_EQ(dev.num_races(), 1);
  dev.Use(x + 60, 64, kA);  // runs past the allocation
  dev.Freed(x + 1);         // no lifetime starts there
  EXPECT_EQ(dev.counters().test_mistakes, 2);
}

// The checker is only worth something if it catches an allocator that
// ignores streams: plain AllocateRaw/DeallocateRaw with the memory used on
// two streams races at the first cross-stream reuse.
TEST(StreamRaceCheckerTest, CatchesAStreamUnawareAllocator) {
  Allocator plain(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                  64 * kMiB, "plain");
  FakeStreamOps dev;
  void* p = plain.AllocateRaw(256, kMiB);
  dev.Allocated(p, kMiB);
  dev.Use(p, kMiB, kA);
  dev.Freed(p);
  plain.DeallocateRaw(p);
  void* q = plain.AllocateRaw(256, kMiB);
  ASSERT_EQ(q, p);
  dev.Allocated(q, kMiB);
  EXPECT_FALSE(dev.Use(q, kMiB, kB));
  dev.Freed(q);
  plain.DeallocateRaw(q);
}

// --- Scenarios
// ----------------------------------------------------------------

// rapidsai/rmm#2489: a block freed on A while A's kernel is pending; B takes
// it after a wait and frees it on B; C must still be ordered after A's kernel
// (RMM re-keyed the block under a stale event, and C raced A). Every rule
// combination, with A's kernel held throughout.
TEST(AllocatorStreamsTest, Rmm2489ThirdStreamOrderedAfterTheFirst) {
  QuietLog quiet;
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    Rig r(Rules(rules), 4 * kMiB);  // one 2 MiB region, no second one
    r.dev->Hold(kA);
    void* p = r.AllocUse(kA, 2 * kMiB);
    ASSERT_NE(p, nullptr);
    r.Free(p, kA);
    const bool follow = rules & 1, internal = rules & 4;
    if (!internal) {
      // B can only know of A's work through a wait the caller made.
      r.dev->Wait(kB, kA);
      ASSERT_TRUE(r.alloc->NotifyStreamWait(kB, kA).ok());
    }
    void* q = r.AllocUse(kB, 2 * kMiB);
    if (internal) {
      EXPECT_EQ(q, p);  // after one inserted wait
      EXPECT_EQ(r.waits(), 1);
    } else if (follow) {
      EXPECT_EQ(q, p);  // the caller's wait covers it
      EXPECT_EQ(r.waits(), 0);
    } else {
      EXPECT_NE(q, p);  // a new region
    }
    if (q != nullptr) r.Free(q, kB);
    void* t = r.AllocUse(kC, 2 * kMiB);  // the checker orders it after A
    if (t != nullptr) r.Free(t, kC);
    r.ExpectClean();
    r.dev->Release(kA);
    r.dev->CompleteAll();
  }
}

// The same, with C told it waits for B (and nothing about A): C may take the
// block, since B's use came after B waited for A, and it is race-free.
TEST(AllocatorStreamsTest, Rmm2489ATransitiveWaitIsEnough) {
  QuietLog quiet;
  Rig r(Rules(1), 2 * kMiB);  // follow dependencies only
  r.dev->Hold(kA);
  void* p = r.AllocUse(kA, 2 * kMiB);
  r.Free(p, kA);
  r.dev->Wait(kB, kA);
  ASSERT_TRUE(r.alloc->NotifyStreamWait(kB, kA).ok());
  void* q = r.AllocUse(kB, 2 * kMiB);
  ASSERT_EQ(q, p);
  r.Free(q, kB);
  EXPECT_EQ(r.AllocUse(kC, 2 * kMiB), nullptr);  // C waits for nobody
  r.dev->Wait(kC, kB);
  ASSERT_TRUE(r.alloc->NotifyStreamWait(kC, kB).ok());
  void* t = r.AllocUse(kC, 2 * kMiB);
  EXPECT_EQ(t, p);
  r.Free(t, kC);
  EXPECT_EQ(r.waits(), 0);
  r.ExpectClean();
  r.dev->Release(kA);
}

// A stream forgotten (ForgetStream) and destroyed while memory freed on it
// is pending: no StreamOps call names it again, its memory is not handed out
// before its work completes, and then it is.
TEST(AllocatorStreamsTest, ForgottenStreamDestroyedWhileItsFreesArePending) {
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    QuietLog quiet;
    Rig r(Rules(rules), 2 * kMiB);
    r.dev->Hold(kA);
    void* p = r.AllocUse(kA, 2 * kMiB);
    r.Free(p, kA);
    ASSERT_TRUE(r.alloc->ForgetStream(kA).ok());
    EXPECT_LE(r.dev->counters().records, 1);  // its last event, if any
    r.dev->DestroyStream(kA);
    void* q = r.AllocUse(kB, 2 * kMiB);  // after a wait on A's last event
    if (q != nullptr) r.Free(q, kB);
    r.dev->Release(kA);  // the destroyed stream's work runs
    r.dev->CompleteAll();
    void* t = r.AllocUse(kC, 2 * kMiB);
    EXPECT_EQ(t, p) << "the forgotten stream's memory is never reclaimed";
    if (t != nullptr) r.Free(t, kC);
    r.ExpectClean();  // misuses == 0: nothing named A after ForgetStream
  }
}

// The forgotten stream's handle reused for a new stream: the new stream is
// not ordered after the old one's work, so it must not reuse its pending
// memory as if it were the same stream.
TEST(AllocatorStreamsTest, ForgottenHandleReusedIsANewStream) {
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    QuietLog quiet;
    Rig r(Rules(rules), 2 * kMiB);
    r.dev->Hold(kA);
    void* p = r.AllocUse(kA, 2 * kMiB);
    r.Free(p, kA);
    ASSERT_TRUE(r.alloc->ForgetStream(kA).ok());
    r.dev->DestroyStream(kA);
    r.dev->CreateStream(kA);
    void* q = r.AllocUse(kA, 2 * kMiB);
    if (!(rules & 4)) {
      EXPECT_EQ(q, nullptr) << "taken before the old A ran";
    }
    if (q != nullptr) r.Free(q, kA);
    r.ExpectClean();
    r.dev->ReleaseAll();
  }
}

// A server that makes and destroys a stream per request: ForgetStream frees
// the stream's slot for a later stream once nothing names its pending work,
// so the allocator's stream table stays bounded (it kept one entry per
// stream ever seen, and after 2^22 of them refused every stream call for
// good), while the race checker still orders every reuse after the old
// streams' work, under every rule combination.
TEST(AllocatorStreamsTest, ForgottenStreamsSlotsAreReused) {
  constexpr int kLifetimes = 300;
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    QuietLog quiet;
    Rig r(Rules(rules), 8 * kMiB);
    for (int i = 0; i < kLifetimes; ++i) {
      const StreamId s = i % 2 == 0 ? kA : kB;  // handles come back
      if (i >= 2) r.dev->CreateStream(s);
      void* p = r.AllocUse(s, kMiB);
      ASSERT_NE(p, nullptr) << i << ": " << r.last_status;
      r.Free(p, s);
      ASSERT_TRUE(r.alloc->ForgetStream(s).ok());
      r.dev->DestroyStream(s);
      // Some streams' work is still pending whenever slots are collected.
      if (i % 7 == 0) r.dev->CompleteAll();
    }
    r.ExpectClean();
    EXPECT_EQ(r.alloc->GetStreamStats().streams, kLifetimes + 1);
    // Collections run every 64 forgotten streams (kMinSlotCollection).
    EXPECT_LE(r.alloc->RecordMemoryMap().streams.size(), 2 * 64 + 2);
    r.dev->CompleteAll();
  }
}

// The same without StreamOps and at scale: a stream named once
// (NotifyStreamWait) and forgotten, a million times over.
TEST(AllocatorStreamsTest, AMillionStreamLifetimes) {
  QuietLog quiet;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30), 64 * kMiB,
              "stream-lifetimes");
  for (int i = 0; i < 1000000; ++i) {
    ASSERT_TRUE(a.NotifyStreamWait(kA, kImplicitStream).ok()) << i;
    ASSERT_TRUE(a.ForgetStream(kA).ok());
  }
  absl::StatusOr<void*> p = a.AllocateOnStream(kA, kMiB);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(a.DeallocateOnStream(*p, kA).ok());
  EXPECT_EQ(a.GetStreamStats().streams, 1000000 + 2);
  EXPECT_LE(a.RecordMemoryMap().streams.size(), 2 * 64 + 2);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// onnxruntime#29351: memory tagged by a stream that never runs again must
// come back once its work is done (there a dummy stream's tag pinned about
// 2 GiB per run). D frees and is never used again; E gets the memory under
// every rule combination (a query, a wait, or the out-of-memory
// synchronization), within the limit.
TEST(AllocatorStreamsTest, StaleFenceIsReclaimedOnceItsWorkCompletes) {
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    Rig r(Rules(rules), 2 * kMiB);
    void* p = r.AllocUse(kD, 2 * kMiB);
    r.Free(p, kD);
    r.dev->CompleteAll();
    for (int i = 0; i < 3; ++i) {
      void* q = r.AllocUse(kB, 2 * kMiB);
      ASSERT_EQ(q, p) << i;
      r.Free(q, kB);
      r.dev->CompleteAll();
    }
    EXPECT_EQ(r.alloc->GetStreamStats().bytes_pending,
              static_cast<int64_t>(2 * kMiB));  // B's last free
    r.ExpectClean();
  }
}

// While the stale stream's work is still running, nobody gets its memory
// without an ordering; the allocation fails cleanly (no growth room).
TEST(AllocatorStreamsTest, StaleFenceStillRunningFailsCleanly) {
  QuietLog quiet;
  for (int rules : {0, 1, 2, 3}) {  // no inserted waits
    SCOPED_TRACE(RulesName(rules));
    Rig r(Rules(rules), 2 * kMiB);
    r.dev->Hold(kD);
    void* p = r.AllocUse(kD, 2 * kMiB);
    r.Free(p, kD);
    absl::StatusOr<void*> q = r.alloc->AllocateOnStream(kB, 2 * kMiB);
    EXPECT_EQ(q.status().code(), absl::StatusCode::kResourceExhausted);
    r.ExpectClean();
    r.dev->Release(kD);
  }
}

// onnxruntime PR #12913: a split remainder lost its tag. B takes a small
// piece of A's pending block (it waits for A); the remainder keeps A's fence,
// so C, which waits for nobody, gets none of it until A's work is done.
TEST(AllocatorStreamsTest, SplitRemainderKeepsItsFence) {
  QuietLog quiet;
  Rig r(Rules(3), 4 * kMiB);  // follow + opportunistic, no inserted waits
  void* big = r.AllocUse(kA, 4 * kMiB);
  ASSERT_NE(big, nullptr);
  r.dev->Hold(kA);
  r.Use(big, kA);
  r.Free(big, kA);
  r.dev->Wait(kB, kA);
  ASSERT_TRUE(r.alloc->NotifyStreamWait(kB, kA).ok());
  void* piece = r.AllocUse(kB, 256 * kKiB);
  ASSERT_NE(piece, nullptr);
  EXPECT_TRUE(r.Inside(piece, big, 4 * kMiB));
  for (size_t n : {size_t{256}, 64 * kKiB, kMiB, 3 * kMiB}) {
    EXPECT_EQ(r.AllocUse(kC, n), nullptr) << n << " bytes cut from A's block";
  }
  r.dev->Release(kA);
  r.dev->CompleteAll();
  void* later = r.AllocUse(kC, kMiB);  // A's work is done (a query)
  ASSERT_NE(later, nullptr);
  EXPECT_TRUE(r.Inside(later, big, 4 * kMiB));
  r.ExpectClean();
}

// The same with inserted waits: C's piece of the remainder comes with its
// own wait on A (B's wait does not order C).
TEST(AllocatorStreamsTest, SplitRemainderNeedsItsOwnWait) {
  Rig r(Rules(7), 4 * kMiB);
  void* big = r.AllocUse(kA, 4 * kMiB);
  r.dev->Hold(kA);
  r.Free(big, kA);
  void* piece = r.AllocUse(kB, 256 * kKiB);
  EXPECT_TRUE(r.Inside(piece, big, 4 * kMiB));
  EXPECT_EQ(r.waits(), 1);
  void* other = r.AllocUse(kC, kMiB);
  EXPECT_TRUE(r.Inside(other, big, 4 * kMiB));
  EXPECT_EQ(r.waits(), 2);
  EXPECT_EQ(r.dev->counters().records, 1);  // one event covers both
  r.ExpectClean();
  r.dev->Release(kA);
}

// PyTorch's Tensor.record_stream: memory A frees that B also used is not
// given to a third stream before B's use is done (or C waits for it).
TEST(AllocatorStreamsTest, RecordStreamUseDelaysReuseByAThirdStream) {
  QuietLog quiet;
  Rig r(Rules(3), 2 * kMiB);  // no inserted waits: C cannot wait its way in
  void* p = r.AllocUse(kA, kMiB);
  ASSERT_TRUE(r.alloc->RecordStreamUse(p, kB).ok());
  r.dev->Wait(kB, kA);  // B may only use A's memory after A allocated it
  r.dev->Hold(kB);
  r.Use(p, kB);
  r.dev->CompleteAll();  // A's own work is done, B's is held
  r.Free(p, kA);
  // C takes whatever else there is, never p.
  std::vector<void*> c_blocks;
  for (void* q; (q = r.AllocUse(kC, kMiB)) != nullptr;) {
    EXPECT_NE(q, p) << "handed to C while B still uses it";
    c_blocks.push_back(q);
    ASSERT_LT(c_blocks.size(), 8u);
  }
  EXPECT_EQ(r.last_status.code(), absl::StatusCode::kResourceExhausted);
  // Told that C waits for A: still not enough.
  r.dev->Wait(kC, kA);
  ASSERT_TRUE(r.alloc->NotifyStreamWait(kC, kA).ok());
  EXPECT_EQ(r.AllocUse(kC, kMiB), nullptr);
  r.dev->Release(kB);
  r.dev->CompleteAll();
  void* q = r.AllocUse(kC, kMiB);  // B's use is done: found by a query
  EXPECT_EQ(q, p);
  if (q != nullptr) c_blocks.push_back(q);
  for (void* b : c_blocks) r.Free(b, kC);
  r.ExpectClean();
}

// With inserted waits C takes the block at once, waiting for A and for B's
// use (the event on A is recorded lazily, at C's request, so it is not known
// complete yet: one wait per stream of the fence).
TEST(AllocatorStreamsTest, RecordStreamUseThirdStreamWaitsForTheUser) {
  Rig r(Rules(7), 2 * kMiB);
  void* p = r.AllocUse(kA, 2 * kMiB);
  ASSERT_TRUE(r.alloc->RecordStreamUse(p, kB).ok());
  r.dev->Wait(kB, kA);
  r.dev->Hold(kB);
  r.Use(p, kB);
  r.dev->CompleteAll();
  r.Free(p, kA);
  void* q = r.AllocUse(kC, 2 * kMiB);
  EXPECT_EQ(q, p);
  EXPECT_EQ(r.waits(), 2);
  r.ExpectClean();
  r.dev->Release(kB);
}

// Waits are inserted only when needed: none for same-stream reuse, none
// when the caller already made the wait (NotifyStreamWait), one per
// producer's batch of frees otherwise.
TEST(AllocatorStreamsTest, WaitsAreInsertedOnlyWhenNeeded) {
  Rig r(Rules(7), 4 * kMiB);
  r.dev->Hold(kA);
  void* p1 = r.AllocUse(kA, 2 * kMiB);  // the first region: 2 MiB
  void* p2 = r.AllocUse(kA, 2 * kMiB);  // the second (limit reached)
  ASSERT_NE(p2, nullptr);
  r.Free(p1, kA);
  EXPECT_EQ(r.AllocUse(kA, 2 * kMiB), p1);  // same stream: no wait
  EXPECT_EQ(r.waits(), 0);
  r.Free(p1, kA);
  r.dev->Wait(kB, kA);
  ASSERT_TRUE(r.alloc->NotifyStreamWait(kB, kA).ok());
  EXPECT_EQ(r.AllocUse(kB, 2 * kMiB), p1);  // the caller's wait covers it
  EXPECT_EQ(r.waits(), 0);
  r.Free(p1, kB);
  r.Free(p2, kA);  // after the caller's wait
  // C: one wait on B (p1) ...
  void* c1 = r.AllocUse(kC, 2 * kMiB);
  EXPECT_EQ(r.waits(), 1);
  // ... and one on A (p2).
  void* c2 = r.AllocUse(kC, 2 * kMiB);
  EXPECT_EQ(r.waits(), 2);
  EXPECT_EQ(std::set<void*>({c1, c2}), std::set<void*>({p1, p2}));
  r.Free(c1, kC);
  r.Free(c2, kC);
  // Two frees on C, one batch: D needs a single wait for both.
  void* d1 = r.AllocUse(kD, 2 * kMiB);
  void* d2 = r.AllocUse(kD, 2 * kMiB);
  EXPECT_EQ(std::set<void*>({d1, d2}), std::set<void*>({p1, p2}));
  EXPECT_EQ(r.waits(), 3);
  r.ExpectClean();
  r.dev->Release(kA);
}

// Same-stream reuse makes no StreamOps call at all, with four streams each
// recycling their own memory while none of their work completes. (Setting
// up may make a few: leaving single-stream mode fences all free memory with
// one implicit-stream point, never-used memory included.)
TEST(AllocatorStreamsTest, SameStreamReuseMakesNoStreamOpsCalls) {
  Rig r(Rules(7));
  const std::vector<StreamId> streams = {kImplicitStream, kA, kB, kC};
  std::map<StreamId, std::vector<void*>> mine;
  std::mt19937_64 rng(5);
  for (StreamId s : streams) {
    for (int i = 0; i < 8; ++i) {
      mine[s].push_back(r.AllocUse(s, 1 * kKiB + rng() % (512 * kKiB)));
    }
  }
  const int64_t before = r.dev->counters().calls();
  for (int i = 0; i < 2000; ++i) {
    const StreamId s = streams[rng() % streams.size()];
    std::vector<void*>& v = mine[s];
    const size_t k = rng() % v.size();
    const size_t n = r.sizes.at(v[k]);
    r.Free(v[k], s);
    v[k] = r.AllocUse(s, n);
    ASSERT_NE(v[k], nullptr) << i;
  }
  EXPECT_EQ(r.dev->counters().calls(), before);
  r.ExpectClean();
}

// One stream: exactly the placements of the plain AllocateRaw/
// DeallocateRaw calls on an allocator without streams, and no StreamOps call.
void ExpectPlainPlacements(StreamId stream) {
  Rig r(Rules(7));
  auto sub = std::make_unique<VirtualSubAllocator>(size_t{1} << 30);
  const auto plain_base = reinterpret_cast<uintptr_t>(sub->base());
  Allocator plain(std::move(sub), 64 * kMiB, "plain", Rules(7));
  std::mt19937_64 rng(7);
  std::vector<void*> a, b;
  for (int i = 0; i < 4000; ++i) {
    if (a.empty() || (a.size() < 200 && rng() % 2 == 0)) {
      // Mostly small, some up to 4 MiB.
      const size_t n =
          rng() % 8 == 0 ? 256 + rng() % (4 * kMiB) : 256 + rng() % (64 * kKiB);
      void* p = r.AllocUse(stream, n);
      void* q = plain.AllocateRaw(256, n);
      ASSERT_NE(p, nullptr);
      ASSERT_NE(q, nullptr);
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) - r.base,
                reinterpret_cast<uintptr_t>(q) - plain_base)
          << "step " << i << ", " << n << " bytes";
      a.push_back(p);
      b.push_back(q);
    } else {
      const size_t k = rng() % a.size();
      r.Free(a[k], stream);
      plain.DeallocateRaw(b[k]);
      a.erase(a.begin() + static_cast<std::ptrdiff_t>(k));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  EXPECT_EQ(r.dev->counters().calls(), 0);
  r.ExpectClean();
}

TEST(AllocatorStreamsTest, ImplicitStreamPlacesAsThePlainCalls) {
  ExpectPlainPlacements(kImplicitStream);
}

// The same for a single stream that is not kImplicitStream (a PyTorch or RMM
// program that never leaves its one non-default stream): the header promises
// "with one stream nothing changes: TF's placement, no extra work".
TEST(AllocatorStreamsTest, OneExplicitStreamPlacesAsThePlainCalls) {
  ExpectPlainPlacements(kA);
}

// The smallest case of the above: a block freed on the only stream does not
// coalesce with the never-used rest of its region (a pending fence next to a
// clean chunk defers the merge), so a larger request grows the pool where
// the plain calls reuse the merged chunk.
TEST(AllocatorStreamsTest, OneExplicitStreamFreeCoalescesWithCleanMemory) {
  for (StreamId s : {kImplicitStream, kA}) {
    SCOPED_TRACE(s == kImplicitStream ? "implicit stream" : "stream A");
    Rig r(Rules(7));
    void* p1 = r.AllocUse(s, kMiB);  // the first region: 2 MiB
    r.Free(p1, s);
    void* p2 = r.AllocUse(s, 1536 * kKiB);
    EXPECT_EQ(p2, p1);
    EXPECT_EQ(*r.alloc->GetStats()->pool_bytes,
              static_cast<int64_t>(2 * kMiB));  // no growth
    EXPECT_EQ(r.dev->counters().calls(), 0);
    r.ExpectClean();
  }
}

// Events the allocator records are released once it no longer needs them:
// memory handed back and forth between two streams whose work completes
// does not accumulate live events, under every rule combination.
TEST(AllocatorStreamsTest, LiveEventsStayBounded) {
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    Rig r(Rules(rules), 2 * kMiB);
    for (int i = 0; i < 200; ++i) {
      const StreamId s = i % 2 ? kB : kA;
      void* p = r.AllocUse(s, 2 * kMiB);
      ASSERT_NE(p, nullptr) << i;
      r.Free(p, s);
      r.dev->CompleteAll();
    }
    EXPECT_LE(r.dev->counters().max_live_events, 4);
    r.ExpectClean();
    r.alloc.reset();
    EXPECT_EQ(r.final_counters->live_events, 0) << "events leaked at exit";
  }
}

// PyTorch's record_stream on a side stream that is then destroyed (after
// ForgetStream) before the tensor is freed: once all work has completed, the
// memory must be reusable and releasable again.
TEST(AllocatorStreamsTest, ForgottenRecordedUserDoesNotPinMemory) {
  for (int rules = 0; rules < 8; ++rules) {
    SCOPED_TRACE(RulesName(rules));
    QuietLog quiet;
    Rig r(Rules(rules), 2 * kMiB);
    void* p = r.AllocUse(kA, 2 * kMiB);
    ASSERT_TRUE(r.alloc->RecordStreamUse(p, kB).ok());
    r.dev->Wait(kB, kA);
    r.Use(p, kB);
    ASSERT_TRUE(r.alloc->ForgetStream(kB).ok());
    r.dev->DestroyStream(kB);
    r.Free(p, kA);
    r.dev->CompleteAll();
    void* q = r.AllocUse(kC, 2 * kMiB);
    EXPECT_EQ(q, p) << "pinned: " << r.last_status;
    if (q != nullptr) r.Free(q, kC);
    r.dev->CompleteAll();
    EXPECT_EQ(r.alloc->ReleaseFreeRegions(), 2 * kMiB);
    r.ExpectClean();
  }
}

// What waits on streams is visible: GetStreamStats, the memory dump (each
// pending chunk names its streams; per-stream bytes) and its JSON, which
// reads back to the same; once the work completes and the allocator learns
// it, nothing is pending.
TEST(AllocatorStreamsTest, PendingMemoryShowsInStatsAndDumps) {
  Rig r(Rules(7), 8 * kMiB);
  void* a = r.AllocUse(kA, 2 * kMiB);  // the first region: 2 MiB
  r.Free(a, kA);                       // pending on A
  const Allocator::StreamStats s = r.alloc->GetStreamStats();
  EXPECT_EQ(s.streams, 2);  // the implicit stream and A
  EXPECT_EQ(s.bytes_pending, static_cast<int64_t>(2 * kMiB));
  MemoryDump d = r.alloc->RecordMemoryMap();
  ASSERT_EQ(d.chunks.size(), 1u);
  EXPECT_EQ(d.chunks[0].pending_streams,
            std::vector<uint64_t>{reinterpret_cast<uintptr_t>(kA)});
  ASSERT_EQ(d.streams.size(), 2u);
  EXPECT_EQ(d.streams[1].stream, reinterpret_cast<uintptr_t>(kA));
  EXPECT_EQ(d.streams[1].bytes_pending, static_cast<int64_t>(2 * kMiB));
  EXPECT_EQ(d.streams[0].bytes_pending, 0);
  const std::string json = MemoryDumpToJson(d);
  absl::StatusOr<MemoryDump> back = MemoryDumpFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(MemoryDumpToJson(*back), json);
  EXPECT_EQ(back->chunks[0].pending_streams, d.chunks[0].pending_streams);
  EXPECT_EQ(back->stream_stats.bytes_pending, s.bytes_pending);
  // B takes it after a wait (internal dependencies): one event, one wait.
  void* b = r.AllocUse(kB, 2 * kMiB);
  EXPECT_EQ(b, a);
  const Allocator::StreamStats t = r.alloc->GetStreamStats();
  EXPECT_EQ(t.events_recorded, 1);
  EXPECT_EQ(t.waits_inserted, 1);
  EXPECT_EQ(t.bytes_pending, 0);
  r.Free(b, kB);
  r.dev->CompleteAll();
  // The next cross-stream look polls: complete, nothing pending.
  void* c = r.AllocUse(kA, 2 * kMiB);
  EXPECT_EQ(c, a);
  r.Free(c, kA);
  r.ExpectClean();
}

// A dump of a program that used one stream has no stream fields, and a
// dump JSON with a pending list on an in-use chunk is refused.
TEST(AllocatorStreamsTest, OneStreamDumpsHaveNoStreamFields) {
  Rig r(Rules(7), 8 * kMiB);
  void* a = r.AllocUse(kImplicitStream, kMiB);
  const std::string json = MemoryDumpToJson(r.alloc->RecordMemoryMap());
  for (const char* key :
       {"\"streams\":", "\"stream_stats\":", "\"pending_streams\":"}) {
    EXPECT_EQ(json.find(key), std::string::npos) << key;
  }
  std::string bad = json;
  const std::string key = "\"in_use\":true";
  ASSERT_NE(bad.find(key), std::string::npos);
  bad.insert(bad.find(key), "\"pending_streams\":[1],");
  absl::StatusOr<MemoryDump> refused = MemoryDumpFromJson(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("pending_streams"),
            std::string::npos)
      << refused.status();
  r.Free(a, kImplicitStream);
}

// --- Randomized schedules
// ------------------------------------------------------

struct Live {
  void* p;
  size_t n;
  StreamId owner;
  std::vector<StreamId> users;  // RecordStreamUse
};

struct ScheduleConfig {
  int num_streams;
  int rules;
  uint64_t seed;
  int steps;
  int fail_every = 0;  // FakeStreamOps::FailEveryNthCall
};

// The pool options a schedule runs under (seed % kNumPoolVariants): the
// paths that give regions back, split differently or grow differently must
// respect fences too.
constexpr int kNumPoolVariants = 5;
Allocator::Options PoolVariant(int rules, int variant, std::string* name) {
  Allocator::Options o = Rules(rules);
  switch (variant) {
    case 1:
      *name = "garbage_collection+release_before_extend+threshold";
      o.garbage_collection = true;
      o.release_before_extend = true;
      o.pool_release_threshold = 0.5;
      break;
    case 2:
      *name = "max_split_bytes+min_split_remainder";
      o.max_split_bytes = kMiB;
      o.min_split_remainder_bytes = 64 * kKiB;
      break;
    case 3:
      *name = "extend_by_missing_tail+same_as_requested";
      o.extend_by_missing_tail = true;
      o.growth_policy = GrowthPolicy::kSameAsRequested;
      break;
    case 4:
      *name = "huge_allocation_bytes=2MiB";
      o.huge_allocation_bytes = 2 * kMiB;
      break;
    default:
      *name = "defaults";
      break;
  }
  return o;
}

// Random allocations (256 B .. 4 MiB, some over-aligned, some through
// AllocateRaw on the implicit stream; each used at once on its stream),
// frees on the owner or on a stream made to wait for it, uses on other
// streams declared by RecordStreamUse (after the user waits for the owner),
// waits the test makes and reports, holds and releases, partial progress,
// ReleaseFreeRegions, and streams forgotten (then retired, or their handle
// reused for a new stream). Validate() after every step; no races, no
// misuses, and at the end every byte can be given back.
void RunSchedule(const ScheduleConfig& cfg) {
  std::string pool;
  const Allocator::Options options = PoolVariant(
      cfg.rules, static_cast<int>(cfg.seed % kNumPoolVariants), &pool);
  const std::string where =
      absl::StrCat(cfg.num_streams, " streams, ", RulesName(cfg.rules), ", ",
                   pool, ", seed ", cfg.seed, ", fail every ", cfg.fail_every);
  SCOPED_TRACE(where);
  Rig r(options, 32 * kMiB);
  r.dev->FailEveryNthCall(cfg.fail_every);
  std::mt19937_64 rng(cfg.seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<StreamId> streams;
  uintptr_t next_handle = 0x100;
  for (int i = 0; i < cfg.num_streams; ++i) {
    streams.push_back(i == 0 ? kImplicitStream : S(next_handle++));
  }
  // Leave single-stream mode at once (see
  // ReleasedRegionFromSingleStreamModeIsOrdered for why).
  ASSERT_TRUE(r.alloc->NotifyStreamWait(streams[1], kImplicitStream).ok());
  std::vector<Live> live;
  auto busy = [&](StreamId s) {
    for (const Live& b : live) {
      if (b.owner == s ||
          std::find(b.users.begin(), b.users.end(), s) != b.users.end()) {
        return true;
      }
    }
    return false;
  };
  int64_t allocations = 0, refused = 0;
  bool pinned_by_failure = false;
  // The steps so far, printed when one fails.
  std::vector<std::string> journal;
  auto recent = [&] {
    std::string out;
    const size_t from = journal.size() > 40 ? journal.size() - 40 : 0;
    for (size_t i = from; i < journal.size(); ++i) {
      out += absl::StrCat("  ", i, ": ", journal[i], "\n");
    }
    return out;
  };
  for (int step = 0; step < cfg.steps; ++step) {
    const int what = static_cast<int>(rng() % 100);
    if (what < 30) {
      StreamId s = streams[pick(streams.size())];
      // Log-uniform over 256 B .. 4 MiB.
      const int shift = 8 + static_cast<int>(rng() % 15);
      const size_t n = std::min(
          (size_t{1} << shift) + rng() % (size_t{1} << shift), 4 * kMiB);
      const size_t alignment =
          rng() % 8 == 0 ? size_t{512} << (rng() % 8) : kMinAllocationSize;
      absl::StatusOr<void*> p;
      if (rng() % 8 == 0) {
        s = kImplicitStream;  // the TF-style call
        void* raw = r.alloc->AllocateRaw(alignment, n);
        p = raw != nullptr ? absl::StatusOr<void*>(raw)
                           : absl::ResourceExhaustedError("AllocateRaw");
      } else {
        p = r.alloc->AllocateOnStream(s, n, alignment);
      }
      ++allocations;
      if (!p.ok()) {
        ++refused;
        journal.push_back(absl::StrFormat("alloc +%d on %p refused", n, s));
        const absl::StatusCode code = p.status().code();
        ASSERT_TRUE(code == absl::StatusCode::kResourceExhausted ||
                    (cfg.fail_every > 0 && code == absl::StatusCode::kInternal))
            << "step " << step << ": " << p.status();
      } else {
        ASSERT_EQ(reinterpret_cast<uintptr_t>(*p) % alignment, 0u);
        ASSERT_EQ(r.alloc->RequestedSize(*p), n);
        journal.push_back(absl::StrFormat("alloc %p +%d (align %d) on %p", *p,
                                          n, alignment, s));
        r.dev->Allocated(*p, n);
        r.dev->Use(*p, n, s);
        live.push_back(Live{*p, n, s, {}});
      }
    } else if (what < 52) {
      if (live.empty()) continue;
      const size_t k = pick(live.size());
      StreamId on = live[k].owner;
      if (rng() % 4 == 0) {
        // cudaFreeAsync on another stream, ordered after the owner's uses
        // (the declared users' are the allocator's to track).
        on = streams[pick(streams.size())];
        r.dev->Wait(on, live[k].owner);
      }
      journal.push_back(absl::StrFormat("free %p (owner %p) on %p", live[k].p,
                                        live[k].owner, on));
      r.dev->Freed(live[k].p);
      if (on == kImplicitStream && rng() % 2 == 0) {
        r.alloc->DeallocateRaw(live[k].p);
      } else {
        ASSERT_TRUE(r.alloc->DeallocateOnStream(live[k].p, on).ok());
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else if (what < 60) {
      if (live.empty()) continue;
      // Another stream uses a live block: declared, and ordered after the
      // allocation (the user's side of the contract).
      Live& b = live[pick(live.size())];
      const StreamId u = streams[pick(streams.size())];
      ASSERT_TRUE(r.alloc->RecordStreamUse(b.p, u).ok());
      journal.push_back(absl::StrFormat("record+use %p by %p", b.p, u));
      if (u != b.owner) {
        r.dev->Wait(u, b.owner);
        if (rng() % 2) {
          ASSERT_TRUE(r.alloc->NotifyStreamWait(u, b.owner).ok());
        }
        b.users.push_back(u);
      }
      r.dev->Use(b.p, b.n, u);
    } else if (what < 66) {
      const StreamId c = streams[pick(streams.size())];
      const StreamId p = streams[pick(streams.size())];
      journal.push_back(absl::StrFormat("wait %p for %p", c, p));
      r.dev->Wait(c, p);
      ASSERT_TRUE(r.alloc->NotifyStreamWait(c, p).ok());
    } else if (what < 71) {
      const StreamId s = streams[pick(streams.size())];
      const bool hold = rng() % 3 == 0;
      journal.push_back(absl::StrFormat("%s %p", hold ? "hold" : "release", s));
      if (hold) {
        r.dev->Hold(s);
      } else {
        r.dev->Release(s);
      }
    } else if (what < 73) {
      // Forget a stream with nothing live (never the implicit one).
      const size_t k = 1 + pick(streams.size() - 1);
      if (busy(streams[k])) continue;
      const absl::Status forgot = r.alloc->ForgetStream(streams[k]);
      ASSERT_TRUE(forgot.ok() || cfg.fail_every > 0) << forgot;
      // Its last event failed: its pending frees can never be learnt (the
      // allocator keeps them, safely, for good).
      if (!forgot.ok()) pinned_by_failure = true;
      r.dev->DestroyStream(streams[k]);
      const bool retire = rng() % 2;
      journal.push_back(absl::StrFormat("forget %p, %s", streams[k],
                                        retire ? "retired" : "handle reused"));
      if (retire) {
        streams[k] = S(next_handle++);  // never named again
      } else {
        r.dev->CreateStream(streams[k]);  // the handle names a new stream
      }
    } else if (what < 74) {
      journal.push_back("release all");
      r.dev->ReleaseAll();
    } else if (what < 75) {
      journal.push_back("ReleaseFreeRegions");
      r.alloc->ReleaseFreeRegions();  // PyTorch's empty_cache
    } else if (what < 97) {
      const StreamId s = streams[pick(streams.size())];
      const int n = 1 + static_cast<int>(rng() % 8);
      journal.push_back(absl::StrFormat("complete %d on %p: %d", n, s,
                                        r.dev->Complete(s, n)));
    } else {
      journal.push_back(
          absl::StrFormat("complete all: %d", r.dev->CompleteAll()));
    }
    const absl::Status v = r.alloc->Validate();
    ASSERT_TRUE(v.ok()) << "step " << step << ": " << v << "\n" << recent();
    ASSERT_EQ(r.dev->num_races(), 0) << "step " << step << "\n"
                                     << r.dev->Races() << "after\n"
                                     << recent();
  }
  // Everything done and freed: every region can be given back.
  r.dev->FailEveryNthCall(0);
  r.dev->ReleaseAll();
  for (const Live& b : live) r.Free(b.p, b.owner);
  r.dev->CompleteAll();
  r.alloc->ReleaseFreeRegions();
  if (!pinned_by_failure) {
    EXPECT_EQ(*r.alloc->GetStats()->pool_bytes, 0)
        << "memory pinned after all work completed";
  }
  EXPECT_GT(allocations, refused);
  r.ExpectClean();
  r.alloc.reset();
  EXPECT_EQ(r.final_counters->live_events, 0);
}

class RandomScheduleTest
    : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(RandomScheduleTest, RaceFree) {
  QuietLog quiet;
  const auto [num_streams, rules] = GetParam();
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    RunSchedule({num_streams, rules, seed * 7919 + num_streams * 8 + rules,
                 /*steps=*/500});
    if (HasFatalFailure()) return;
  }
}

// The same with every few StreamOps calls failing (3 and 6 streams suffice).
class FailingStreamOpsScheduleTest
    : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(FailingStreamOpsScheduleTest, RaceFree) {
  QuietLog quiet;
  const auto [num_streams, rules] = GetParam();
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    RunSchedule({num_streams, rules, seed * 104729 + rules, /*steps=*/500,
                 /*fail_every=*/static_cast<int>(3 + seed)});
    if (HasFatalFailure()) return;
  }
}

std::string ScheduleName(
    const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return absl::StrCat("streams", std::get<0>(info.param), "_rules",
                      std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllRules, RandomScheduleTest,
                         ::testing::Combine(::testing::Range(2, 9),
                                            ::testing::Range(0, 8)),
                         ScheduleName);
INSTANTIATE_TEST_SUITE_P(AllRules, FailingStreamOpsScheduleTest,
                         ::testing::Combine(::testing::Values(3, 6),
                                            ::testing::Range(0, 8)),
                         ScheduleName);

// --- A thread per stream
// ---------------------------------------------------------

// One allocator, a thread per stream (run under TSan: label concurrency).
// Each thread allocates, uses and frees on its own stream, makes its stream
// wait for others (and says so), advances its stream and sometimes the whole
// device; the allocator's lock and the fake's are all that order them.
class ThreadPerStreamTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadPerStreamTest, RaceFree) {
  QuietLog quiet;
  const int rules = GetParam();
  Rig r(Rules(rules), 16 * kMiB);
  constexpr int kThreads = 4;
  std::vector<StreamId> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(S(0x10 + t));
  std::atomic<int64_t> bad_status{0};
  // NotifyStreamWait's contract: no free on the producer between the wait
  // and the call. Each thread's frees and its wait-and-notify pairs take
  // this lock, so a wait covers exactly the frees the notify declares.
  std::mutex order;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const StreamId s = streams[t];
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 31 + rules);
      std::vector<std::pair<void*, size_t>> mine;
      for (int i = 0; i < 300; ++i) {
        const int what = static_cast<int>(rng() % 100);
        if (what < 40 || mine.empty()) {
          const size_t n = 256 + rng() % (512 * kKiB);
          absl::StatusOr<void*> p = r.alloc->AllocateOnStream(s, n);
          if (!p.ok()) {
            if (p.status().code() != absl::StatusCode::kResourceExhausted) {
              ++bad_status;
            }
            continue;
          }
          r.dev->Allocated(*p, n);
          r.dev->Use(*p, n, s);
          mine.emplace_back(*p, n);
        } else if (what < 75) {
          const size_t k = rng() % mine.size();
          {
            std::lock_guard<std::mutex> lock(order);
            r.dev->Freed(mine[k].first);
            if (!r.alloc->DeallocateOnStream(mine[k].first, s).ok()) {
              ++bad_status;
            }
          }
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        } else if (what < 80) {
          const StreamId p = streams[rng() % kThreads];
          std::lock_guard<std::mutex> lock(order);
          r.dev->Wait(s, p);
          if (!r.alloc->NotifyStreamWait(s, p).ok()) ++bad_status;
        } else if (what < 97) {
          r.dev->Complete(s, 1 + static_cast<int>(rng() % 4));
        } else {
          r.dev->CompleteAll();
        }
        if (i % 32 == 0 && !r.alloc->Validate().ok()) ++bad_status;
      }
      for (const auto& [p, n] : mine) {
        std::lock_guard<std::mutex> lock(order);
        r.dev->Freed(p);
        if (!r.alloc->DeallocateOnStream(p, s).ok()) ++bad_status;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad_status.load(), 0);
  EXPECT_GT(r.dev->uses_checked(), 100);
  r.dev->CompleteAll();
  r.alloc->ReleaseFreeRegions();
  EXPECT_EQ(*r.alloc->GetStats()->pool_bytes, 0);
  r.ExpectClean();
}

INSTANTIATE_TEST_SUITE_P(AllRules, ThreadPerStreamTest, ::testing::Range(0, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return absl::StrCat("rules", info.param);
                         });

}  // namespace
}  // namespace bfc
