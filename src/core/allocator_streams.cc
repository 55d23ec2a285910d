// File: src/core/allocator_streams.cc
// -----------------------------------------------------------------------------
//
// Stream-ordered reuse (bfc/allocator.h, "Streams"): fences on chunks.
//
// A free on stream P stamps the chunk with P's next point, (P, ++seq[P]),
// and makes no CUDA call. What the allocator knows about each stream is
// monotone: `completed` (every point up to it has run: an event found
// complete, or synchronized) and, per consumer, `waits_for` (the consumer
// waits for the producer up to a point). A chunk is safe for S when every
// point of its fence is on S, complete, or waited for by S. Fences are never
// re-keyed: a merge keeps both fences' points (the later one of the same
// stream), a split remainder keeps its parent's fence, and a fence becomes
// clean only on allocation — never replaced by one not proven to come after
// it (rapidsai/rmm#2489).
//
// Events are recorded lazily, one per stream per batch of frees, only when
// another stream or the out-of-memory path needs to know about its points;
// a point is covered by any event recorded after it (stream order).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/allocator.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "core/internal/user_code.h"

namespace bfc {

using internal::Chunk;
using internal::ChunkHandle;
using internal::kInvalidChunkHandle;

namespace {

std::string StreamName(StreamId s) { return internal::Format("%p", s); }

// A StreamOps method (`call`, returning a Status or StatusOr R) through the
// library's noexcept boundary: what it throws becomes an Internal status
// naming the method; what it logs joins `queue` (the allocator's, sent once
// its lock is released).
template <typename R, typename F>
R CallStreamOps(internal::LogQueue* queue, const char* method, F&& call) {
  R result = absl::InternalError("");
  std::string what;
  if (internal::CallUserCodeDeferringLogs(
          queue, [&] { result = call(); }, &what)) {
    return result;
  }
  // Described when the host can spare the memory (a StreamOps call that
  // threw std::bad_alloc may have found it without: HostHasRoomFor).
  if (internal::HostHasRoomFor(size_t{1} << 20)) {
    try {
      return absl::InternalError(
          absl::StrCat("StreamOps::", method, " threw: ", what));
    } catch (...) {
    }
  }
  return result;  // Internal, without a message
}

}  // namespace

// --- Public calls -----------------------------------------------------------

absl::Status Allocator::SetStreamOps(std::unique_ptr<StreamOps> ops) {
  Lock lock(this);
  if (ops == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("Allocator '", name_, "': SetStreamOps(nullptr)"));
  }
  if (stream_ops_ != nullptr || multi_stream_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Allocator '", name_,
        "': SetStreamOps must come before any stream other than the "
        "implicit one is used, and only once"));
  }
  stream_ops_ = std::move(ops);
  has_stream_ops_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<void*> Allocator::AllocateOnStream(StreamId stream,
                                                  size_t num_bytes,
                                                  size_t alignment) {
  AllocationAttributes attr;
  attr.stream = stream;
  return Allocate(num_bytes, alignment, attr);
}

absl::Status Allocator::DeallocateOnStream(void* ptr, StreamId stream) {
  if (ptr == nullptr) return absl::OkStatus();
  Lock lock(this);
  return FreeOnStream(ptr, stream, "DeallocateOnStream");
}

absl::Status Allocator::NotifyStreamWait(StreamId consumer, StreamId producer) {
  Lock lock(this);
  absl::StatusOr<StreamSlot> c = SlotFor(consumer);
  if (!c.ok()) return c.status();
  absl::StatusOr<StreamSlot> p = SlotFor(producer);
  if (!p.ok()) return p.status();
  if (*c == *p) return absl::OkStatus();
  const uint64_t point = streams_[*p].seq;
  std::vector<std::pair<StreamSlot, uint64_t>>& w = streams_[*c].waits_for;
  auto it = std::find_if(w.begin(), w.end(),
                         [&](const auto& e) { return e.first == *p; });
  if (it == w.end()) {
    try {
      w.emplace_back(*p, point);
    } catch (...) {
      return internal::NoHostMemoryStatus("NotifyStreamWait");
    }
  } else {
    it->second = std::max(it->second, point);
  }
  MaybeValidate("NotifyStreamWait");
  return absl::OkStatus();
}

