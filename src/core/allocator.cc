// File: src/core/allocator.cc
// The BFC algorithm. Placement, splitting, merging and growth follow
// TensorFlow's BFCAllocator step by step (see allocator.h for the model); the
// data structures differ where TF's cost is avoidable: bins are B-trees of
// (size, address, handle) keys with a bitmap of non-empty bins, and the region
// map holds one entry per chunk rather than one per 256 bytes.
#include "bfc/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/cleanup/cleanup.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bfc/account.h"
#include "bfc/internal/check.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "bfc/units.h"
#include "core/internal/account_state.h"
#include "core/internal/allocator_accounts_inl.h"
#include "core/internal/bits.h"
#include "core/internal/user_code.h"

namespace bfc {
namespace {

// A pointer as the integer address MemoryEvent records.
uint64_t AddressOf(const void* p) { return reinterpret_cast<uintptr_t>(p); }

using internal::AlignDown;
using internal::AlignUp;
using internal::BinNumForSize;
using internal::CallUserCode;
using internal::Chunk;
using internal::IsAligned;
using internal::IsPowerOfTwo;
using internal::kInvalidBinNum;
using internal::kInvalidChunkHandle;
using internal::RoundedBytes;

constexpr int64_t kDefaultMaxInternalFragmentation = int64_t{128} << 20;
// Invalid frees and requests reported in full per allocator; later ones are
// counted, with one line at each power-of-two count (ReportInvalid).
constexpr int64_t kMaxInvalidInputLogs = 10;
// TF backs off with a float factor; the product is computed in float, which
// matters for which sizes the sub-allocator is asked for.
constexpr float kBackpedalFactor = 0.9f;

// "256B", "1.5KiB", "1.50GiB": TF's HumanReadableNumBytes style, which log
// scrapers of TF's OOM messages expect: no space, one decimal for KiB and
// two above, and the value truncated to whole units of the unit below
// before the last division (so 1 GiB + 1023 B is "1.00GiB", as TF has it).
std::string HumanBytes(uint64_t num_bytes) {
  if (num_bytes < 1024) return absl::StrCat(num_bytes, "B");
  static constexpr char kUnits[] = "KMGTPE";
  int unit = 0;
  while (num_bytes >= uint64_t{1024} * 1024) {
    num_bytes /= 1024;
    ++unit;
  }
  const double value = static_cast<double>(num_bytes) / 1024.0;
  return unit == 0 ? internal::Format("%.1fKiB", value)
                   : internal::Format("%.2f%ciB", value, kUnits[unit]);
}
// A counter: never negative (a negative one would be a bug, shown as 0).
std::string HumanBytes(int64_t num_bytes) {
  return HumanBytes(static_cast<uint64_t>(std::max<int64_t>(num_bytes, 0)));
}

int64_t MaxInternalFragmentation(double fraction, size_t total_memory) {
  if (fraction > 0.0 && fraction <= 1.0) {
    // With total_memory near SIZE_MAX the product reaches 2^64: casting a
    // double at or above 2^63 (exact in double) to int64_t is undefined, and
    // on x86 yields INT64_MIN, which would split every chunk. No chunk can be
    // that large, so the cap saturates.
    const double bytes = fraction * static_cast<double>(total_memory);
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (!(bytes < kTwoTo63)) return std::numeric_limits<int64_t>::max();
    return static_cast<int64_t>(bytes);
  }
  return kDefaultMaxInternalFragmentation;
}

bool SupportsCoalescingNoThrow(const SubAllocator* sub,
                               const std::string& name) {
  if (sub == nullptr) return false;
  bool result = false;
  std::string what;
  if (!CallUserCode([&] { result = sub->SupportsCoalescing(); }, &what)) {
    Log(LogSeverity::kError,
        absl::StrCat("Allocator '", name,
                     "': SubAllocator::SupportsCoalescing threw (", what,
                     "); regions will not be merged"));
    return false;
  }
  return result;
}

// SubAllocator::PartialFreeBytes, 0 when it throws or is not a power of two
// (page arithmetic needs one).
size_t PartialFreeBytesNoThrow(const SubAllocator* sub,
                               const std::string& name) {
  if (sub == nullptr) return 0;
  size_t result = 0;
  std::string what;
  if (!CallUserCode([&] { result = sub->PartialFreeBytes(); }, &what)) {
    Log(LogSeverity::kError,
        absl::StrCat("Allocator '", name,
                     "': SubAllocator::PartialFreeBytes threw (", what,
                     "); only whole regions will be given back"));
    return 0;
  }
  if (result != 0 &&
      (!internal::IsPowerOfTwo(result) || result < kMinAllocationSize)) {
    Log(LogSeverity::kError,
        internal::Format("Allocator '%s': SubAllocator::PartialFreeBytes() = "
                         "%d is not a power of two >= %d; only whole regions "
                         "will be given back",
                         name, result, kMinAllocationSize));
    return 0;
  }
  return result;
}

size_t ReservedAddressBytesNoThrow(const SubAllocator* sub) {
  if (sub == nullptr) return 0;
  size_t result = 0;
  std::string what;
  if (!CallUserCode([&] { result = sub->ReservedAddressBytes(); }, &what)) {
    return 0;
  }
  return result;
}

// pool_release_threshold x limit, saturating; SIZE_MAX when off (or NaN,
// which ValidateAllocatorOptions refuses before an allocator is built).
size_t PoolReleaseTarget(double fraction, size_t limit) {
  if (!(fraction > 0.0)) return std::numeric_limits<size_t>::max();
  const long double target = static_cast<long double>(fraction) * limit;
  if (target >= static_cast<long double>(std::numeric_limits<size_t>::max())) {
    return std::numeric_limits<size_t>::max();
  }
  return static_cast<size_t>(target);
}

}  // namespace

Allocator::Allocator(std::unique_ptr<SubAllocator> sub_allocator,
                     size_t total_memory, std::string name)
    : Allocator(std::move(sub_allocator), total_memory, std::move(name),
                Options()) {}

Allocator::Allocator(std::unique_ptr<SubAllocator> sub_allocator,
                     size_t total_memory, std::string name,
                     const Options& options)
    : sub_allocator_(std::move(sub_allocator)),
      name_(std::move(name)),
      opts_(options),
      memory_limit_(total_memory),
      coalesce_regions_(SupportsCoalescingNoThrow(sub_allocator_.get(), name_)),
      partial_free_bytes_(PartialFreeBytesNoThrow(sub_allocator_.get(), name_)),
      va_reserved_bytes_(ReservedAddressBytesNoThrow(sub_allocator_.get())),
      max_internal_fragmentation_bytes_(MaxInternalFragmentation(
          options.fragmentation_fraction, total_memory)),
      huge_threshold_(options.huge_allocation_bytes == 0 ||
                              options.huge_allocation_bytes >
                                  internal::kMaxRoundableBytes
                          ? std::numeric_limits<size_t>::max()
                          : RoundedBytes(options.huge_allocation_bytes)),
      min_split_remainder_(options.min_split_remainder_bytes == 0
                               ? std::numeric_limits<size_t>::max()
                               : RoundedBytes(std::min<uint64_t>(
                                     options.min_split_remainder_bytes,
                                     internal::kMaxRoundableBytes))),
      max_split_(
          options.max_split_bytes == 0
              ? 0
              : RoundedBytes(std::min<uint64_t>(options.max_split_bytes,
                                                internal::kMaxRoundableBytes))),
      oversize_filter_(max_split_ != 0 && !coalesce_regions_),
      stamp_free_regions_(options.release_before_extend ||
                          options.pool_release_threshold > 0),
      pool_release_target_(
          PoolReleaseTarget(options.pool_release_threshold, total_memory)),
      grow_below_peak_ratio_(
          options.allow_growth && !coalesce_regions_ &&
                  options.grow_below_peak_ratio > 0
              ? static_cast<size_t>(options.grow_below_peak_ratio)
              : 0) {
  Lock lock(this);
  streams_.emplace_back();  // slot 0: kImplicitStream
  stream_slots_.emplace(kImplicitStream, 0);
  // The tables report a growth the host could not serve through
  // kShortPath (bfc/internal/shortage.h); the columns beside the chunk table
  // grow with it, never on their own in the middle of an operation.
  const internal::ShortageSignal shortage(&slow_paths_, kShortPath);
  chunks_.set_shortage_signal(shortage);
  chunks_.set_grow_hook(&Allocator::GrowColumnsHook, this);
  // Chunks tile regions, which the limit bounds, and none is under a
  // granule: the table's range need hold no more (plus a block for the
  // spare slots it keeps ahead).
  chunks_.set_max_chunks(std::min(total_memory / kMinAllocationSize,
                                  internal::ChunkTable::kMaxChunks) +
                         internal::ChunkTable::kBlockChunks);
  region_manager_.set_shortage_signal(shortage);
  for (internal::Bin& bin : bins_) bin.set_shortage_signal(shortage);
  // Room ahead from the start: the map's smallest tables would have too
  // little room past their load bound (shortage.h).
  region_manager_.Reserve(kMinHandleRoom);
  // Without growth the first Extend takes the whole limit; nothing is taken
  // here, so constructing an allocator is free.
  const size_t capped = std::min(total_memory, internal::kMaxRoundableBytes);
  // TF starts growth at 2 MiB (initial_region_bytes' default); 0 means the
  // smallest region, not a zero step that could never double.
  const size_t initial = static_cast<size_t>(
      std::max<uint64_t>(opts_.initial_region_bytes, kMinAllocationSize));
  curr_region_allocation_bytes_ = opts_.allow_growth
                                      ? RoundedBytes(std::min(capped, initial))
                                      : RoundedBytes(capped);
  stats_.bytes_limit = static_cast<int64_t>(std::min<size_t>(
      total_memory, static_cast<size_t>(std::numeric_limits<int64_t>::max())));
  stats_.pool_bytes = 0;
  stats_.peak_pool_bytes = 0;
  if (va_reserved_bytes_ > 0) {
    stats_.va_reserved_bytes = static_cast<int64_t>(std::min<size_t>(
        va_reserved_bytes_,
        static_cast<size_t>(std::numeric_limits<int64_t>::max())));
  }
  if (sub_allocator_ == nullptr) {
    DeferLog(
        LogSeverity::kError,
        absl::StrCat("Allocator '", name_,
                     "' has no sub-allocator; every allocation will fail"));
  }
  if (absl::Status s = ValidateAllocatorOptions(opts_); !s.ok()) {
    DeferLog(LogSeverity::kWarning,
             absl::StrCat("Allocator '", name_, "': ", s.message(),
                          "; the default behaviour is used for it"));
  }
}

Allocator::~Allocator() {
  Lock lock(this);
  int64_t outstanding = 0;
  int64_t outstanding_bytes = 0;
  for (internal::ChunkHandle h = 0; h < chunks_.capacity(); ++h) {
    const Chunk& c = chunks_[h];
    if (c.in_use()) {
      ++outstanding;
      outstanding_bytes += static_cast<int64_t>(c.size);
    }
  }
  if (outstanding > 0) {
    DeferLog(LogSeverity::kWarning,
             internal::Format(
                 "Allocator '%s' destroyed with %d outstanding allocation(s) "
                 "holding %s "
                 "(%d bytes); their memory is returned to the sub-allocator",
                 name_, outstanding, HumanBytes(outstanding_bytes),
                 outstanding_bytes) +
                 LeakReportLocked(/*top_n=*/10));
  }
  if (stream_ops_ != nullptr) {
    for (StreamState& st : streams_) {
      for (const auto& [event, covers] : st.events) {
        CallReleaseEvent(event);
      }
      st.events.clear();
    }
  }
  if (sub_allocator_ != nullptr) {
    // A Free that throws is logged and the others still run.
    for (const internal::AllocationRegion& r : region_manager_.regions()) {
      (void)FreeToSubAllocator(r.ptr(), r.memory_size(), "destruction");
    }
  }
  if (invalid_reports_ > kMaxInvalidInputLogs) {
    DeferLog(
        LogSeverity::kWarning,
        internal::Format("Allocator '%s': %d invalid-input report(s) in all "
                         "were suppressed",
                         name_, invalid_reports_ - kMaxInvalidInputLogs));
  }
  if (oom_logs_suppressed_ > 0) {
    DeferLog(
        LogSeverity::kWarning,
        internal::Format("Allocator '%s': %d out-of-memory report(s) in all "
                         "were suppressed (max_oom_logs=%d)",
                         name_, oom_logs_suppressed_, opts_.max_oom_logs));
  }
}

// --- Request checking --------------------------------------------------------

Allocator::RequestCheck Allocator::CheckRequest(size_t alignment,
                                                size_t num_bytes,
                                                size_t* rounded,
                                                std::string* error) const {
  if (num_bytes == 0) return RequestCheck::kZero;
  if (!IsPowerOfTwo(alignment)) {
    *error = absl::StrCat("alignment ", alignment,
                          " is not a power of two (asked for ", num_bytes,
                          " bytes)");
    return RequestCheck::kInvalid;
  }
  if (num_bytes > internal::kMaxRoundableBytes) {
    *error = absl::StrCat("size ", num_bytes,
                          " bytes overflows when rounded up to a multiple of ",
                          kMinAllocationSize);
    return RequestCheck::kInvalid;
  }
  *rounded = RoundedBytes(num_bytes);
  if (alignment > kMinAllocationSize) {
    if (alignment > memory_limit_) {
      *error = absl::StrCat("alignment ", alignment,
                            " exceeds the allocator's limit of ", memory_limit_,
                            " bytes");
      return RequestCheck::kInvalid;
    }
    if (*rounded >
        std::numeric_limits<size_t>::max() - (alignment - kMinAllocationSize)) {
      *error = absl::StrCat("size ", num_bytes, " bytes with alignment ",
                            alignment, " overflows once padded for alignment");
      return RequestCheck::kInvalid;
    }
  }
  return RequestCheck::kOk;
}

// --- Allocation --------------------------------------------------------------
//
// The path, in the order a request meets it:
//
//   AllocateRaw / Allocate
//     AllocateFast     a plainly valid request served by a free chunk: one
//                      lock, FindChunk + AllocateChunk, nothing else
//     AllocateSlow     everything else: CheckRequest (zero, bad alignment,
//                      overflow), then AllocateOrFail
//   AllocateOrFail     one attempt, or (retry on) attempts until
//                      retry_timeout as other threads free; then the OOM
//                      count and log
//   AllocateLocked     one attempt (TF: AllocateRawInternal): FindChunk;
//                      else Extend and FindChunk; else give fully-free
//                      regions back, Extend and FindChunk
//   FindChunk          best fit: the first chunk >= the request in size,
//                      address order, from the request's bin upward; taken
//                      out of its bin
//   AllocateChunk      splits off an alignment prefix and a remainder worth
//                      keeping (TF's split rule), marks the chunk in use,
//                      counts it
//   Extend             a new region from the sub-allocator (growth policy,
//                      limit, back-off on failure)

ABSL_ATTRIBUTE_ALWAYS_INLINE inline bool Allocator::FastPathBytes(
    size_t alignment, size_t num_bytes, size_t* rounded) const {
  if (alignment > kMinAllocationSize || !IsPowerOfTwo(alignment) ||
      num_bytes - 1 >= internal::kMaxRoundableBytes) {
    return false;
  }
  *rounded = RoundedBytes(num_bytes);
  // A huge request never takes a pooled chunk: it gets its own region.
  return ABSL_PREDICT_TRUE(*rounded < huge_threshold_);
}

// Fast path: a valid request at the default alignment that an existing free
// chunk satisfies. FindChunk changes nothing when it finds nothing, so a miss
// falls through to AllocateSlow, which checks the request in full and repeats
// the search before growing (or waiting), exactly as without this path.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void* Allocator::AllocateFast(
    size_t alignment, size_t num_bytes) {
  if (size_t rounded;
      ABSL_PREDICT_TRUE(FastPathBytes(alignment, num_bytes, &rounded))) {
    // A plain lock, taken and released by hand: the fast branch never logs
    // (what a validation at check level 2 queues is sent below), and
    // Lock's check for queued messages on every call, or a local queue to
    // take them into, cost 1-6 % per allocate-free pair. What the slow
    // branch queued (a StreamOps failure) leaves the queue as the lock is
    // released (UnlockAndSendDeferredLogs), so no other thread's call sends
    // it.
    mutex_.Lock();
    void* ptr;
    try {
      if (ABSL_PREDICT_TRUE(slow_paths_ == 0)) {
        const ChunkHandle h = FindChunk</*kMaySlow=*/false>(alignment, rounded);
        ptr = h == kInvalidChunkHandle ? nullptr
                                       : AllocateChunk</*kMaySlow=*/false>(
                                             h, alignment, rounded, num_bytes);
        // The queue first: empty on almost every call, so the check level's
        // once-read flag is looked at only when something was queued.
        if (ABSL_PREDICT_TRUE(deferred_logs_.empty()) ||
            !internal::ValidateEveryCall()) {
          mutex_.Unlock();
          return ptr;
        }
      } else {
        ptr = AllocateFastSlow(alignment, rounded, num_bytes);
        if (ABSL_PREDICT_TRUE(deferred_logs_.empty())) {
          mutex_.Unlock();
          return ptr;
        }
      }
    } catch (...) {
      mutex_.Unlock();  // as in DeallocateRaw
      throw;
    }
    UnlockAndSendDeferredLogs();
    return ptr;
  }
  return nullptr;
}

