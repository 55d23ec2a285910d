// File: tests/cuda_vmm_test.cc
// -----------------------------------------------------------------------------
//
// Expandable regions on CUDA virtual memory: CudaVmmSubAllocator alone and
// under an Allocator (partial release, region merges on both sides, the
// out-of-memory path). In CI against the fake driver, which enforces the VMM
// rules (granularity, no partial unmap, access only on mapped ranges); with
// BFC_TEST_REAL_CUDA=ON the same tests run on a GPU and those that steer the
// driver (injected failures, backed pages) skip.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bfc/allocator.h"
#include "bfc/cuda_vmm_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/memory_dump.h"
#include "bfc/units.h"
#include "fake_cuda/fake_cuda_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::GetFake;
using ::testing::HasSubstr;

constexpr size_t kPage = size_t{2} << 20;

// What the fake driver holds for device 0.
struct DriverState {
  size_t mapped = 0;
  size_t physical = 0;
  int handles = 0;
  size_t reserved = 0;
  bool operator==(const DriverState& o) const {
    return mapped == o.mapped && physical == o.physical &&
           handles == o.handles && reserved == o.reserved;
  }
};

DriverState Driver() {
  const auto* f = GetFake();
  return DriverState{f->vmm_mapped_bytes(0), f->vmm_physical_bytes(0),
                     f->vmm_live_handles(0), f->vmm_reserved_bytes()};
}

std::ostream& operator<<(std::ostream& os, const DriverState& s) {
  return os << "{mapped " << s.mapped << ", physical " << s.physical
            << ", handles " << s.handles << ", reserved " << s.reserved << "}";
}

CudaVmmSubAllocator::Options SmallRange(size_t pages = 64) {
  CudaVmmSubAllocator::Options o;
  o.page_bytes = kPage;
  o.address_bytes = pages * kPage;
  return o;
}

void* At(const CudaVmmSubAllocator& sub, size_t page) {
  return reinterpret_cast<void*>(sub.base() + page * kPage);
}

class CudaVmmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GetFake() != nullptr) GetFake()->reset();
  }
  void TearDown() override {
    if (GetFake() != nullptr) GetFake()->reset();
  }
};

TEST_F(CudaVmmTest, ReservesOnceAndMapsContiguousPages) {
  CudaVmmSubAllocator sub(0, SmallRange());
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  EXPECT_TRUE(sub.SupportsCoalescing());
  EXPECT_EQ(sub.PartialFreeBytes(), kPage);
  EXPECT_EQ(sub.ReservedAddressBytes(), 64 * kPage);
  size_t got = 0;
  void* a = sub.Alloc(256, 1, &got);
  ASSERT_EQ(a, At(sub, 0));
  EXPECT_EQ(got, kPage);  // whole pages
  void* b = sub.Alloc(256, kPage + 1, &got);
  EXPECT_EQ(b, At(sub, 1));  // right after: the allocator merges them
  EXPECT_EQ(got, 2 * kPage);
  EXPECT_EQ(sub.counters().maps, 3);
  EXPECT_EQ(sub.counters().mapped_bytes, 3 * kPage);
  if (GetFake() != nullptr) {
    EXPECT_EQ(Driver().mapped, 3 * kPage);
    EXPECT_EQ(Driver().handles, 3);  // one handle per page
  }
  EXPECT_TRUE(
      sub.CheckHeldRegions({{sub.base(), sub.base() + 3 * kPage}}).ok());
  EXPECT_FALSE(
      sub.CheckHeldRegions({{sub.base(), sub.base() + 2 * kPage}}).ok());
  sub.Free(a, kPage);
  sub.Free(b, 2 * kPage);
  EXPECT_EQ(sub.counters().mapped_bytes, 0u);
  EXPECT_EQ(sub.counters().unmaps, 3);
}