absl::Status Allocator::ForgetStream(StreamId stream) {
  Lock lock(this);
  auto it = stream_slots_.find(stream);
  if (it == stream_slots_.end() || it->second == 0) {
    // Unknown (never used: nothing to forget) or the implicit stream, which
    // lives as long as the process.
    return absl::OkStatus();
  }
  const StreamSlot slot = it->second;
  StreamState& st = streams_[slot];
  absl::Status result;
  // Live memory this stream used (RecordStreamUse) is freed later, on
  // another stream: its fence then names this stream's last point (see
  // StampFree), so that point must cover the uses made so far.
  bool used_by_live_memory = false;
  for (const auto& [h, uses] : extra_uses_) {
    if (std::find(uses.slots.begin(), uses.slots.end(), slot) !=
        uses.slots.end()) {
      used_by_live_memory = true;
      break;
    }
  }
  const uint64_t last = st.seq + (used_by_live_memory ? 1 : 0);
  if (stream_ops_ != nullptr && last > st.completed && st.recorded < last) {
    // The room for its last event first: short of host memory, the call
    // fails whole and the stream stays known (forgotten without that event,
    // what was freed on it and still pending could never be shown complete).
    try {
      st.events.reserve(st.events.size() + 1);
    } catch (...) {
      return internal::NoHostMemoryStatus("ForgetStream");
    }
  }
  st.seq = last;
  if (st.seq > st.completed && st.recorded < st.seq) {
    // One last event, so that the stream's pending points can still be
    // learnt after it is gone (events outlive their stream).
    if (stream_ops_ != nullptr) {
      // Without it (StreamOps failed) the stream is forgotten all the same:
      // the caller may destroy it and CUDA hand the same handle to a new
      // stream, which must not inherit this one's order. What was freed on
      // it and still pending then stays unused for good: safe, not
      // recoverable.
      StreamOps::Event event;
      (void)EventCovering(slot, st.seq, &event, &result);
    }
  }
  st.forgotten = true;
  ++forgotten_slots_;
  stream_slots_.erase(it);
  // Nobody waits for a forgotten stream's future work, and it waits for
  // nothing any more.
  st.waits_for.clear();
  MaybeValidate("ForgetStream");
  return result;
}

bool Allocator::HasStreamOps() const {
  // Set once and never cleared: read without the lock, which every C ABI
  // call took once more for this question besides its own.
  return has_stream_ops_.load(std::memory_order_acquire);
}

Allocator::StreamStats Allocator::GetStreamStats() const {
  Lock lock(this);
  return StreamStatsLocked();
}

Allocator::StreamStats Allocator::StreamStatsLocked() const {
  StreamStats s = stream_stats_;
  s.streams = streams_seen_;
  s.bytes_pending = 0;
  for (const internal::Bin& bin : bins_) {
    bin.ForEach([&](const internal::Bin::Entry& e)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
                      const uint64_t f = chunks_[e.handle].fence;
                      if (f != 0 && !FenceComplete(f)) {
                        s.bytes_pending += static_cast<int64_t>(e.size);
                      }
                    });
  }
  for (ChunkHandle h : pending_dedicated_) {
    s.bytes_pending += static_cast<int64_t>(chunks_[h].size);
  }
  return s;
}

// --- Slots and fences -------------------------------------------------------

absl::StatusOr<Allocator::StreamSlot> Allocator::SlotFor(StreamId stream) {
  auto it = stream_slots_.find(stream);
  if (ABSL_PREDICT_TRUE(it != stream_slots_.end())) return it->second;
  // A new stream's entries: each growth below either completes or throws
  // before anything changed, so a host out of memory fails the call whole.
  try {
    return NewSlotFor(stream);
  } catch (...) {
    return internal::NoHostMemoryStatus("a new stream");
  }
}

absl::StatusOr<Allocator::StreamSlot> Allocator::NewSlotFor(StreamId stream) {
  if (free_slots_.empty() && (forgotten_slots_ >= next_slot_collection_ ||
                              streams_.size() >= kMaxStreams)) {
    CollectForgottenSlots();
  }
  if (!free_slots_.empty()) {
    // A forgotten stream's slot that nothing names any more. Its points keep
    // counting up (all of them complete as far as anyone can ask), so a
    // point of the new stream is never one of the old one's.
    const StreamSlot slot = free_slots_.back();
    stream_slots_.emplace(stream, slot);
    free_slots_.pop_back();
    StreamState& st = streams_[slot];
    st.id = stream;
    st.forgotten = false;
    st.on_free_list = false;
    ++streams_seen_;
    return slot;
  }
  if (streams_.size() >= kMaxStreams) {
    return absl::ResourceExhaustedError(
        absl::StrCat("Allocator '", name_, "': more than ", kMaxStreams,
                     " streams used over its lifetime; stream ",
                     StreamName(stream), " refused"));
  }
  const auto slot = static_cast<StreamSlot>(streams_.size());
  // Room first, then the map, then the entry (which cannot throw now).
  if (streams_.size() == streams_.capacity()) {
    streams_.reserve(2 * streams_.size());
  }
  stream_slots_.emplace(stream, slot);
  streams_.emplace_back();
  streams_.back().id = stream;
  ++streams_seen_;
  if (!multi_stream_) {
    // Leaving single-stream mode: memory freed so far on the implicit stream
    // may still be in use by its work; fence it all with one point.
    multi_stream_ = true;
    slow_paths_ |= kStreamsPath;
    const uint64_t point = ++streams_[0].seq;
    for (internal::Bin& bin : bins_) {
      bin.ForEach([&](const internal::Bin::Entry& e)
                      ABSL_NO_THREAD_SAFETY_ANALYSIS {    // under mutex_
                        chunks_[e.handle].fence = point;  // slot 0
                        ListFenced(e.handle);
                      });
    }
  }
  return slot;
}

