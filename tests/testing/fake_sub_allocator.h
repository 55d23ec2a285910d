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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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
  // Free calls whose (ptr, size) the backing VirtualSubAllocator did not
  // accept: the allocator broke the Free contract.
  size_t invalid_frees = 0;
  // Calls for which a misbehaviour was injected.
  size_t misaligned = 0, shortened = 0, overlapping = 0, lengthened = 0;
  // Calls that threw on purpose.
  size_t alloc_throws = 0, free_throws = 0;
};

class FakeSubAllocator : public SubAllocator {
 public:
  struct Options {
    size_t capacity = size_t{64} << 30;
    bool supports_coalescing = false;
    size_t gap_bytes = 0;
    bool never_reuse = false;
    // Pages that Free may give back one by one (VirtualSubAllocator's
    // partial_free_bytes; PartialFreeBytes()). 0: off.
    size_t partial_free_bytes = 0;
    // Called before each Alloc with (0-based call index, num_bytes); true
    // makes the call fail.
    std::function<bool(size_t call, size_t num_bytes)> fail_if;
    // Misbehaviours, applied to successful calls for which the predicate is
    // true: hand out memory shifted off alignment, or report fewer bytes.
    std::function<bool(size_t call)> misalign_if;
    std::function<bool(size_t call)> short_if;
    // Return, instead of fresh memory, an address inside a block handed out
    // earlier and not yet freed (its middle, aligned as asked), reporting
    // num_bytes received. Nothing is taken from the backing range, so such a
    // block's Free is only journaled. No earlier live block: a normal call.
    std::function<bool(size_t call)> overlap_if;
    // Report (and really hand out) `long_extra_bytes` more than asked.
    std::function<bool(size_t call)> long_if;
    size_t long_extra_bytes = 1024;
    // Hostile user code. Alloc call `call` (0-based, as for fail_if) throws
    // std::runtime_error before taking anything; Free call `call` (0-based
    // over Free calls) throws after journaling and before giving anything
    // back, so its block stays outstanding.
    std::function<bool(size_t call)> throw_alloc_if;
    std::function<bool(size_t call)> throw_free_if;
    // Availability(): what the backend says about itself.
    absl::Status availability;
    // SupportsCoalescing(), GetMemoryType() and Availability() throw.
    bool throw_from_queries = false;
  };