TEST_F(CudaVmmTest, FillsTheLowestHoleAndFreesAnyPageRange) {
  CudaVmmSubAllocator sub(0, SmallRange());
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  size_t got = 0;
  void* a = sub.Alloc(256, 4 * kPage, &got);
  ASSERT_EQ(a, At(sub, 0));
  // A part of a block: its middle two pages.
  sub.Free(At(sub, 1), 2 * kPage);
  EXPECT_EQ(sub.counters().mapped_bytes, 2 * kPage);
  // Too big for the hole: above it.
  EXPECT_EQ(sub.Alloc(256, 3 * kPage, &got), At(sub, 4));
  // Fits: the hole, lowest first.
  EXPECT_EQ(sub.Alloc(256, kPage, &got), At(sub, 1));
  EXPECT_EQ(sub.Alloc(256, kPage, &got), At(sub, 2));
  // An over-aligned request starts on its alignment.
  // Pages 0..6 are mapped: the first 16 MiB boundary at or past page 7.
  const uintptr_t boundary =
      (sub.base() + 7 * kPage + 8 * kPage - 1) / (8 * kPage) * (8 * kPage);
  void* aligned = sub.Alloc(8 * kPage, kPage, &got);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(aligned), boundary);
  sub.Free(At(sub, 0), 7 * kPage);  // a union of three Allocs
  sub.Free(aligned, kPage);
  EXPECT_EQ(sub.counters().mapped_bytes, 0u);
}

TEST_F(CudaVmmTest, RefusesFreesOfPagesItDidNotHandOut) {
  CudaVmmSubAllocator sub(0, SmallRange());
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  size_t got = 0;
  void* a = sub.Alloc(256, 2 * kPage, &got);
  ASSERT_NE(a, nullptr);
  testing::LogCapture log;
  sub.Free(static_cast<char*>(a) + 256, kPage);  // not page aligned
  sub.Free(a, kPage + 256);                      // not whole pages
  sub.Free(a, 3 * kPage);                        // past what is mapped
  sub.Free(At(sub, 64), kPage);                  // outside the range
  int dummy = 0;
  sub.Free(&dummy, kPage);  // foreign
  EXPECT_EQ(sub.counters().mapped_bytes, 2 * kPage);
  EXPECT_EQ(sub.counters().unmaps, 0);
  EXPECT_TRUE(log.Contains("not a range of whole pages"));
  sub.Free(a, 2 * kPage);
  EXPECT_EQ(sub.counters().mapped_bytes, 0u);
}

TEST_F(CudaVmmTest, RunsOutOfAddressSpaceCleanly) {
  CudaVmmSubAllocator sub(0, SmallRange(4));
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  size_t got = 0;
  testing::LogCapture log;
  EXPECT_EQ(sub.Alloc(256, 5 * kPage, &got), nullptr);
  EXPECT_EQ(got, 0u);
  void* a = sub.Alloc(256, 3 * kPage, &got);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(sub.Alloc(256, 2 * kPage, &got), nullptr);
  EXPECT_TRUE(log.Contains("no hole of 2 pages"));
  sub.Free(a, 3 * kPage);
}

// Every driver call an Alloc makes, failing at each position: the page table
// and the driver are exactly as before (PyTorch #188008), and the next Alloc
// works.
TEST_F(CudaVmmTest, EveryFaultPointRollsBackExactly) {
  BFC_REQUIRE_FAKE_CUDA();
  CudaVmmSubAllocator sub(0, SmallRange());
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  size_t got = 0;
  void* keep = sub.Alloc(256, kPage, &got);  // something already mapped
  ASSERT_NE(keep, nullptr);
  struct Point {
    const char* call;
    int nth;
  };
  const Point points[] = {{"cuMemCreate", 1},    {"cuMemCreate", 2},
                          {"cuMemCreate", 3},    {"cuMemMap", 1},
                          {"cuMemMap", 2},       {"cuMemMap", 3},
                          {"cuMemSetAccess", 1}, {"cuCtxSynchronize", 1}};
  for (const Point& p : points) {
    SCOPED_TRACE(std::string(p.call) + " #" + std::to_string(p.nth));
    const DriverState before = Driver();
    const CudaVmmSubAllocator::Counters c0 = sub.counters();
    GetFake()->fail_call(p.call, p.nth, CUDA_ERROR_OUT_OF_MEMORY);
    testing::LogCapture log;
    void* q = sub.Alloc(256, 3 * kPage, &got);
    if (std::string(p.call) == "cuCtxSynchronize") {
      // Alloc does not synchronize: it succeeds, and the failure waits for
      // the Free, which keeps the pages out of use rather than unmap them
      // under a running kernel.
      ASSERT_NE(q, nullptr);
      sub.Free(q, 3 * kPage);
      EXPECT_EQ(sub.counters().stuck_pages, 3);
      EXPECT_TRUE(log.Contains("cuCtxSynchronize"));
      // The next call synchronizes and unmaps them.
      void* r = sub.Alloc(256, kPage, &got);
      EXPECT_EQ(sub.counters().stuck_pages, 0);
      sub.Free(r, kPage);
      EXPECT_EQ(Driver(), before);
      continue;
    }
    EXPECT_EQ(q, nullptr);
    EXPECT_EQ(got, 0u);
    EXPECT_TRUE(log.Contains(p.call));
    EXPECT_EQ(Driver(), before);
    EXPECT_EQ(sub.counters().mapped_bytes, c0.mapped_bytes);
    EXPECT_EQ(sub.counters().stuck_pages, 0);
    EXPECT_EQ(sub.counters().failed_allocs, c0.failed_allocs + 1);
    EXPECT_TRUE(sub.CheckHeldRegions({{sub.base(), sub.base() + kPage}}).ok());
    // Nothing is left behind to trip the next one.
    void* r = sub.Alloc(256, 3 * kPage, &got);
    ASSERT_EQ(r, At(sub, 1));
    sub.Free(r, 3 * kPage);
    EXPECT_EQ(Driver(), before);
  }
  sub.Free(keep, kPage);
}