void Allocator::CollectForgottenSlots() {
  // What completed since is known first.
  PollStreams();
  // Which slots something still names: a pending point of a fence on a free
  // chunk (every such chunk is on the fenced-chunk list, unless a listing
  // failed for want of memory: then the bins and the parked dedicated chunks
  // hold them all), or another stream's use of a live chunk.
  // Its memory first (SlotFor fails whole if the host has none).
  std::vector<bool> named(streams_.size(), false);
  free_slots_.reserve(streams_.size());
  // A point known complete names nothing: the slot's points all count as
  // complete once it is free (and a new stream's points come after them).
  auto name_fence = [&](uint64_t fence) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    FencePart one;
    for (const auto& [p, q] : FenceSpan(fence, &one)) {
      if (q > streams_[p].completed) named[p] = true;
    }
  };
  if (!fence_list_lost_) {
    for (const ChunkHandle h : fenced_chunks_) {
      if (chunks_.InRange(h) && chunks_[h].fence != 0) {
        name_fence(chunks_[h].fence);
      }
    }
  } else {
    for (const internal::Bin& bin : bins_) {
      bin.ForEach([&](const internal::Bin::Entry& e)
                      ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
                        name_fence(chunks_[e.handle].fence);
                      });
    }
  }
  // (A multi-fence is named through the chunks holding it: Validate checks
  // that its count of holders is exact.)
  for (const ChunkHandle h : pending_dedicated_) name_fence(chunks_[h].fence);
  for (const auto& [h, uses] : extra_uses_) {
    for (const StreamSlot u : uses.slots) named[u] = true;
  }
  size_t freed = 0;
  for (StreamSlot p = 1; p < streams_.size(); ++p) {
    StreamState& st = streams_[p];
    if (!st.forgotten || st.on_free_list || named[p]) continue;
    // Nothing can ask about its points any more: its events serve nothing,
    // and every point counts as complete.
    for (const auto& [event, covers] : st.events) CallReleaseEvent(event);
    st.events.clear();
    st.waits_for.clear();
    st.completed = st.recorded = st.seq;
    st.on_free_list = true;
    free_slots_.push_back(p);
    ++freed;
  }
  if (freed > 0) {
    // Nobody waits for a stream that is gone.
    for (StreamState& st : streams_) {
      st.waits_for.erase(
          std::remove_if(st.waits_for.begin(), st.waits_for.end(),
                         [&](const std::pair<StreamSlot, uint64_t>& w)
                             ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
                               return streams_[w.first].on_free_list;
                             }),
          st.waits_for.end());
    }
  }
  forgotten_slots_ -= freed;
  // Slots still named are looked at again after as many more lifetimes: the
  // cost stays amortized however long their memory stays pending.
  next_slot_collection_ = std::max(kMinSlotCollection, 2 * forgotten_slots_);
}

uint64_t Allocator::StampFree(ChunkHandle h, StreamSlot slot) {
  const uint64_t own = ++streams_[slot].seq;
  auto it = extra_uses_.find(h);
  if (ABSL_PREDICT_TRUE(it == extra_uses_.end())) {
    return uint64_t{slot} << kFenceSeqBits | own;
  }
  // In the room RecordStreamUse made: a free needs no host memory.
  std::vector<FencePart>& parts = it->second.parts;
  BFC_DCHECK_GT(parts.capacity(), it->second.slots.size());
  parts.clear();
  parts.emplace_back(slot, own);
  for (StreamSlot u : it->second.slots) {
    if (u == slot) continue;
    // A forgotten stream runs nothing more: its uses are covered by the
    // point ForgetStream stamped (and its last event).
    StreamState& user = streams_[u];
    parts.emplace_back(u, user.forgotten ? user.seq : ++user.seq);
  }
  const uint64_t fence = MakeFence(parts);
  extra_uses_.erase(it);
  return fence;
}

void Allocator::FenceParts(
    uint64_t fence, std::vector<std::pair<StreamSlot, uint64_t>>* out) const {
  out->clear();
  if (fence == 0) return;
  if (fence & kMultiFenceBit) {
    const MultiFence& m = multi_fences_[fence & ~kMultiFenceBit];
    out->assign(m.parts.begin(), m.parts.end());
    return;
  }
  out->emplace_back(static_cast<StreamSlot>(fence >> kFenceSeqBits),
                    fence & kFenceSeqMask);
}

absl::Span<const Allocator::FencePart> Allocator::FenceSpan(
    uint64_t fence, FencePart* single) const {
  if (fence == 0) return {};
  if (fence & kMultiFenceBit) {
    return multi_fences_[fence & ~kMultiFenceBit].parts;
  }
  *single = FencePart(static_cast<StreamSlot>(fence >> kFenceSeqBits),
                      fence & kFenceSeqMask);
  return absl::MakeConstSpan(single, 1);
}

