// File: tests/testing/reentrant_sink.h
// -----------------------------------------------------------------------------
//
// A log sink that calls back into the allocator a message names: on each
// message containing 'NAME' it reads that allocator's stats and, with
// `allocate`, allocates and frees from it (a sink that allocates on an
// out-of-memory report would recurse). A message sent with that allocator's
// lock held hangs it: run it under a Fuse (fuse.h).
#ifndef BFC_TESTS_TESTING_REENTRANT_SINK_H_
#define BFC_TESTS_TESTING_REENTRANT_SINK_H_

#include <atomic>
#include <string>
#include <string_view>
#include <utility>

#include "bfc/allocator.h"
#include "bfc/log.h"

namespace bfc::testing {

class ReentrantSink {
 public:
  explicit ReentrantSink(std::string name, bool allocate = false)
      : needle_("'" + name + "'"), allocate_(allocate) {
    previous_ = SetLogSink([this](LogSeverity, std::string_view message) {
      if (message.find(needle_) == std::string_view::npos) return;
      Allocator* a = allocator_.load();
      if (a == nullptr) return;
      if (a->GetStats().has_value()) ++calls_;
      if (!allocate_) return;
      if (void* p = a->AllocateRaw(256, 256)) a->DeallocateRaw(p);
    });
  }
  ~ReentrantSink() { SetLogSink(std::move(previous_)); }
  ReentrantSink(const ReentrantSink&) = delete;
  ReentrantSink& operator=(const ReentrantSink&) = delete;

  // The allocator to call back into; nullptr: none.
  void Watch(Allocator* a) { allocator_.store(a); }
  // Messages for which the callback ran.
  int calls() const { return calls_.load(); }

 private:
  const std::string needle_;
  const bool allocate_;
  std::atomic<Allocator*> allocator_{nullptr};
  std::atomic<int> calls_{0};
  LogSink previous_;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_REENTRANT_SINK_H_