// A rollback whose unmap fails too: the page is kept out of use ("stuck"),
// never handed out, and unmapped by a later call.
TEST_F(CudaVmmTest, APageThatWillNotUnmapIsRetriedLater) {
  BFC_REQUIRE_FAKE_CUDA();
  CudaVmmSubAllocator sub(0, SmallRange());
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  const DriverState before = Driver();
  GetFake()->fail_call("cuMemSetAccess", 1, CUDA_ERROR_OUT_OF_MEMORY);
  GetFake()->fail_call("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN);
  testing::LogCapture log;
  size_t got = 0;
  EXPECT_EQ(sub.Alloc(256, 2 * kPage, &got), nullptr);
  EXPECT_EQ(sub.counters().stuck_pages, 1);
  EXPECT_EQ(sub.counters().mapped_bytes, 0u);
  EXPECT_TRUE(log.Contains("retried later"));
  // The stuck page (page 0) is not handed out; the retry unmaps it first.
  void* a = sub.Alloc(256, kPage, &got);
  EXPECT_EQ(a, At(sub, 0));
  EXPECT_EQ(sub.counters().stuck_pages, 0);
  sub.Free(a, kPage);
  EXPECT_EQ(Driver(), before);
}

// From a review: pages that would not unmap stayed on the device but no
// longer counted against the allocator's limit (the device held twice the
// limit); a physical page whose cuMemRelease failed was lost for good,
// uncounted. Both are now UnreturnedBytes, held against the limit, and
// retried until they go.
TEST_F(CudaVmmTest, PagesThatCannotGoBackCountAgainstTheLimit) {
  BFC_REQUIRE_FAKE_CUDA();
  for (const char* call : {"cuMemUnmap", "cuMemRelease"}) {
    SCOPED_TRACE(call);
    GetFake()->reset();
    testing::LogCapture log;
    auto owned = std::make_unique<CudaVmmSubAllocator>(0, SmallRange());
    CudaVmmSubAllocator* sub = owned.get();
    Allocator::Options o;
    o.growth_policy = GrowthPolicy::kSameAsRequested;
    o.allow_retry_on_failure = false;
    Allocator a(std::move(owned), 4 * kPage, "vmm", o);
    void* p = a.AllocateRaw(256, 4 * kPage);
    ASSERT_NE(p, nullptr);
    a.DeallocateRaw(p);
    // The driver refuses for a while (the next 400 calls).
    for (int i = 0; i < 400; ++i) {
      GetFake()->fail_call(call, 1, CUDA_ERROR_UNKNOWN);
    }
    a.ReleaseFreeRegions();
    EXPECT_EQ(sub->counters().stuck_pages + sub->counters().unreleased_pages,
              4);
    // The limit holds on the device: nothing more fits.
    EXPECT_EQ(a.AllocateRaw(256, kPage), nullptr);
    EXPECT_LE(GetFake()->vmm_physical_bytes(0), 4 * kPage);
    EXPECT_TRUE(a.Validate().ok()) << a.Validate();
    // Each ask tries them again; once the driver gives them up, the limit
    // is whole again.
    int tries = 0;
    while (sub->UnreturnedBytes() > 0 && tries < 400) ++tries;
    EXPECT_LT(tries, 400);
    void* q = a.AllocateRaw(256, 4 * kPage);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(sub->UnreturnedBytes(), 0u);
    EXPECT_LE(GetFake()->vmm_physical_bytes(0), 4 * kPage);
    a.DeallocateRaw(q);
    a.ReleaseFreeRegions();
    EXPECT_EQ(GetFake()->vmm_live_handles(0), 0);
  }
}

// From a review: a range whose page table the host cannot hold threw
// std::bad_alloc out of the constructor and left the range reserved. The
// table is made first; without it, nothing is reserved and the
// sub-allocator is unavailable, saying why.
TEST_F(CudaVmmTest, APageTableTooLargeForTheHostReservesNothing) {
  BFC_REQUIRE_FAKE_CUDA();
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the sanitizer's allocator ends the process on a 512 GiB "
                  "request instead of throwing std::bad_alloc";
#endif
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator ends the process on a 512 GiB "
                  "request instead of throwing std::bad_alloc";
#endif
  GetFake()->set_vmm_granularity(4096);
  CudaVmmSubAllocator::Options o;
  o.page_bytes = 4096;
  o.address_bytes = size_t{1} << 47;  // 2^35 pages: 512 GiB of table
  bool threw = false;
  {
    try {
      CudaVmmSubAllocator sub(0, o);
      EXPECT_EQ(sub.Availability().code(), absl::StatusCode::kResourceExhausted)
          << sub.Availability();
      EXPECT_THAT(std::string(sub.Availability().message()),
                  HasSubstr("page table"));
    } catch (...) {
      threw = true;
    }
  }
  EXPECT_FALSE(threw);
  EXPECT_EQ(GetFake()->vmm_reserved_bytes(), 0u);
}

TEST_F(CudaVmmTest, UnavailableWithoutVmmSupportOrDevice) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_vmm_supported(0, 0);
  CudaVmmSubAllocator no_vmm(0, SmallRange());
  EXPECT_EQ(no_vmm.Availability().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(no_vmm.Availability().message()),
              HasSubstr("does not support virtual memory management"));
  size_t got = 1;
  EXPECT_EQ(no_vmm.Alloc(256, kPage, &got), nullptr);
  EXPECT_EQ(got, 0u);
  EXPECT_EQ(no_vmm.PartialFreeBytes(), 0u);
  GetFake()->reset();
  CudaVmmSubAllocator no_device(3, SmallRange());
  EXPECT_EQ(no_device.Availability().code(), absl::StatusCode::kUnavailable);
  CudaVmmSubAllocator::Options peers = SmallRange();
  peers.peer_devices = {7};
  CudaVmmSubAllocator no_peer(0, peers);
  EXPECT_THAT(std::string(no_peer.Availability().message()),
              HasSubstr("no device 7"));
  GetFake()->fail_call("cuMemAddressReserve", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CudaVmmSubAllocator no_range(0, SmallRange());
  EXPECT_EQ(no_range.Availability().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Driver().reserved, 0u);
}

TEST_F(CudaVmmTest, PeersGetAccessToo) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_count(2);
  CudaVmmSubAllocator::Options o = SmallRange();
  o.peer_devices = {1, 0, 1};  // the owner and repeats are dropped
  CudaVmmSubAllocator sub(0, o);
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  size_t got = 0;
  void* a = sub.Alloc(256, kPage, &got);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(GetFake()->call_count("cuMemSetAccess"), 1);
  sub.Free(a, kPage);
}

