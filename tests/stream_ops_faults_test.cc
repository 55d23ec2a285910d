// File: tests/stream_ops_faults_test.cc
// A StreamOps (user code, bfc/stream_ops.h) that throws, fails, or hands out
// handles the allocator might mistake for "no event". What it throws stays
// inside the library (README, "Guarantees"), no free chunk is lost on the
// way, an account charged during a call that failed is not charged by the
// next one, and the destructor survives it.
// From an adversarial review of the stream API; each test failed before its
// fix.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/stream_ops.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/quiet_log.h"

namespace bfc {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

StreamId S(uintptr_t v) { return reinterpret_cast<StreamId>(v); }

// Events never complete; each call throws or fails while told to. Handles
// are indices from `first` (0 is a handle like any other).
class ScriptedStreamOps : public StreamOps {
 public:
  struct Script {
    bool throw_record = false, throw_query = false, throw_wait = false,
         throw_sync = false, throw_release = false;
    int live_events = 0;
  };
  ScriptedStreamOps(Script* s, uintptr_t first) : s_(s), next_(first) {}
  absl::StatusOr<Event> RecordEvent(StreamId) override {
    if (s_->throw_record) throw std::runtime_error("RecordEvent threw");
    ++s_->live_events;
    return reinterpret_cast<Event>(next_++);
  }
  absl::StatusOr<bool> QueryEvent(Event) override {
    if (s_->throw_query) throw std::runtime_error("QueryEvent threw");
    return false;
  }
  absl::Status StreamWaitEvent(StreamId, Event) override {
    if (s_->throw_wait) throw std::runtime_error("StreamWaitEvent threw");
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event) override {
    if (s_->throw_sync) throw 42;  // not even a std::exception
    return absl::OkStatus();
  }
  void ReleaseEvent(Event) override {
    --s_->live_events;
    if (s_->throw_release) throw std::runtime_error("ReleaseEvent threw");
  }

 private:
  Script* s_;
  uintptr_t next_;
};

// One 4 MiB region, no growth: a second stream can only get memory the
// first one freed.
std::unique_ptr<Allocator> MakeAllocator(ScriptedStreamOps::Script* script,
                                         uintptr_t first_handle = 1,
                                         bool internal_dependencies = true) {
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.allow_growth = false;
  // Off: no wait is inserted, so the out-of-memory path synchronizes.
  o.reuse_allow_internal_dependencies = internal_dependencies;
  auto a = std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30), 4 * kMiB,
      "scripted-stream-ops", o);
  EXPECT_TRUE(
      a->SetStreamOps(std::make_unique<ScriptedStreamOps>(script, first_handle))
          .ok());
  return a;
}

// Stream 1 takes and frees the whole pool; stream 2 then asks for it: the
// allocator records an event on stream 1, queries it and makes stream 2
// wait for it (reuse_allow_internal_dependencies, the default).
class ThrowingStreamOpsTest : public ::testing::TestWithParam<int> {};

TEST_P(ThrowingStreamOpsTest, NothingEscapesAndNothingIsLost) {
  testing::QuietLog quiet;
  ScriptedStreamOps::Script script;
  auto a = MakeAllocator(&script, 1, /*internal_dependencies=*/GetParam() != 3);
  absl::StatusOr<void*> p = a->AllocateOnStream(S(0x1), 4 * kMiB);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(a->DeallocateOnStream(*p, S(0x1)).ok());
  bool* which[] = {&script.throw_record, &script.throw_query,
                   &script.throw_wait, &script.throw_sync};
  *which[GetParam()] = true;
  absl::StatusOr<void*> q = absl::UnknownError("not run");
  bool escaped = false;
  try {
    q = a->AllocateOnStream(S(0x2), 4 * kMiB);
  } catch (...) {
    escaped = true;
  }
  EXPECT_FALSE(escaped);
  ASSERT_TRUE(a->Validate().ok()) << a->Validate();
  EXPECT_GT(a->GetStreamStats().stream_op_errors, 0);
  if (q.ok()) {
    ASSERT_TRUE(a->DeallocateOnStream(*q, S(0x2)).ok());
  }
  // The free chunk is still there: its own stream gets it back.
  *which[GetParam()] = false;
  absl::StatusOr<void*> r = a->AllocateOnStream(S(0x1), 4 * kMiB);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
}

std::string CallName(const ::testing::TestParamInfo<int>& info) {
  static const char* const kNames[] = {"RecordEvent", "QueryEvent",
                                       "StreamWaitEvent", "SynchronizeEvent"};
  return kNames[info.param];
}

