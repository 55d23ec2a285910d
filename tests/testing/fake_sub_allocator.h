// File: tests/testing/fake_sub_allocator.h
// -----------------------------------------------------------------------------
//
// Test doubles for the layer below bfc::Allocator, so the core is tested
// without a GPU: a FakeSubAllocator hands out never-touched addresses (it wraps
// a VirtualSubAllocator), records every call in a shared journal that outlives
// it (the allocator owns and destroys its sub-allocator), and can be told to
// fail or to misbehave. LogCapture collects what the library logs.
#ifndef BFC_TESTS_TESTING_FAKE_SUB_ALLOCATOR_H_
#define BFC_TESTS_TESTING_FAKE_SUB_ALLOCATOR_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bfc/log.h"
#include "bfc/sub_allocator.h"
#include "bfc/virtual_sub_allocator.h"

namespace bfc::testing {

// What the fake saw; shared so tests can read it after the allocator died.
struct SubAllocatorJournal {
  std::vector<size_t> alloc_requests;  // num_bytes of every Alloc call
  std::vector<size_t> alloc_alignments;
  std::vector<void*> alloc_results;  // nullptr for failed calls
  std::vector<std::pair<void*, size_t>> frees;
  size_t bytes_outstanding = 0;  // handed out and not freed
};

class FakeSubAllocator : public SubAllocator {
 public:
  struct Options {
    size_t capacity = size_t{64} << 30;
    bool supports_coalescing = false;
    size_t gap_bytes = 0;
    bool never_reuse = false;
    // Called before each Alloc with (0-based call index, num_bytes); true
    // makes the call fail.
    std::function<bool(size_t call, size_t num_bytes)> fail_if;
    // Misbehaviours, applied to successful calls for which the predicate is
    // true: hand out memory shifted off alignment, or report fewer bytes.
    std::function<bool(size_t call)> misalign_if;
    std::function<bool(size_t call)> short_if;
  };

  explicit FakeSubAllocator(Options options,
                            std::shared_ptr<SubAllocatorJournal> journal =
                                std::make_shared<SubAllocatorJournal>())
      : SubAllocator({}, {}),
        options_(std::move(options)),
        journal_(std::move(journal)),
        virtual_(options_.capacity,
                 VirtualSubAllocator::Options{options_.supports_coalescing,
                                              options_.gap_bytes,
                                              options_.never_reuse}) {}

  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    const size_t call = journal_->alloc_requests.size();
    journal_->alloc_requests.push_back(num_bytes);
    journal_->alloc_alignments.push_back(alignment);
    void* p = nullptr;
    if (!(options_.fail_if && options_.fail_if(call, num_bytes))) {
      p = virtual_.Alloc(alignment, num_bytes, bytes_received);
    }
    if (p != nullptr) {
      journal_->bytes_outstanding += *bytes_received;
      if (options_.short_if && options_.short_if(call)) {
        short_sizes_.emplace_back(p, *bytes_received);
        *bytes_received = num_bytes / 2;
      }
      if (options_.misalign_if && options_.misalign_if(call)) {
        // Remember the true block so Free can give it back.
        shifted_.emplace_back(static_cast<char*>(p) + 64, p);
        p = static_cast<char*>(p) + 64;
      }
    }
    journal_->alloc_results.push_back(p);
    return p;
  }

  void Free(void* ptr, size_t num_bytes) override {
    journal_->frees.emplace_back(ptr, num_bytes);
    for (size_t i = 0; i < shifted_.size(); ++i) {
      if (shifted_[i].first == ptr) {
        ptr = shifted_[i].second;
        shifted_.erase(shifted_.begin() + i);
        break;
      }
    }
    // A short block comes back with the short size; free what was handed out.
    size_t true_size = num_bytes;
    for (size_t i = 0; i < short_sizes_.size(); ++i) {
      if (short_sizes_[i].first == ptr) {
        true_size = short_sizes_[i].second;
        short_sizes_.erase(short_sizes_.begin() + i);
        break;
      }
    }
    journal_->bytes_outstanding -=
        std::min(journal_->bytes_outstanding, true_size);
    virtual_.Free(ptr, true_size);
  }

  bool SupportsCoalescing() const override {
    return options_.supports_coalescing;
  }
  MemoryType GetMemoryType() const override { return MemoryType::kDevice; }

  const VirtualSubAllocator& backing() const { return virtual_; }

 private:
  Options options_;
  std::shared_ptr<SubAllocatorJournal> journal_;
  VirtualSubAllocator virtual_;
  std::vector<std::pair<void*, void*>> shifted_;       // (shifted, true base)
  std::vector<std::pair<void*, size_t>> short_sizes_;  // (base, true size)
};

// Captures everything logged while alive; restores the previous sink after.
class LogCapture {
 public:
  LogCapture() {
    previous_ =
        SetLogSink([this](LogSeverity severity, std::string_view message) {
          std::lock_guard<std::mutex> lock(mu_);
          lines_.emplace_back(severity, std::string(message));
        });
  }
  ~LogCapture() { SetLogSink(std::move(previous_)); }

  std::vector<std::pair<LogSeverity, std::string>> lines() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  // True when some line of at least `severity` contains `needle`.
  bool Contains(std::string_view needle,
                LogSeverity severity = LogSeverity::kInfo) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [s, line] : lines_) {
      if (s >= severity && line.find(needle) != std::string::npos) return true;
    }
    return false;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<LogSeverity, std::string>> lines_;
  LogSink previous_;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_FAKE_SUB_ALLOCATOR_H_