void* Allocator::AllocateChargedFast(size_t alignment, size_t num_bytes,
                                     internal::AccountState* st) {
  size_t rounded;
  if (!FastPathBytes(alignment, num_bytes, &rounded)) return nullptr;
  const int64_t bytes = static_cast<int64_t>(rounded);
  Lock lock(this);
  if (ABSL_PREDICT_FALSE(slow_paths_ != 0) || st->allocator != this ||
      st->closed) {
    return nullptr;
  }
  // The chunk first: a request the pool cannot serve now changes no
  // account (not even a peak).
  const ChunkHandle h = FindChunk</*kMaySlow=*/false>(alignment, rounded);
  if (h == kInvalidChunkHandle) return nullptr;
  // Inside the account's reservation the charge stays there; above it,
  // each level is checked, then charged.
  if (!TryChargeAccountLocked(st, bytes)) {
    // A limit refuses: the chunk goes back where it was (the bins are
    // ordered, so exactly), and AllocateOrFail says which limit.
    InsertFreeChunkIntoBin(h);
    return nullptr;
  }
  // Charged, not yet on a chunk: what Validate counts until the tag.
  st->pending += bytes;
  void* ptr =
      AllocateChunk</*kMaySlow=*/false>(h, alignment, rounded, num_bytes);
  TagChunkLocked(h, st);
  return ptr;
}

ABSL_ATTRIBUTE_NOINLINE void* Allocator::AllocateFastSlow(size_t alignment,
                                                          size_t rounded,
                                                          size_t num_bytes) {
  // This call's own: another thread's call may have left its values while
  // it waits unlocked (the retry wait, its freed_by_func, its OOM report),
  // and its freed_by_func bound would narrow this search to a worse fit.
  alloc_stream_ = 0;
  alloc_host_ready_ = false;
  alloc_freed_before_ = 0;
  // Host memory ran short: AllocateLocked grows the tables first.
  if (slow_paths_ & kShortPath) return nullptr;
  if (timing_counter_ != nullptr) MergeTimestampedChunks(0);
  const ChunkHandle h = FindChunk(alignment, rounded);
  if (h == kInvalidChunkHandle) return nullptr;
  return AllocateChunk(h, alignment, rounded, num_bytes);
}

void* Allocator::AllocateRaw(size_t alignment, size_t num_bytes) {
  void* ptr = AllocateFast(alignment, num_bytes);
  if (ABSL_PREDICT_TRUE(ptr != nullptr)) return ptr;
  return AllocateSlow(alignment, num_bytes, AllocationAttributes());
}

void* Allocator::AllocateRaw(size_t alignment, size_t num_bytes,
                             const AllocationAttributes& attr) {
  // A dedicated request never takes a pooled chunk; the fast path is the
  // implicit stream's, without an account to charge.
  void* ptr = !FastPathAttributes(attr) ? nullptr
              : attr.account == nullptr
                  ? AllocateFast(alignment, num_bytes)
                  : AllocateChargedFast(alignment, num_bytes,
                                        attr.account->state_.get());
  if (ABSL_PREDICT_TRUE(ptr != nullptr)) return ptr;
  return AllocateSlow(alignment, num_bytes, attr);
}

void* Allocator::AllocateSlow(size_t alignment, size_t num_bytes,
                              const AllocationAttributes& attr) {
  size_t rounded = 0;
  std::string error;
  RequestCheck check;
  try {
    check = CheckRequest(alignment, num_bytes, &rounded, &error);
  } catch (...) {
    // Only the message can throw (no host memory for it): still invalid.
    check = RequestCheck::kInvalid;
  }
  switch (check) {
    case RequestCheck::kZero:
      return nullptr;  // TF: a zero-byte request gets nullptr, nothing else.
    case RequestCheck::kInvalid: {
      Lock lock(this);
      ++stats_.num_invalid_requests;
      ReportInvalid([&] { return absl::StrCat("AllocateRaw: ", error); });
      MaybeValidate("AllocateRaw (invalid request)");
      return nullptr;
    }
    case RequestCheck::kOk:
      break;
  }
  return AllocateOrFail(alignment, num_bytes, rounded, attr);
}

absl::StatusOr<void*> Allocator::Allocate(size_t num_bytes, size_t alignment,
                                          const AllocationAttributes& attr) {
  size_t rounded = 0;
  std::string error;
  switch (CheckRequest(alignment, num_bytes, &rounded, &error)) {
    case RequestCheck::kZero:
      return absl::InvalidArgumentError(absl::StrCat(
          "Allocator '", name_,
          "': Allocate of 0 bytes (AllocateRaw returns nullptr for it)"));
    case RequestCheck::kInvalid: {
      Lock lock(this);
      ++stats_.num_invalid_requests;
      MaybeValidate("Allocate (invalid request)");
      return absl::InvalidArgumentError(
          absl::StrCat("Allocator '", name_, "': ", error));
    }
    case RequestCheck::kOk:
      break;
  }
  absl::Status failure;
  void* ptr = AllocateOrFail(alignment, num_bytes, rounded, attr, &failure);
  if (ptr != nullptr) return ptr;
  return failure;
}

void Allocator::DeferReport(LogSeverity severity,
                            absl::FunctionRef<std::string()> build) const {
  // Only when the host can spare the memory (see HostHasRoomFor); and
  // nothing may be thrown from here.
  if (!internal::HostHasRoomFor(kReportRoomBytes)) return;
  try {
    DeferLog(severity, build());
  } catch (...) {
  }
}

void Allocator::DeferLog(LogSeverity severity, std::string message) const {
  try {
    deferred_logs_.emplace_back(severity, std::move(message));
  } catch (...) {
    // No host memory for the queue: sent now, under the lock (the sink then
    // must not call back, as before deferral existed), rather than lost.
    Log(severity, message);
  }
}

ABSL_ATTRIBUTE_NOINLINE void Allocator::UnlockAndSendDeferredLogs() const {
  internal::LogQueue logs;
  logs.swap(deferred_logs_);
  mutex_.Unlock();
  SendLogs(logs);
}

void* Allocator::AllocateOrFail(size_t alignment, size_t num_bytes,
                                size_t rounded,
                                const AllocationAttributes& attr,
                                absl::Status* failure) {
  uint64_t freed_before = FreedBefore(attr);
  Lock lock(this);
  // Only this call's searches are limited by its freed_by_func.
  absl::Cleanup no_limit = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    alloc_freed_before_ = 0;
  };
  const bool dedicated = attr.dedicated || rounded >= huge_threshold_;
  StreamSlot slot = 0;
  if (ABSL_PREDICT_FALSE(attr.stream != kImplicitStream)) {
    absl::StatusOr<StreamSlot> s = SlotFor(attr.stream);
    if (!s.ok()) {
      if (failure != nullptr) *failure = s.status();
      return nullptr;
    }
    slot = *s;
  }
  // An account is charged by each attempt (what a limit refuses never
  // touches the pool) and credited again when the attempt fails: a call
  // waiting for memory holds no charge, so it neither refuses other calls
  // near the limit (a review: a spurious refusal that no order of the two
  // calls explains) nor blocks its account's close for longer than the
  // call. in_flight counts the call meanwhile (Close refuses).
  internal::AccountState* account = nullptr;
  absl::Status account_refusal;  // the last attempt's, when a limit refused
  if (ABSL_PREDICT_FALSE(attr.account != nullptr)) {
    account = attr.account->state_.get();
    // Of another allocator or closed: nothing to wait for.
    if (account->allocator != this || account->closed) {
      absl::Status refused = AccountChargeFailureLocked(account, rounded);
      if (failure != nullptr) *failure = std::move(refused);
      return nullptr;
    }
    ++account->in_flight;
  }
  absl::Cleanup done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (account == nullptr) return;
    // The last call in flight on an account whose handle is gone makes the
    // close the handle's destruction could not (see ~Account).
    if (--account->in_flight == 0 && account->handle == nullptr &&
        !account->closed) {
      (void)CloseAccountLocked(account);
    }
    MaybeForgetAccountLocked(account);
  };
  // One attempt; AllocateChunk tags the chunk with the account (the lock
  // is held throughout, so no other call sees alloc_account_).
  auto attempt = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> void* {
    if (account != nullptr) {
      absl::Status charged = ChargeForAllocationLocked(account, rounded);
      if (!charged.ok()) {
        account_refusal = std::move(charged);
        return nullptr;
      }
      account_refusal = absl::OkStatus();
      account->pending += static_cast<int64_t>(rounded);
    }
    alloc_account_ = account;
    // Also if something below throws: a later allocation must not be tagged
    // to this account (which may be gone by then), and the charge goes back.
    bool placed = false;
    absl::Cleanup forget = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      alloc_account_ = nullptr;
      // Placed, the chunk's tag took the charge over (TagChunkLocked).
      if (account != nullptr && !placed) {
        account->pending -= static_cast<int64_t>(rounded);
        CreditAccountLocked(account, static_cast<int64_t>(rounded));
      }
    };
    void* p = AllocateLocked(alignment, num_bytes, rounded, dedicated);
    placed = p != nullptr;  // then charged for good
    return p;
  };
  // The failure of a call whose last attempt a limit refused: that
  // refusal, counted once per call in the account's failures.
  auto refused = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    internal::AddRelaxed(account->failures, 1);
    if (failure != nullptr) *failure = account_refusal;
    MaybeValidate("Allocate (account limit)");
    return nullptr;
  };
  alloc_stream_ = slot;
  alloc_host_ready_ = attr.host_ready;
  alloc_freed_before_ = freed_before;
  void* ptr = attempt();
  if (ptr != nullptr) return ptr;
  // Refused by a limit before memory was looked for: no wait (TF's retry
  // waits for memory, not for another caller's charge to go).
  if (!account_refusal.ok()) return refused();
  absl::Status cause = FailureCauseLocked();
  // Waiting helps only when another thread can make room: by a free or a
  // release of memory this allocator holds. It cannot when the pool is empty
  // (nobody holds anything of ours), when the sub-allocator can never
  // allocate, threw, or is missing (`cause`), or for a request larger than
  // the whole limit.
  auto waiting_can_help = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return cause.ok() && *stats_.pool_bytes > 0;
  };
  if (opts_.allow_retry_on_failure && attr.retry_on_failure &&
      rounded <= memory_limit_ && waiting_can_help()) {
    // Only a request that failed once pays for reading the clock.
    const absl::Time deadline = absl::Now() + opts_.retry_timeout;
    while (absl::Now() < deadline && waiting_can_help()) {
      // Everything that makes room signals the condition variable while
      // someone waits, so each gets the waiter one more attempt, as TF's
      // AllocatorRetry does for frees.
      ++num_waiters_;
      ++stats_.num_retries;
      if (ABSL_PREDICT_TRUE(deferred_logs_.empty())) {
        freed_cv_.WaitWithDeadline(&mutex_, deadline);
      } else {
        // What the attempt queued is sent before sleeping (plain-locked
        // fast paths send nothing). Room made while the lock is released
        // for that signals no one yet; num_waiters_ is already raised, so
        // it is counted in wakes_, and this call tries again at once.
        const uint64_t wakes = wakes_;
        UnlockAndSendDeferredLogs();
        mutex_.Lock();
        if (wakes_ == wakes) freed_cv_.WaitWithDeadline(&mutex_, deadline);
      }
      --num_waiters_;
      if (attr.freed_by_func != nullptr) {
        // TF asks again on every attempt (the device may have moved on), and
        // never with the lock held.
        mutex_.Unlock();
        freed_before = FreedBefore(attr);
        mutex_.Lock();
      }
      alloc_stream_ = slot;  // another thread's call may have set them
      alloc_host_ready_ = attr.host_ready;
      alloc_freed_before_ = freed_before;
      ptr = attempt();
      if (ptr != nullptr) return ptr;
      // A limit's refusal ends the call, as on the first attempt.
      if (!account_refusal.ok()) return refused();
      cause = FailureCauseLocked();
    }
  }
  ++stats_.num_ooms;
  if (history_ != nullptr) {
    RecordEvent(MemoryEvent::Action::kOutOfMemory, 0, num_bytes, 0, -1,
                memory_limit_ - total_region_allocated_bytes_);
  }
  // TF logs non-retryable failures too: the caller may have a fallback, but
  // the user may want to know memory was short. Built here, sent once the
  // lock is released (Lock): a sink may then look at this allocator or
  // others (their usage, on this one's out-of-memory) without two
  // allocators' locks ever being held at once (each waiting for the other's,
  // as both log).
  std::vector<std::pair<LogSeverity, std::string>> report;
  if (attr.retry_on_failure) {
    LogOom(num_bytes, rounded, alignment, cause, &report);
  } else {
    LogOomNote(num_bytes, cause, &report);
  }
  if (failure != nullptr) {
    *failure = cause;
    if (cause.ok()) {
      // Described when the host can spare the memory (see HostHasRoomFor).
      *failure = absl::Status(absl::StatusCode::kResourceExhausted, "");
      if (internal::HostHasRoomFor(kReportRoomBytes)) {
        try {
          *failure = absl::ResourceExhaustedError(
              OomMessage(num_bytes, rounded, alignment));
        } catch (...) {
        }
      }
    }
  }
  MaybeValidate("AllocateRaw (out of memory)");
  // Sent when `lock` is released, after the charge went back (`uncharge`
  // runs first).
  for (auto& [severity, message] : report) {
    DeferLog(severity, std::move(message));
  }
  return nullptr;
}