// From a review: a page size the header allows (a multiple of the
// granularity) that is not a power of two failed a check and aborted the
// process; the driver takes the reservation's alignment only as a power of
// two. It is refused with the reason, and nothing is reserved.
TEST_F(CudaVmmTest, APageSizeNotAPowerOfTwoIsRefused) {
  BFC_REQUIRE_FAKE_CUDA();
  CudaVmmSubAllocator::Options o;
  o.page_bytes = 3 * kPage;  // 6 MiB
  o.address_bytes = 16 * 3 * kPage;
  CudaVmmSubAllocator sub(0, o);
  EXPECT_EQ(sub.Availability().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sub.Availability().message(), HasSubstr("is not a power of two"));
  size_t got = 0;
  EXPECT_EQ(sub.Alloc(256, kPage, &got), nullptr);
  EXPECT_EQ(Driver().reserved, 0u);
  // 3 MiB rounds up to two 2 MiB granules: 4 MiB, a power of two.
  o.page_bytes = 3 << 20;
  CudaVmmSubAllocator rounded(0, o);
  ASSERT_TRUE(rounded.Availability().ok()) << rounded.Availability();
  EXPECT_EQ(rounded.counters().page_bytes, 2 * kPage);
}

// From a review: the destructor freed the address range while a page that
// would not unmap was still mapped in it, which the driver does not define.
// The range is kept, and said to be.
TEST_F(CudaVmmTest, ARangeWithAPageThatWillNotUnmapIsNotFreed) {
  BFC_REQUIRE_FAKE_CUDA();
  testing::LogCapture log;
  {
    CudaVmmSubAllocator sub(0, SmallRange(8));
    size_t got = 0;
    ASSERT_NE(sub.Alloc(256, kPage, &got), nullptr);
    GetFake()->fail_call("cuMemUnmap", 1, CUDA_ERROR_UNKNOWN);
  }
  EXPECT_EQ(GetFake()->call_count("cuMemAddressFree"), 0);
  EXPECT_EQ(Driver().mapped, kPage);
  EXPECT_EQ(Driver().reserved, 8 * kPage);
  EXPECT_TRUE(log.Contains("the address range stays reserved"));
}

