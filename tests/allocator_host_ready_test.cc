// File: tests/allocator_host_ready_test.cc
// -----------------------------------------------------------------------------
//
// AllocationAttributes::host_ready (memory the host or any stream uses at
// once, the CCCL resources' synchronous allocate) and regions grown next to
// memory a stream still uses, on the simulated device and its race checker
// (testing/fake_stream_ops.h). From an adversarial review: each test failed
// at the commit before its fix.
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/fake_stream_ops.h"
#include "testing/quiet_log.h"

namespace bfc {
namespace {

using testing::FakeStreamOps;
constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
StreamId S(uintptr_t i) { return reinterpret_cast<StreamId>(i); }
const StreamId kA = S(1), kB = S(2);
// The host, to the fake: a stream the allocator never hears of. An op
// launched on it is ordered after what the host learnt (SynchronizeEvent).
const StreamId kHost = S(999);

// Every reuse rule on (internal dependencies as asked), no retry wait.
Allocator::Options Rules(bool internal_dependencies = true) {
  Allocator::Options o;
  o.reuse_follow_dependencies = true;
  o.reuse_allow_opportunistic = true;
  o.reuse_allow_internal_dependencies = internal_dependencies;
  o.allow_retry_on_failure = false;
  return o;
}

// An allocator on the simulated device.
struct Rig {
  explicit Rig(const Allocator::Options& o = Rules()) {
    auto sub = std::make_unique<VirtualSubAllocator>(size_t{1} << 30);
    alloc =
        std::make_unique<Allocator>(std::move(sub), 64 * kMiB, "host-ready", o);
    auto ops = std::make_unique<FakeStreamOps>();
    dev = ops.get();
    EXPECT_TRUE(alloc->SetStreamOps(std::move(ops)).ok());
  }
  std::unique_ptr<Allocator> alloc;
  FakeStreamOps* dev = nullptr;
};

// 1 MiB used on stream A and freed there, the implicit stream made to wait
// for A: the memory is safe for the implicit stream's work, not yet for the
// host.
void FreeOnAWaitedForByTheImplicitStream(Rig& r) {
  absl::StatusOr<void*> p = r.alloc->AllocateOnStream(kA, 1 * kMiB);
  ASSERT_TRUE(p.ok());
  r.dev->Allocated(*p, kMiB);
  r.dev->Use(*p, kMiB, kA);
  r.dev->Freed(*p);
  ASSERT_TRUE(r.alloc->DeallocateOnStream(*p, kA).ok());
  r.dev->Wait(kImplicitStream, kA);
  ASSERT_TRUE(r.alloc->NotifyStreamWait(kImplicitStream, kA).ok());
}

// ... and A forgotten without its last event (the dead-stream rule).
void ForgetAWithoutItsEvent(Rig& r) {
  r.dev->FailEveryNthCall(1);
  EXPECT_FALSE(r.alloc->ForgetStream(kA).ok());
  r.dev->FailEveryNthCall(0);
  r.dev->DestroyStream(kA);
}

// Only the implicit stream so far: frees carry no fence, and a host_ready
// allocation got memory a kernel still used, with no wait.
TEST(HostReadyTest, OneStreamSoFarTheHostWaitsForIt) {
  testing::QuietLog quiet;
  Rig r;
  absl::StatusOr<void*> p = r.alloc->Allocate(1 * kMiB);
  ASSERT_TRUE(p.ok());
  r.dev->Allocated(*p, kMiB);
  r.dev->Use(*p, kMiB, kImplicitStream);  // a kernel, still running
  r.dev->Freed(*p);
  ASSERT_TRUE(r.alloc->Deallocate(*p).ok());
  AllocationAttributes attr;
  attr.host_ready = true;
  absl::StatusOr<void*> q = r.alloc->Allocate(1 * kMiB, 256, attr);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, *p);
  r.dev->Allocated(*q, kMiB);
  r.dev->Use(*q, kMiB, kHost);  // the host writes it at once
  EXPECT_EQ(r.dev->num_races(), 0) << r.dev->Races();
  EXPECT_EQ(r.dev->counters().syncs, 1);
}

// With several streams the fence says what to wait for.
TEST(HostReadyTest, SeveralStreamsTheHostWaitsForTheFence) {
  testing::QuietLog quiet;
  Rig r;
  absl::StatusOr<void*> x = r.alloc->AllocateOnStream(kA, 4 * kKiB);
  ASSERT_TRUE(x.ok());
  absl::StatusOr<void*> p = r.alloc->Allocate(1 * kMiB);
  ASSERT_TRUE(p.ok());
  r.dev->Allocated(*p, kMiB);
  r.dev->Use(*p, kMiB, kImplicitStream);
  r.dev->Freed(*p);
  ASSERT_TRUE(r.alloc->Deallocate(*p).ok());
  AllocationAttributes attr;
  attr.host_ready = true;
  absl::StatusOr<void*> q = r.alloc->Allocate(1 * kMiB, 256, attr);
  ASSERT_TRUE(q.ok()) << q.status();
  r.dev->Allocated(*q, kMiB);
  r.dev->Use(*q, kMiB, kHost);
  EXPECT_EQ(r.dev->num_races(), 0) << r.dev->Races();
}

// Memory of a stream forgotten without its last event can never be shown
// safe: it is passed over for fresh memory (it failed every such request).
TEST(HostReadyTest, MemoryOfAForgottenStreamIsPassedOver) {
  testing::QuietLog quiet;
  Rig r;
  FreeOnAWaitedForByTheImplicitStream(r);
  ForgetAWithoutItsEvent(r);
  AllocationAttributes attr;
  attr.host_ready = true;
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<void*> q = r.alloc->Allocate(1 * kMiB, 256, attr);
    EXPECT_TRUE(q.ok()) << "attempt " << i << ": " << q.status();
    if (q.ok()) {
      r.dev->Allocated(*q, kMiB);
      r.dev->Use(*q, kMiB, kHost);
    }
  }
  EXPECT_EQ(r.dev->num_races(), 0) << r.dev->Races();
  EXPECT_TRUE(r.alloc->Validate().ok());
}

