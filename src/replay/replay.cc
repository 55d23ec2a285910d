#include "bfc/replay/replay.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "bfc/account.h"
#include "bfc/internal/str_format.h"

namespace bfc {

Replayer::Replayer(const CompiledTrace& trace, Allocator& allocator,
                   ReplayOptions options)
    : trace_(trace), allocator_(allocator), options_(std::move(options)) {}

Replayer::~Replayer() { ReleaseLive(); }

size_t Replayer::ReleaseLive() {
  size_t n = 0;
  for (void*& p : slots_) {
    if (p != nullptr) {
      allocator_.DeallocateRaw(p);
      p = nullptr;
      ++n;
    }
  }
  return n;
}

// Simulates slot liveness once, so the timed loop can trust every slot index,
// never leaks a pointer by overwriting a live slot, and never subtracts from
// its live bytes more than it added (a free's size must be its allocation's).
absl::Status Replayer::CheckTrace() const {
  if (trace_.num_slots > size_t{UINT32_MAX} + 1) {
    return absl::InvalidArgumentError(bfc::internal::Format(
        "%s: the trace declares %d slots, but slot indices are 32-bit",
        trace_.name, trace_.num_slots));
  }
  struct Slot {
    bool live = false;
    size_t size = 0;
    size_t op = 0;  // the allocating op
  };
  std::vector<Slot> slots(trace_.num_slots);
  for (size_t i = 0; i < trace_.ops.size(); ++i) {
    const ReplayOp& op = trace_.ops[i];
    if (op.slot >= trace_.num_slots) {
      return absl::InvalidArgumentError(bfc::internal::Format(
          "%s: op %d (event %d) uses slot %d, but the trace has %d slots",
          trace_.name, i, op.event_index, op.slot, trace_.num_slots));
    }
    if (op.stream >= trace_.streams.size()) {
      return absl::InvalidArgumentError(bfc::internal::Format(
          "%s: op %d (event %d) names stream %d, but the trace has %d",
          trace_.name, i, op.event_index, op.stream, trace_.streams.size()));
    }
    Slot& slot = slots[op.slot];
    if (op.kind == ReplayOp::Kind::kAllocate) {
      if (slot.live) {
        return absl::InvalidArgumentError(bfc::internal::Format(
            "%s: op %d (event %d) allocates into slot %d, which is still live",
            trace_.name, i, op.event_index, op.slot));
      }
      slot = Slot{true, op.size, i};
    } else {
      if (!slot.live) {
        return absl::InvalidArgumentError(bfc::internal::Format(
            "%s: op %d (event %d) frees slot %d, which is not live",
            trace_.name, i, op.event_index, op.slot));
      }
      if (op.size != slot.size) {
        return absl::InvalidArgumentError(bfc::internal::Format(
            "%s: op %d (event %d) frees slot %d as %d bytes, but op %d "
            "allocated it with %d bytes",
            trace_.name, i, op.event_index, op.slot, op.size, slot.op,
            slot.size));
      }
      slot.live = false;
    }
  }
  return absl::OkStatus();
}

template <bool kCallbacks, bool kStreams>
void Replayer::Loop(ReplaySummary* s) {
  AllocationAttributes attr;
  attr.retry_on_failure = false;
  const size_t alignment = options_.alignment;
  void** slots = slots_.data();
  size_t live = 0;
  size_t peak = 0;
  size_t allocations = 0, frees = 0, failures = 0, skipped = 0;
  const ReplayOp* ops = trace_.ops.data();
  const size_t n = trace_.ops.size();
  for (size_t i = 0; i < n; ++i) {
    const ReplayOp& op = ops[i];
    void* p;
    if (op.kind == ReplayOp::Kind::kAllocate) {
      if constexpr (kStreams) attr.stream = StreamOf(op);
      if constexpr (kCallbacks) {
        if (options_.account_of) attr.account = options_.account_of(i, op);
      }
      p = allocator_.AllocateRaw(alignment, op.size, attr);
      slots[op.slot] = p;
      if (p != nullptr) {
        ++allocations;
        live += op.size;
        peak = std::max(peak, live);
      } else if (op.size > 0) {
        ++failures;
      }
      if constexpr (kCallbacks) {
        if (options_.on_allocate) options_.on_allocate(op, p);
      }
    } else {
      p = slots[op.slot];
      if (p != nullptr) {
        if constexpr (kStreams) {
          // A pointer this replay allocated: the free cannot be refused.
          (void)allocator_.DeallocateOnStream(p, StreamOf(op));
        } else {
          allocator_.DeallocateRaw(p);
        }
        slots[op.slot] = nullptr;
        live -= op.size;
        ++frees;
      } else {
        ++skipped;
      }
    }
    if constexpr (kCallbacks) {
      if (options_.after_op) options_.after_op(i, op, p);
    }
  }
  s->allocations = allocations;
  s->frees = frees;
  s->failures = failures;
  s->skipped_frees = skipped;
  s->peak_live_bytes = peak;
  s->live_bytes_at_end = live;
}

absl::StatusOr<ReplaySummary> Replayer::Run() {
  // The slot tables are as large as the trace says; a hand-made trace may
  // say more than memory holds, which is an error, not an exception.
  try {
    if (!checked_) {
      absl::Status st = CheckTrace();
      if (!st.ok()) return st;
      checked_ = true;
    }
    ReleaseLive();
    slots_.assign(trace_.num_slots, nullptr);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        bfc::internal::Format("%s: no memory for the replay's %d slots",
                              trace_.name, trace_.num_slots));
  } catch (const std::length_error&) {
    return absl::ResourceExhaustedError(
        bfc::internal::Format("%s: no memory for the replay's %d slots",
                              trace_.name, trace_.num_slots));
  }