// From a review: with peers, Free synchronized only the owner's context,
// and a real context synchronize does not wait for another device's
// kernels: a peer could still read a page being unmapped. Every device with
// access is synchronized.
TEST_F(CudaVmmTest, FreeWaitsForEveryDeviceWithAccess) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_count(2);
  using RetainFn = CUresult (*)(CUcontext*, CUdevice);
  using PushFn = CUresult (*)(CUcontext);
  using PopFn = CUresult (*)(CUcontext*);
  using CreateFn = CUresult (*)(CUstream*, unsigned);
  auto retain = testing::DriverFunction<RetainFn>("cuDevicePrimaryCtxRetain");
  auto push = testing::DriverFunction<PushFn>("cuCtxPushCurrent_v2");
  auto pop = testing::DriverFunction<PopFn>("cuCtxPopCurrent_v2");
  auto create = testing::DriverFunction<CreateFn>("cuStreamCreate");
  CudaVmmSubAllocator::Options o = SmallRange(8);
  o.peer_devices = {1};
  CudaVmmSubAllocator sub(0, o);
  ASSERT_TRUE(sub.Availability().ok()) << sub.Availability();
  // A stream of device 1, its work held: a kernel still reading the page.
  CUcontext peer = nullptr;
  ASSERT_EQ(retain(&peer, 1), CUDA_SUCCESS);
  ASSERT_EQ(push(peer), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(create(&stream, 0), CUDA_SUCCESS);
  CUcontext popped = nullptr;
  ASSERT_EQ(pop(&popped), CUDA_SUCCESS);
  size_t got = 0;
  void* p = sub.Alloc(256, kPage, &got);
  ASSERT_NE(p, nullptr);
  GetFake()->hold_stream(stream);
  std::atomic<bool> released{false};
  std::thread kernel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    released = true;
    GetFake()->release_stream(stream);
  });
  const long syncs = GetFake()->call_count("cuCtxSynchronize");
  sub.Free(p, got);
  EXPECT_TRUE(released) << "the page was unmapped while device 1 ran";
  EXPECT_EQ(GetFake()->call_count("cuCtxSynchronize") - syncs, 2);
  EXPECT_EQ(Driver().mapped, 0u);
  kernel.join();
}

// From a review: a peer that cannot reach the owner's memory was accepted,
// and every Alloc then failed at cuMemSetAccess. It is refused up front.
TEST_F(CudaVmmTest, APeerWithoutAccessIsRefusedUpFront) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_count(3);
  GetFake()->set_peer_access(2, 0, 0);
  CudaVmmSubAllocator::Options o = SmallRange(8);
  o.peer_devices = {1, 2};
  CudaVmmSubAllocator sub(0, o);
  EXPECT_EQ(sub.Availability().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(sub.Availability().message(),
              HasSubstr("device 2 cannot access device 0's memory"));
  EXPECT_EQ(Driver().reserved, 0u);
  // The driver refuses such a grant, as a real one does.
  o.peer_devices = {1};
  CudaVmmSubAllocator ok(0, o);
  ASSERT_TRUE(ok.Availability().ok()) << ok.Availability();
  size_t got = 0;
  void* p = ok.Alloc(256, kPage, &got);
  ASSERT_NE(p, nullptr);
  ok.Free(p, got);
}