INSTANTIATE_TEST_SUITE_P(EachCall, ThrowingStreamOpsTest,
                         ::testing::Values(0, 1, 2, 3), CallName);

// The charged variant: the call that failed set the account being charged;
// the next, uncharged allocation must not be tagged to it (and must not
// write through it once the account is gone).
TEST(StreamOpsFaultsTest, AChargedCallThatFailedChargesNothingLater) {
  testing::QuietLog quiet;
  ScriptedStreamOps::Script script;
  auto a = MakeAllocator(&script);
  // [A live | B freed on stream 1 | C freed on the implicit stream + rest]
  void* pa = a->AllocateRaw(kMinAllocationSize, kMiB);
  absl::StatusOr<void*> pb = a->AllocateOnStream(S(0x1), kMiB);
  void* pc = a->AllocateRaw(kMinAllocationSize, kMiB);
  ASSERT_TRUE(pa != nullptr && pb.ok() && pc != nullptr);
  ASSERT_TRUE(a->DeallocateOnStream(*pb, S(0x1)).ok());
  a->DeallocateRaw(pc);
  {
    AccountOptions ro;
    ro.name = "short-lived";
    absl::StatusOr<std::shared_ptr<Account>> acc =
        Account::CreateRoot(a.get(), ro);
    ASSERT_TRUE(acc.ok()) << acc.status();
    // Stream 2 can use none of the free memory yet: the allocator records
    // an event, which throws, in the middle of the charged attempt.
    script.throw_record = true;
    AllocationAttributes attr;
    attr.stream = S(0x2);
    bool escaped = false;
    absl::StatusOr<void*> q = absl::UnknownError("not run");
    try {
      q = (*acc)->Allocate(kMiB, kMinAllocationSize, attr);
    } catch (...) {
      escaped = true;
    }
    EXPECT_FALSE(escaped);
    script.throw_record = false;
    if (q.ok()) {
      ASSERT_TRUE(a->Deallocate(*q).ok());
    }
    EXPECT_EQ((*acc)->GetStats().live_allocations, 0);
    EXPECT_EQ((*acc)->GetStats().bytes_in_use, 0);
    ASSERT_TRUE(a->Validate().ok()) << a->Validate();
  }
  // The account is gone; a plain allocation is charged to nobody.
  void* q = a->AllocateRaw(kMinAllocationSize, 1024);
  ASSERT_NE(q, nullptr);
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
  a->DeallocateRaw(q);
  a->DeallocateRaw(pa);
}

// ~Allocator gives back the events it still holds; one that throws is
// logged, and destruction carries on (the destructor may not throw).
TEST(StreamOpsFaultsDeathTest, AReleaseEventThatThrowsInTheDestructor) {
  EXPECT_EXIT(
      {
        testing::QuietLog quiet;
        ScriptedStreamOps::Script script;
        auto a = MakeAllocator(&script);
        absl::StatusOr<void*> p = a->AllocateOnStream(S(0x1), kMiB);
        if (!p.ok() || !a->DeallocateOnStream(*p, S(0x1)).ok()) std::exit(3);
        // Stream 2 needs memory: an event (never complete) is recorded on
        // stream 1 and kept.
        (void)a->AllocateOnStream(S(0x2), 4 * kMiB);
        if (a->GetStreamStats().events_recorded == 0) std::exit(4);
        script.throw_release = true;
        a.reset();
        std::exit(script.live_events == 0 ? 0 : 5);
      },
      ::testing::ExitedWithCode(0), "");
}

// Event handles are opaque: 0 is one too. It covers its point, is waited
// for, and Validate() accepts it.
TEST(StreamOpsFaultsTest, AnEventHandleOfZeroIsAnEvent) {
  testing::QuietLog quiet;
  ScriptedStreamOps::Script script;
  auto a = MakeAllocator(&script, /*first_handle=*/0);
  absl::StatusOr<void*> p = a->AllocateOnStream(S(0x1), 4 * kMiB);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(a->DeallocateOnStream(*p, S(0x1)).ok());
  absl::StatusOr<void*> q = a->AllocateOnStream(S(0x2), 4 * kMiB);
  EXPECT_TRUE(a->Validate().ok()) << a->Validate();
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(a->GetStreamStats().waits_inserted, 1);
  ASSERT_TRUE(a->DeallocateOnStream(*q, S(0x2)).ok());
}

}  // namespace
}  // namespace bfc
