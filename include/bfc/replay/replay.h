// File: bfc/replay/replay.h
// -----------------------------------------------------------------------------
//
// Replays a CompiledTrace (see bfc/replay/trace.h) against a bfc::Allocator and
// measures what happened: how much memory the pool needed compared with what
// the program had live, how many requests failed, and how fast it went.
//
// The model: every `allocate` op calls
//   AllocateRaw(alignment, size, AllocationAttributes{retry_on_failure=false})
// and stores the pointer in the op's slot; every `free` op calls DeallocateRaw
// on the slot's pointer. A failed allocation (nullptr) is counted and its later
// free is skipped, as a program that saw the failure would have done. Slots
// are dense indices, so the timed loop is an array lookup per op: no hashing,
// no allocation (the slot table is sized before the clock starts).
//
// Peaks of the allocator (`peak_bytes_in_use`, `peak_pool_bytes`) are read
// from its GetStats() after the loop, so they cover the allocator's whole
// history since construction (or ClearStats): replay into a fresh allocator
// to measure one trace.
//
// Example:
//
//   absl::StatusOr<bfc::Trace> trace = bfc::ReadTrace("resnet18-train.csv");
//   absl::StatusOr<bfc::CompiledTrace> ops = bfc::CompileTrace(*trace);
//   bfc::Allocator alloc(std::make_unique<bfc::VirtualSubAllocator>(size_t{64}
//   << 30),
//                        size_t{16} << 30, "replay");
//   absl::StatusOr<bfc::ReplaySummary> s = bfc::ReplayTrace(*ops, alloc);
//   // s->footprint_ratio, s->ns_per_op, ...
//
// Thread safety: a Replayer is thread-compatible (one thread drives it). The
// allocator may be shared, but then its peaks include the other users.
#ifndef BFC_REPLAY_H_
#define BFC_REPLAY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/replay/trace.h"
#include "bfc/stream_ops.h"

namespace bfc {

struct ReplayOptions {
  // Alignment passed to every AllocateRaw (TF's replay uses 256).
  size_t alignment = kMinAllocationSize;
  // Called after every allocate op with the pointer it got (nullptr when the
  // allocation failed). Lets a test record placements or a viewer draw them.
  std::function<void(const ReplayOp& op, void* ptr)> on_allocate;
  // Called after every op, allocate or free, with its index in `ops` and the
  // pointer it allocated or freed (nullptr for a failed allocation or a
  // skipped free). For periodic Validate() calls and snapshots.
  std::function<void(size_t op_index, const ReplayOp& op, void* ptr)> after_op;
  // Replay each op on its trace Stream (AllocateOnStream/DeallocateOnStream;
  // stream 0 is kImplicitStream): stream-ordered reuse as the allocator does
  // it, with whatever StreamOps it was given (MakeCompletedWorkStreamOps for
  // a replay without a device). Off: one stream, TF's placements.
  bool streams = false;
  // Charges each allocate op to the account this returns for it
  // (AllocationAttributes::account; nullptr: no account): per-phase,
  // per-request or per-model budgets replayed from a trace. The account must
  // be on the replay's allocator. Charged allocations take the allocator's
  // general path, so ns/op is not the uncharged replay's.
  std::function<Account*(size_t op_index, const ReplayOp& op)> account_of;
  // When callbacks are set, their time is part of `wall_seconds`.
};

struct ReplaySummary {
  std::string trace_name;
  size_t events = 0;       // data rows in the trace
  size_t ops = 0;          // ops replayed (allocations + frees + skipped frees)
  size_t allocations = 0;  // allocate ops that succeeded
  size_t frees = 0;        // DeallocateRaw calls
  size_t failures = 0;     // allocate ops that got nullptr (size > 0)
  size_t skipped_frees =
      0;  // frees of failed or 0-byte allocations, not replayed
  size_t live_at_end = 0;        // allocations the trace never freed
  size_t live_bytes_at_end = 0;  // their requested bytes
  // Max over time of the requested bytes of successful, live allocations.
  size_t peak_live_bytes = 0;
  // From the allocator's GetStats() after the loop (0 if it has no stats).
  int64_t peak_bytes_in_use = 0;  // whole chunks, rounded and unsplit
  int64_t peak_pool_bytes = 0;    // bytes held in regions
  int64_t pool_bytes_at_end = 0;
  int64_t regions = 0;  // regions obtained from the sub-allocator (num_extends)
  // SubAllocator::Free calls during the replay: regions given back whole
  // and parts of regions (num_regions_released + num_partial_releases);
  // with `regions`, the sub-allocator calls a GPU pays for.
  int64_t regions_released = 0;
  // peak_pool_bytes / peak_live_bytes: 1.0 is a perfect fit; 0 when nothing
  // was live.
  double footprint_ratio = 0;
  double wall_seconds = 0;  // the op loop only
  double ns_per_op = 0;
  // With ReplayOptions::streams: the trace's distinct streams and what
  // stream-ordered reuse cost (the allocator's GetStreamStats after the
  // loop); 0 and zeros otherwise.
  size_t trace_streams = 0;
  StreamStats stream_stats;
};

// StreamOps for replaying a trace without a device: all work queued so far
// has completed whenever the host looks (QueryEvent is true, waits and
// synchronizations return at once). Cross-stream reuse then costs an event
// and a query, as on a device that keeps up; nothing is ever pending long.
std::unique_ptr<StreamOps> MakeCompletedWorkStreamOps();

// Drives one CompiledTrace against one allocator. The allocator must outlive
// the Replayer; the destructor frees whatever the replay left live.
class Replayer {
 public:
  Replayer(const CompiledTrace& trace, Allocator& allocator,
           ReplayOptions options = ReplayOptions());
  ~Replayer();