  ReplaySummary s;
  s.trace_name = trace_.name;
  s.events = trace_.num_events;
  s.ops = trace_.ops.size();

  const bool callbacks =
      options_.on_allocate || options_.after_op || options_.account_of;
  auto start = std::chrono::steady_clock::now();
  if (options_.streams) {
    if (callbacks) {
      Loop<true, true>(&s);
    } else {
      Loop<false, true>(&s);
    }
  } else if (callbacks) {
    Loop<true, false>(&s);
  } else {
    Loop<false, false>(&s);
  }
  auto end = std::chrono::steady_clock::now();
  s.wall_seconds = std::chrono::duration<double>(end - start).count();
  s.ns_per_op =
      s.ops == 0 ? 0 : s.wall_seconds * 1e9 / static_cast<double>(s.ops);

  s.live_at_end = static_cast<size_t>(std::count_if(
      slots_.begin(), slots_.end(), [](void* p) { return p != nullptr; }));
  std::optional<AllocatorStats> stats = allocator_.GetStats();
  if (stats.has_value()) {
    s.peak_bytes_in_use = stats->peak_bytes_in_use;
    s.peak_pool_bytes = stats->peak_pool_bytes.value_or(0);
    s.pool_bytes_at_end = stats->pool_bytes.value_or(0);
    s.regions = stats->num_extends;
    // Every SubAllocator::Free: whole regions and parts of them.
    s.regions_released =
        stats->num_regions_released + stats->num_partial_releases;
  }
  if (options_.streams) {
    s.trace_streams = trace_.streams.size();
    s.stream_stats = allocator_.GetStreamStats();
  }
  s.footprint_ratio = s.peak_live_bytes == 0
                          ? 0
                          : static_cast<double>(s.peak_pool_bytes) /
                                static_cast<double>(s.peak_live_bytes);
  return s;
}

namespace {

class CompletedWorkStreamOps final : public StreamOps {
 public:
  absl::StatusOr<Event> RecordEvent(StreamId) override {
    // Distinct non-null handles; nothing to allocate or free.
    return reinterpret_cast<Event>(++next_);
  }
  absl::StatusOr<bool> QueryEvent(Event) override { return true; }
  absl::Status StreamWaitEvent(StreamId, Event) override {
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event) override { return absl::OkStatus(); }
  void ReleaseEvent(Event) override {}

 private:
  uintptr_t next_ = 0;
};

}  // namespace

std::unique_ptr<StreamOps> MakeCompletedWorkStreamOps() {
  return std::make_unique<CompletedWorkStreamOps>();
}

absl::StatusOr<ReplaySummary> ReplayTrace(const CompiledTrace& trace,
                                          Allocator& allocator,
                                          const ReplayOptions& options) {
  Replayer replayer(trace, allocator, options);
  absl::StatusOr<ReplaySummary> s = replayer.Run();
  replayer.ReleaseLive();
  return s;
}

absl::Status ReplayAccounts::Open(
    Allocator* allocator, const std::vector<std::string>& names,
    std::function<size_t(size_t op_index)> account_of_op) {
  AccountOptions root_options;
  root_options.name = "replay";
  absl::StatusOr<std::shared_ptr<Account>> root =
      Account::CreateRoot(allocator, root_options);
  if (!root.ok()) return root.status();
  root_ = *std::move(root);
  for (const std::string& name : names) {
    AccountOptions child;
    child.name = name;
    absl::StatusOr<std::shared_ptr<Account>> c = root_->CreateChild(child);
    if (!c.ok()) {
      return absl::InvalidArgumentError(bfc::internal::Format(
          "account '%s': %s", name, c.status().message()));
    }
    children_.push_back(*std::move(c));
  }
  account_of_op_ = std::move(account_of_op);
  return absl::OkStatus();
}

void ReplayAccounts::Attach(ReplayOptions* replay) const {
  if (root_ == nullptr) return;
  replay->account_of = [this](size_t i, const ReplayOp&) -> Account* {
    const size_t k = account_of_op_ ? account_of_op_(i) : children_.size();
    return k < children_.size() ? children_[k].get() : root_.get();
  };
}

void ReplayAccounts::Close() {
  for (const std::shared_ptr<Account>& c : children_) (void)c->Close();
  if (root_ != nullptr) (void)root_->Close();
}

}  // namespace bfc