absl::Status Allocator::FailureCauseLocked() const {
  if (sub_allocator_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("Allocator '", name_, "' has no sub-allocator"));
  }
  if (!extend_error_.ok()) return extend_error_;
  absl::Status available;
  std::string what;
  if (!internal::CallUserCodeDeferringLogs(
          &deferred_logs_, [&] { available = sub_allocator_->Availability(); },
          &what)) {
    return absl::InternalError(absl::StrCat(
        "Allocator '", name_, "': SubAllocator::Availability threw: ", what));
  }
  if (available.ok()) return available;
  return absl::Status(available.code(),
                      absl::StrCat("Allocator '", name_,
                                   "': the sub-allocator cannot allocate: ",
                                   available.message()));
}

bool Allocator::FreeToSubAllocator(void* ptr, size_t num_bytes,
                                   const char* why) {
  std::string what;
  (void)SubAllocator::TakeFreeFailure(&what);  // not this call's
  what.clear();
  if (internal::CallUserCodeDeferringLogs(
          &deferred_logs_, [&] { sub_allocator_->Free(ptr, num_bytes); },
          &what) &&
      !SubAllocator::TakeFreeFailure(&what)) {
    return true;
  }
  ++sub_failures_.free_exceptions;
  sub_failures_.bytes_abandoned += static_cast<int64_t>(num_bytes);
  // The counts record it regardless of the report (DeferReport).
  DeferReport(LogSeverity::kError, [&] {
    return internal::Format(
        "Allocator '%s': SubAllocator::Free(%p, %d bytes) during %s failed: "
        "%s; the region is forgotten (never used or freed again) and still "
        "counts against the limit",
        name_, ptr, num_bytes, why, what);
  });
  return false;
}

Allocator::SubAllocatorFailures Allocator::sub_allocator_failures() const {
  Lock lock(this);
  return sub_failures_;
}

int64_t Allocator::num_oom_logs_suppressed() const {
  Lock lock(this);
  return oom_logs_suppressed_;
}

void* Allocator::AllocateLocked(size_t alignment, size_t num_bytes,
                                size_t rounded, bool dedicated) {
  extend_error_ = absl::OkStatus();
  // The tables' room ahead (shortage.h): made here, before anything
  // changes, when a growth failed or the chunk table has never grown.
  if (ABSL_PREDICT_FALSE((slow_paths_ & kShortPath) ||
                         chunks_.spare() <= internal::kSpareEntries) &&
      !RefillTablesLocked()) {
    // Nothing was changed: the request fails whole, as out of memory.
    try {
      extend_error_ = absl::ResourceExhaustedError(
          "the host has no memory for the allocator's own tables");
    } catch (...) {
      extend_error_ = absl::ResourceExhaustedError("");
    }
    return nullptr;
  }
  if (dedicated) {
    // The place its free may park it (FreeDedicated) is made now, where
    // failing is allowed.
    const auto regions = static_cast<size_t>(num_dedicated_regions_);
    if (pending_dedicated_.capacity() <= regions) {
      try {
        pending_dedicated_.reserve(
            std::max<size_t>(regions + 1, 2 * pending_dedicated_.capacity()));
      } catch (...) {
        extend_error_ =
            internal::NoHostMemoryStatus("the allocator's own tables");
        return nullptr;
      }
    }
    // Exact memory of its own, handed out whole; on failure, fully-free
    // regions are given back (with garbage_collection) and it is tried once
    // more, as for a pooled request.
    // The options that give memory back before the pool grows apply to it
    // as to a pooled request (they did not: a review saw the pool double
    // past its peak, and a request fail that a release would have served).
    ReleaseBeforeExtend(rounded);
    ChunkHandle d = kInvalidChunkHandle;
    if (!Extend(alignment, rounded, &d) && DeallocateFreeRegions(rounded)) {
      (void)Extend(alignment, rounded, &d);
    }
    if (d == kInvalidChunkHandle) return nullptr;
    stats_.huge_bytes_in_use += static_cast<int64_t>(chunks_[d].size);
    return AllocateChunk(d, alignment, rounded, num_bytes, /*may_split=*/false);
  }
  // TF: queued timestamped chunks whose counts became safe merge first.
  if (ABSL_PREDICT_FALSE(timing_counter_ != nullptr)) {
    MergeTimestampedChunks(0);
  }
  grow_instead_ = false;
  ChunkHandle h = FindChunk(alignment, rounded);
  if (ABSL_PREDICT_FALSE(multi_stream_) && h == kInvalidChunkHandle) {
    // Nothing safe for this stream yet: what completed since, then what a
    // wait makes safe, before growing.
    h = FindChunkAcrossStreams(alignment, rounded, /*any_size=*/false);
  }
  if (h == kInvalidChunkHandle) {
    {
      // What the pool grows by is the region the growth policy takes, not
      // the request: judged by the request, a floor let each small request
      // raise the peak by up to the floor while free regions stayed.
      size_t curr = curr_region_allocation_bytes_;
      bool doubled;
      ReleaseBeforeExtend(GrowthStep(
          rounded, std::numeric_limits<size_t>::max(), &curr, &doubled));
    }
    // A chunk of any size may serve the request once the pool has grown for
    // it: a new region larger than max_split_bytes is the request's own.
    if (opts_.extend_by_missing_tail && coalesce_regions_ &&
        opts_.allow_growth) {
      // Memory appended to the highest region joins its free tail: ask only
      // for what the tail lacks. The sub-allocator may put it elsewhere;
      // then the full request is asked for next.
      const size_t tail = alignment > kMinAllocationSize ? 0 : FreeTailBytes();
      ChunkHandle grown = kInvalidChunkHandle;
      if (tail > 0 && tail < rounded &&
          Extend(kMinAllocationSize, rounded - tail, nullptr, &grown)) {
        h = FindChunkForAnyStream(alignment, rounded);
        // Put elsewhere, the memory is given back before the full request
        // is asked for: kept, it took the limit's room for it (a review saw
        // requests fail that fit, and a failed one grow the pool).
        if (h == kInvalidChunkHandle) GiveBackFreeChunk(grown);
      }
    }
    if (h == kInvalidChunkHandle && Extend(alignment, rounded)) {
      h = FindChunkForAnyStream(alignment, rounded);
    }
    // The growth that was to spare a large chunk failed: the chunk serves,
    // found as it was (for another stream's chunk, with the wait that
    // makes it safe).
    if (h == kInvalidChunkHandle && grow_instead_) {
      h = FindChunk(alignment, rounded, /*any_size=*/false,
                    /*unsafe_ok=*/false, /*whole_ok=*/true);
      if (ABSL_PREDICT_FALSE(multi_stream_) && h == kInvalidChunkHandle) {
        h = FindChunkAcrossStreams(alignment, rounded, /*any_size=*/false,
                                   /*whole_ok=*/true);
      }
    }
    // Out of memory with other streams' frees pending: wait for them all
    // (PyTorch's synchronize_and_free_events), then look again.
    if (ABSL_PREDICT_FALSE(multi_stream_) && h == kInvalidChunkHandle) {
      (void)SynchronizeAllStreams();
      MergeDeferred();
      h = FindChunkForAnyStream(alignment, rounded);
    }
    // TF: rather than fail a request without a count limit, merge queued
    // timestamped chunks, unsafe ones too, until one large enough forms.
    if (ABSL_PREDICT_FALSE(TimestampQueueNonEmpty()) &&
        h == kInvalidChunkHandle && alloc_freed_before_ == 0 &&
        MergeTimestampedChunks(rounded)) {
      h = FindChunkForAnyStream(alignment, rounded);
    }
    // Last resort before failing: give fully-free regions back so the
    // sub-allocator can hand out one larger region.
    if (h == kInvalidChunkHandle && DeallocateFreeRegions(rounded) &&
        Extend(alignment, rounded)) {
      h = FindChunkForAnyStream(alignment, rounded);
    }
  }
  if (h == kInvalidChunkHandle) return nullptr;
  if (ABSL_PREDICT_FALSE(alloc_host_ready_)) {
    const absl::Status ready = MakeHostReady(h);
    if (!ready.ok()) {
      InsertFreeChunkIntoBin(h);
      // Fresh memory instead (in multi-stream mode a new region joins only
      // neighbours whose work is done, see Extend): a chunk that cannot be
      // shown safe (a stream forgotten without its event, a failing
      // StreamOps) failed requests the pool had room for (a review). Without
      // it the call fails with the cause, not as out of memory.
      ChunkHandle grown = kInvalidChunkHandle;
      if (!multi_stream_ || !Extend(alignment, rounded, nullptr, &grown) ||
          chunks_[grown].size < rounded) {
        if (extend_error_.ok()) extend_error_ = ready;
        return nullptr;
      }
      RemoveFreeChunkFromBin(grown);
      h = grown;
    }
  }
  return AllocateChunk(h, alignment, rounded, num_bytes);
}

absl::Status Allocator::MakeHostReady(ChunkHandle h) {
  // Used at once by the host or any stream (AllocationAttributes::
  // host_ready): the host waits for the work that may still use it. A
  // stream wait, or this stream's own order, would not keep the host or
  // another stream off it (a review: a pinned buffer the host writes while
  // a copy on another stream still reads it).
  if (multi_stream_) {
    const uint64_t fence = chunks_[h].fence;
    if (fence == 0 || FenceComplete(fence)) return absl::OkStatus();
    if (FenceDead(fence)) {
      return absl::FailedPreconditionError(
          "the memory's stream was forgotten without its last event");
    }
    return SynchronizeFence(fence);
  }
  // One stream so far: frees carry no fence, so any free chunk may still be
  // used by work on the implicit stream (a review: 0 waits, and the host
  // wrote memory a kernel used). The host waits for that stream.
  if (stream_ops_ == nullptr) return absl::OkStatus();
  absl::StatusOr<StreamOps::Event> e = CallRecordEvent(kImplicitStream);
  if (!e.ok()) {
    StreamOpFailed(e.status());
    return e.status();
  }
  ++stream_stats_.events_recorded;
  ++stream_stats_.synchronizations;
  absl::Status s = CallSynchronizeEvent(*e);
  if (!s.ok()) StreamOpFailed(s);
  CallReleaseEvent(*e);
  return s;
}

Allocator::ChunkHandle Allocator::FindChunkAcrossStreams(size_t alignment,
                                                         size_t rounded_bytes,
                                                         bool any_size,
                                                         bool whole_ok) {
  // What other streams freed may have completed since: look (one query per
  // recorded event), after recording events for the best fit's streams so
  // that the next look can see them.
  ChunkHandle best = FindChunk(alignment, rounded_bytes, any_size,
                               /*unsafe_ok=*/true, whole_ok);
  if (best == kInvalidChunkHandle) return kInvalidChunkHandle;
  const uint64_t fence = chunks_[best].fence;
  InsertFreeChunkIntoBin(best);  // back, unchanged
  CoverFence(fence);
  PollStreams();
  MergeDeferred();
  ChunkHandle h = FindChunk(alignment, rounded_bytes, any_size,
                            /*unsafe_ok=*/false, whole_ok);
  if (h != kInvalidChunkHandle) return h;
  if (!opts_.reuse_allow_internal_dependencies || stream_ops_ == nullptr) {
    return kInvalidChunkHandle;
  }
  // The best fit, once this stream waits for the work still using it.
  h = FindChunk(alignment, rounded_bytes, any_size, /*unsafe_ok=*/true,
                whole_ok);
  if (h == kInvalidChunkHandle) return kInvalidChunkHandle;
  if (!InsertWaits(chunks_[h].fence, alloc_stream_).ok()) {
    InsertFreeChunkIntoBin(h);
    return kInvalidChunkHandle;
  }
  return h;
}

// --- TF's timestamped reuse
// ---------------------------------------------------

void Allocator::SetTimingCounter(SharedCounter* counter) {
  Lock lock(this);
  if (counter == nullptr) return;  // TF never turns it off
  // The free counts' column, as large as the chunk table (GrowColumns keeps
  // it so); without the host memory for it, timestamped reuse stays off.
  try {
    freed_at_.resize(std::max(freed_at_.size(), chunks_.handle_bound()), 0);
  } catch (...) {
    DeferReport(LogSeverity::kError, [] {
      return std::string(
          "SetTimingCounter: the host has no memory for the free counts; "
          "timestamped reuse stays off");
    });
    return;
  }
  timing_counter_ = counter;
  slow_paths_ |= kTimestampsPath;
  has_timing_counter_.store(true, std::memory_order_release);
}

void Allocator::SetSafeFrontier(uint64_t count) {
  Lock lock(this);
  if (count <= safe_frontier_) return;
  safe_frontier_ = count;
  // Waiting allocations may now merge (and so fit): TF's NotifyDealloc.
  WakeWaiters();
}

uint64_t Allocator::FreedBefore(const AllocationAttributes& attr) {
  // Without a timing counter every count is 0: the answer could not
  // change anything, so the caller's function is not run.
  if (attr.freed_by_func == nullptr || *attr.freed_by_func == nullptr ||
      !has_timing_counter_.load(std::memory_order_acquire)) {
    return 0;
  }
  uint64_t count = 0;
  std::string what;
  if (!CallUserCode([&] { count = (*attr.freed_by_func)(); }, &what)) {
    // Reported when the host can spare the memory (see HostHasRoomFor).
    if (internal::HostHasRoomFor(kReportRoomBytes)) {
      try {
        Log(LogSeverity::kError,
            absl::StrCat("Allocator '", name_,
                         "': AllocationAttributes::freed_by_func threw: ", what,
                         "; allocating without a free-count limit"));
      } catch (...) {
      }
    }
    return 0;
  }
  return count;
}

ABSL_ATTRIBUTE_NOINLINE void Allocator::FreeDedicated(
    ChunkHandle h, const internal::AllocationRegion& r) {
  // Its own region, its only chunk: given back at once, never pooled.
  stats_.huge_bytes_in_use -= static_cast<int64_t>(chunks_[h].size);
  if (ABSL_PREDICT_FALSE(!FenceComplete(chunks_[h].fence)) &&
      !SynchronizeFence(chunks_[h].fence).ok()) {
    // Its stream's work must be done before it goes back (as cudaFree
    // synchronizes); it could not be waited for (logged), so it stays,
    // unused, until its fence is known complete. (Room made when it was
    // allocated.)
    BFC_DCHECK_LT(pending_dedicated_.size(), pending_dedicated_.capacity());
    pending_dedicated_.push_back(h);
    MaybeValidate("Deallocate (dedicated region, pending)");
    return;
  }
  (void)ReleaseRegionLocked(r, /*binned=*/false);
  WakeWaiters();
  MaybeValidate("Deallocate (dedicated region)");
}