  Replayer(const Replayer&) = delete;
  Replayer& operator=(const Replayer&) = delete;

  // Replays every op once. Allocations a previous Run left live are freed
  // first, so Run may be repeated for a warm-allocator (steady-state) pass.
  // InvalidArgument when the CompiledTrace is inconsistent (a slot out of
  // range, an allocate into a live slot, a free of a slot never allocated,
  // a free whose size is not its allocation's, more than 2^32 slots);
  // that is checked before anything is allocated. ResourceExhausted when the
  // slot table does not fit in memory. Never throws.
  absl::StatusOr<ReplaySummary> Run();

  // Frees the allocations the last Run left live; returns how many.
  size_t ReleaseLive();

  // The pointer in `slot` right now (nullptr if none). For viewers.
  void* SlotPointer(uint32_t slot) const {
    return slot < slots_.size() ? slots_[slot] : nullptr;
  }

 private:
  template <bool kCallbacks, bool kStreams>
  void Loop(ReplaySummary* summary);
  StreamId StreamOf(const ReplayOp& op) const {
    return reinterpret_cast<StreamId>(
        static_cast<uintptr_t>(trace_.streams[op.stream]));
  }
  absl::Status CheckTrace() const;

  const CompiledTrace& trace_;
  Allocator& allocator_;
  const ReplayOptions options_;
  std::vector<void*> slots_;
  bool checked_ = false;
};

// Run once, then free what the trace left live (after the summary's numbers
// were taken).
absl::StatusOr<ReplaySummary> ReplayTrace(
    const CompiledTrace& trace, Allocator& allocator,
    const ReplayOptions& options = ReplayOptions());

// Accounts for a replay (bfc/account.h): a root "replay" on the replay's
// allocator and one child per name, with a ReplayOptions::account_of that
// charges allocate op i to child account_of_op(i) (an index into the names;
// any other value: the root). Used by bfc-replay --accounts (a child per
// trace phase) and BuildReplayReport. Declare it after the allocator and
// keep it until the replay has freed what it left live.
class ReplayAccounts {
 public:
  // InvalidArgument naming a name no account can have (Account::CreateChild
  // says why: empty, a '/', taken).
  absl::Status Open(Allocator* allocator, const std::vector<std::string>& names,
                    std::function<size_t(size_t op_index)> account_of_op);
  // Sets replay->account_of (nothing before Open).
  void Attach(ReplayOptions* replay) const;
  // Closes the children, then the root (what is still charged is logged
  // as leaked).
  void Close();

  const std::shared_ptr<Account>& root() const { return root_; }
  const std::vector<std::shared_ptr<Account>>& children() const {
    return children_;
  }

 private:
  std::shared_ptr<Account> root_;
  std::vector<std::shared_ptr<Account>> children_;
  std::function<size_t(size_t)> account_of_op_;
};

}  // namespace bfc

#endif  // BFC_REPLAY_H_