void Allocator::ReserveMultiFenceLocked() {
  // A chunk with other streams' uses takes at most one record when freed
  // (StampFree; merges never make one, see JoinFences), so a record for
  // each, free or never used yet, is enough.
  const size_t unused = multi_fences_.capacity() - multi_fences_.size();
  if (free_multi_fences_.size() + unused >= extra_uses_.size()) return;
  const size_t needed =
      multi_fences_.size() + extra_uses_.size() - free_multi_fences_.size();
  const size_t capacity = std::max(needed, 2 * multi_fences_.capacity());
  // The free list first: UnrefFence pushes onto it without throwing while
  // its capacity covers every record.
  free_multi_fences_.reserve(capacity);
  multi_fences_.reserve(capacity);
}

bool Allocator::PointSafeFor(StreamSlot producer, uint64_t point,
                             StreamSlot slot) const {
  if (producer == slot) return true;
  if (point <= streams_[producer].completed) return true;
  if (opts_.reuse_follow_dependencies) {
    for (const auto& [p, upto] : streams_[slot].waits_for) {
      if (p == producer) return point <= upto;
    }
  }
  return false;
}

bool Allocator::FenceSafeFor(uint64_t fence, StreamSlot slot) const {
  if (fence == 0) return true;
  if (ABSL_PREDICT_TRUE(!(fence & kMultiFenceBit))) {
    return PointSafeFor(static_cast<StreamSlot>(fence >> kFenceSeqBits),
                        fence & kFenceSeqMask, slot);
  }
  for (const auto& [p, q] : multi_fences_[fence & ~kMultiFenceBit].parts) {
    if (!PointSafeFor(p, q, slot)) return false;
  }
  return true;
}

bool Allocator::FenceComplete(uint64_t fence) const {
  if (fence == 0) return true;
  if (!(fence & kMultiFenceBit)) {
    return (fence & kFenceSeqMask) <=
           streams_[fence >> kFenceSeqBits].completed;
  }
  for (const auto& [p, q] : multi_fences_[fence & ~kMultiFenceBit].parts) {
    if (q > streams_[p].completed) return false;
  }
  return true;
}

bool Allocator::MayMergeSlow(ChunkHandle a, ChunkHandle b) const {
  if (timing_counter_ != nullptr && !force_timestamp_merge_ &&
      (FreedAt(a) != 0 || FreedAt(b) != 0)) {
    return false;
  }
  const uint64_t fa = chunks_[a].fence, fb = chunks_[b].fence;
  return (fa | fb) == 0 || MayMergeFences(fa, fb);
}

bool Allocator::FenceDead(uint64_t fence) const {
  FencePart one;
  for (const auto& [p, q] : FenceSpan(fence, &one)) {
    const StreamState& st = streams_[p];
    // Forgotten without an event that covers the point (ForgetStream's last
    // event could not be recorded): nothing can show it complete.
    if (st.forgotten && q > st.completed && q > st.recorded) return true;
  }
  return false;
}

bool Allocator::MayMergeFences(uint64_t a, uint64_t b) const {
  // One side clean: the merged chunk keeps the other's fence (JoinFences),
  // so no memory becomes usable early; the clean part waits with it --
  // unless the other side can never be shown complete: then the clean part
  // stays apart and usable (joined, it was lost for good, and so was every
  // neighbour freed or region grown next to it later, until the pool held
  // the whole limit unusable).
  const bool a_done = FenceComplete(a), b_done = FenceComplete(b);
  if (a_done && b_done) return true;
  if (a_done) return !FenceDead(b);
  if (b_done) return !FenceDead(a);
  // Two points of one stream: the merged chunk is safe exactly where each
  // part was (the later point) -- unless only the later one is dead: the
  // earlier part, which will complete, would be lost with it.
  return a != 0 && b != 0 && !((a | b) & kMultiFenceBit) &&
         (a >> kFenceSeqBits) == (b >> kFenceSeqBits) &&
         FenceDead(a) == FenceDead(b);
}

uint64_t Allocator::MakeFence(
    std::vector<std::pair<StreamSlot, uint64_t>>& parts) {
  // One point per stream: the latest.
  std::sort(parts.begin(), parts.end());
  size_t n = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (n > 0 && parts[n - 1].first == parts[i].first) {
      parts[n - 1].second = std::max(parts[n - 1].second, parts[i].second);
    } else {
      parts[n++] = parts[i];
    }
  }
  parts.resize(n);
  if (n == 0) return 0;
  if (n == 1)
    return uint64_t{parts[0].first} << kFenceSeqBits | parts[0].second;
  uint32_t index;
  if (!free_multi_fences_.empty()) {
    index = free_multi_fences_.back();
    free_multi_fences_.pop_back();
  } else {
    // Within the room ReserveMultiFenceLocked made for StampFree.
    if (multi_fences_.size() == multi_fences_.capacity()) {
      free_multi_fences_.reserve(2 * multi_fences_.size() + 1);
      multi_fences_.reserve(2 * multi_fences_.size() + 1);
    }
    index = static_cast<uint32_t>(multi_fences_.size());
    multi_fences_.emplace_back();
  }
  MultiFence& m = multi_fences_[index];
  // Swapped in, not copied: the caller's vector holds the record's old
  // (empty) storage.
  m.parts.swap(parts);
  m.refs = 1;
  return kMultiFenceBit | index;
}