// Out of line: the paths without a timing counter only test the pointer.
ABSL_ATTRIBUTE_NOINLINE void Allocator::FreeTimestamped(ChunkHandle h) {
  // TF: stamped with the next count and queued, not coalesced, until its
  // count is safe (MergeTimestampedChunks).
  freed_at_[h] = static_cast<uint64_t>(timing_counter_->next());
  QueueTimestamped(h);
  BinFreeChunk(h, "Deallocate (timestamped)");
}

ABSL_ATTRIBUTE_NOINLINE void Allocator::SplitSlow(ChunkHandle h,
                                                  ChunkHandle nh) {
  const uint64_t fence = chunks_[h].fence;
  if (fence != 0) {
    // The remainder was used (or is pending) exactly as the whole was.
    chunks_[nh].fence = fence;
    RefFence(fence);
    ListFenced(nh);
  }
  if (timing_counter_ != nullptr) SplitFreedAt(h, nh);
}

ABSL_ATTRIBUTE_NOINLINE void Allocator::MergeSlow(ChunkHandle h1,
                                                  ChunkHandle h2) {
  Chunk& c1 = chunks_[h1];
  Chunk& c2 = chunks_[h2];
  if ((c1.fence | c2.fence) != 0) {
    c1.fence = JoinFences(c1.fence, c2.fence);
    c2.fence = 0;  // its reference went to the join
    if (c1.fence != 0) ListFenced(h1);
  }
  if (timing_counter_ != nullptr) MergeFreedAt(h1, h2);
}

void Allocator::SplitFreedAt(ChunkHandle h, ChunkHandle nh) {
  // TF: the remainder inherits the free count. Unlike TF it is queued too,
  // so that it merges with its neighbours once safe (TF leaves it apart for
  // good: fragmentation that only grows).
  const uint64_t count = FreedAt(h);
  if (count != 0) freed_at_[nh] = count;
  QueueTimestamped(nh);
}

void Allocator::QueueTimestamped(ChunkHandle h) {
  try {
    timestamped_chunks_.push_back(h);
  } catch (...) {
    timestamp_queue_lost_ = true;
  }
}

void Allocator::MergeFreedAt(ChunkHandle h1, ChunkHandle h2) {
  // TF: the later free count.
  const uint64_t count = std::max(FreedAt(h1), FreedAt(h2));
  freed_at_[h2] = 0;
  freed_at_[h1] = count;
}

ABSL_ATTRIBUTE_NOINLINE void Allocator::ForgetFreedAt(ChunkHandle h) {
  if (h < freed_at_.size()) freed_at_[h] = 0;
}

bool Allocator::MergeTimestampedChunks(size_t required_bytes) {
  bool satisfied = required_bytes == 0;
  // A queued handle may be stale (merged away, reallocated, or its slot
  // recycled for another chunk): only a free, binned chunk that the map
  // still resolves is merged, whichever chunk it now is (as in TF).
  auto still_queued_chunk =
      [&](ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        if (!chunks_.InRange(h)) return false;
        const Chunk& c = chunks_[h];
        return c.ptr != nullptr && !c.in_use() &&
               region_manager_.get_handle(c.ptr) == h &&
               bins_[BinNumForSize(c.size)].Contains(c.size, c.ptr);
      };
  // The host memory first (short of it, nothing merges now: the request
  // may grow the pool or fail instead): a queue lost for want of it is
  // rebuilt from the bins, every free chunk that may merge in its place.
  std::vector<void*> to_merge;
  try {
    if (timestamp_queue_lost_) {
      timestamped_chunks_.clear();
      for (const internal::Bin& bin : bins_) {
        bin.ForEach([&](const internal::Bin::Entry& e)
                        ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
                          timestamped_chunks_.push_back(e.handle);
                        });
      }
      timestamp_queue_lost_ = false;
    }
    to_merge.reserve(timestamped_chunks_.size());
  } catch (...) {
    return required_bytes == 0;
  }
  // The entries kept move to the front, in order.
  size_t kept = 0;
  for (size_t i = 0; i < timestamped_chunks_.size(); ++i) {
    const ChunkHandle h = timestamped_chunks_[i];
    if (!still_queued_chunk(h)) continue;
    const uint64_t count = FreedAt(h);
    if (count == 0) {
      to_merge.push_back(chunks_[h].ptr);
    } else if (count < safe_frontier_) {
      freed_at_[h] = 0;  // safe from now on
      to_merge.push_back(chunks_[h].ptr);
    } else if (required_bytes > 0) {
      to_merge.push_back(chunks_[h].ptr);
    } else {
      timestamped_chunks_[kept++] = h;
    }
  }
  timestamped_chunks_.resize(kept);
  // A standard merge takes them all; a forced one (counts ignored) stops
  // once a chunk of required_bytes formed and queues the rest again.
  force_timestamp_merge_ = required_bytes > 0;
  for (void* ptr : to_merge) {
    const ChunkHandle h = region_manager_.get_handle(ptr);
    if (h == kInvalidChunkHandle || chunks_[h].ptr != ptr ||
        chunks_[h].in_use()) {
      continue;  // merged into an earlier one of this loop
    }
    if (required_bytes > 0 && satisfied) {
      QueueTimestamped(h);
      continue;
    }
    const bool was_whole_region = chunks_[h].whole_region();
    RemoveFreeChunkFromBin(h);
    const ChunkHandle merged = TryToCoalesce(h);
    InsertFreeChunkIntoBin(merged);
    if (stamp_free_regions_ && !was_whole_region &&
        chunks_[merged].whole_region()) {
      LinkFreeRegion(merged);
    }
    if (required_bytes > 0) {
      // Still counted: queued again (TF requeues only a chunk that merged
      // into its previous neighbour, and loses the others' counts' merges).
      if (FreedAt(merged) != 0) QueueTimestamped(merged);
      if (chunks_[merged].size >= required_bytes) satisfied = true;
    }
  }
  if (!satisfied) {
    // Unlike TF, which may fail here: free neighbours that no queue entry
    // reaches (a chain left apart while fences or counts held them) merge
    // too, so that an unlimited request fails only when memory really is
    // short. Fences still hold what other streams may use.
    for (const internal::AllocationRegion& r : region_manager_.regions()) {
      if (ForceMergeRegion(r, required_bytes)) {
        satisfied = true;
        break;
      }
    }
  }
  force_timestamp_merge_ = false;
  MaybeValidate("MergeTimestampedChunks");
  return satisfied;
}

bool Allocator::ForceMergeRegion(const internal::AllocationRegion& r,
                                 size_t required_bytes) {
  if (r.dedicated()) return false;
  const bool forced = force_timestamp_merge_;
  force_timestamp_merge_ = true;
  bool satisfied = false;
  ChunkHandle h = region_manager_.get_handle(r.ptr());
  while (h != kInvalidChunkHandle) {
    const ChunkHandle next = chunks_[h].next;
    if (chunks_[h].in_use() || next == kInvalidChunkHandle ||
        chunks_[next].in_use()) {
      h = next;
      continue;
    }
    RemoveFreeChunkFromBin(h);
    const ChunkHandle merged = TryToCoalesce(h);
    InsertFreeChunkIntoBin(merged);
    if (stamp_free_regions_ && chunks_[merged].whole_region()) {
      LinkFreeRegion(merged);
    }
    if (FreedAt(merged) != 0) QueueTimestamped(merged);
    if (chunks_[merged].size >= required_bytes) satisfied = true;
    // Merged forward: look again at the new next. A fence kept them apart:
    // move on.
    h = chunks_[merged].next == next ? next : merged;
  }
  force_timestamp_merge_ = forced;
  return satisfied;
}

void Allocator::MergeFullyFreeRegions() {
  for (const internal::AllocationRegion& r : region_manager_.regions()) {
    bool all_free = true;
    for (ChunkHandle h = region_manager_.get_handle(r.ptr());
         h != kInvalidChunkHandle && all_free; h = chunks_[h].next) {
      all_free = !chunks_[h].in_use();
    }
    if (all_free) (void)ForceMergeRegion(r, std::numeric_limits<size_t>::max());
  }
}

void Allocator::ListFenced(ChunkHandle h) {
  if (h < fence_listed_.size() && fence_listed_[h]) return;
  // Runs inside a free or a merge, which must not stop half done: if the
  // host has no memory to grow the list, it is marked incomplete, and
  // MergeDeferred rebuilds it from the bins.
  try {
    if (h >= fence_listed_.size()) {
      fence_listed_.resize(std::max<size_t>(h + 1, 2 * fence_listed_.size()));
    }
    fenced_chunks_.push_back(h);
  } catch (...) {
    fence_list_lost_ = true;
    return;
  }
  fence_listed_[h] = true;
}

void Allocator::RebuildFenceListLocked() {
  fence_list_lost_ = false;
  for (const ChunkHandle h : fenced_chunks_) fence_listed_[h] = false;
  fenced_chunks_.clear();
  for (const internal::Bin& bin : bins_) {
    bin.ForEach([&](const internal::Bin::Entry& e)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
                      if (chunks_[e.handle].fence != 0) ListFenced(e.handle);
                    });
  }
  for (const ChunkHandle h : pending_dedicated_) ListFenced(h);
}

void Allocator::MergeDeferred() {
  if (ABSL_PREDICT_FALSE(fence_list_lost_)) RebuildFenceListLocked();
  // The binned chunks whose fences are known complete, from the list of
  // fenced chunks (a scan of every bin cost O(free chunks) on each cross-
  // stream miss). An entry whose chunk was merged away, handed out or
  // cleaned since is dropped; one still pending, or out of its bin for now
  // (a dedicated region's), stays.
  std::vector<ChunkHandle> ready;
  try {
    ready.reserve(fenced_chunks_.size());
  } catch (...) {
    return;  // merges wait for a host with memory; the pool may grow instead
  }
  size_t kept = 0;
  for (size_t i = 0; i < fenced_chunks_.size(); ++i) {
    const ChunkHandle h = fenced_chunks_[i];
    const Chunk& c = chunks_[h];
    if (c.ptr == nullptr || c.in_use() || c.fence == 0 ||
        region_manager_.get_handle(c.ptr) != h) {
      fence_listed_[h] = false;
      continue;
    }
    if (FenceComplete(c.fence) &&
        bins_[BinNumForSize(c.size)].Contains(c.size, c.ptr)) {
      fence_listed_[h] = false;
      ready.push_back(h);
      continue;
    }
    fenced_chunks_[kept++] = h;
  }
  fenced_chunks_.resize(kept);
  for (ChunkHandle h : ready) {
    // An earlier merge in this loop may have taken it in, or joined a
    // pending fence into it: look again.
    const Chunk& c = chunks_[h];
    if (c.ptr == nullptr || c.in_use() || c.fence == 0 ||
        region_manager_.get_handle(c.ptr) != h || !FenceComplete(c.fence)) {
      continue;
    }
    RemoveFreeChunkFromBin(h);
    SetFence(h, 0);  // known complete: clean
    // Deferred merges can chain (several neighbours waited): merge until
    // nothing more joins.
    ChunkHandle merged = h;
    for (size_t before = 0; before != chunks_[merged].size;) {
      before = chunks_[merged].size;
      merged = TryToCoalesce(merged);
    }
    InsertFreeChunkIntoBin(merged);
    if (stamp_free_regions_ && chunks_[merged].whole_region()) {
      LinkFreeRegion(merged);
    }
  }
  if (ABSL_PREDICT_FALSE(!pending_dedicated_.empty())) {
    size_t kept = 0;
    for (ChunkHandle h : pending_dedicated_) {
      if (FenceComplete(chunks_[h].fence)) {
        // A copy: the release erases the region from the manager.
        const internal::AllocationRegion r =
            *region_manager_.RegionFor(chunks_[h].ptr);
        (void)ReleaseRegionLocked(r, /*binned=*/false);
      } else {
        pending_dedicated_[kept++] = h;
      }
    }
    if (kept < pending_dedicated_.size()) {
      pending_dedicated_.resize(kept);
      WakeWaiters();
    }
  }
}

Allocator::ChunkHandle Allocator::FindChunkForAnyStream(size_t alignment,
                                                        size_t rounded_bytes) {
  ChunkHandle h = FindChunk(alignment, rounded_bytes, /*any_size=*/true);
  if (ABSL_PREDICT_FALSE(multi_stream_) && h == kInvalidChunkHandle) {
    h = FindChunkAcrossStreams(alignment, rounded_bytes, /*any_size=*/true);
  }
  return h;
}

template <bool kMaySlow>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Allocator::ChunkHandle Allocator::FindChunk(
    size_t alignment, size_t rounded_bytes, bool any_size, bool unsafe_ok,
    bool whole_ok) {
  const BinNum bin_num = BinNumForSize(rounded_bytes);
  const bool over_aligned = alignment > kMinAllocationSize;
  // With max_split_bytes, chunks at or above `below` are not for this
  // request (SIZE_MAX: every chunk is).
  const size_t below = ABSL_PREDICT_FALSE(oversize_filter_) && !any_size
                           ? MaxFitFor(rounded_bytes)
                           : std::numeric_limits<size_t>::max();
  // Once several streams are in use, only chunks safe for this one; with a
  // freed_by_func count, only chunks freed at or before it (TF).
  // One test while neither is on.
  const bool filtered =
      kMaySlow && ABSL_PREDICT_FALSE(slow_paths_ != 0) &&
      ((multi_stream_ && !unsafe_ok) || alloc_freed_before_ != 0);
  const bool safe_only = filtered && multi_stream_ && !unsafe_ok;
  const uint64_t freed_before = filtered ? alloc_freed_before_ : 0;
  uint32_t candidates = non_empty_bins_ & (~uint32_t{0} << bin_num);
  while (candidates != 0) {
    const BinNum b = __builtin_ctz(candidates);
    candidates &= candidates - 1;
    internal::Bin::Entry entry;
    bool found;
    if (ABSL_PREDICT_FALSE(filtered)) {
      // The best fit among the chunks this request may use now.
      if (internal::BinNumToSize(b) >= below) break;
      found = bins_[b].TakeFirst(
          rounded_bytes,
          [&](const internal::Bin::Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            const uintptr_t pad = AlignUp(e.addr, alignment) - e.addr;
            return e.size < below && e.size >= pad &&
                   e.size - pad >= rounded_bytes &&
                   (!safe_only ||
                    FenceSafeFor(chunks_[e.handle].fence, alloc_stream_)) &&
                   (freed_before == 0 || FreedAt(e.handle) <= freed_before);
          },
          &entry);
    } else if (!over_aligned) {
      if (ABSL_PREDICT_TRUE(below == std::numeric_limits<size_t>::max())) {
        found = bins_[b].TakeBestFit(rounded_bytes, &entry);
      } else {
        // Bins hold ascending sizes: from a bin whose smallest size is too
        // large, no later bin can serve either.
        if (internal::BinNumToSize(b) >= below) break;
        found = bins_[b].TakeBestFitBelow(rounded_bytes, below, &entry);
      }
    } else {
      found = bins_[b].TakeFirst(
          rounded_bytes,
          [&](const internal::Bin::Entry& e) {
            const uintptr_t pad = AlignUp(e.addr, alignment) - e.addr;
            return e.size < below && e.size >= pad &&
                   e.size - pad >= rounded_bytes;
          },
          &entry);
    }
    if (!found) continue;
    // A best fit far larger than what the pool would grow for this request
    // stays whole for a request of its size while growing costs no peak.
    // The cheap tests first (no division: this runs on every allocation
    // with the option on): the pool has room under its peak for the
    // request at least, and the best fit is the ratio times it.
    size_t ratio_bytes;
    if (ABSL_PREDICT_FALSE(grow_below_peak_ratio_ != 0) && !any_size &&
        !whole_ok && !filtered && !over_aligned &&
        total_region_allocated_bytes_ + rounded_bytes <=
            static_cast<size_t>(*stats_.peak_pool_bytes) &&
        !__builtin_mul_overflow(rounded_bytes, grow_below_peak_ratio_,
                                &ratio_bytes) &&
        entry.size >= ratio_bytes && PreferGrowth(rounded_bytes, entry.size)) {
      // Back where it was (the bins are ordered, so exactly).
      const bool inserted = bins_[b].Insert(
          entry.size, reinterpret_cast<void*>(entry.addr), entry.handle);
      BFC_DCHECK(inserted);
      (void)inserted;
      grow_instead_ = true;
      return kInvalidChunkHandle;
    }
    // Taken out of its bin with the search's own iterator (no second
    // descent by key).
    BFC_DCHECK_EQ(BinNumForSize(entry.size), b);
    BFC_DCHECK(!chunks_[entry.handle].in_use() &&
               chunks_[entry.handle].addr() == entry.addr &&
               chunks_[entry.handle].size == entry.size);
    if (bins_[b].empty()) non_empty_bins_ &= ~(uint32_t{1} << b);
    return entry.handle;
  }
  return kInvalidChunkHandle;
}

