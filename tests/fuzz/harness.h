// File: tests/fuzz/harness.h
// -----------------------------------------------------------------------------
//
// The allocator fuzzing harness, shared by the libFuzzer target
// (allocator_fuzzer.cc, clang) and a deterministic randomized GoogleTest
// (fuzz_harness_test.cc, any compiler), which also replays the committed seed
// corpus and every crash input in regressions/.
//
// Input format (bytes; reading past the end yields zeros):
//   byte 0  configuration: bit 0 growth, bit 1 garbage collection, bit 2
//           coalescing sub-allocator, bit 3 retry (timeout 0), bits 4-6 the
//           limit (kLimits), bit 7 a 4 KiB gap between sub-allocator blocks
//   byte 1  sub-allocator faults: bits 5-7 the mode (0 none; 1-3 none, with
//           growth options from bits 0-4; 4 fail calls by a bit pattern, 5
//           misalign, 6 short, 7 overlap or long), bits 0-4 which calls.
//           Growth options (modes 1-3): bits 0-1 the policy (doubling,
//           same_as_requested, fixed_step, doubling capped at 1 MiB), bit 2
//           release_before_extend, bit 3 min_split_remainder_bytes 256, bit 4
//           huge_allocation_bytes 1 MiB; mode 2 adds a 1 MiB growth floor,
//           mode 3 a 64 KiB initial region
//   byte 2  fragmentation_fraction (0: default; else byte/255); in modes
//           1-3 its bits 0-3 also set max_split_bytes 512 KiB,
//           pool_release_threshold 0.5, extend_by_missing_tail and (over a
//           coalescing sub-allocator without gaps, and a limit of 1 MiB or
//           more) 64 KiB pages that can be given back one by one, with
//           release_partial_regions; then every other opcode 12 is
//           ReleaseFreeMemory (all, or some pages); in every mode, bit 5
//           sets grow_below_peak_ratio (2, or 4 with bit 6), with
//           same_as_requested and release_before_extend in modes 4-7
//   then operations, one opcode byte each followed by its arguments. An
//   allocation's `how` byte picks its stream (bits 2-3: the implicit stream
//   or streams 1-3) and the account it is charged to (bits 4-5: none, the
//   root, its child `a` with a limit and a reservation, or its child `b`;
//   the root's limit is half the allocator's, a's a quarter, its
//   reservation a sixteenth), checked against a model of the charges; a status
//   free with bit 1 set frees on the stream of bits 2-3 (DeallocateOnStream).
//   Events are simulated (FuzzStreamOps): they complete after a few queries;
//   waits and synchronizations succeed. Opcode 15 drives TF's timestamped reuse
//   from its byte: SetTimingCounter, SetSafeFrontier, or the count that later
//   allocations' freed_by_func returns (or nothing: the stats check alone).
//
// After every operation the harness checks Validate() and a shadow model:
// live pointers never overlap, each lies in memory the sub-allocator handed
// out and still holds, is aligned as asked, and has the requested/allocated
// sizes and id the allocator reports; the stats equal the model's sums and
// counters; refused sub-allocator memory was given back. A broken promise is
// reported through `fail` and ends the run.
#ifndef BFC_TESTS_FUZZ_HARNESS_H_
#define BFC_TESTS_FUZZ_HARNESS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "bfc/log.h"
#include "bfc/shared_counter.h"
#include "testing/fake_sub_allocator.h"