// From a review: pages that would not unmap (a driver going away at exit
// answers CUDA_ERROR_DEINITIALIZED to everything) were logged one line per
// page, tens of thousands on a large device, and again on every retry. The
// first failure is logged, the rest counted in one line.
TEST_F(CudaVmmTest, PagesThatWillNotUnmapAreLoggedOnceWithACount) {
  BFC_REQUIRE_FAKE_CUDA();
  testing::LogCapture log;
  {
    CudaVmmSubAllocator sub(0, SmallRange(8));
    size_t got = 0;
    for (int i = 0; i < 3; ++i) ASSERT_NE(sub.Alloc(256, kPage, &got), nullptr);
    for (int i = 0; i < 3; ++i) {
      GetFake()->fail_call("cuMemUnmap", 1, CUDA_ERROR_DEINITIALIZED);
    }
  }
  size_t unmap_lines = 0;
  for (const auto& [severity, line] : log.lines()) {
    unmap_lines += line.find("cuMemUnmap(") != std::string::npos;
  }
  EXPECT_EQ(unmap_lines, 1u);
  EXPECT_TRUE(log.Contains("2 more pages would not unmap either"));
}

// --- under an Allocator ------------------------------------------------------

Allocator::Options VmmOptions() {
  Allocator::Options o;
  o.growth_policy = GrowthPolicy::kSameAsRequested;
  o.min_split_remainder_bytes = 256;
  o.release_partial_regions = true;
  return o;
}

std::vector<RegionDump> Regions(const Allocator& a) {
  return a.RecordMemoryMap().regions;
}

TEST_F(CudaVmmTest, AllocatorMergesContiguousRegions) {
  Allocator a(std::make_unique<CudaVmmSubAllocator>(0, SmallRange()),
              32 * kPage, "vmm", VmmOptions());
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) {
    ps.push_back(a.AllocateRaw(256, 3 * kPage));
    ASSERT_NE(ps.back(), nullptr);
    ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  }
  EXPECT_EQ(Regions(a).size(), 1u);  // four Extends, one region
  EXPECT_EQ(a.GetStats()->num_extends, 4);
  EXPECT_EQ(a.GetStats()->va_reserved_bytes, int64_t{64} * kPage);
  for (void* p : ps) a.DeallocateRaw(p);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// The interior of a free chunk goes back; its ends stay as free chunks that
// end and start the two regions the hole leaves; a later Extend maps into
// the hole and the three merge again (on both sides).
TEST_F(CudaVmmTest, PartialReleaseAndHoleFillingMergeOnBothSides) {
  auto owned = std::make_unique<CudaVmmSubAllocator>(0, SmallRange());
  CudaVmmSubAllocator* sub = owned.get();
  Allocator a(std::move(owned), 32 * kPage, "vmm", VmmOptions());
  // Pages 0..5 in one region: [x 1 MiB][big 9 MiB][y 2 MiB].
  constexpr size_t kMiB = kPage / 2;
  void* x = a.AllocateRaw(256, kMiB);
  ASSERT_NE(x, nullptr);
  void* big = a.AllocateRaw(256, 9 * kMiB);
  void* y = a.AllocateRaw(256, kPage);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(y, nullptr);
  ASSERT_EQ(Regions(a).size(), 1u);
  const int64_t pool = *a.GetStats()->pool_bytes;
  a.DeallocateRaw(big);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  const size_t released = a.ReleaseFreeMemory();
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_EQ(released, 8 * kMiB);  // pages 1..4; the first 1 MiB stays
  EXPECT_EQ(*a.GetStats()->pool_bytes, pool - static_cast<int64_t>(released));
  EXPECT_EQ(sub->counters().mapped_bytes,
            static_cast<size_t>(*a.GetStats()->pool_bytes));
  EXPECT_GE(a.GetStats()->num_partial_releases, 1);
  EXPECT_EQ(Regions(a).size(), 2u);
  // x and y are still there (and still ours).
  EXPECT_EQ(a.RequestedSize(x), kMiB);
  EXPECT_EQ(a.RequestedSize(y), kPage);
  // Something that does not fit the 1 MiB left: mapped into the hole,
  // exactly, where it joins both neighbours and the free 1 MiB.
  void* again = a.AllocateRaw(256, 7 * kMiB);
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_EQ(Regions(a).size(), 1u);
  EXPECT_EQ(again, static_cast<char*>(x) + kMiB);  // the stub, extended
  a.DeallocateRaw(again);
  a.DeallocateRaw(x);
  a.DeallocateRaw(y);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  const int64_t left = *a.GetStats()->pool_bytes;
  EXPECT_EQ(a.ReleaseFreeMemory(), static_cast<size_t>(left));
  EXPECT_EQ(*a.GetStats()->pool_bytes, 0);
  EXPECT_EQ(sub->counters().mapped_bytes, 0u);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
}