template <bool kMaySlow>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void* Allocator::AllocateChunk(
    ChunkHandle h, size_t alignment, size_t rounded_bytes, size_t num_bytes,
    bool may_split) {
  if (ABSL_PREDICT_FALSE(stamp_free_regions_) && chunks_[h].whole_region()) {
    UnlinkFreeRegion(h);  // its region is not fully free any more
  }
  if (alignment > kMinAllocationSize) {
    const size_t pad =
        AlignUp(chunks_[h].addr(), alignment) - chunks_[h].addr();
    if (pad > 0) {
      // The aligned prefix stays free; its previous neighbour is in use
      // (coalescing is complete), so no merge is possible -- except where a
      // stream fence or TF's free counts keep free neighbours apart.
      BFC_DCHECK(chunks_[h].prev == kInvalidChunkHandle ||
                 chunks_[chunks_[h].prev].in_use() || multi_stream_ ||
                 timing_counter_ != nullptr);
      const ChunkHandle rest = SplitChunk<kMaySlow>(h, pad);
      InsertFreeChunkIntoBin(h);
      h = rest;
    }
  }
  // Split when the remainder is worth keeping: TF's rule (the chunk is at
  // least twice the request, or the waste would reach the internal-
  // fragmentation cap), or a rest of min_split_remainder_bytes.
  const size_t chunk_size = chunks_[h].size;
  BFC_DCHECK_GE(chunk_size, rounded_bytes);
  const size_t rest = chunk_size - rounded_bytes;
  if (may_split && rest > 0 &&
      (ABSL_PREDICT_FALSE(max_split_ != 0 && rounded_bytes >= max_split_)
           // PyTorch's max_split_size: a large request keeps what it took
           // unless a whole large buffer would be left over.
           ? rest >= kMaxUnsplitWaste
           : chunk_size >= rounded_bytes * 2 ||
                 static_cast<int64_t>(rest) >=
                     max_internal_fragmentation_bytes_ ||
                 rest >= min_split_remainder_)) {
    InsertFreeChunkIntoBin(SplitChunk<kMaySlow>(h, rounded_bytes));
  }
  if (kMaySlow && ABSL_PREDICT_FALSE(slow_paths_ != 0) &&
      chunks_[h].fence != 0) {
    SetFence(h, 0);
  }
  Chunk& c = chunks_[h];
  c.requested_size = num_bytes;
  c.allocation_id = next_allocation_id_++;
  if constexpr (kMaySlow) {
    if (ABSL_PREDICT_FALSE(alloc_account_ != nullptr)) {
      TagChunkLocked(h, alloc_account_);
    }
  }
  stats_.bytes_requested_in_use += static_cast<int64_t>(num_bytes);
  if (opts_.record_allocation_sites) RecordAllocationSite(c.allocation_id);
  if (ABSL_PREDICT_FALSE(history_ != nullptr)) {
    RecordEvent(MemoryEvent::Action::kAllocate, AddressOf(c.ptr), c.size,
                num_bytes, c.allocation_id);
  }

  ++stats_.num_allocs;
  stats_.bytes_in_use += static_cast<int64_t>(c.size);
  stats_.peak_bytes_in_use =
      std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.largest_alloc_size =
      std::max(stats_.largest_alloc_size, static_cast<int64_t>(c.size));
  MaybeValidate("AllocateRaw");
  return c.ptr;
}

ABSL_ATTRIBUTE_NOINLINE bool Allocator::PreferGrowth(
    size_t rounded_bytes, size_t best_fit_bytes) const {
  size_t curr = curr_region_allocation_bytes_;
  bool doubled;
  const size_t step = GrowthStep(
      rounded_bytes, std::numeric_limits<size_t>::max(), &curr, &doubled);
  if (best_fit_bytes / grow_below_peak_ratio_ < step) return false;
  // Within the peak (and the release threshold), so that growing gives
  // nothing back (ReleaseBeforeExtend) and the footprint does not move.
  // And with room under the limit for the region and one more chunk of the
  // spared size: near the limit, the region is room a request of that size
  // may need later, and fails without (under a limit of 1.10 times peak
  // live bytes densenet121-infer failed 11 allocations with the rule
  // unguarded, 2 without the rule, 2 guarded).
  const size_t target = std::min(pool_release_target_,
                                 static_cast<size_t>(*stats_.peak_pool_bytes));
  const size_t held = total_region_allocated_bytes_ +
                      static_cast<size_t>(sub_failures_.bytes_abandoned);
  return held <= target && step <= target - held && held <= memory_limit_ &&
         step <= memory_limit_ - held &&
         best_fit_bytes <= memory_limit_ - held - step;
}

size_t Allocator::GrowthStep(size_t needed, size_t available,
                             size_t* curr_region_bytes, bool* increased) const {
  *increased = false;
  // Without growth the first region is the whole limit (TF); the policy
  // knobs are growth's.
  const GrowthPolicy policy =
      opts_.allow_growth ? opts_.growth_policy : GrowthPolicy::kDoubling;
  size_t bytes = needed;
  switch (policy) {
    case GrowthPolicy::kDoubling:
      while (needed > *curr_region_bytes) {
        if (*curr_region_bytes > std::numeric_limits<size_t>::max() / 2) {
          *curr_region_bytes = needed;
        } else {
          *curr_region_bytes *= 2;
        }
        *increased = true;
      }
      bytes = *curr_region_bytes;
      break;
    case GrowthPolicy::kSameAsRequested:
      bytes = needed;
      break;
    case GrowthPolicy::kFixedStep:
      // The current size stays initial_region_bytes.
      bytes = std::max(needed, *curr_region_bytes);
      break;
  }
  if (opts_.allow_growth) {
    // Options are below 2^62, so the round-ups cannot wrap.
    if (opts_.max_growth_step_bytes != 0) {
      const size_t cap =
          AlignUp(opts_.max_growth_step_bytes, kMinAllocationSize);
      if (bytes > cap) bytes = std::max(needed, cap);
    }
    // A floor's rest pays when it holds more requests like the one it was
    // grown for; a region raised to the floor for a request over half of it
    // keeps a rest that cannot (2 MiB for a 1.5 MiB request: the rest is
    // mostly waste), so the floor can be kept for requests up to a bound.
    if (opts_.min_growth_step_bytes != 0 &&
        (opts_.min_growth_step_max_request_bytes == 0 ||
         needed <= opts_.min_growth_step_max_request_bytes)) {
      bytes = std::max<size_t>(
          bytes, AlignUp(opts_.min_growth_step_bytes, kMinAllocationSize));
    }
  }
  // A region grown for a request below max_split_bytes stays below it too
  // (PyTorch's segments for such requests are never oversize): otherwise
  // its rest would be closed to the requests it was grown for.
  if (oversize_filter_ && needed < max_split_ && bytes >= max_split_) {
    bytes = std::max(needed, max_split_ - kMinAllocationSize);
  }
  return std::min(bytes, available);
}

bool Allocator::Extend(size_t alignment, size_t rounded_bytes,
                       ChunkHandle* dedicated, ChunkHandle* binned) {
  if (sub_allocator_ == nullptr) return false;
  // What a failed Free left with the sub-allocator counts too: it may
  // still hold it; and so does what it could not give back yet
  // (SubAllocator::UnreturnedBytes: a review saw VMM pages that would not
  // unmap let the device hold twice the limit).
  size_t unreturned = 0;
  std::string ignored;
  (void)internal::CallUserCodeDeferringLogs(
      &deferred_logs_, [&] { unreturned = sub_allocator_->UnreturnedBytes(); },
      &ignored);
  const size_t ours = total_region_allocated_bytes_ +
                      static_cast<size_t>(sub_failures_.bytes_abandoned);
  const size_t held = unreturned > std::numeric_limits<size_t>::max() - ours
                          ? std::numeric_limits<size_t>::max()
                          : ours + unreturned;
  size_t available = memory_limit_ > held ? memory_limit_ - held : 0;
  // A sub-allocator of pages hands out whole pages, each aligned to a page:
  // the limit holds whole pages only.
  const size_t unit = std::max(kMinAllocationSize, partial_free_bytes_);
  available = AlignDown(available, unit);
  // No room for padding: the region is asked for at the request's alignment
  // (region_alignment below; misaligned memory is refused), so the request
  // fits at its start, and a coalesced neighbour only moves the chunk's
  // start down. As TF, which asks for the rounded request only: padding
  // made a 2 MiB request at 2 MiB alignment take a 4 MiB region, and one
  // under a 2 MiB limit fail (a review against TF).
  const size_t needed = rounded_bytes;
  if (needed > available) return false;
  // The region's entry needs room; made before anything is taken (the
  // chunk table and the map keep theirs ahead: shortage.h).
  try {
    region_manager_.ReserveRegion();
  } catch (...) {
    extend_error_ = internal::NoHostMemoryStatus("the allocator's own tables");
    return false;
  }

  // A dedicated region is exactly the request; a pooled one is sized by the
  // growth policy.
  bool increased_allocation = false;
  size_t bytes =
      dedicated != nullptr
          ? needed
          : GrowthStep(needed, available, &curr_region_allocation_bytes_,
                       &increased_allocation);

  const size_t region_alignment = std::max(alignment, kMinAllocationSize);
  size_t bytes_received = 0;
  void* mem = nullptr;
  for (;;) {
    bytes_received = 0;
    std::string what;
    if (!internal::CallUserCodeDeferringLogs(
            &deferred_logs_,
            [&] {
              mem = sub_allocator_->Alloc(region_alignment, bytes,
                                          &bytes_received);
            },
            &what)) {
      // Not a size problem, so no back-off: the request fails with it.
      ++sub_failures_.alloc_exceptions;
      // Described when the host can spare the memory (a sub-allocator that
      // threw std::bad_alloc may have found it without: HostHasRoomFor).
      extend_error_ = absl::Status(absl::StatusCode::kInternal, "");
      if (internal::HostHasRoomFor(kReportRoomBytes)) {
        try {
          extend_error_ = absl::InternalError(internal::Format(
              "Allocator '%s': SubAllocator::Alloc(%d bytes, alignment %d) "
              "threw: %s",
              name_, bytes, region_alignment, what));
          DeferLog(LogSeverity::kError, std::string(extend_error_.message()));
        } catch (...) {
        }
      }
      return false;
    }
    if (mem != nullptr) {
      // Refuse memory that breaks the SubAllocator contract, giving it back:
      // handing it out would corrupt the caller or our own bookkeeping.
      const uintptr_t a = reinterpret_cast<uintptr_t>(mem);
      // Empty: acceptable (built only on the refusal path).
      std::string problem;
      // Whole pages can pass the limit by less than a page: the pages past
      // it go straight back (the sub-allocator frees parts of blocks).
      if (partial_free_bytes_ > 0 && bytes_received > available &&
          bytes_received >= bytes &&
          IsAligned(a + bytes_received, partial_free_bytes_)) {
        const uintptr_t keep_end =
            internal::AlignDown(a + available, partial_free_bytes_);
        if (keep_end >= a + bytes && keep_end > a) {
          if (FreeToSubAllocator(reinterpret_cast<void*>(keep_end),
                                 a + bytes_received - keep_end,
                                 "the pages past the limit")) {
            bytes_received = keep_end - a;
          }
        }
      }
      if (!IsAligned(a, region_alignment)) {
        problem = "is misaligned";
      } else if (bytes_received < bytes) {
        problem = "is shorter than asked";
      } else if (bytes_received > available ||
                 !IsAligned(bytes_received, kMinAllocationSize)) {
        // Keeping only part of it would make the later Free name a size the
        // sub-allocator never handed out (and leak the rest).
        problem = absl::StrCat(
            "is longer than the limit allows or not a multiple of ",
            kMinAllocationSize);
      } else if (a + bytes_received < a) {
        problem = "wraps around the address space";
      } else if (region_manager_.Overlaps(mem, bytes_received)) {
        problem = "overlaps a region already held";
      }
      if (problem.empty()) break;
      ++stats_.num_sub_allocator_rejects;
      DeferReport(LogSeverity::kError, [&] {
        return internal::Format(
            "Allocator '%s': sub-allocator memory %p (%d bytes received, %d "
            "asked, alignment %d) %s; refused and given back",
            name_, mem, bytes_received, bytes, region_alignment, problem);
      });
      (void)FreeToSubAllocator(mem, bytes_received, "the refusal of a block");
      mem = nullptr;
    }
    // Back off, as TF does, but always by at least kMinAllocationSize so a
    // sub-allocator that keeps failing ends in a clean failure.
    size_t next = RoundedBytes(
        static_cast<size_t>(static_cast<float>(bytes) * kBackpedalFactor));
    if (next >= bytes) next = bytes - kMinAllocationSize;
    bytes = next;
    if (bytes < needed || bytes == 0) return false;
  }

  if (dedicated == nullptr && !increased_allocation &&
      (!opts_.allow_growth || opts_.growth_policy == GrowthPolicy::kDoubling)) {
    // The next region doubles after a success that did not have to grow.
    if (curr_region_allocation_bytes_ <=
        std::numeric_limits<size_t>::max() / 2) {
      curr_region_allocation_bytes_ *= 2;
    }
  }

  // Keep only whole kMinAllocationSize units, and never go past the limit
  // even if the sub-allocator handed out more than asked.
  size_t usable = AlignDown(bytes_received, kMinAllocationSize);
  usable = std::min(usable, available);
  total_region_allocated_bytes_ += usable;
  stats_.growth_overshoot_bytes += static_cast<int64_t>(usable - needed);
  *stats_.pool_bytes += static_cast<int64_t>(usable);
  *stats_.peak_pool_bytes =
      std::max(*stats_.peak_pool_bytes, *stats_.pool_bytes);
  ++stats_.num_extends;

  BFC_DCHECK(IsAligned(mem, region_alignment));
  BFC_DCHECK_GE(usable, needed);
  const ChunkHandle h = chunks_.Allocate();
  {
    Chunk& c = chunks_[h];
    c.ptr = mem;
    c.size = usable;
    c.allocation_id = -1;
  }
  region_manager_.set_handle(mem, h);

  if (dedicated != nullptr) {
    // Never joined to a neighbour, never in a bin: the caller hands the one
    // chunk out whole.
    region_manager_.AddAllocationRegion(mem, usable, /*dedicated=*/true);
    ++num_dedicated_regions_;
    slow_paths_ |= kDedicatedPath;
    if (history_ != nullptr) {
      RecordEvent(MemoryEvent::Action::kRegionAlloc, AddressOf(mem), usable, 0,
                  -1);
    }
    *dedicated = h;
    return true;
  }
  if (!coalesce_regions_) {
    region_manager_.AddAllocationRegion(mem, usable);
    if (history_ != nullptr) {
      RecordEvent(MemoryEvent::Action::kRegionAlloc, AddressOf(mem), usable, 0,
                  -1);
    }
  } else {
    internal::AllocationRegion* extended =
        region_manager_.AddOrExtendAllocationRegion(mem, usable);
    if (extended != nullptr) {
      // Link the new chunk after the last chunk of the region it extends.
      ChunkHandle last = region_manager_.get_handle(extended->ptr());
      while (chunks_[last].next != kInvalidChunkHandle)
        last = chunks_[last].next;
      UnlinkFreeRegion(last);  // joined below; listed again if fully free
      chunks_[h].prev = last;
      chunks_[last].next = h;
    }
    // Memory that ends where another region starts joins it too, so that a
    // region given back and taken again reunites with its neighbours.
    const internal::AllocationRegion* region = region_manager_.RegionFor(mem);
    void* following = region_manager_.MergeWithFollowing(region->ptr());
    if (following != nullptr) {
      const ChunkHandle first = region_manager_.get_handle(following);
      UnlinkFreeRegion(first);
      chunks_[h].next = first;
      chunks_[first].prev = h;
    }
    if (history_ != nullptr) {
      RecordEvent(extended != nullptr || following != nullptr
                      ? MemoryEvent::Action::kRegionExtend
                      : MemoryEvent::Action::kRegionAlloc,
                  AddressOf(mem), usable, 0, -1);
    }
  }
  // The new region may have room for waiters too. With several streams it
  // joins only free neighbours safe for the stream that grew it: joined to
  // memory another
  // stream still uses, it took that fence, and the stream that grew the pool
  // could not use what it grew (a review: each retry grew the pool again, up
  // to the limit). The others join it once their fence completes
  // (MergeDeferred).
  ChunkHandle joined = h;
  if (ABSL_PREDICT_FALSE(multi_stream_)) {
    for (const ChunkHandle n : {chunks_[h].next, chunks_[h].prev}) {
      if (n == kInvalidChunkHandle || chunks_[n].in_use()) continue;
      const uint64_t f = chunks_[n].fence;
      // Safe for the stream that grew (its own pending frees, in its
      // order) is fine too, unless the memory is for the host (host_ready).
      if (!FenceComplete(f) &&
          (alloc_host_ready_ || !FenceSafeFor(f, alloc_stream_))) {
        continue;
      }
      const bool after = n == chunks_[joined].next;
      if (!(after ? MayMerge(joined, n) : MayMerge(n, joined))) continue;
      RemoveFreeChunkFromBin(n);
      if (after) {
        Merge(joined, n);
      } else {
        Merge(n, joined);
        joined = n;
      }
    }
  } else {
    joined = TryToCoalesce(h);
  }
  BinFreeChunk(joined, "Extend");
  if (binned != nullptr) *binned = joined;
  return true;
}