void Allocator::RefFence(uint64_t fence) {
  if (fence & kMultiFenceBit) ++multi_fences_[fence & ~kMultiFenceBit].refs;
}

void Allocator::UnrefFence(uint64_t fence) {
  if (!(fence & kMultiFenceBit)) return;
  const auto index = static_cast<uint32_t>(fence & ~kMultiFenceBit);
  MultiFence& m = multi_fences_[index];
  BFC_DCHECK_GT(m.refs, 0u);
  if (--m.refs == 0) {
    m.parts.clear();
    free_multi_fences_.push_back(index);
  }
}

uint64_t Allocator::JoinFences(uint64_t a, uint64_t b) {
  if ((a | b) != 0 && FenceComplete(a) && FenceComplete(b)) {
    // Both proven complete: the merged memory is clean.
    UnrefFence(a);  // each chunk held a reference, even to the same one
    UnrefFence(b);
    return 0;
  }
  if (b == 0 || a == b) {
    if (a == b) UnrefFence(b);
    return a;
  }
  if (a == 0) return b;
  // One side proven complete: the other alone says the same, and no new
  // record is needed (so a merge needs no host memory: MayMergeFences
  // allows nothing else across streams).
  if (FenceComplete(a)) {
    UnrefFence(a);
    return b;
  }
  if (FenceComplete(b)) {
    UnrefFence(b);
    return a;
  }
  if (!((a | b) & kMultiFenceBit) &&
      (a >> kFenceSeqBits) == (b >> kFenceSeqBits)) {
    return std::max(a, b);  // one stream: the later point
  }
  std::vector<std::pair<StreamSlot, uint64_t>> parts, more;
  FenceParts(a, &parts);
  FenceParts(b, &more);
  parts.insert(parts.end(), more.begin(), more.end());
  UnrefFence(a);
  UnrefFence(b);
  return MakeFence(parts);
}

// --- Events
// -------------------------------------------------------------------

void Allocator::StreamOpFailed(const absl::Status& s) {
  ++stream_stats_.stream_op_errors;
  stream_error_ = s;
  // The counts and stream_error_ record it regardless of the report.
  DeferReport(LogSeverity::kError, [&] {
    return absl::StrCat("Allocator '", name_, "': ", s.message(),
                        " (the memory involved stays unused until it is "
                        "known safe)");
  });
}

absl::Status Allocator::NoEventStatus(StreamId stream) const {
  if (internal::HostHasRoomFor(kReportRoomBytes)) {
    try {
      return absl::FailedPreconditionError(
          absl::StrCat("no event can cover stream ", StreamName(stream)));
    } catch (...) {
    }
  }
  return absl::Status(absl::StatusCode::kFailedPrecondition, "");
}

bool Allocator::EventCovering(StreamSlot producer, uint64_t point,
                              StreamOps::Event* event, absl::Status* error) {
  StreamState& st = streams_[producer];
  for (const auto& [e, covers] : st.events) {
    if (covers >= point) {
      *event = e;
      return true;
    }
  }
  if (stream_ops_ == nullptr || st.forgotten) {
    // A forgotten stream's last event (if any) was in `events`; without
    // StreamOps nothing can be learnt.
    return false;
  }
  // Room to keep it before it is recorded.
  try {
    st.events.reserve(st.events.size() + 1);
  } catch (...) {
    *error = internal::NoHostMemoryStatus("a stream event");
    return false;
  }
  ++stream_stats_.events_recorded;
  absl::StatusOr<StreamOps::Event> e = CallRecordEvent(st.id);
  if (!e.ok()) {
    *error = e.status();
    StreamOpFailed(e.status());
    return false;
  }
  try {
    st.events.emplace_back(*e, st.seq);
  } catch (...) {
    // No host memory to keep it: given up, as if it had failed.
    CallReleaseEvent(*e);
    *error = internal::NoHostMemoryStatus("a stream event");
    return false;
  }
  // Recorded now, after every free stamped so far on the stream.
  st.recorded = st.seq;
  // The newest event covers every earlier point; older ones only serve
  // polls, which may find them complete sooner. Without polls
  // (reuse_allow_opportunistic off) they serve nothing, and a stream whose
  // work never completes must not collect events without bound.
  if (!opts_.reuse_allow_opportunistic) {
    for (size_t i = 0; i + 1 < st.events.size(); ++i) {
      CallReleaseEvent(st.events[i].first);
    }
    st.events.erase(st.events.begin(), st.events.end() - 1);
  } else if (st.events.size() > kMaxEventsPerStream) {
    const auto second_newest = st.events.end() - 2;
    CallReleaseEvent(second_newest->first);
    st.events.erase(second_newest);
  }
  *event = *e;
  return true;
}

