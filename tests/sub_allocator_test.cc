// File: tests/sub_allocator_test.cc
// -----------------------------------------------------------------------------
//
// The SubAllocator base: visitor order and memory type names. A minimal
// subclass exposes the protected visit calls so the base is tested alone.
#include "bfc/sub_allocator.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace bfc {
namespace {

class RecordingSubAllocator : public SubAllocator {
 public:
  using SubAllocator::SubAllocator;
  void* Alloc(size_t, size_t, size_t* bytes_received) override {
    *bytes_received = 0;
    return nullptr;
  }
  void Free(void*, size_t) override {}
  bool SupportsCoalescing() const override { return false; }

  void CallVisitAlloc(void* p, int i, size_t n) { VisitAlloc(p, i, n); }
  void CallVisitFree(void* p, int i, size_t n) { VisitFree(p, i, n); }
};

// Visitors that append "<tag>" to a shared log and record their arguments.
struct Call {
  std::string tag;
  void* ptr;
  int index;
  size_t num_bytes;
};

SubAllocator::Visitor Recorder(std::vector<Call>* calls, std::string tag) {
  return [calls, tag](void* ptr, int index, size_t num_bytes) {
    calls->push_back({tag, ptr, index, num_bytes});
  };
}

std::vector<std::string> Tags(const std::vector<Call>& calls) {
  std::vector<std::string> tags;
  for (const Call& c : calls) tags.push_back(c.tag);
  return tags;
}

TEST(SubAllocatorTest, AllocVisitorsRunInRegistrationOrder) {
  std::vector<Call> calls;
  RecordingSubAllocator sub(
      {Recorder(&calls, "a1"), Recorder(&calls, "a2"), Recorder(&calls, "a3")},
      {Recorder(&calls, "f1")});
  int dummy = 0;
  sub.CallVisitAlloc(&dummy, 7, 4096);
  EXPECT_EQ(Tags(calls), (std::vector<std::string>{"a1", "a2", "a3"}));
  for (const Call& c : calls) {
    EXPECT_EQ(c.ptr, &dummy);
    EXPECT_EQ(c.index, 7);
    EXPECT_EQ(c.num_bytes, 4096u);
  }
}

TEST(SubAllocatorTest, FreeVisitorsRunInReverseRegistrationOrder) {
  std::vector<Call> calls;
  RecordingSubAllocator sub(
      {Recorder(&calls, "a1")},
      {Recorder(&calls, "f1"), Recorder(&calls, "f2"), Recorder(&calls, "f3")});
  int dummy = 0;
  sub.CallVisitFree(&dummy, 3, 512);
  EXPECT_EQ(Tags(calls), (std::vector<std::string>{"f3", "f2", "f1"}));
  for (const Call& c : calls) {
    EXPECT_EQ(c.ptr, &dummy);
    EXPECT_EQ(c.index, 3);
    EXPECT_EQ(c.num_bytes, 512u);
  }
}

TEST(SubAllocatorTest, AllocAndFreeVisitorsAreSeparate) {
  std::vector<Call> calls;
  RecordingSubAllocator sub({Recorder(&calls, "a")}, {Recorder(&calls, "f")});
  int dummy = 0;
  sub.CallVisitAlloc(&dummy, 0, 1);
  sub.CallVisitFree(&dummy, 0, 1);
  sub.CallVisitAlloc(&dummy, 0, 1);
  EXPECT_EQ(Tags(calls), (std::vector<std::string>{"a", "f", "a"}));
}

TEST(SubAllocatorTest, NoVisitorsAndEmptyVisitorsAreFine) {
  RecordingSubAllocator none({}, {});
  int dummy = 0;
  none.CallVisitAlloc(&dummy, 0, 1);
  none.CallVisitFree(&dummy, 0, 1);

  // An empty std::function in the list is skipped rather than thrown on.
  std::vector<Call> calls;
  RecordingSubAllocator with_empty(
      {SubAllocator::Visitor(), Recorder(&calls, "a")},
      {Recorder(&calls, "f"), SubAllocator::Visitor()});
  with_empty.CallVisitAlloc(&dummy, 0, 1);
  with_empty.CallVisitFree(&dummy, 0, 1);
  EXPECT_EQ(Tags(calls), (std::vector<std::string>{"a", "f"}));
}

TEST(SubAllocatorTest, DefaultMemoryTypeIsUnknown) {
  RecordingSubAllocator sub({}, {});
  EXPECT_EQ(sub.GetMemoryType(), MemoryType::kUnknown);
}

TEST(SubAllocatorTest, MemoryTypeName) {
  EXPECT_STREQ(MemoryTypeName(MemoryType::kUnknown), "unknown");
  EXPECT_STREQ(MemoryTypeName(MemoryType::kDevice), "device");
  EXPECT_STREQ(MemoryTypeName(MemoryType::kHostPageable), "host-pageable");
  EXPECT_STREQ(MemoryTypeName(MemoryType::kHostPinned), "host-pinned");
  // Out-of-range values still give a printable name.
  EXPECT_STREQ(MemoryTypeName(static_cast<MemoryType>(42)), "unknown");
}

}  // namespace
}  // namespace bfc
