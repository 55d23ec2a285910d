// File: tests/cuda_sub_allocator_test.cc
// -----------------------------------------------------------------------------
//
// CUDA sub-allocators. The build machines have the toolkit but no GPU (and no
// driver), so the tests that matter most there are the failure paths: no
// crash, nullptr, and a logged message that names the CUDA error. Tests that
// need a real device skip with the runtime's reason.
#include "bfc/cuda_sub_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/log.h"
#include "bfc/units.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

// Captures everything the library logs while it is alive.
class CaptureLog {
 public:
  CaptureLog()
      : previous_(SetLogSink([this](LogSeverity s, std::string_view msg) {
          severities_.push_back(s);
          messages_.emplace_back(msg);
        })) {}
  ~CaptureLog() { SetLogSink(previous_); }
  const std::vector<std::string>& messages() const { return messages_; }
  const std::vector<LogSeverity>& severities() const { return severities_; }
  std::string All() const {
    std::string all;
    for (const std::string& m : messages_) all += m + "\n";
    return all;
  }

 private:
  std::vector<LogSeverity> severities_;
  std::vector<std::string> messages_;
  LogSink previous_;
};

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Our failures must not linger in the runtime's last-error slot. Without a
// usable driver the runtime cannot initialise at all and every call,
// cudaGetLastError included, reports that initialisation error: it cannot be
// cleared by anyone, so only that exact error is tolerated then.
void ExpectNoLeftoverCudaError() {
  const cudaError_t last = cudaGetLastError();
  int n = 0;
  const cudaError_t init = cudaGetDeviceCount(&n);
  if (init == cudaSuccess) {
    EXPECT_EQ(last, cudaSuccess) << cudaGetErrorName(last);
  } else {
    EXPECT_TRUE(last == cudaSuccess || last == init)
        << "left over: " << cudaGetErrorName(last)
        << ", runtime init: " << cudaGetErrorName(init);
  }
}

int DeviceCount(std::string* why) {
  const int count = CudaDeviceCount(why);
  if (count == 0 && why->empty()) *why = "(no reason given)";
  return count;
}

TEST(CudaDeviceCountTest, ZeroComesWithAReason) {
  std::string error;
  const int count = CudaDeviceCount(&error);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(error.empty());
    EXPECT_TRUE(Contains(error, "cuda")) << error;
  } else {
    EXPECT_TRUE(error.empty()) << error;
  }
  // A null error pointer is allowed.
  EXPECT_EQ(CudaDeviceCount(), count);
  // The sticky last-error slot is left clean for the host program.
  ExpectNoLeftoverCudaError();
}

TEST(CudaDeviceSubAllocatorTest, Properties) {
  CudaDeviceSubAllocator sub(3);
  EXPECT_EQ(sub.device_ordinal(), 3);
  EXPECT_EQ(sub.GetMemoryType(), MemoryType::kDevice);
  EXPECT_FALSE(sub.SupportsCoalescing());
  CudaPinnedSubAllocator pinned;
  EXPECT_EQ(pinned.GetMemoryType(), MemoryType::kHostPinned);
  EXPECT_FALSE(pinned.SupportsCoalescing());
}

// Without a device, device 0 fails; with devices, an ordinal past the last one
// fails the same way. Either way the failure must be clean and explained.
TEST(CudaDeviceSubAllocatorTest, UnusableDeviceFailsWithCudaErrorMessage) {
  std::string why;
  const int count = DeviceCount(&why);
  const int ordinal = count == 0 ? 0 : count + 5;
  int visits = 0;
  CudaDeviceSubAllocator sub(ordinal, {[&](void*, int, size_t) { ++visits; }},
                             {[&](void*, int, size_t) { ++visits; }});
  CaptureLog log;
  size_t received = 123;
  EXPECT_EQ(sub.Alloc(256, 3 * kMiB, &received), nullptr);
  EXPECT_EQ(received, 0u);
  EXPECT_EQ(visits, 0);
  ASSERT_FALSE(log.messages().empty());
  const std::string all = log.All();
  // Names the CUDA error (cudaGetErrorName gives "cudaError...")...
  EXPECT_TRUE(Contains(all, "cudaError")) << all;
  // ...the sub-allocator and device, and the request.
  EXPECT_TRUE(Contains(all, "CudaDeviceSubAllocator")) << all;
  EXPECT_TRUE(Contains(all, "device " + std::to_string(ordinal))) << all;
  EXPECT_TRUE(Contains(all, std::to_string(3 * kMiB))) << all;
  for (LogSeverity s : log.severities()) EXPECT_EQ(s, LogSeverity::kError);
  ExpectNoLeftoverCudaError();
}

