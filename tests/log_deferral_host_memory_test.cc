// The host running out of memory around deferred log delivery and account
// creation, from a review: each failed on the code it was written against.
// This binary replaces the global operator new (testing/failing_new.h):
// while armed on a thread, allocations of exactly `fail_size` bytes fail, or
// (fail_at >= 0) the fail_at-th allocation fails.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/units.h"
#include "gtest/gtest.h"
#include "testing/failing_new.h"
#include "testing/fuse.h"

namespace bfc {
namespace {

using ::bfc::testing::g_host;
using ::bfc::testing::HostMemory;

// Log() copies the sink (a std::function) for every message. A sink whose
// callable does not fit std::function's small buffer (here a lambda holding
// a std::string) needs host memory for that copy. That copy threw
// std::bad_alloc out of Log, which runs from Allocator::Lock's destructor
// (noexcept): std::terminate. Short of memory, the message now goes to
// stderr.
TEST(LogDeferralHostMemoryDeathTest, AShortHostWhileSendingDoesNotTerminate) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string prefix(5000, 'x');  // a 5001-byte heap block
        SetLogSink([prefix](LogSeverity, std::string_view) {});
        Allocator a(std::make_unique<HostSubAllocator>(), 64 * kMiB, "short");
        int not_ours = 0;
        g_host.fail_size = prefix.size() + 1;  // only the sink's copy fails
        g_host.armed = true;
        a.DeallocateRaw(&not_ours);  // logs one invalid-free report
        g_host.armed = false;
        std::fprintf(stderr, "survived, %ld host allocation(s) refused\n",
                     g_host.failed);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "survived");
}

// Account::CreateChild built the child's Account under the allocator's Lock
// and then called RegisterAccountLocked, which may throw std::bad_alloc. The
// shared_ptr<Account> was declared after the Lock, so unwinding destroyed it
// first: ~Account -> CloseImpl took the same (non-recursive) allocator
// mutex, a self-deadlock. Swept over each host allocation inside
// CreateChild: every call returns (no exception), fails with
// ResourceExhausted or succeeds, and the allocator stays valid.
TEST(LogDeferralHostMemoryTest, CreateChildShortOfHostMemoryFailsCleanly) {
  ::bfc::testing::Fuse fuse(absl::Seconds(20),
                            "CreateChildShortOfHostMemoryFailsCleanly");
  Allocator a(std::make_unique<HostSubAllocator>(), 64 * kMiB, "accounts");
  absl::StatusOr<std::shared_ptr<Account>> root = Account::CreateRoot(&a, [] {
    AccountOptions o;
    o.name = "root";
    return o;
  }());
  ASSERT_TRUE(root.ok()) << root.status();
  int failed = 0;
  for (long k = 0; k < 64; ++k) {
    AccountOptions child;
    child.name = "child" + std::to_string(k);
    child.reservation_bytes = 4096;
    bool threw = false;
    absl::StatusOr<std::shared_ptr<Account>> c =
        absl::UnknownError("not called");
    g_host = HostMemory();
    g_host.fail_at = k;
    g_host.armed = true;
    try {
      c = (*root)->CreateChild(child);
    } catch (...) {
      threw = true;
    }
    g_host.armed = false;
    EXPECT_FALSE(threw) << "allocation " << k;
    if (!c.ok()) {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted)
          << c.status();
      ++failed;
    }
    EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  }
  EXPECT_GT(failed, 0);
  // Every refused child's reservation went back to the root.
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  SUCCEED();
}

}  // namespace
}  // namespace bfc