  explicit FakeSubAllocator(Options options,
                            std::shared_ptr<SubAllocatorJournal> journal =
                                std::make_shared<SubAllocatorJournal>())
      : SubAllocator({}, {}),
        options_(std::move(options)),
        journal_(std::move(journal)),
        virtual_(options_.capacity,
                 VirtualSubAllocator::Options{
                     options_.supports_coalescing, options_.gap_bytes,
                     options_.never_reuse, options_.partial_free_bytes}) {}

  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    const size_t call = journal_->alloc_requests.size();
    journal_->alloc_requests.push_back(num_bytes);
    journal_->alloc_alignments.push_back(alignment);
    if (options_.throw_alloc_if && options_.throw_alloc_if(call)) {
      ++journal_->alloc_throws;
      journal_->alloc_results.push_back(nullptr);
      throw std::runtime_error("injected Alloc exception");
    }
    void* p = nullptr;
    if (!(options_.fail_if && options_.fail_if(call, num_bytes))) {
      if (options_.overlap_if && options_.overlap_if(call) && !live_.empty()) {
        p = OverlappingAddress(alignment);
        if (p != nullptr) {
          ++journal_->overlapping;
          overlapping_.push_back(p);
          *bytes_received = num_bytes;
          journal_->bytes_outstanding += num_bytes;
          journal_->alloc_results.push_back(p);
          return p;
        }
      }
      const bool lengthen = options_.long_if && options_.long_if(call);
      p = virtual_.Alloc(
          alignment,
          lengthen ? num_bytes + options_.long_extra_bytes : num_bytes,
          bytes_received);
      if (p != nullptr && lengthen) ++journal_->lengthened;
    }
    if (p != nullptr) {
      journal_->bytes_outstanding += *bytes_received;
      live_.emplace_back(reinterpret_cast<uintptr_t>(p), *bytes_received);
      if (options_.short_if && options_.short_if(call)) {
        ++journal_->shortened;
        short_sizes_.emplace_back(p, *bytes_received);
        *bytes_received = num_bytes / 2;
      }
      if (options_.misalign_if && options_.misalign_if(call)) {
        // Remember the true block so Free can give it back.
        ++journal_->misaligned;
        shifted_.emplace_back(static_cast<char*>(p) + 64, p);
        p = static_cast<char*>(p) + 64;
      }
    }
    journal_->alloc_results.push_back(p);
    return p;
  }

  void Free(void* ptr, size_t num_bytes) override {
    const size_t free_call = journal_->frees.size();
    journal_->frees.emplace_back(ptr, num_bytes);
    if (options_.throw_free_if && options_.throw_free_if(free_call)) {
      ++journal_->free_throws;
      throw std::runtime_error("injected Free exception");
    }
    for (size_t i = 0; i < overlapping_.size(); ++i) {
      if (overlapping_[i] == ptr) {
        // Never taken from the backing range: only the accounting changes.
        overlapping_.erase(overlapping_.begin() + i);
        journal_->bytes_outstanding -=
            std::min(journal_->bytes_outstanding, num_bytes);
        return;
      }
    }
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
    // Forget the live blocks inside the freed range (a union, when
    // coalescing); with pages, keep what of a block lies outside it.
    const uintptr_t lo = reinterpret_cast<uintptr_t>(ptr);
    const uintptr_t hi = lo + true_size;
    std::vector<std::pair<uintptr_t, size_t>> kept;
    for (const auto& [base, size] : live_) {
      const uintptr_t end = base + size;
      if (options_.partial_free_bytes == 0) {
        if (!(base >= lo && base < hi)) kept.emplace_back(base, size);
        continue;
      }
      if (end <= lo || base >= hi) {
        kept.emplace_back(base, size);
        continue;
      }
      if (base < lo) kept.emplace_back(base, lo - base);
      if (end > hi) kept.emplace_back(hi, end - hi);
    }
    live_.swap(kept);
    const size_t invalid_before = virtual_.invalid_frees();
    virtual_.Free(ptr, true_size);
    journal_->invalid_frees += virtual_.invalid_frees() - invalid_before;
  }

  bool SupportsCoalescing() const override {
    if (options_.throw_from_queries) throw std::runtime_error("injected query");
    return options_.supports_coalescing;
  }
  size_t PartialFreeBytes() const override {
    return virtual_.PartialFreeBytes();
  }
  MemoryType GetMemoryType() const override {
    if (options_.throw_from_queries) throw std::runtime_error("injected query");
    return MemoryType::kDevice;
  }
  absl::Status Availability() const override {
    if (options_.throw_from_queries) throw std::runtime_error("injected query");
    return options_.availability;
  }

  const VirtualSubAllocator& backing() const { return virtual_; }
  // Blocks really taken from the backing range and not yet freed:
  // (true base, true size), in call order.
  const std::vector<std::pair<uintptr_t, size_t>>& live_blocks() const {
    return live_;
  }

 private:
  // The middle of the most recent live block, aligned down to `alignment`
  // but not below its base; nullptr when alignment cannot be met inside it.
  void* OverlappingAddress(size_t alignment) const {
    const auto& [base, size] = live_.back();
    const size_t a = std::max<size_t>(alignment, 256);
    uintptr_t mid = (base + size / 2) & ~(static_cast<uintptr_t>(a) - 1);
    if (mid < base) mid = base;
    if (mid % a != 0 || mid >= base + size) return nullptr;
    return reinterpret_cast<void*>(mid);
  }

  Options options_;
  std::shared_ptr<SubAllocatorJournal> journal_;
  VirtualSubAllocator virtual_;
  std::vector<std::pair<void*, void*>> shifted_;       // (shifted, true base)
  std::vector<std::pair<void*, size_t>> short_sizes_;  // (base, true size)
  std::vector<std::pair<uintptr_t, size_t>> live_;     // real blocks out
  std::vector<void*> overlapping_;                     // fake blocks out
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