namespace bfc::fuzz {

inline constexpr size_t kMaxOpsPerInput = 4096;
inline constexpr size_t kLimits[8] = {
    100,     4 << 10,  (64 << 10) + 768, 1 << 20, (3 << 20) + 256,
    8 << 20, 64 << 20, size_t{1} << 30};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Error lines logged by the library while a harness runs (the sink is
// process-wide; the harness is single-threaded).
// Events that complete on their third query (or when synchronized): enough
// to drive every path of stream-ordered reuse (poll, wait, synchronize)
// without a device; reuse races are the race checker's
// (tests/allocator_streams_test.cc).
class FuzzStreamOps : public StreamOps {
 public:
  absl::StatusOr<Event> RecordEvent(StreamId) override {
    queries_.push_back(0);
    return reinterpret_cast<Event>(queries_.size());
  }
  absl::StatusOr<bool> QueryEvent(Event e) override {
    return ++queries_[reinterpret_cast<uintptr_t>(e) - 1] >= 3;
  }
  absl::Status StreamWaitEvent(StreamId, Event) override {
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event e) override {
    queries_[reinterpret_cast<uintptr_t>(e) - 1] = 3;
    return absl::OkStatus();
  }
  void ReleaseEvent(Event) override {}

 private:
  std::vector<int> queries_;
};

inline StreamId FuzzStream(unsigned bits) {
  return bits == 0 ? kImplicitStream : reinterpret_cast<StreamId>(bits * 16);
}

inline int64_t& LoggedErrors() {
  static int64_t n = 0;
  return n;
}

class Harness {
 public:
  using FailFn = std::function<void(const std::string&)>;

  Harness(const uint8_t* data, size_t size, FailFn fail)
      : in_(data, size), fail_(std::move(fail)) {}

  // Runs every operation; returns how many ran (stops at the first failure).
  size_t Run() {
    static const bool sink_installed = [] {
      SetLogSink([](LogSeverity s, std::string_view) {
        if (s == LogSeverity::kError) ++LoggedErrors();
      });
      return true;
    }();
    (void)sink_installed;
    Configure();
    size_t ops = 0;
    while (!in_.done() && ops < kMaxOpsPerInput && !failed_) {
      Step();
      ++ops;
      if (!failed_) CheckModel();
    }
    if (!failed_) Teardown();
    return ops;
  }
  bool failed() const { return failed_; }

 private:
  struct Live {
    size_t requested;
    size_t allocated;
    size_t alignment;
    int64_t id;
    int account = 0;  // kRoot..kB, 0: none
  };

  // The account tree and a model of it, computed from the live allocations
  // (not incrementally, as the allocator does): own[k] is what account k's
  // allocations charge; a subtree's use is its own plus each child's
  // max(reservation, use).
  enum { kNone = 0, kRoot = 1, kA = 2, kB = 3 };
  int64_t UseOf(int k, int64_t extra_root, int64_t extra_a,
                int64_t extra_b) const {
    const int64_t a = account_own_[kA] + extra_a;
    const int64_t b = account_own_[kB] + extra_b;
    if (k == kA) return a;
    if (k == kB) return b;
    return account_own_[kRoot] + extra_root + std::max(a_reservation_, a) + b;
  }
  // Whether charging `bytes` to account k fits every limit on the way up.
  bool ChargeFits(int k, int64_t bytes) const {
    const int64_t r = k == kRoot ? bytes : 0;
    const int64_t a = k == kA ? bytes : 0;
    const int64_t b = k == kB ? bytes : 0;
    if (k == kA && UseOf(kA, r, a, b) > a_limit_) return false;
    return UseOf(kRoot, r, a, b) <= root_limit_;
  }
  Account* AccountFor(int k) const {
    return k == kRoot ? root_.get()
           : k == kA  ? a_.get()
           : k == kB  ? b_.get()
                      : nullptr;
  }

  void Fail(const std::string& what) {
    if (failed_) return;
    failed_ = true;
    fail_(absl::StrCat("after op ", op_index_, " (", last_op_, "): ", what,
                       "\nconfig: ", config_));
  }

  void Configure() {
    const uint8_t c = in_.u8();
    const uint8_t faults = in_.u8();
    const uint8_t frag = in_.u8();
    limit_ = kLimits[(c >> 4) & 7];
    Allocator::Options o;
    o.allow_growth = c & 1;
    o.garbage_collection = c & 2;
    o.allow_retry_on_failure = c & 8;
    o.retry_timeout = absl::ZeroDuration();
    o.fragmentation_fraction = frag == 0 ? 0.0 : frag / 255.0;
    o.max_oom_logs = 2;
    testing::FakeSubAllocator::Options f;
    f.supports_coalescing = c & 4;
    f.gap_bytes = (c & 128) ? 4096 : 0;
    f.capacity = std::max<size_t>(4 * limit_, size_t{64} << 20);
    const unsigned mode = faults >> 5;
    const unsigned which = faults & 31;
    faulty_ = mode >= 4;
    if (mode >= 1 && mode <= 3) {
      switch (which & 3) {
        case 1:
          o.growth_policy = GrowthPolicy::kSameAsRequested;
          break;
        case 2:
          o.growth_policy = GrowthPolicy::kFixedStep;
          break;
        case 3:
          o.max_growth_step_bytes = 1 << 20;
          break;
        default:
          break;
      }
      o.release_before_extend = which & 4;
      o.min_split_remainder_bytes = (which & 8) ? 256 : 0;
      o.huge_allocation_bytes = (which & 16) ? 1 << 20 : 0;
      if (mode == 2) {
        o.min_growth_step_bytes = 1 << 20;
        o.min_growth_step_max_request_bytes = (frag & 16) ? 256 << 10 : 0;
      }
      if (mode == 3) o.initial_region_bytes = 64 << 10;
      o.max_split_bytes = (frag & 1) ? 512 << 10 : 0;
      o.pool_release_threshold = (frag & 2) ? 0.5 : 0.0;
      o.extend_by_missing_tail = frag & 4;
      // Pages as CUDA VMM's (64 KiB here), given back from inside free
      // chunks: only over a coalescing sub-allocator without gaps.
      if ((frag & 8) && f.supports_coalescing && f.gap_bytes == 0 &&
          limit_ >= (1 << 20)) {
        f.partial_free_bytes = 64 << 10;
        o.release_partial_regions = true;
      }
    }
    // In the fault modes too: its growth may fail, and the chunk it left
    // whole must then serve. There it comes with exact regions and
    // releases before growth, without which the pool never stands below
    // its peak and the rule never acts.
    o.grow_below_peak_ratio = (frag & 32) ? ((frag & 64) ? 4 : 2) : 0;
    if (o.grow_below_peak_ratio != 0 && mode >= 4) {
      o.growth_policy = GrowthPolicy::kSameAsRequested;
      o.release_before_extend = true;
    }
    switch (mode) {
      case 4:
        f.fail_if = [which](size_t call, size_t) {
          return (which >> (call % 5)) & 1;
        };
        break;
      case 5:
        f.misalign_if = [which](size_t call) {
          return call % 8 == (which & 7);
        };
        break;
      case 6:
        f.short_if = [which](size_t call) { return call % 8 == (which & 7); };
        break;
      case 7:
        if (which & 16) {
          f.long_if = [which](size_t call) { return call % 4 == (which & 3); };
        } else {
          f.overlap_if = [which](size_t call) {
            return call % 8 == (which & 7);
          };
        }
        break;
      default:
        break;
    }
    config_ = absl::StrFormat(
        "limit %d growth %d gc %d coalescing %d retry %d gap %d faults %d/%d "
        "frag %d policy %s cap %d floor %d up to %d initial %d release %d "
        "split %d "
        "huge %d max_split %d release_threshold %g tail %d pages %d "
        "grow_below_peak %d",
        limit_, o.allow_growth, o.garbage_collection, f.supports_coalescing,
        o.allow_retry_on_failure, f.gap_bytes, mode, which, frag,
        GrowthPolicyName(o.growth_policy), o.max_growth_step_bytes,
        o.min_growth_step_bytes, o.min_growth_step_max_request_bytes,
        o.initial_region_bytes, o.release_before_extend,
        o.min_split_remainder_bytes, o.huge_allocation_bytes, o.max_split_bytes,
        o.pool_release_threshold, o.extend_by_missing_tail,
        f.partial_free_bytes, o.grow_below_peak_ratio);
    gc_ = o.garbage_collection;
    journal_ = std::make_shared<testing::SubAllocatorJournal>();
    auto sub = std::make_unique<testing::FakeSubAllocator>(f, journal_);
    fake_ = sub.get();
    alloc_ = std::make_unique<Allocator>(std::move(sub), limit_, "fuzz", o);
    if (!alloc_->SetStreamOps(std::make_unique<FuzzStreamOps>()).ok()) {
      Fail("SetStreamOps on a new allocator failed");
    }
    root_limit_ = static_cast<int64_t>(limit_ / 2);
    a_limit_ = static_cast<int64_t>(limit_ / 4);
    a_reservation_ = static_cast<int64_t>(limit_ / 16);
    AccountOptions ro;
    ro.name = "root";
    ro.limit_bytes = root_limit_;
    AccountOptions ao;
    ao.name = "a";
    ao.limit_bytes = a_limit_;
    ao.reservation_bytes = a_reservation_;
    AccountOptions bo;
    bo.name = "b";
    absl::StatusOr<std::shared_ptr<Account>> root =
        Account::CreateRoot(alloc_.get(), ro);
    if (!root.ok()) return Fail(root.status().ToString());
    root_ = *root;
    absl::StatusOr<std::shared_ptr<Account>> a = root_->CreateChild(ao);
    absl::StatusOr<std::shared_ptr<Account>> b = root_->CreateChild(bo);
    if (!a.ok() || !b.ok()) return Fail("creating the accounts failed");
    a_ = *a;
    b_ = *b;
  }

  size_t PickSize() {
    const uint8_t cls = in_.u8();
    const uint32_t r = in_.u32();
    switch (cls % 8) {
      case 0:
      case 1:
      case 2:
        return 1 + r % 4096;
      case 3:
        return 1 + r % (256 << 10);
      case 4:
        return 1 + r % (4 << 20);
      case 5: {
        const size_t l = limit_;
        const size_t choices[] = {l / 8, l / 4, l / 2, l > 256 ? l - 256 : 1,
                                  l,     l + 1, 2 * l, 256};
        return std::max<size_t>(choices[r % 8], 1);
      }
      case 6:
        return 256 * (1 + r % 64);
      default: {
        const size_t m = internal::kMaxRoundableBytes;
        const size_t choices[] = {SIZE_MAX,     SIZE_MAX - 254,  m,
                                  m + 1,        size_t{1} << 63, 0,
                                  SIZE_MAX / 2, m - 255};
        return choices[r % 8];
      }
    }
  }

  size_t PickAlignment() {
    const uint8_t b = in_.u8();
    if (b < 128) return 256;
    if (b < 240) return size_t{1} << (b % 23);
    const size_t bad[] = {0,        3,   48, size_t{1} << 40, size_t{1} << 63,
                          SIZE_MAX, 768, 257};
    return bad[b % 8];
  }

  static bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

  enum class Expect { kZero, kInvalid, kMaybe };
  Expect Classify(size_t alignment, size_t n) const {
    if (n == 0) return Expect::kZero;
    if (!IsPowerOfTwo(alignment)) return Expect::kInvalid;
    if (n > internal::kMaxRoundableBytes) return Expect::kInvalid;
    const size_t rounded = internal::RoundedBytes(n);
    if (alignment > 256) {
      if (alignment > limit_) return Expect::kInvalid;
      if (rounded > SIZE_MAX - (alignment - 256)) return Expect::kInvalid;
    }
    return Expect::kMaybe;
  }

  void DoAllocate() {
    const size_t n = PickSize();
    const size_t alignment = PickAlignment();
    const uint8_t how = in_.u8();
    const bool status_call = how & 1;
    AllocationAttributes attr;
    attr.retry_on_failure = how & 2;
    attr.stream = FuzzStream((how >> 2) & 3);
    const bool limited = timestamped_ && freed_limit_ > 0;
    if (limited) attr.freed_by_func = &freed_by_;
    const int account = (how >> 4) & 3;
    attr.account = AccountFor(account);
    last_op_ =
        absl::StrFormat("allocate %d bytes, alignment %d, %s, account %d", n,
                        alignment, status_call ? "status" : "raw", account);
    const Expect e = Classify(alignment, n);
    // A valid request an account's limit refuses: refused before the pool
    // is touched (no OOM counted), and only then.
    const size_t rounded_n =
        e == Expect::kMaybe ? internal::RoundedBytes(n) : 0;
    // More than int64 can count never fits an account.
    const bool countable =
        rounded_n <= static_cast<size_t>(std::numeric_limits<int64_t>::max());
    const int64_t charge = countable ? static_cast<int64_t>(rounded_n) : 0;
    if (account != kNone && e == Expect::kMaybe &&
        (!countable || !ChargeFits(account, charge))) {
      void* q = nullptr;
      if (status_call) {
        absl::StatusOr<void*> r = alloc_->Allocate(n, alignment, attr);
        if (r.ok()) return Fail("an account limit was passed");
        if (r.status().code() != absl::StatusCode::kResourceExhausted ||
            !absl::StrContains(r.status().message(), "would pass the limit")) {
          return Fail(
              absl::StrCat("limit refusal returned ", r.status().ToString()));
        }
      } else {
        q = alloc_->AllocateRaw(alignment, n, attr);
        if (q != nullptr) return Fail("an account limit was passed");
      }
      ++account_failures_[account];
      return;
    }
    const bool empty_before = live_.empty();
    void* p = nullptr;
    if (status_call) {
      absl::StatusOr<void*> r = alloc_->Allocate(n, alignment, attr);
      if (r.ok()) {
        p = *r;
        if (p == nullptr) return Fail("Allocate returned OK with nullptr");
      } else {
        const absl::StatusCode want = e == Expect::kMaybe
                                          ? absl::StatusCode::kResourceExhausted
                                          : absl::StatusCode::kInvalidArgument;
        if (r.status().code() != want) {
          return Fail(
              absl::StrCat("Allocate returned ", r.status().ToString()));
        }
      }
    } else {
      const int64_t errors = LoggedErrors();
      p = alloc_->AllocateRaw(alignment, n, attr);
      if (e == Expect::kInvalid &&
          (LoggedErrors() != errors) != NextInvalidReportIsLogged()) {
        return Fail("invalid request logged against the rate limit");
      }
    }
    if (e == Expect::kInvalid) ++invalid_requests_;
    if (e != Expect::kMaybe) {
      if (p != nullptr) return Fail("bad request got memory");
      return;
    }
    if (p == nullptr) {
      ++ooms_;
      // Liveness: with nothing live, GC on and a well-behaved sub-allocator,
      // anything that fits in the limit with its worst-case padding must
      // succeed.
      // With pages the sub-allocator hands out whole pages, aligned to
      // them: the limit holds whole pages only, and a request takes its
      // pages.
      const size_t page = std::max<size_t>(fake_->PartialFreeBytes(), 256);
      const size_t pad = alignment > page ? alignment - page : 0;
      const size_t usable_limit = limit_ / page * page;
      const size_t exact = internal::RoundedBytes(n);
      const size_t rounded =
          exact > usable_limit ? exact : (exact + page - 1) / page * page;
      // (Not for an allocation limited by freed_by_func: free memory freed
      // after its count is not for it.)
      if (!faulty_ && gc_ && empty_before && !limited &&
          rounded <= usable_limit && pad <= usable_limit - rounded) {
        return Fail("an empty allocator with GC refused a request that fits");
      }
      return;
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (live_.count(a)) return Fail("pointer handed out twice");
    const size_t allocated = alloc_->AllocatedSize(p);
    const int64_t id = alloc_->AllocationId(p);
    if (allocated < internal::RoundedBytes(n) || allocated % 256 != 0) {
      return Fail(absl::StrCat("allocated size ", allocated, " for ", n));
    }
    if (a % std::max<size_t>(alignment, 256) != 0) return Fail("misaligned");
    if (id <= last_id_) return Fail("allocation ids do not increase");
    last_id_ = id;
    live_[a] = Live{n, allocated, alignment, id, account};
    account_own_[account] += charge;
    in_use_ += static_cast<int64_t>(allocated);
    ++num_allocs_;
    peak_ = std::max(peak_, in_use_);
    largest_ = std::max<int64_t>(largest_, static_cast<int64_t>(allocated));
  }

  // Frees `p` and checks the outcome against the model.
  void FreeAndCheck(void* p, uint8_t how) {
    const bool status_call = how & 1;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = live_.find(a);
    const bool valid = it != live_.end();
    const int64_t errors = LoggedErrors();
    if (status_call) {
      const absl::Status s =
          (how & 2) ? alloc_->DeallocateOnStream(p, FuzzStream((how >> 2) & 3))
                    : alloc_->Deallocate(p);
      if (p == nullptr || valid) {
        if (!s.ok())
          return Fail(absl::StrCat("valid free failed: ", s.ToString()));
      } else if (s.code() != absl::StatusCode::kInvalidArgument) {
        return Fail(absl::StrCat("invalid free returned ", s.ToString()));
      }
    } else {
      alloc_->DeallocateRaw(p);
      if (p != nullptr && !valid &&
          (LoggedErrors() != errors) != NextInvalidReportIsLogged()) {
        return Fail("invalid free logged against the rate limit");
      }
    }
    if (p == nullptr) return;
    if (!valid) {
      ++invalid_frees_;
      return;
    }
    in_use_ -= static_cast<int64_t>(it->second.allocated);
    account_own_[it->second.account] -=
        static_cast<int64_t>(internal::RoundedBytes(it->second.requested));
    live_.erase(it);
    recently_freed_.push_back(p);
    if (recently_freed_.size() > 16)
      recently_freed_.erase(recently_freed_.begin());
  }

  void* NthLive(uint16_t k) {
    if (live_.empty()) return nullptr;
    auto it = live_.begin();
    std::advance(it, k % live_.size());
    return reinterpret_cast<void*>(it->first);
  }

  void* PickBogus() {
    static int stack_probe = 0;  // an address in no allocator
    static char heap_probe[64];
    const uint8_t kind = in_.u8();
    const uint16_t k = in_.u16();
    switch (kind % 8) {
      case 0:
        return nullptr;
      case 1:
        return &stack_probe;
      case 2:
        return heap_probe + (k % 64);
      case 3: {  // inside a live chunk
        if (live_.empty()) return nullptr;
        auto it = live_.begin();
        std::advance(it, k % live_.size());
        return reinterpret_cast<void*>(it->first + 1 +
                                       k % it->second.allocated);
      }
      case 4:  // a freed pointer (may have been handed out again)
        if (recently_freed_.empty()) return nullptr;
        return recently_freed_[k % recently_freed_.size()];
      case 5: {  // the end of (or one byte before) a sub-allocator block
        const auto& blocks = fake_->live_blocks();
        if (blocks.empty()) return nullptr;
        const auto& b = blocks[k % blocks.size()];
        return reinterpret_cast<void*>((k & 1) ? b.first + b.second
                                               : b.first - 1);
      }
      case 6: {  // an arbitrary 256-aligned address in the backing range
        const uintptr_t base =
            reinterpret_cast<uintptr_t>(fake_->backing().base());
        return reinterpret_cast<void*>(base + (static_cast<size_t>(k) * 256) %
                                                  fake_->backing().capacity());
      }
      default:
        return reinterpret_cast<void*>(uintptr_t{0} - 256 * (1 + k % 4));
    }
  }

  void CheckQueries(const void* p) {
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    const size_t req = alloc_->RequestedSize(p);
    const size_t got = alloc_->AllocatedSize(p);
    const int64_t id = alloc_->AllocationId(p);
    if (it == live_.end()) {
      if (req != 0 || got != 0 || id != -1) {
        return Fail(absl::StrFormat("queries on non-live %p: %d/%d/%d", p, req,
                                    got, id));
      }
    } else if (req != it->second.requested || got != it->second.allocated ||
               id != it->second.id) {
      return Fail(absl::StrFormat("queries on live %p disagree", p));
    }
  }

  void Step() {
    ++op_index_;
    const uint8_t op = in_.u8();
    switch (op % 16) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4:
      case 5:
        DoAllocate();
        break;
      case 6:
      case 7:
      case 8: {
        const uint16_t k = in_.u16();
        const uint8_t how = in_.u8();
        last_op_ = "free live";
        FreeAndCheck(NthLive(k), how);
        break;
      }
      case 9:
      case 10: {
        void* p = PickBogus();
        const uint8_t how = in_.u8();
        last_op_ = absl::StrFormat("free bogus %p", p);
        CheckQueries(p);
        FreeAndCheck(p, how);
        break;
      }
      case 11:
        last_op_ = "ClearStats";
        alloc_->ClearStats();
        num_allocs_ = 0;
        peak_ = in_use_;
        largest_ = 0;
        break;
      case 12: {
        // With pages, every other call gives back free memory from inside
        // regions too: all of it, or a few pages' worth.
        const bool partial =
            fake_->PartialFreeBytes() != 0 && (++release_calls_ & 1) == 0;
        last_op_ = partial ? "ReleaseFreeMemory" : "ReleaseFreeRegions";
        const int64_t pool = *alloc_->GetStats()->pool_bytes;
        const size_t released =
            !partial ? alloc_->ReleaseFreeRegions()
            : (release_calls_ & 2)
                ? alloc_->ReleaseFreeMemory()
                : alloc_->ReleaseFreeMemory(release_calls_ * (64 << 10));
        if (static_cast<int64_t>(released) !=
            pool - *alloc_->GetStats()->pool_bytes) {
          Fail(last_op_ + " returned the wrong byte count");
        }
        break;
      }
      case 13: {
        last_op_ = "queries";
        void* p = (in_.u8() & 1) ? NthLive(in_.u16()) : PickBogus();
        CheckQueries(p);
        break;
      }
      case 14: {
        last_op_ = "RenderOccupancy";
        const std::string s = alloc_->RenderOccupancy();
        if (s.size() != 100 && s != "<allocator contains no memory>") {
          Fail("bad occupancy picture");
        }
        break;
      }
      default: {
        // TF's timestamped reuse: bits 0-1 pick, bits 2-7 a distance from
        // the counter's last count.
        const uint8_t t = in_.u8();
        const int64_t at = counter_.get() - (t >> 2);
        switch (t & 3) {
          case 1:
            last_op_ = "SetTimingCounter";
            alloc_->SetTimingCounter(&counter_);
            timestamped_ = true;
            break;
          case 2:
            last_op_ = absl::StrFormat("SetSafeFrontier(%d)", at);
            if (at > 0) alloc_->SetSafeFrontier(static_cast<uint64_t>(at));
            break;
          case 3:
            last_op_ = absl::StrFormat("freed_by_func limit %d", at);
            freed_limit_ = at > 0 ? static_cast<uint64_t>(at) : 0;
            break;
          default:
            last_op_ = "GetStats";  // the model check compares them all
            break;
        }
        break;
      }
    }
  }

  void CheckModel() {
    const absl::Status v = alloc_->Validate();
    if (!v.ok()) return Fail(absl::StrCat("Validate: ", v.ToString()));
    for (int k : {kRoot, kA, kB}) {
      const AccountStats st = AccountFor(k)->GetStats();
      if (st.own_bytes != account_own_[k] ||
          st.bytes_in_use != UseOf(k, 0, 0, 0) ||
          st.failures != account_failures_[k]) {
        return Fail(absl::StrFormat(
            "account %s: own %d use %d failures %d; model %d %d %d",
            AccountFor(k)->path(), st.own_bytes, st.bytes_in_use, st.failures,
            account_own_[k], UseOf(k, 0, 0, 0), account_failures_[k]));
      }
    }
    const std::optional<AllocatorStats> so = alloc_->GetStats();
    if (!so) return Fail("no stats");
    const AllocatorStats& s = *so;
    if (s.bytes_in_use != in_use_) {
      return Fail(
          absl::StrCat("bytes_in_use ", s.bytes_in_use, " model ", in_use_));
    }
    if (s.num_allocs != num_allocs_) return Fail("num_allocs");
    if (s.peak_bytes_in_use != peak_) {
      return Fail(absl::StrCat("peak ", s.peak_bytes_in_use, " model ", peak_));
    }
    if (s.largest_alloc_size != largest_) return Fail("largest_alloc_size");
    if (s.num_invalid_frees != invalid_frees_) return Fail("num_invalid_frees");
    if (s.num_invalid_requests != invalid_requests_) {
      return Fail("num_invalid_requests");
    }
    if (s.num_ooms != ooms_) {
      return Fail(absl::StrCat("num_ooms ", s.num_ooms, " model ", ooms_));
    }
    const int64_t pool = *s.pool_bytes;
    if (pool < s.bytes_in_use || static_cast<size_t>(pool) > limit_) {
      return Fail("pool_bytes out of range");
    }
    // Refused memory went back at once: the sub-allocator holds the pool.
    if (static_cast<size_t>(pool) != journal_->bytes_outstanding) {
      return Fail(absl::StrCat("pool ", pool, " but the sub-allocator has ",
                               journal_->bytes_outstanding, " outstanding"));
    }
    if (journal_->invalid_frees != 0)
      return Fail("a Free the sub-allocator rejected");
    // Misaligned, short and overlapping memory is always refused; longer
    // than asked only when it would not fit under the limit.
    const int64_t must_refuse = static_cast<int64_t>(
        journal_->misaligned + journal_->shortened + journal_->overlapping);
    if (s.num_sub_allocator_rejects < must_refuse ||
        s.num_sub_allocator_rejects >
            must_refuse + static_cast<int64_t>(journal_->lengthened)) {
      return Fail("num_sub_allocator_rejects");
    }
    // Live pointers: disjoint, inside memory the sub-allocator holds for us.
    std::vector<std::pair<uintptr_t, uintptr_t>> held;  // merged [lo, hi)
    {
      std::vector<std::pair<uintptr_t, size_t>> blocks = fake_->live_blocks();
      std::sort(blocks.begin(), blocks.end());
      for (const auto& [b, n] : blocks) {
        if (!held.empty() && held.back().second == b) {
          held.back().second = b + n;
        } else {
          held.emplace_back(b, b + n);
        }
      }
    }
    uintptr_t prev_end = 0;
    for (const auto& [a, l] : live_) {
      if (a < prev_end) return Fail(absl::StrFormat("live %#x overlaps", a));
      prev_end = a + l.allocated;
      auto h = std::upper_bound(held.begin(), held.end(),
                                std::make_pair(a, UINTPTR_MAX));
      if (h == held.begin() || std::prev(h)->second < a + l.allocated) {
        return Fail(absl::StrFormat(
            "live %#x+%d is outside sub-allocator memory", a, l.allocated));
      }
    }
    // Spot-check the queries on one live pointer per op (all at teardown).
    if (!live_.empty()) CheckQueries(NthLive(static_cast<uint16_t>(op_index_)));
  }

  void Teardown() {
    for (const auto& [a, l] : live_) CheckQueries(reinterpret_cast<void*>(a));
    if (failed_) return;
    // Free half, destroy with the rest live: every region must go back.
    size_t i = 0;
    std::vector<uintptr_t> victims;
    for (const auto& [a, l] : live_) {
      if (i++ % 2 == 0) victims.push_back(a);
    }
    for (uintptr_t a : victims) FreeAndCheck(reinterpret_cast<void*>(a), 0);
    if (failed_) return;
    CheckModel();
    // Accounts close before their allocator goes; what is still charged is
    // reported, not freed (the allocator's destructor gives it all back).
    for (Account* acc : {b_.get(), a_.get(), root_.get()}) {
      const absl::Status closed = acc->Close();
      const bool charged = acc->GetStats().live_allocations > 0;
      if (closed.ok() == charged) {
        return Fail(
            absl::StrCat("Close of ", acc->path(), ": ", closed.ToString()));
      }
    }
    b_.reset();
    a_.reset();
    root_.reset();
    alloc_.reset();
    if (journal_->bytes_outstanding != 0) {
      return Fail(absl::StrCat("destruction leaked ",
                               journal_->bytes_outstanding,
                               " sub-allocator bytes"));
    }
    if (journal_->invalid_frees != 0) {
      return Fail("destruction made a Free the sub-allocator rejected");
    }
  }

  Reader in_;
  FailFn fail_;
  bool failed_ = false;
  std::string config_;
  std::string last_op_ = "configure";
  size_t op_index_ = 0;
  size_t limit_ = 0;
  bool faulty_ = false;
  bool gc_ = false;
  size_t release_calls_ = 0;  // op 12 calls, to vary what it releases
  std::shared_ptr<testing::SubAllocatorJournal> journal_;
  testing::FakeSubAllocator* fake_ = nullptr;
  // TF's timestamped reuse (op 15): the counter outlives the allocator.
  SharedCounter counter_;
  bool timestamped_ = false;
  uint64_t freed_limit_ = 0;  // freed_by_func's answer; 0: none passed
  std::function<uint64_t()> freed_by_ = [this] { return freed_limit_; };
  std::unique_ptr<Allocator> alloc_;
  // After alloc_: destroyed first.
  std::shared_ptr<Account> root_, a_, b_;
  int64_t root_limit_ = 0, a_limit_ = 0, a_reservation_ = 0;
  int64_t account_own_[4] = {0, 0, 0, 0};
  int64_t account_failures_[4] = {0, 0, 0, 0};
  std::map<uintptr_t, Live> live_;
  std::vector<void*> recently_freed_;
  int64_t in_use_ = 0, num_allocs_ = 0, peak_ = 0, largest_ = 0;
  int64_t invalid_frees_ = 0, invalid_requests_ = 0, ooms_ = 0;
  // Invalid raw calls so far: the allocator logs the first ten in full, then
  // one line each time the count past ten reaches a power of two (README,
  // Guarantees: "Out of memory").
  int64_t raw_invalid_reports_ = 0;
  bool NextInvalidReportIsLogged() {
    const int64_t k = ++raw_invalid_reports_;
    if (k <= 10) return true;
    const int64_t past = k - 10;
    return (past & (past - 1)) == 0;
  }
  int64_t last_id_ = 0;
};

// Runs one input; returns the number of operations it ran.
inline size_t RunInput(const uint8_t* data, size_t size,
                       const Harness::FailFn& fail) {
  Harness h(data, size, fail);
  return h.Run();
}

}  // namespace bfc::fuzz

#endif  // BFC_TESTS_FUZZ_HARNESS_H_