// A backend that can never allocate (no driver, no GPU, no such device) says
// so through Availability(), and an Allocator over it fails at once with that
// reason instead of waiting out its retry_timeout and reporting "out of
// memory".
TEST(CudaDeviceSubAllocatorTest, AnUnusableDeviceFailsFastWithItsReason) {
  std::string why;
  const int count = DeviceCount(&why);
  const int ordinal = count == 0 ? 0 : count + 5;
  CaptureLog log;
  auto sub = std::make_unique<CudaDeviceSubAllocator>(ordinal);
  const absl::Status available = sub->Availability();
  EXPECT_EQ(available.code(), absl::StatusCode::kUnavailable) << available;
  EXPECT_TRUE(Contains(
      std::string(available.message()),
      "CudaDeviceSubAllocator(device " + std::to_string(ordinal) + ")"))
      << available;
  Allocator::Options o;
  o.retry_timeout = absl::Seconds(20);  // a waiting allocator fails the bound
  Allocator alloc(std::move(sub), 64 * kMiB, "gpu", o);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> p = alloc.Allocate(4096);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_EQ(alloc.GetStats()->num_retries, 0);
  if (count == 0) {
    CudaPinnedSubAllocator pinned;
    EXPECT_EQ(pinned.Availability().code(), absl::StatusCode::kUnavailable);
  }
  ExpectNoLeftoverCudaError();
}

TEST(CudaDeviceSubAllocatorTest, BadRequestsGiveNullptr) {
  CudaDeviceSubAllocator sub(0);
  CaptureLog log;
  size_t received = 123;
  EXPECT_EQ(sub.Alloc(256, 0, &received), nullptr);
  EXPECT_EQ(received, 0u);
  received = 123;
  EXPECT_EQ(sub.Alloc(384, kMiB, &received), nullptr);
  EXPECT_EQ(received, 0u);
  EXPECT_TRUE(Contains(log.All(), "power of two")) << log.All();
  sub.Free(nullptr, 0);  // no-op
}

TEST(CudaDeviceSubAllocatorTest, AllocatesOnItsDeviceAndRestoresCurrent) {
  std::string why;
  const int count = DeviceCount(&why);
  if (count == 0) GTEST_SKIP() << "no CUDA device: " << why;
  const int ordinal = count - 1;
  std::vector<int> indices;
  CudaDeviceSubAllocator sub(
      ordinal, {[&](void*, int i, size_t) { indices.push_back(i); }},
      {[&](void*, int i, size_t) { indices.push_back(i); }});
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  size_t received = 0;
  void* p = sub.Alloc(256, 3 * kMiB + 1, &received);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(received, 3 * kMiB + 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, p), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, ordinal);
  EXPECT_EQ(cudaMemset(p, 0, received), cudaSuccess);
  sub.Free(p, received);
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, 0);
  EXPECT_EQ(indices, (std::vector<int>{ordinal, ordinal}));
}

TEST(CudaDeviceSubAllocatorTest, OutOfMemoryFailsCleanly) {
  std::string why;
  if (DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
  CudaDeviceSubAllocator sub(0);
  CaptureLog log;
  size_t received = 0;
  // 1 PiB: no GPU has it.
  EXPECT_EQ(sub.Alloc(256, size_t{1} << 50, &received), nullptr);
  EXPECT_TRUE(Contains(log.All(), "cudaErrorMemoryAllocation")) << log.All();
  ExpectNoLeftoverCudaError();
  // The device still works afterwards.
  void* p = sub.Alloc(256, kMiB, &received);
  ASSERT_NE(p, nullptr);
  sub.Free(p, received);
}

// Pinned memory needs a working driver. Without one it must fail like the
// device sub-allocator; with one it must be real, writable host memory.
TEST(CudaPinnedSubAllocatorTest, FailsCleanlyOrGivesWritableMemory) {
  std::string why;
  const int count = DeviceCount(&why);
  std::vector<std::pair<void*, size_t>> visits;
  CudaPinnedSubAllocator sub({[&](void* p, int, size_t n) {
                               visits.push_back({p, n});
                             }},
                             {[&](void* p, int, size_t n) {
                               visits.push_back({p, n});
                             }});
  CaptureLog log;
  size_t received = 123;
  void* p = sub.Alloc(256, 2 * kMiB + 3, &received);
  if (count == 0) {
    // What this (driverless) machine does: refuse, and say why.
    ASSERT_EQ(p, nullptr) << "pinned allocation without a device: " << why;
    EXPECT_EQ(received, 0u);
    EXPECT_TRUE(visits.empty());
    const std::string all = log.All();
    EXPECT_TRUE(Contains(all, "cudaError")) << all;
    EXPECT_TRUE(Contains(all, "CudaPinnedSubAllocator")) << all;
    EXPECT_TRUE(Contains(all, std::to_string(2 * kMiB + 3))) << all;
    ExpectNoLeftoverCudaError();
    return;
  }
  ASSERT_NE(p, nullptr) << log.All();
  EXPECT_EQ(received, 2 * kMiB + 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  std::memset(p, 0x5a, received);
  EXPECT_EQ(static_cast<unsigned char*>(p)[received - 1], 0x5a);
  sub.Free(p, received);
  ASSERT_EQ(visits.size(), 2u);
  EXPECT_EQ(visits[0], std::make_pair(p, received));
  EXPECT_EQ(visits[1], std::make_pair(p, received));
  EXPECT_TRUE(log.messages().empty()) << log.All();
}

}  // namespace
}  // namespace bfc
