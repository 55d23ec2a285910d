// File: tests/cuda_driver_test.cc
// -----------------------------------------------------------------------------
//
// Loading the CUDA driver when it is not there or not usable. bfc loads the
// driver once per process, so each case is its own CTest entry with its own
// environment (tests/CMakeLists.txt, cuda_driver_<case>); BFC_TEST_DRIVER_CASE
// names the case, and a case run under another's environment fails.
//
// Every case: the library is loaded and usable without CUDA (host memory
// works), and the first CUDA use fails at once (no retry wait) with a message
// that says what is wrong and, when no driver is found, how to point at one.
#include "core/internal/cuda_driver.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/cuda_sub_allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/units.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

using ::testing::HasSubstr;

std::string Case() {
  const char* c = std::getenv("BFC_TEST_DRIVER_CASE");
  return c == nullptr ? "" : c;
}

// What every case shares; `expect` is in each error message.
void CheckFailsAtOnce(const std::string& expect) {
  // Host memory needs no driver.
  {
    Allocator host(std::make_unique<HostSubAllocator>(), 64 * kMiB, "host");
    absl::StatusOr<void*> p = host.Allocate(4096);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(host.Deallocate(*p).ok());
  }
  absl::StatusOr<const internal::CudaDriver*> driver =
      internal::CudaDriver::Get();
  ASSERT_FALSE(driver.ok());
  EXPECT_EQ(driver.status().code(), absl::StatusCode::kUnavailable)
      << driver.status();
  EXPECT_THAT(std::string(driver.status().message()), HasSubstr(expect));

  std::string why;
  EXPECT_EQ(CudaDeviceCount(&why), 0);
  EXPECT_THAT(why, HasSubstr(expect));

  // An allocator over CUDA fails fast with that reason, not after its retry
  // wait and not as "out of memory".
  Allocator::Options options;
  options.retry_timeout = absl::Seconds(20);
  Allocator gpu(std::make_unique<CudaDeviceSubAllocator>(0), 64 * kMiB, "gpu",
                options);
  const absl::Time start = absl::Now();
  absl::StatusOr<void*> p = gpu.Allocate(4096);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(expect));
  Allocator pinned(std::make_unique<CudaPinnedSubAllocator>(), 64 * kMiB,
                   "pinned", options);
  p = pinned.Allocate(4096);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr(expect));
  // The failure is remembered: a second call says the same at once.
  absl::StatusOr<const internal::CudaDriver*> again =
      internal::CudaDriver::Get();
  EXPECT_EQ(again.status(), driver.status());
}

TEST(CudaDriverLoadTest, no_driver) {
  ASSERT_EQ(Case(), "no_driver") << "run through CTest (cuda_driver_no_driver)";
  CheckFailsAtOnce("no CUDA driver found");
  std::string why;
  CudaDeviceCount(&why);
  EXPECT_THAT(why, HasSubstr("BFC_CUDA_DRIVER_LIBRARY"));
  EXPECT_THAT(why, HasSubstr("no-such-dir/libcuda.so.1"));
}

TEST(CudaDriverLoadTest, old_driver) {
  ASSERT_EQ(Case(), "old_driver")
      << "run through CTest (cuda_driver_old_driver)";
  CheckFailsAtOnce("older than CUDA 12.0");
}

// The oldest driver supported (12.0) serves.
TEST(CudaDriverLoadTest, oldest_driver) {
  ASSERT_EQ(Case(), "oldest_driver")
      << "run through CTest (cuda_driver_oldest_driver)";
  absl::StatusOr<const internal::CudaDriver*> driver =
      internal::CudaDriver::Get();
  ASSERT_TRUE(driver.ok()) << driver.status();
  EXPECT_EQ((*driver)->version, internal::kMinDriverVersion);
  Allocator gpu(std::make_unique<CudaDeviceSubAllocator>(0), 64 * kMiB, "gpu");
  absl::StatusOr<void*> p = gpu.Allocate(4096);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(gpu.Deallocate(*p).ok());
}

TEST(CudaDriverLoadTest, no_device) {
  ASSERT_EQ(Case(), "no_device") << "run through CTest (cuda_driver_no_device)";
  CheckFailsAtOnce("cuInit failed: CUDA_ERROR_NO_DEVICE");
}

TEST(CudaDriverLoadTest, init_fails) {
  ASSERT_EQ(Case(), "init_fails")
      << "run through CTest (cuda_driver_init_fails)";
  CheckFailsAtOnce("cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH");
}

}  // namespace
}  // namespace bfc