absl::StatusOr<StreamOps::Event> Allocator::CallRecordEvent(StreamId stream) {
  return CallStreamOps<absl::StatusOr<StreamOps::Event>>(
      &deferred_logs_, "RecordEvent",
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
        return stream_ops_->RecordEvent(stream);
      });
}

absl::StatusOr<bool> Allocator::CallQueryEvent(StreamOps::Event event) {
  return CallStreamOps<absl::StatusOr<bool>>(
      &deferred_logs_, "QueryEvent",
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
        return stream_ops_->QueryEvent(event);
      });
}

absl::Status Allocator::CallStreamWaitEvent(StreamId stream,
                                            StreamOps::Event event) {
  return CallStreamOps<absl::Status>(
      &deferred_logs_, "StreamWaitEvent",
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
        return stream_ops_->StreamWaitEvent(stream, event);
      });
}

absl::Status Allocator::CallSynchronizeEvent(StreamOps::Event event) {
  return CallStreamOps<absl::Status>(
      &deferred_logs_, "SynchronizeEvent",
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
        return stream_ops_->SynchronizeEvent(event);
      });
}

void Allocator::CallReleaseEvent(StreamOps::Event event) {
  std::string what;
  if (internal::CallUserCodeDeferringLogs(
          &deferred_logs_,
          [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mutex_
            stream_ops_->ReleaseEvent(event);
          },
          &what)) {
    return;
  }
  ++stream_stats_.stream_op_errors;
  DeferReport(LogSeverity::kError, [&] {
    return absl::StrCat("Allocator '", name_,
                        "': StreamOps::ReleaseEvent threw (", what,
                        "); the event is given up");
  });
}

void Allocator::PollStreams() {
  if (stream_ops_ == nullptr || !opts_.reuse_allow_opportunistic) return;
  for (StreamState& st : streams_) {
    size_t done = 0;
    for (; done < st.events.size(); ++done) {
      ++stream_stats_.event_queries;
      absl::StatusOr<bool> complete = CallQueryEvent(st.events[done].first);
      if (!complete.ok()) {
        StreamOpFailed(complete.status());
        break;
      }
      if (!*complete) break;
      st.completed = std::max(st.completed, st.events[done].second);
    }
    for (size_t i = 0; i < done; ++i) {
      CallReleaseEvent(st.events[i].first);
    }
    st.events.erase(st.events.begin(),
                    st.events.begin() + static_cast<long>(done));
  }
}

void Allocator::CoverFence(uint64_t fence) {
  if (stream_ops_ == nullptr) return;
  FencePart one;
  for (const auto& [p, q] : FenceSpan(fence, &one)) {
    if (q > streams_[p].completed && q > streams_[p].recorded) {
      absl::Status error;
      StreamOps::Event event;
      (void)EventCovering(p, q, &event, &error);
    }
  }
}