void Allocator::ReleaseBeforeExtend(size_t grown) {
  // Memory nobody uses goes back before more is taken, least recently
  // freed first: release_before_extend until the pool, grown, is no larger
  // than its peak so far (all of it while the pool is at its peak; a
  // steady state that stays below keeps its regions, so no sub-allocator
  // calls); pool_release_threshold until it is within that fraction of the
  // limit.
  size_t target = pool_release_target_;
  if (opts_.release_before_extend) {
    target = std::min(target, static_cast<size_t>(*stats_.peak_pool_bytes));
  }
  if (target == std::numeric_limits<size_t>::max()) return;
  ReleaseFreeRegionsAbove(grown, target);
  // Then the pages inside free chunks, where the sub-allocator can free
  // parts of regions: none of those chunks fits this request.
  const size_t room = grown <= target ? target - grown : 0;
  if (opts_.release_partial_regions && partial_free_bytes_ > 0 &&
      total_region_allocated_bytes_ > room) {
    (void)ReleaseFreeInteriors(total_region_allocated_bytes_ - room);
  }
}

void Allocator::GiveBackFreeChunk(ChunkHandle h) {
  if (h == kInvalidChunkHandle) return;
  const Chunk& c = chunks_[h];
  if (c.in_use() || !FenceComplete(c.fence)) return;
  bool released = false;
  if (c.whole_region()) {
    released = ReleaseRegionLocked(internal::AllocationRegion(c.ptr, c.size),
                                   /*binned=*/true);
  } else if (timing_counter_ == nullptr) {  // see ReleaseFreeInteriors
    released = ReleaseChunkInterior(h) > 0;
  }
  // A sub-allocator that neither frees parts of regions nor was given a
  // whole one keeps the memory in the pool, where it serves later requests.
  if (released) WakeWaiters();
}

// --- Out of memory -----------------------------------------------------------

bool Allocator::DeallocateFreeRegions(size_t rounded_bytes) {
  if (opts_.release_partial_regions && partial_free_bytes_ > 0) {
    // Pages inside free chunks count too: give back everything free, so
    // the sub-allocator has room for the new region (it maps into the
    // holes, where it joins what was left around them).
    return ReleaseFreeMemoryLocked(std::numeric_limits<size_t>::max()) > 0;
  }
  if (!opts_.garbage_collection) return false;
  if (ABSL_PREDICT_FALSE(multi_stream_)) {
    // Regions split by merges a fence deferred are whole again once every
    // stream's frees are done.
    (void)SynchronizeAllStreams();
    MergeDeferred();
  }
  // TF gives back a region whose chunks are all free whatever their free
  // counts; here such a region becomes one chunk first.
  if (ABSL_PREDICT_FALSE(timing_counter_ != nullptr)) MergeFullyFreeRegions();
  size_t total_free_bytes = 0;
  for (const internal::AllocationRegion& r : region_manager_.regions()) {
    const Chunk& c = chunks_[region_manager_.get_handle(r.ptr())];
    // Coalescing is complete inside a region, so it is fully free exactly
    // when its first chunk is free and spans it.
    if (!c.in_use() && c.size == r.memory_size())
      total_free_bytes += r.memory_size();
  }
  if (total_free_bytes == 0) return false;
  const size_t available =
      memory_limit_ - total_region_allocated_bytes_ + total_free_bytes;
  if (rounded_bytes > available) return false;
  DeferReport(LogSeverity::kWarning, [&] {
    return absl::StrCat(
        "Allocator '", name_,
        "': garbage collection: giving fully-free regions back so that a "
        "larger region can be allocated. Frequent collections mean the job "
        "runs near the memory limit and pays for re-allocation.");
  });
  ReleaseFreeRegionsLocked();
  return true;
}

bool Allocator::GrowColumnsHook(void* self, size_t new_handle_bound) {
  // Called by the chunk table under mutex_ (set in the constructor).
  return static_cast<Allocator*>(self)->GrowColumns(new_handle_bound);
}

bool Allocator::GrowColumns(size_t bound) {
  try {
    if (stamp_free_regions_ && free_region_links_.size() < bound) {
      free_region_links_.resize(bound);
    }
    if (accounts_on_ && chunk_account_.size() < bound) {
      chunk_account_.resize(bound, 0);
    }
    if (timing_counter_ != nullptr && freed_at_.size() < bound) {
      freed_at_.resize(bound, 0);
    }
  } catch (...) {
    return false;  // what grew stays: larger columns are harmless
  }
  return true;
}

bool Allocator::RefillTablesLocked() {
  slow_paths_ |= kShortPath;  // until the room is there again
  try {
    chunks_.Reserve(internal::kSpareEntries);
    region_manager_.Reserve(internal::kSpareEntries);
    // The bins' nodes come from the heap one at a time: if a node-sized
    // block cannot be had now, the next insert would take the arena again.
    ::operator delete(::operator new(1024));
  } catch (...) {
    return false;
  }
  slow_paths_ &= ~kShortPath;
  return true;
}

size_t Allocator::ReleaseFreeRegions() {
  Lock lock(this);
  return ReleaseFreeRegionsLocked();
}

bool Allocator::ReleaseRegionLocked(internal::AllocationRegion r, bool binned) {
  const ChunkHandle h = region_manager_.get_handle(r.ptr());
  if (binned) RemoveFreeChunkFromBin(h);
  SetFence(h, 0);
  UnlinkFreeRegion(h);
  if (timing_counter_ != nullptr) ForgetFreedAt(h);
  DeleteChunk(h);
  if (r.dedicated() && --num_dedicated_regions_ == 0) {
    slow_paths_ &= ~kDedicatedPath;
  }
  const bool removed = region_manager_.RemoveAllocationRegion(r.ptr());
  BFC_DCHECK(removed);
  (void)removed;
  // Out of the pool whether or not Free throws: a region whose Free threw
  // is forgotten, never handed out or freed again.
  total_region_allocated_bytes_ -= r.memory_size();
  *stats_.pool_bytes -= static_cast<int64_t>(r.memory_size());
  if (history_ != nullptr) {
    RecordEvent(MemoryEvent::Action::kRegionFree, AddressOf(r.ptr()),
                r.memory_size(), 0, -1);
  }
  if (!FreeToSubAllocator(r.ptr(), r.memory_size(), "region release")) {
    return false;
  }
  ++stats_.num_regions_released;
  return true;
}

size_t Allocator::ReleaseFreeRegionsLocked(size_t bytes) {
  // Memory another stream's work may still use is not given back before
  // that work is done (PyTorch's empty_cache synchronizes its events too);
  // what a failed synchronization leaves pending stays.
  if (ABSL_PREDICT_FALSE(multi_stream_)) {
    (void)SynchronizeAllStreams();
    MergeDeferred();
  }
  if (ABSL_PREDICT_FALSE(timing_counter_ != nullptr)) MergeFullyFreeRegions();
  // In address order, in place (a list of them needed host memory, and
  // this runs on the out-of-memory path): a region released leaves the
  // list, so the next one takes its index.
  size_t released = 0;
  bool any = false;
  for (size_t i = 0;
       i < region_manager_.regions().size() && released < bytes;) {
    const internal::AllocationRegion r = region_manager_.regions()[i];
    const Chunk& c = chunks_[region_manager_.get_handle(r.ptr())];
    if (c.in_use() || c.size != r.memory_size() || !FenceComplete(c.fence)) {
      ++i;
      continue;
    }
    any = true;
    if (ReleaseRegionLocked(r, /*binned=*/true)) released += r.memory_size();
  }
  // The limit has room again: waiters may now Extend.
  if (any) WakeWaiters();
  MaybeValidate("ReleaseFreeRegions");
  return released;
}

size_t Allocator::ReleaseFreeMemory(size_t bytes) {
  Lock lock(this);
  return ReleaseFreeMemoryLocked(bytes);
}

size_t Allocator::ReleaseFreeMemoryLocked(size_t bytes) {
  size_t released = ReleaseFreeRegionsLocked(bytes);
  if (released < bytes && partial_free_bytes_ > 0) {
    const size_t more = ReleaseFreeInteriors(bytes - released);
    if (more > 0) {
      released += more;
      WakeWaiters();
      MaybeValidate("ReleaseFreeMemory");
    }
  }
  return released;
}

size_t Allocator::ReleaseFreeInteriors(size_t bytes) {
  const size_t page = partial_free_bytes_;
  if (page == 0 || bytes == 0) return 0;
  // TF's timestamped frees keep per-chunk counts a split would have to
  // share; that mode gives back whole regions only.
  if (ABSL_PREDICT_FALSE(timing_counter_ != nullptr)) return 0;
  struct Candidate {
    size_t pages_bytes;
    ChunkHandle h;
  };
  std::vector<Candidate> candidates;
  for (const internal::Bin& bin : bins_) {
    bin.ForEach([&](const internal::Bin::Entry& e) {
      if (e.size < page) return;
      const uintptr_t lo = internal::AlignUp(e.addr, page);
      const uintptr_t hi = internal::AlignDown(e.addr + e.size, page);
      if (hi > lo) candidates.push_back({hi - lo, e.handle});
    });
  }
  // Largest first: the most memory per driver call (none of them fits the
  // request that made us release, so size is no reason to keep one).
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& x, const Candidate& y) {
              return x.pages_bytes != y.pages_bytes
                         ? x.pages_bytes > y.pages_bytes
                         : x.h < y.h;
            });
  size_t released = 0;
  for (const Candidate& c : candidates) {
    if (released >= bytes) break;
    released += ReleaseChunkInterior(c.h);
  }
  return released;
}