// A wait that fails (here: a held stream the fake will not wait for) takes
// fresh memory instead (it failed as "out of memory" with room to grow).
TEST(HostReadyTest, AWaitThatFailsTakesFreshMemory) {
  testing::QuietLog quiet;
  Rig r;
  FreeOnAWaitedForByTheImplicitStream(r);
  r.dev->Hold(kA);  // a long kernel: SynchronizeEvent refuses (fake)
  AllocationAttributes attr;
  attr.host_ready = true;
  absl::StatusOr<void*> q = r.alloc->Allocate(1 * kMiB, 256, attr);
  EXPECT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(r.dev->num_races(), 0) << r.dev->Races();
}

// And with the retry on, such a call does not wait out retry_timeout.
TEST(HostReadyTest, MemoryOfAForgottenStreamNeverMakesACallWait) {
  testing::QuietLog quiet;
  Allocator::Options o = Rules();
  o.allow_retry_on_failure = true;
  o.retry_timeout = absl::Milliseconds(500);
  Rig r(o);
  Allocator& alloc = *r.alloc;
  FreeOnAWaitedForByTheImplicitStream(r);
  ForgetAWithoutItsEvent(r);
  AllocationAttributes attr;
  attr.host_ready = true;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> q = alloc.Allocate(1 * kMiB, 256, attr);
  const absl::Duration took = absl::Now() - t0;
  EXPECT_TRUE(q.ok()) << q.status() << " after " << took;
  EXPECT_LT(took, absl::Milliseconds(100)) << took;
  if (q.ok()) (void)alloc.Deallocate(*q);
}

// 1 MiB used by a kernel on stream A (still running when `hold`), freed
// there.
void FreeOnA(Rig& r, bool hold) {
  absl::StatusOr<void*> a = r.alloc->AllocateOnStream(kA, 1 * kMiB);
  ASSERT_TRUE(a.ok());
  r.dev->Allocated(*a, kMiB);
  r.dev->Use(*a, kMiB, kA);
  if (hold) r.dev->Hold(kA);
  r.dev->Freed(*a);
  ASSERT_TRUE(r.alloc->DeallocateOnStream(*a, kA).ok());
}

// A region grown for stream B next to a free chunk still pending on stream
// A joined that chunk and took its fence: B could not use what it grew, and
// each retry grew the pool again, up to the limit.
TEST(GrownRegionTest, NewMemoryDoesNotJoinMemoryAStreamStillUses) {
  testing::QuietLog quiet;
  Rig r(Rules(/*internal_dependencies=*/false));
  Allocator& alloc = *r.alloc;
  FakeStreamOps* dev = r.dev;
  FreeOnA(r, /*hold=*/true);  // a long kernel
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<void*> b = alloc.AllocateOnStream(kB, 1 * kMiB);
    EXPECT_TRUE(b.ok()) << "attempt " << i << ": " << b.status();
    if (b.ok()) {
      dev->Allocated(*b, kMiB);
      dev->Use(*b, kMiB, kB);
      break;
    }
  }
  EXPECT_EQ(dev->num_races(), 0) << dev->Races();
  EXPECT_LE(alloc.GetStats()->pool_bytes.value_or(0), int64_t{8 * kMiB})
      << "pool grew to " << *alloc.GetStats()->pool_bytes;
}

// The same, A not held: the new memory serves B with no host wait.
TEST(GrownRegionTest, NewMemoryNeedsNoHostWait) {
  testing::QuietLog quiet;
  Rig r(Rules(/*internal_dependencies=*/false));
  Allocator& alloc = *r.alloc;
  FakeStreamOps* dev = r.dev;
  FreeOnA(r, /*hold=*/false);
  absl::StatusOr<void*> b = alloc.AllocateOnStream(kB, 1 * kMiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(dev->counters().syncs, 0);
  EXPECT_GT(alloc.GetStats()->pool_bytes.value_or(0), int64_t{2 * kMiB});
}

}  // namespace
}  // namespace bfc