// TF's VMM allocator was disabled for this: garbage collection left address
// holes its bump pointer never reused, and the range ran out while physical
// memory was free. Here 1,000 cycles of growing and giving back stay inside
// the first pages of the range.
TEST_F(CudaVmmTest, GrowAndReleaseCyclesNeverGrowTheAddressRange) {
  auto owned = std::make_unique<CudaVmmSubAllocator>(0, SmallRange(64));
  CudaVmmSubAllocator* sub = owned.get();
  Allocator::Options o = VmmOptions();
  o.garbage_collection = true;
  Allocator a(std::move(owned), 32 * kPage, "vmm", o);
  void* keep = a.AllocateRaw(256, kPage / 4);  // pins the first page
  ASSERT_NE(keep, nullptr);
  uintptr_t highest = 0;
  for (int i = 0; i < 1000; ++i) {
    const size_t bytes = (1 + i % 7) * kPage + (i % 3) * 4096;
    void* p = a.AllocateRaw(256, bytes);
    void* q = a.AllocateRaw(256, kPage / 2 + (i % 5) * 256);
    ASSERT_NE(p, nullptr) << "cycle " << i;
    ASSERT_NE(q, nullptr) << "cycle " << i;
    highest = std::max({highest, reinterpret_cast<uintptr_t>(p) + bytes,
                        reinterpret_cast<uintptr_t>(q) + kPage / 2});
    a.DeallocateRaw(p);
    if (i % 2 == 0) a.DeallocateRaw(q);
    a.ReleaseFreeMemory();
    if (i % 2 == 1) a.DeallocateRaw(q);
    if (i % 100 == 0) {
      ASSERT_TRUE(a.Validate().ok()) << "cycle " << i << ": " << a.Validate();
    }
  }
  // Live at most: 8 pages of p, a page of `keep`, one of q. Holes are
  // reused, so the highest address stays within a small multiple of that
  // (a bump pointer would have run out of the 64-page range by cycle 64).
  EXPECT_LE(highest, sub->base() + 24 * kPage);
  EXPECT_LE(sub->counters().peak_mapped_bytes, 12 * kPage);
  a.DeallocateRaw(keep);
  a.ReleaseFreeMemory();
  EXPECT_EQ(sub->counters().mapped_bytes, 0u);
  if (GetFake() != nullptr) {
    EXPECT_EQ(Driver().handles, 0);
  }
}

// Out of memory with release_partial_regions: the pages inside free chunks
// go back so that the request can be mapped.
TEST_F(CudaVmmTest, OutOfMemoryGivesBackFreePagesFirst) {
  auto owned = std::make_unique<CudaVmmSubAllocator>(0, SmallRange(64));
  CudaVmmSubAllocator* sub = owned.get();
  Allocator::Options o = VmmOptions();
  o.allow_retry_on_failure = false;
  Allocator a(std::move(owned), 8 * kPage, "vmm", o);  // 16 MiB limit
  void* x = a.AllocateRaw(256, kPage / 2);
  void* big = a.AllocateRaw(256, 5 * kPage);
  void* y = a.AllocateRaw(256, kPage / 2);
  ASSERT_NE(x, nullptr);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(y, nullptr);
  a.DeallocateRaw(big);
  // 6 MiB more than fits beside 5 free pages: only with them given back.
  void* z = a.AllocateRaw(256, 6 * kPage);
  ASSERT_NE(z, nullptr);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  EXPECT_GE(a.GetStats()->num_partial_releases, 1);
  EXPECT_LE(sub->counters().mapped_bytes, 8 * kPage);
  for (void* p : {x, y, z}) a.DeallocateRaw(p);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
}