size_t Allocator::ReleaseChunkInterior(ChunkHandle h) {
  const size_t page = partial_free_bytes_;
  const Chunk c = chunks_[h];  // a copy: h may go
  if (page == 0 || c.in_use() || !FenceComplete(c.fence)) return 0;
  const internal::AllocationRegion* found = region_manager_.RegionFor(c.ptr);
  if (found == nullptr || found->dedicated()) return 0;
  const internal::AllocationRegion region = *found;
  const uintptr_t a = c.addr();
  const uintptr_t end = c.end_addr();
  const uintptr_t lo = internal::AlignUp(a, page);
  const uintptr_t hi = internal::AlignDown(end, page);
  if (lo < a || hi <= lo) return 0;
  if (lo == region.addr() && hi == region.end_addr()) {
    // The chunk is the whole region.
    return ReleaseRegionLocked(region, /*binned=*/true) ? hi - lo : 0;
  }
  RemoveFreeChunkFromBin(h);
  UnlinkFreeRegion(h);
  // What stays before the hole is `h`, shortened; what stays after it is a
  // new chunk. Either ends (or starts) its region now.
  ChunkHandle head = kInvalidChunkHandle;
  ChunkHandle tail = kInvalidChunkHandle;
  if (lo > a) {
    head = h;
    chunks_[h].size = lo - a;
    chunks_[h].next = kInvalidChunkHandle;
  } else {
    if (c.prev != kInvalidChunkHandle) {
      chunks_[c.prev].next = kInvalidChunkHandle;
    }
    SetFence(h, 0);
    DeleteChunk(h);
  }
  if (end > hi) {
    tail = chunks_.Allocate();
    Chunk& t = chunks_[tail];
    t.ptr = reinterpret_cast<void*>(hi);
    t.size = end - hi;
    t.allocation_id = -1;
    t.prev = kInvalidChunkHandle;
    t.next = c.next;
    region_manager_.set_handle(t.ptr, tail);
    if (c.next != kInvalidChunkHandle) chunks_[c.next].prev = tail;
  } else if (c.next != kInvalidChunkHandle) {
    chunks_[c.next].prev = kInvalidChunkHandle;
  }
  const bool cut = region_manager_.CutOut(lo, hi);
  BFC_DCHECK(cut);
  (void)cut;
  total_region_allocated_bytes_ -= hi - lo;
  *stats_.pool_bytes -= static_cast<int64_t>(hi - lo);
  if (history_ != nullptr) {
    RecordEvent(MemoryEvent::Action::kRegionFree, lo, hi - lo, 0, -1);
  }
  if (FreeToSubAllocator(reinterpret_cast<void*>(lo), hi - lo,
                         "partial release")) {
    ++stats_.num_partial_releases;
  }
  for (ChunkHandle left : {head, tail}) {
    if (left == kInvalidChunkHandle) continue;
    InsertFreeChunkIntoBin(left);
    if (ABSL_PREDICT_FALSE(stamp_free_regions_) &&
        chunks_[left].whole_region()) {
      LinkFreeRegion(left);
    }
  }
  // A free neighbour kept apart from `h` (its fence differs) that the cut
  // leaves alone in what remains of the region is a fully free region now
  // too (a review: it was left off the list, and Validate failed).
  if (ABSL_PREDICT_FALSE(stamp_free_regions_)) {
    for (ChunkHandle n :
         {head == kInvalidChunkHandle ? c.prev : kInvalidChunkHandle,
          tail == kInvalidChunkHandle ? c.next : kInvalidChunkHandle}) {
      if (n != kInvalidChunkHandle && !chunks_[n].in_use() &&
          chunks_[n].whole_region()) {
        LinkFreeRegion(n);
      }
    }
  }
  return hi - lo;
}

void Allocator::LinkFreeRegion(ChunkHandle h) {
  if (h >= free_region_links_.size()) {
    free_region_links_.resize(
        std::max<size_t>(h + 1, 2 * free_region_links_.size()));
  }
  if (free_region_links_[h].linked) UnlinkListedFreeRegion(h);
  FreeRegionLink& link = free_region_links_[h];
  link.linked = true;
  link.prev = free_region_tail_;
  link.next = kInvalidChunkHandle;
  if (free_region_tail_ != kInvalidChunkHandle) {
    free_region_links_[free_region_tail_].next = h;
  } else {
    free_region_head_ = h;
  }
  free_region_tail_ = h;
  ++num_free_region_links_;
}

void Allocator::UnlinkListedFreeRegion(ChunkHandle h) {
  FreeRegionLink& link = free_region_links_[h];
  if (link.prev != kInvalidChunkHandle) {
    free_region_links_[link.prev].next = link.next;
  } else {
    free_region_head_ = link.next;
  }
  if (link.next != kInvalidChunkHandle) {
    free_region_links_[link.next].prev = link.prev;
  } else {
    free_region_tail_ = link.prev;
  }
  link = FreeRegionLink();
  --num_free_region_links_;
}

void Allocator::ReleaseFreeRegionsAbove(size_t needed, size_t target) {
  // The pool may hold at most this much before growing by `needed`.
  const size_t room = needed <= target ? target - needed : 0;
  // Fully-free pooled regions, least recently freed first (PyTorch's
  // garbage_collection_threshold frees the blocks unused the longest): the
  // list holds exactly those regions, so this costs what it releases.
  bool released = false;
  ChunkHandle h = free_region_head_;
  while ((needed > target || total_region_allocated_bytes_ > room) &&
         h != kInvalidChunkHandle) {
    const ChunkHandle next = free_region_links_[h].next;
    const Chunk& c = chunks_[h];
    // Memory another stream's work may still use stays (no waiting here).
    if (FenceComplete(c.fence)) {
      // ReleaseRegionLocked takes it off the list.
      (void)ReleaseRegionLocked(internal::AllocationRegion(c.ptr, c.size),
                                /*binned=*/true);
      released = true;
    }
    h = next;
  }
  // The limit has room again: waiters may now Extend.
  if (released) WakeWaiters();
  MaybeValidate("ReleaseFreeRegionsAbove");
}

size_t Allocator::FreeTailBytes() const {
  const std::vector<internal::AllocationRegion>& regions =
      region_manager_.regions();
  if (regions.empty() || regions.back().dedicated()) return 0;
  // Regions are in address order; walk the last one's chunks to its end.
  ChunkHandle h = region_manager_.get_handle(regions.back().ptr());
  while (chunks_[h].next != kInvalidChunkHandle) h = chunks_[h].next;
  return chunks_[h].in_use() ? 0 : chunks_[h].size;
}

std::string Allocator::OomMessage(size_t num_bytes, size_t rounded,
                                  size_t alignment) const {
  return internal::Format(
      "Allocator '%s' ran out of memory trying to allocate %s (%d bytes, "
      "rounded to %d, "
      "alignment %d). In use: %s in %d allocation(s) since the last "
      "ClearStats; pool: %s of a "
      "%s limit; largest free chunk: %s.",
      name_, HumanBytes(uint64_t{num_bytes}), num_bytes, rounded, alignment,
      HumanBytes(stats_.bytes_in_use), stats_.num_allocs,
      HumanBytes(*stats_.pool_bytes), HumanBytes(uint64_t{memory_limit_}),
      HumanBytes(uint64_t{LargestFreeChunkLocked()}));
}

void Allocator::LogOom(
    size_t num_bytes, size_t rounded, size_t alignment,
    const absl::Status& cause,
    std::vector<std::pair<LogSeverity, std::string>>* report) {
  // A storm past max_oom_logs logs one line per power-of-two count
  // (LogOomUnguarded): the others build nothing.
  if (opts_.max_oom_logs <= 0) return;
  if (oom_logs_ >= opts_.max_oom_logs &&
      ((oom_logs_suppressed_ + 1) & oom_logs_suppressed_) != 0) {
    ++oom_logs_suppressed_;
    return;
  }
  // The report is built from strings; when the host is out of memory too,
  // it is dropped rather than thrown out of a failed allocation (see
  // HostHasRoomFor).
  if (!internal::HostHasRoomFor(kReportRoomBytes)) {
    ++oom_logs_suppressed_;
    return;
  }
  try {
    LogOomUnguarded(num_bytes, rounded, alignment, cause, report);
  } catch (...) {
    report->clear();
    ++oom_logs_suppressed_;
  }
}

void Allocator::LogOomNote(
    size_t num_bytes, const absl::Status& cause,
    std::vector<std::pair<LogSeverity, std::string>>* report) {
  if (opts_.max_oom_logs <= 0) return;
  if (oom_notes_ >= opts_.max_oom_logs ||
      !internal::HostHasRoomFor(kReportRoomBytes)) {
    ++oom_logs_suppressed_;
    return;
  }
  try {
    report->emplace_back(
        LogSeverity::kWarning,
        internal::Format(
            "Allocator '%s' ran out of memory trying to allocate %s (%d "
            "bytes), a request its caller can do without "
            "(retry_on_failure=false); more memory might make the program "
            "faster%s%s",
            name_, HumanBytes(uint64_t{num_bytes}), num_bytes,
            cause.ok() ? "" : ": ", cause.message()));
    ++oom_notes_;
  } catch (...) {
    report->clear();
    ++oom_logs_suppressed_;
  }
}

void Allocator::LogOomUnguarded(
    size_t num_bytes, size_t rounded, size_t alignment,
    const absl::Status& cause,
    std::vector<std::pair<LogSeverity, std::string>>* report) {
  if (opts_.max_oom_logs <= 0) return;
  if (oom_logs_ >= opts_.max_oom_logs) {
    // A storm: one line at each power-of-two count, so n failures log
    // O(log n) lines and the count of what was dropped is never lost.
    ++oom_logs_suppressed_;
    if ((oom_logs_suppressed_ & (oom_logs_suppressed_ - 1)) == 0) {
      report->emplace_back(
          LogSeverity::kWarning,
          internal::Format("Allocator '%s': %d similar out-of-memory "
                           "report(s) suppressed so far (max_oom_logs=%d); "
                           "the latest asked for %d bytes",
                           name_, oom_logs_suppressed_, opts_.max_oom_logs,
                           num_bytes));
    }
    return;
  }
  ++oom_logs_;
  const std::string what = cause.ok()
                               ? OomMessage(num_bytes, rounded, alignment)
                               : std::string(cause.message());
  report->emplace_back(
      LogSeverity::kWarning,
      absl::StrCat(what, "\nOccupancy: ", RenderOccupancyLocked()));
  // TF's memory log lists every chunk: once per allocator is enough to see
  // the picture, and a storm of them buries everything else.
  if (oom_logs_ == 1) {
    report->emplace_back(LogSeverity::kWarning, MemoryLogLocked(num_bytes));
  }
}

// --- Deallocation ------------------------------------------------------------

void Allocator::DeallocateRaw(void* ptr) {
  if (ptr == nullptr) return;
  // A plain lock, by hand (see AllocateFast); what a free queues (a
  // StreamOps failure on the fenced path, an invalid pointer's report)
  // leaves the queue as the lock is released.
  mutex_.Lock();
  try {
    const ChunkHandle h = InUseChunk(ptr);
    if (ABSL_PREDICT_TRUE(h != kInvalidChunkHandle)) {
      FreeChunk(h);
      if (ABSL_PREDICT_TRUE(deferred_logs_.empty())) {
        mutex_.Unlock();
        return;
      }
    } else {
      ++stats_.num_invalid_frees;
      ReportInvalid([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
        return absl::StrCat("DeallocateRaw: ", DescribeInvalidPointer(ptr));
      });
      MaybeValidate("DeallocateRaw (invalid pointer)");
    }
  } catch (...) {
    // Not expected (the tables draw on emergency arenas, user code runs
    // inside CallUserCode), but a lock left held would hang every later
    // call. Free of cost when nothing throws.
    mutex_.Unlock();
    throw;
  }
  UnlockAndSendDeferredLogs();
}

void Allocator::SendLogs(const internal::LogQueue& logs) {
  for (const auto& [severity, message] : logs) Log(severity, message);
}

absl::Status Allocator::Deallocate(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  Lock lock(this);
  const ChunkHandle h = InUseChunk(ptr);
  if (ABSL_PREDICT_TRUE(h != kInvalidChunkHandle)) {
    FreeChunk(h);
    return absl::OkStatus();
  }
  ++stats_.num_invalid_frees;
  MaybeValidate("Deallocate (invalid pointer)");
  return InvalidPointerStatus("Deallocate", ptr);
}