absl::Status Allocator::InsertWaits(uint64_t fence, StreamSlot slot) {
  if (stream_ops_ == nullptr) {
    return absl::FailedPreconditionError("no StreamOps");
  }
  FencePart one;
  for (const auto& [p, q] : FenceSpan(fence, &one)) {
    if (PointSafeFor(p, q, slot)) continue;
    absl::Status error;
    StreamOps::Event e;
    if (!EventCovering(p, q, &e, &error)) {
      return error.ok() ? NoEventStatus(streams_[p].id) : error;
    }
    ++stream_stats_.waits_inserted;
    absl::Status s = CallStreamWaitEvent(streams_[slot].id, e);
    if (!s.ok()) {
      StreamOpFailed(s);
      return s;
    }
    // The event covers at least q: the stream now waits up to its point.
    uint64_t covers = q;
    for (const auto& [event, c] : streams_[p].events) {
      if (event == e) covers = c;
    }
    std::vector<std::pair<StreamSlot, uint64_t>>& w = streams_[slot].waits_for;
    bool known = false;
    for (auto& [producer, upto] : w) {
      if (producer != p) continue;
      upto = std::max(upto, covers);
      known = true;
    }
    if (!known) {
      try {
        w.emplace_back(p, covers);
      } catch (...) {
        // The wait is on the device all the same; only the knowledge that
        // later frees on `p` up to `covers` are safe here is lost (a later
        // reuse asks again).
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Allocator::SynchronizeFence(uint64_t fence) {
  FencePart one;
  for (const auto& [p, q] : FenceSpan(fence, &one)) {
    StreamState& st = streams_[p];
    if (q <= st.completed) continue;
    absl::Status error;
    StreamOps::Event e;
    if (!EventCovering(p, q, &e, &error)) {
      return error.ok() ? NoEventStatus(st.id) : error;
    }
    ++stream_stats_.synchronizations;
    absl::Status s = CallSynchronizeEvent(e);
    if (!s.ok()) {
      StreamOpFailed(s);
      return s;
    }
    // Everything up to this event (and the events before it) completed.
    size_t done = 0;
    while (done < st.events.size()) {
      st.completed = std::max(st.completed, st.events[done].second);
      const bool last = st.events[done].first == e;
      ++done;
      if (last) break;
    }
    for (size_t i = 0; i < done; ++i) {
      CallReleaseEvent(st.events[i].first);
    }
    st.events.erase(st.events.begin(),
                    st.events.begin() + static_cast<long>(done));
  }
  return absl::OkStatus();
}

bool Allocator::SynchronizeAllStreams() {
  bool ok = true;
  for (StreamSlot p = 0; p < streams_.size(); ++p) {
    const uint64_t seq = streams_[p].seq;
    if (seq <= streams_[p].completed) continue;
    if (!SynchronizeFence(uint64_t{p} << kFenceSeqBits | seq).ok()) ok = false;
  }
  return ok;
}

// --- Checks
// -------------------------------------------------------------------

absl::Status Allocator::ValidateStreamsLocked() const {
  auto fail = [&](auto&&... parts) {
    return absl::InternalError(
        absl::StrCat("Allocator '", name_, "': ", parts...));
  };
  if (streams_.empty() || streams_[0].id != kImplicitStream) {
    return fail("stream slot 0 is not the implicit stream");
  }
  for (StreamSlot p = 0; p < streams_.size(); ++p) {
    const StreamState& st = streams_[p];
    if (st.completed > st.seq || st.recorded > st.seq) {
      return fail("stream ", p, " knows points past its last one (seq ", st.seq,
                  ", completed ", st.completed, ", recorded ", st.recorded,
                  ")");
    }
    uint64_t last = 0;
    for (const auto& [event, covers] : st.events) {
      if (covers < last || covers > st.seq) {
        return fail("stream ", p, ": its events are not in point order");
      }
      last = covers;
    }
    for (const auto& [producer, upto] : st.waits_for) {
      if (producer >= streams_.size() || upto > streams_[producer].seq) {
        return fail("stream ", p, " waits for stream ", producer,
                    " past its last point");
      }
    }
    if (!st.forgotten) {
      auto it = stream_slots_.find(st.id);
      if (it == stream_slots_.end() || it->second != p) {
        return fail("stream ", p, " is live but not mapped to its slot");
      }
    }
  }
  size_t on_free_list = 0, forgotten = 0;
  for (const StreamState& st : streams_) {
    forgotten += st.forgotten && !st.on_free_list;
    on_free_list += st.on_free_list;
    if (st.on_free_list && (!st.forgotten || !st.events.empty() ||
                            !st.waits_for.empty() || st.completed != st.seq)) {
      return fail("a free stream slot still holds a stream's state");
    }
  }
  if (on_free_list != free_slots_.size() || forgotten != forgotten_slots_) {
    return fail("free stream slots: ", free_slots_.size(), " listed, ",
                on_free_list, " marked; forgotten slots: ", forgotten_slots_,
                " counted, ", forgotten, " marked");
  }
  for (const StreamSlot p : free_slots_) {
    if (p == 0 || p >= streams_.size() || !streams_[p].on_free_list) {
      return fail("free stream slot ", p, " is not a forgotten stream's");
    }
  }
  if (stream_slots_.size() > streams_.size()) {
    return fail("more stream handles than slots");
  }
  // Fences: only on free chunks, naming existing streams' stamped points;
  // every multi-fence referenced exactly as often as it says.
  std::vector<uint32_t> refs(multi_fences_.size(), 0);
  std::vector<std::pair<StreamSlot, uint64_t>> parts;
  for (const internal::AllocationRegion& r : region_manager_.regions()) {
    for (ChunkHandle h = region_manager_.get_handle(r.ptr());
         h != kInvalidChunkHandle; h = chunks_[h].next) {
      const Chunk& c = chunks_[h];
      if (c.fence == 0) continue;
      if (c.in_use()) {
        return fail("in-use chunk ", h, " keeps a fence");
      }
      // MergeDeferred finds fenced chunks only through the list (or, once
      // a listing failed for want of memory, rebuilds it from the bins).
      if (!fence_list_lost_ &&
          (h >= fence_listed_.size() || !fence_listed_[h])) {
        return fail("fenced chunk ", h, " is not on the fenced-chunk list");
      }
      if (c.fence & kMultiFenceBit) {
        const uint64_t index = c.fence & ~kMultiFenceBit;
        if (index >= multi_fences_.size() || multi_fences_[index].refs == 0) {
          return fail("chunk ", h, " names a free multi-fence ", index);
        }
        ++refs[index];
      }
      FenceParts(c.fence, &parts);
      for (const auto& [p, q] : parts) {
        if (p >= streams_.size() || q == 0 || q > streams_[p].seq) {
          return fail("chunk ", h, " has a fence (stream ", p, ", point ", q,
                      ") never stamped");
        }
        if (streams_[p].on_free_list && q > streams_[p].completed) {
          return fail("chunk ", h, " has a pending fence on stream slot ", p,
                      ", which is free for a new stream");
        }
      }
    }
  }
  size_t listed = 0;
  for (size_t h = 0; h < fence_listed_.size(); ++h) listed += fence_listed_[h];
  // (An incomplete list still marks exactly what it holds.)
  if (listed != fenced_chunks_.size()) {
    return fail("the fenced-chunk list holds ", fenced_chunks_.size(),
                " entries but ", listed, " chunks are marked listed");
  }
  for (const ChunkHandle h : fenced_chunks_) {
    if (!chunks_.InRange(h) || h >= fence_listed_.size() || !fence_listed_[h]) {
      return fail("fenced-chunk list entry ", h, " is not marked listed");
    }
  }
  // Each listed chunk once: a duplicate and a marked chunk missing from the
  // list would balance the count above, and MergeDeferred would never look
  // at the missing one (its merge, or its dedicated region's release, would
  // wait for ever).
  {
    std::vector<bool> seen(fence_listed_.size(), false);
    for (const ChunkHandle h : fenced_chunks_) {
      if (seen[h]) return fail("fenced-chunk list holds chunk ", h, " twice");
      seen[h] = true;
    }
  }
  size_t unreferenced = 0;
  for (size_t i = 0; i < multi_fences_.size(); ++i) {
    const MultiFence& m = multi_fences_[i];
    if (refs[i] != m.refs) {
      return fail("multi-fence ", i, " counts ", m.refs, " chunks but ",
                  refs[i], " hold it");
    }
    if (m.refs == 0) {
      ++unreferenced;
      continue;
    }
    // What MakeFence makes: two or more streams' points (one would be a
    // plain fence, not a record), the latest per stream, in slot order.
    // Anything else was written behind its back.
    if (m.parts.size() < 2) {
      return fail("multi-fence ", i, " has ", m.parts.size(),
                  " parts; it needs two or more");
    }
    for (size_t k = 1; k < m.parts.size(); ++k) {
      if (m.parts[k - 1].first >= m.parts[k].first) {
        return fail("multi-fence ", i,
                    ": its parts are not one per stream "
                    "in slot order");
      }
    }
  }
  // The free records, each once, exactly the unreferenced ones: MakeFence
  // takes the next one and overwrites it, so a listed record that chunks
  // still hold would change their fences (a stream could then reuse memory
  // another stream's work still uses).
  {
    std::vector<bool> listed_free(multi_fences_.size(), false);
    for (const uint32_t i : free_multi_fences_) {
      if (i >= multi_fences_.size() || listed_free[i] ||
          multi_fences_[i].refs != 0 || !multi_fences_[i].parts.empty()) {
        return fail("free multi-fence list entry ", i,
                    " is out of range, listed twice, held or not cleared");
      }
      listed_free[i] = true;
    }
  }
  if (unreferenced != free_multi_fences_.size()) {
    return fail(unreferenced, " multi-fences are held by no chunk but ",
                free_multi_fences_.size(), " are on the free list");
  }
  // Every handle names a live slot that names it back: a stale entry would
  // stamp a handle's frees on another stream's slot.
  for (const auto& [id, slot] : stream_slots_) {
    if (slot >= streams_.size() || streams_[slot].forgotten ||
        streams_[slot].id != id) {
      return fail("stream handle ", StreamName(id), " maps to slot ", slot,
                  ", which is not that stream's");
    }
  }
  for (const auto& [h, uses] : extra_uses_) {
    if (!chunks_.InRange(h) || !chunks_[h].in_use()) {
      return fail("stream uses recorded for chunk ", h, ", not in use");
    }
    if (uses.slots.empty() || uses.parts.capacity() <= uses.slots.size()) {
      return fail("stream uses of chunk ", h, ": ", uses.slots.size(),
                  " streams, room for ", uses.parts.capacity(), " fence parts");
    }
  }
  // The room a free's fence takes (ReserveMultiFenceLocked).
  const size_t unused = multi_fences_.capacity() - multi_fences_.size();
  if (free_multi_fences_.size() + unused < extra_uses_.size() ||
      free_multi_fences_.capacity() < multi_fences_.size()) {
    return fail("multi-fence room: ", free_multi_fences_.size(), " free + ",
                unused, " unused records for ", extra_uses_.size(),
                " chunks with other streams' uses; free list capacity ",
                free_multi_fences_.capacity(), " for ", multi_fences_.size(),
                " records");
  }
  return absl::OkStatus();
}

}  // namespace bfc