// Driver failures under an Allocator: the allocation fails (or backs off),
// nothing leaks, Validate holds, and the next allocation works.
TEST_F(CudaVmmTest, DriverFaultsUnderAnAllocatorLoseNothing) {
  BFC_REQUIRE_FAKE_CUDA();
  Allocator::Options o = VmmOptions();
  o.allow_retry_on_failure = false;
  Allocator a(std::make_unique<CudaVmmSubAllocator>(0, SmallRange(64)),
              32 * kPage, "vmm", o);
  void* keep = a.AllocateRaw(256, kPage);
  ASSERT_NE(keep, nullptr);
  for (const char* call : {"cuMemCreate", "cuMemMap", "cuMemSetAccess"}) {
    SCOPED_TRACE(call);
    const DriverState before = Driver();
    const int64_t pool = *a.GetStats()->pool_bytes;
    // The back-off's next size is below the request, so one failure
    // fails it.
    GetFake()->fail_call(call, 1, CUDA_ERROR_OUT_OF_MEMORY);
    testing::LogCapture log;
    EXPECT_EQ(a.AllocateRaw(256, 3 * kPage), nullptr);
    ASSERT_TRUE(a.Validate().ok()) << a.Validate();
    EXPECT_EQ(*a.GetStats()->pool_bytes, pool);
    EXPECT_EQ(Driver(), before);
  }
  a.DeallocateRaw(keep);
}

// Backed pages (the fake's real memory behind each handle): what a live
// allocation holds survives the release of the free pages around it, and
// memory given back is gone (a touch faults).
TEST_F(CudaVmmTest, DataSurvivesReleasesAroundItInBackedMode) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_vmm_backed(1);
  {
    Allocator a(std::make_unique<CudaVmmSubAllocator>(0, SmallRange(64)),
                32 * kPage, "vmm", VmmOptions());
    char* left = static_cast<char*>(a.AllocateRaw(256, 3 * kPage));
    char* live = static_cast<char*>(a.AllocateRaw(256, 3 * kPage));
    char* right = static_cast<char*>(a.AllocateRaw(256, 3 * kPage));
    ASSERT_NE(left, nullptr);
    ASSERT_NE(live, nullptr);
    ASSERT_NE(right, nullptr);
    for (size_t i = 0; i < 3 * kPage; i += 4096) live[i] = char(i / 4096);
    a.DeallocateRaw(left);
    a.DeallocateRaw(right);
    EXPECT_GE(a.ReleaseFreeMemory(), 4 * kPage);
    ASSERT_TRUE(a.Validate().ok()) << a.Validate();
    for (size_t i = 0; i < 3 * kPage; i += 4096) {
      ASSERT_EQ(live[i], char(i / 4096)) << "offset " << i;
    }
    // The first page of `left` was given back: touching it faults.
    EXPECT_DEATH(left[0] = 1, "");
    a.DeallocateRaw(live);
  }
  GetFake()->set_vmm_backed(0);
}

// Validate asks the sub-allocator too: a page unmapped behind the
// allocator's back (here by calling the sub-allocator directly) is found.
TEST_F(CudaVmmTest, ValidateFindsAMappedPageNoRegionHoldsOrTheReverse) {
  auto owned = std::make_unique<CudaVmmSubAllocator>(0, SmallRange());
  CudaVmmSubAllocator* sub = owned.get();
  Allocator a(std::move(owned), 32 * kPage, "vmm", VmmOptions());
  void* p = a.AllocateRaw(256, 3 * kPage);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  testing::LogCapture log;
  sub->Free(At(*sub, 2), kPage);  // the allocator still holds it
  const absl::Status s = a.Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("not mapped"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("inside a region"));
  // And a page mapped that no region holds.
  size_t got = 0;
  EXPECT_EQ(sub->Alloc(256, kPage, &got), At(*sub, 2));
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  void* stray = sub->Alloc(256, kPage, &got);
  ASSERT_NE(stray, nullptr);
  EXPECT_THAT(std::string(a.Validate().message()), HasSubstr("in no region"));
  sub->Free(stray, kPage);
  a.DeallocateRaw(p);
}

}  // namespace
}  // namespace bfc