absl::Status Allocator::InvalidPointerStatus(const char* what,
                                             const void* ptr) const {
  // Described when the host can spare the memory (see HostHasRoomFor).
  if (internal::HostHasRoomFor(kReportRoomBytes)) {
    try {
      return absl::InvalidArgumentError(
          absl::StrCat("Allocator '", name_, "': ", what, ": ",
                       DescribeInvalidPointer(ptr)));
    } catch (...) {
    }
  }
  return absl::Status(absl::StatusCode::kInvalidArgument, "");
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::FreeChunk(
    ChunkHandle h, StreamSlot stream) {
  MarkFree(h);
  if (ABSL_PREDICT_FALSE(slow_paths_ != 0)) {
    FreeChunkSlow(h, stream);
    return;
  }
  BinFreeChunk(TryToCoalesce</*kMaySlow=*/false>(h), "Deallocate");
}

ABSL_ATTRIBUTE_NOINLINE void Allocator::FreeChunkSlow(ChunkHandle h,
                                                      StreamSlot stream) {
  if (multi_stream_) {
    chunks_[h].fence = StampFree(h, stream);  // an in-use chunk has none
    ListFenced(h);
  }
  if (num_dedicated_regions_ > 0) {
    const internal::AllocationRegion* r =
        region_manager_.RegionFor(chunks_[h].ptr);
    if (r != nullptr && r->dedicated()) {
      FreeDedicated(h, *r);
      return;
    }
  }
  if (timing_counter_ != nullptr) {
    FreeTimestamped(h);
    return;
  }
  BinFreeChunk(TryToCoalesce(h), "Deallocate");
}

// Stream-naming frees and uses (the rest of streams: allocator_streams.cc);
// here because they share FreeChunk and InUseChunk, inlined in this file.
absl::Status Allocator::FreeOnStream(void* ptr, StreamId stream,
                                     const char* what) {
  const ChunkHandle h = InUseChunk(ptr);
  if (h == kInvalidChunkHandle) {
    ++stats_.num_invalid_frees;
    MaybeValidate(what);
    return InvalidPointerStatus(what, ptr);
  }
  absl::StatusOr<StreamSlot> slot = SlotFor(stream);
  if (!slot.ok()) return slot.status();  // nothing freed
  FreeChunk(h, *slot);
  return absl::OkStatus();
}

absl::Status Allocator::TransferChunkLocked(void* ptr,
                                            internal::AccountState* from,
                                            internal::AccountState* to) {
  const ChunkHandle h = InUseChunk(ptr);
  if (h == kInvalidChunkHandle || ChunkAccountLocked(h) != from) {
    return absl::InvalidArgumentError(internal::Format(
        "TransferOwnership: %p is not an allocation charged to account '%s'",
        ptr, from->path));
  }
  if (to->closed) {
    return absl::FailedPreconditionError(internal::Format(
        "TransferOwnership: account '%s' is closed", to->path));
  }
  if (to == from) return absl::OkStatus();
  const int64_t bytes =
      static_cast<int64_t>(RoundedBytes(chunks_[h].requested_size));
  // Credited first, then charged: an ancestor of both then counts the bytes
  // once, so a transfer inside a subtree near its limit is not refused by a
  // total it does not change. A refusal puts the source's charge back
  // exactly as it was (the same amounts, so no limit can object).
  CreditAccountLocked(from, bytes);
  if (!TryChargeAccountLocked(to, bytes)) {
    absl::Status refusal = AccountRefusalLocked(to, bytes);
    ApplyChargeLocked(from, bytes);
    return refusal;
  }
  from->own.fetch_sub(bytes, std::memory_order_relaxed);
  from->live.fetch_sub(1, std::memory_order_relaxed);
  chunk_account_[h] = to->id;
  to->own.fetch_add(bytes, std::memory_order_relaxed);
  to->live.fetch_add(1, std::memory_order_relaxed);
  MaybeForgetAccountLocked(from);
  MaybeValidate("TransferOwnership");
  return absl::OkStatus();
}

absl::Status Allocator::RecordStreamUse(void* ptr, StreamId stream) {
  Lock lock(this);
  const ChunkHandle h = InUseChunk(ptr);
  if (h == kInvalidChunkHandle) {
    return InvalidPointerStatus("RecordStreamUse", ptr);
  }
  absl::StatusOr<StreamSlot> slot = SlotFor(stream);
  if (!slot.ok()) return slot.status();
  // While only the implicit stream is in use there is nothing to fence.
  if (!multi_stream_) return absl::OkStatus();
  // Everything the chunk's free will need is made here, where failing is
  // allowed: the use, room for the fence's parts and a multi-fence record.
  // Each step completes or throws having changed nothing (a new entry is
  // removed again), so a host out of memory fails the call whole.
  auto it = extra_uses_.find(h);
  if (it != extra_uses_.end() &&
      std::find(it->second.slots.begin(), it->second.slots.end(), *slot) !=
          it->second.slots.end()) {
    MaybeValidate("RecordStreamUse");
    return absl::OkStatus();  // known already
  }
  bool inserted = false;
  try {
    if (it == extra_uses_.end()) {
      it = extra_uses_.try_emplace(h).first;
      inserted = true;
    }
    ExtraUses& uses = it->second;
    uses.slots.reserve(uses.slots.size() + 1);
    uses.parts.reserve(uses.slots.size() + 2);
    ReserveMultiFenceLocked();
  } catch (...) {
    if (inserted) extra_uses_.erase(it);
    return internal::NoHostMemoryStatus("RecordStreamUse");
  }
  it->second.slots.push_back(*slot);
  MaybeValidate("RecordStreamUse");
  return absl::OkStatus();
}

void Allocator::ReportInvalid(absl::FunctionRef<std::string()> describe) {
  ++invalid_reports_;
  // A storm of bad calls logs one line per power-of-two count past the
  // first reports (LogInvalid): the others build nothing.
  const int64_t suppressed = invalid_reports_ - kMaxInvalidInputLogs;
  const bool silent = suppressed > 0 && !opts_.abort_on_invalid_input &&
                      (suppressed & (suppressed - 1)) != 0;
  // The message is built only when the host can spare the memory (see
  // HostHasRoomFor): a caller's mistake must not also cost an exception or
  // the process. Without it, only the counts record the mistake.
  if (!silent && internal::HostHasRoomFor(kReportRoomBytes)) {
    try {
      LogInvalid(describe());
    } catch (...) {
    }
  }
  if (opts_.abort_on_invalid_input) {
    // No later unlock sends the queues: they go now, the report included,
    // also where this allocator runs inside another's user code (a
    // sub-allocator backed by a bfc allocator), whose queue holds it.
    DeferLog(LogSeverity::kError,
             "aborting: Options::abort_on_invalid_input is set");
    internal::SendQueuedLogsBeforeAbort(&deferred_logs_);
    std::abort();
  }
}

void Allocator::LogInvalid(const std::string& message) {
  // A storm of bad calls (a loop freeing garbage) must not bury the log: the
  // first reports in full, then one line per power-of-two count. A report
  // that aborts is always written.
  if (invalid_reports_ > kMaxInvalidInputLogs &&
      !opts_.abort_on_invalid_input) {
    const int64_t suppressed = invalid_reports_ - kMaxInvalidInputLogs;
    if ((suppressed & (suppressed - 1)) == 0) {
      DeferLog(LogSeverity::kError,
               internal::Format("Allocator '%s': %d similar invalid-input "
                                "report(s) suppressed so far; the latest: %s",
                                name_, suppressed, message));
    }
    return;
  }
  DeferLog(LogSeverity::kError,
           absl::StrCat("Allocator '", name_, "': ", message));
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline Allocator::ChunkHandle
Allocator::InUseChunk(const void* ptr) const {
  const ChunkHandle h = region_manager_.get_handle(ptr);
  if (h == kInvalidChunkHandle || !chunks_[h].in_use())
    return kInvalidChunkHandle;
  return h;
}

std::string Allocator::DescribeInvalidPointer(const void* ptr) const {
  const ChunkHandle h = region_manager_.get_handle(ptr);
  if (h != kInvalidChunkHandle) {
    return internal::Format(
        "pointer %p is not allocated: it was already freed (double free?); it "
        "starts a free "
        "chunk of %d bytes",
        ptr, chunks_[h].size);
  }
  const internal::AllocationRegion* region = region_manager_.RegionFor(ptr);
  if (region == nullptr) {
    return internal::Format("pointer %p was not allocated by this allocator",
                            ptr);
  }
  // An error path: walking the region's chunks is affordable here.
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  for (ChunkHandle c = region_manager_.get_handle(region->ptr());
       c != kInvalidChunkHandle; c = chunks_[c].next) {
    const Chunk& chunk = chunks_[c];
    if (a >= chunk.addr() && a < chunk.end_addr()) {
      return internal::Format(
          "pointer %p points %d bytes into a %s chunk at %p (%d bytes); pass "
          "the pointer the "
          "allocation returned",
          ptr, a - chunk.addr(), chunk.in_use() ? "live" : "free", chunk.ptr,
          chunk.size);
    }
  }
  return internal::Format(
      "pointer %p lies in a region of this allocator but in no chunk", ptr);
}

// --- Chunk and bin primitives -----------------------------------------------

template <bool kMaySlow>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Allocator::ChunkHandle
Allocator::SplitChunk(ChunkHandle h, size_t num_bytes) {
  // Only a free chunk out of its bin is cut, inside it, at a granule.
  BFC_DCHECK(!chunks_[h].in_use());
  BFC_DCHECK(num_bytes > 0 && num_bytes < chunks_[h].size);
  BFC_DCHECK_EQ(num_bytes % kMinAllocationSize, size_t{0});
  BFC_DCHECK_EQ(chunks_[h].size % kMinAllocationSize, size_t{0});
  BFC_DCHECK(!bins_[BinNumForSize(chunks_[h].size)].Contains(chunks_[h].size,
                                                             chunks_[h].ptr));
  // Chunks never move (the table grows by whole blocks), so holding
  // references across Allocate would be safe; taking them after is simpler.
  const ChunkHandle nh = chunks_.Allocate();
  Chunk& c = chunks_[h];
  Chunk& n = chunks_[nh];
  n.ptr = static_cast<char*>(c.ptr) + num_bytes;
  n.size = c.size - num_bytes;
  n.allocation_id = -1;
  c.size = num_bytes;
  n.prev = h;
  n.next = c.next;
  if (kMaySlow && ABSL_PREDICT_FALSE(slow_paths_ != 0)) SplitSlow(h, nh);
  if (c.next != kInvalidChunkHandle) chunks_[c.next].prev = nh;
  c.next = nh;
  region_manager_.set_handle(n.ptr, nh);
  return nh;
}

template <bool kMaySlow>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::Merge(ChunkHandle h1,
                                                          ChunkHandle h2) {
  Chunk& c1 = chunks_[h1];
  const Chunk& c2 = chunks_[h2];
  // Physical neighbours, both free, both out of their bins.
  BFC_DCHECK(c1.next == h2 && c2.prev == h1);
  BFC_DCHECK_EQ(c1.end_addr(), c2.addr());
  BFC_DCHECK(!c1.in_use() && !c2.in_use());
  BFC_DCHECK(c1.size % kMinAllocationSize == 0 &&
             c2.size % kMinAllocationSize == 0);
  BFC_DCHECK(!bins_[BinNumForSize(c1.size)].Contains(c1.size, c1.ptr));
  BFC_DCHECK(!bins_[BinNumForSize(c2.size)].Contains(c2.size, c2.ptr));
  c1.size += c2.size;
  c1.next = c2.next;
  if (c2.next != kInvalidChunkHandle) chunks_[c2.next].prev = h1;
  if (kMaySlow && ABSL_PREDICT_FALSE(slow_paths_ != 0)) MergeSlow(h1, h2);
  DeleteChunk(h2);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::DeleteChunk(ChunkHandle h) {
  // Its fence went to a merge or was dropped by the caller (multi-fences are
  // counted).
  BFC_DCHECK_EQ(chunks_[h].fence, uint64_t{0});
  const bool unmapped = region_manager_.erase(chunks_[h].ptr);
  BFC_DCHECK(unmapped);
  chunks_.Deallocate(h);
}

template <bool kMaySlow>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline Allocator::ChunkHandle
Allocator::TryToCoalesce(ChunkHandle h) {
  ChunkHandle result = h;
  const ChunkHandle next = chunks_[h].next;
  if (next != kInvalidChunkHandle && !chunks_[next].in_use() &&
      MayMerge<kMaySlow>(h, next)) {
    RemoveFreeChunkFromBin(next);
    Merge<kMaySlow>(h, next);
  }
  const ChunkHandle prev = chunks_[h].prev;
  if (prev != kInvalidChunkHandle && !chunks_[prev].in_use() &&
      MayMerge<kMaySlow>(prev, h)) {
    RemoveFreeChunkFromBin(prev);
    Merge<kMaySlow>(prev, h);
    result = prev;
  }
  return result;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::BinFreeChunk(
    ChunkHandle h, const char* what) {
  InsertFreeChunkIntoBin(h);
  if (ABSL_PREDICT_FALSE(stamp_free_regions_) && chunks_[h].whole_region()) {
    LinkFreeRegion(h);
  }
  WakeWaiters();
  MaybeValidate(what);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::InsertFreeChunkIntoBin(
    ChunkHandle h) {
  Chunk& c = chunks_[h];
  BFC_DCHECK(!c.in_use());
  const BinNum b = BinNumForSize(c.size);
  // A chunk enters its bin once: a second entry would hand it out twice.
  const bool inserted = bins_[b].Insert(c.size, c.ptr, h);
  BFC_DCHECK(inserted);
  non_empty_bins_ |= uint32_t{1} << b;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::RemoveFreeChunkFromBin(
    ChunkHandle h) {
  Chunk& c = chunks_[h];
  BFC_DCHECK(!c.in_use());
  const BinNum b = BinNumForSize(c.size);
  // Every free chunk is in the bin its size names.
  const bool erased = bins_[b].Erase(c.size, c.ptr);
  BFC_DCHECK(erased);
  if (bins_[b].empty()) non_empty_bins_ &= ~(uint32_t{1} << b);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void Allocator::MarkFree(ChunkHandle h) {
  Chunk& c = chunks_[h];
  BFC_DCHECK(c.in_use());
  BFC_DCHECK_GE(stats_.bytes_in_use, static_cast<int64_t>(c.size));
  stats_.bytes_in_use -= static_cast<int64_t>(c.size);
  stats_.bytes_requested_in_use -= static_cast<int64_t>(c.requested_size);
  if (opts_.record_allocation_sites) ForgetAllocationSite(c.allocation_id);
  if (ABSL_PREDICT_FALSE(history_ != nullptr)) {
    RecordEvent(MemoryEvent::Action::kFree, AddressOf(c.ptr), c.size,
                c.requested_size, c.allocation_id);
  }
  if (ABSL_PREDICT_FALSE(accounts_on_)) CreditFreedChunkLocked(h);
  c.allocation_id = -1;
  c.requested_size = 0;
}

// --- Queries -----------------------------------------------------------------

size_t Allocator::RequestedSize(const void* ptr) const {
  Lock lock(this);
  const ChunkHandle h = InUseChunk(ptr);
  return h == kInvalidChunkHandle ? 0 : chunks_[h].requested_size;
}

size_t Allocator::AllocatedSize(const void* ptr) const {
  Lock lock(this);
  const ChunkHandle h = InUseChunk(ptr);
  return h == kInvalidChunkHandle ? 0 : chunks_[h].size;
}

int64_t Allocator::AllocationId(const void* ptr) const {
  Lock lock(this);
  const ChunkHandle h = InUseChunk(ptr);
  return h == kInvalidChunkHandle ? -1 : chunks_[h].allocation_id;
}

size_t Allocator::LargestFreeChunkLocked() const {
  if (non_empty_bins_ == 0) return 0;
  const BinNum top = 31 - __builtin_clz(non_empty_bins_);
  return bins_[top].Largest()->size;
}

std::optional<AllocatorStats> Allocator::GetStats() const {
  Lock lock(this);
  AllocatorStats stats = stats_;
  stats.largest_free_block_bytes =
      static_cast<int64_t>(LargestFreeChunkLocked());
  const int64_t free_bytes = *stats.pool_bytes - stats.bytes_in_use;
  stats.fragmentation =
      free_bytes > 0
          ? static_cast<double>(free_bytes - stats.largest_free_block_bytes) /
                static_cast<double>(free_bytes)
          : 0.0;
  return stats;
}

bool Allocator::ClearStats() {
  Lock lock(this);
  stats_.num_allocs = 0;
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
  stats_.largest_alloc_size = 0;
  MaybeValidate("ClearStats");
  return true;
}

MemoryType Allocator::GetMemoryType() const {
  if (sub_allocator_ == nullptr) return MemoryType::kUnknown;
  // A SubAllocator is only ever called under the lock (sub_allocator.h), so
  // one written to that contract need not be thread-safe here either.
  Lock lock(this);
  MemoryType type = MemoryType::kUnknown;
  std::string what;
  if (!CallUserCode([&] { type = sub_allocator_->GetMemoryType(); }, &what)) {
    Log(LogSeverity::kError,
        absl::StrCat("Allocator '", name_,
                     "': SubAllocator::GetMemoryType threw (", what,
                     "); reporting unknown"));
    return MemoryType::kUnknown;
  }
  return type;
}

size_t Allocator::MetadataBytes() const {
  Lock lock(this);
  size_t bytes =
      sizeof(*this) + chunks_.MetadataBytes() + region_manager_.MetadataBytes();
  // B-tree nodes, live and recycled.
  for (const internal::Bin& b : bins_) bytes += b.node_bytes();
  // Streams: one state per slot (forgotten ones are reused).
  bytes += streams_.capacity() * sizeof(StreamState);
  for (const StreamState& st : streams_) {
    bytes += st.events.capacity() * sizeof(st.events[0]) +
             st.waits_for.capacity() * sizeof(st.waits_for[0]);
  }
  return bytes;
}

// --- Pictures
// ------------------------------------------------------------------

std::string Allocator::RenderOccupancy() const {
  Lock lock(this);
  return RenderOccupancyLocked();
}

std::string Allocator::RenderOccupancyLocked() const {
  constexpr size_t kResolution = 100;
  size_t total = 0;
  for (const internal::AllocationRegion& r : region_manager_.regions())
    total += r.memory_size();
  if (total == 0) return "<allocator contains no memory>";
  std::string picture(kResolution, '_');
  // Paints the bytes [from, from + n) of the concatenated regions with `c`.
  auto paint = [&](size_t from, size_t n, char ch) {
    if (n == 0) return;
    const size_t first = static_cast<size_t>(
        (static_cast<__uint128_t>(from) * kResolution) / total);
    const size_t last = static_cast<size_t>(
        (static_cast<__uint128_t>(from + n - 1) * kResolution) / total);
    for (size_t i = first; i <= last && i < kResolution; ++i) picture[i] = ch;
  };
  size_t region_offset = 0;
  for (const internal::AllocationRegion& r : region_manager_.regions()) {
    for (ChunkHandle h = region_manager_.get_handle(r.ptr());
         h != kInvalidChunkHandle; h = chunks_[h].next) {
      const Chunk& c = chunks_[h];
      if (!c.in_use()) continue;
      const size_t offset = region_offset + (c.addr() - r.addr());
      // Waste first, so a chunk that is mostly requested bytes shows '*'.
      paint(offset + c.requested_size, c.size - c.requested_size, 'x');
      paint(offset, c.requested_size, '*');
    }
    region_offset += r.memory_size();
  }
  return picture;
}

}  // namespace bfc
