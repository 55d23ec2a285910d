// File: tests/testing/fake_stream_ops.h
// -----------------------------------------------------------------------------
//
// A simulated device for stream-ordered reuse (bfc/stream_ops.h), with the
// race checker of testing/stream_race_checker.h wired to it.
//
// The device. Streams are arbitrary StreamId values (small integers cast to
// pointers; nullptr is a stream too). Each stream is a FIFO of ops: kernels
// the test launches (Launch, Use) and event markers (RecordEvent). Nothing
// completes on its own: the test says when (Complete, CompleteAll), and a
// held stream (Hold) completes nothing until Release. An op completes only
// after the ops before it on its stream and after every event its stream was
// made to wait for (StreamWaitEvent, Wait) before it was queued.
//
//   RecordEvent(S)        queues a marker on S; the event is the marker.
//   QueryEvent(e)         whether the marker completed.
//   StreamWaitEvent(S, e) later ops on S wait for e.
//   SynchronizeEvent(e)   the host waits: completes what e needs, unless a
//                         held stream blocks it; then FailedPrecondition
//                         "would deadlock: stream held" (a test never hangs).
//   ReleaseEvent(e)       e goes back to the pool. Handles are never reused,
//                         so any later use of e is caught: an error status
//                         and a misuse (counters().misuses).
//
// Destroyed streams. DestroyStream(S) (after Allocator::ForgetStream(S)) ends
// S: its queued work still runs and events recorded on it stay valid, but a
// StreamOps call naming S is a misuse. CreateStream(S) makes the handle name
// a brand-new stream (its clock, queue and index are new).
//
// The checker (vector clocks). Each stream has a clock; each op ticks its
// stream's entry; an event captures its stream's clock when recorded;
// StreamWaitEvent joins it into the waiting stream. When the host learns that
// an event completed (QueryEvent true, SynchronizeEvent), the host clock joins
// the event's, and every op launched afterwards on any stream joins the host
// clock first: work launched after the host saw completion is ordered after
// it. Completing ops (Complete) teaches the host nothing: only the
// allocator's own queries and synchronizations do. The test reports memory
// lifetimes (Allocated after the allocator handed memory out, Freed BEFORE
// handing it back, so that live lifetimes never overlap even with threads)
// and uses (Use: a kernel on a stream that touches the range); the checker
// flags any use not ordered after every use of every earlier lifetime of
// those bytes (races()).
//
// Thread-safe: one mutex around everything, so a test may drive it from a
// thread per stream while the allocator calls it under its own lock.
#ifndef BFC_TESTS_TESTING_FAKE_STREAM_OPS_H_
#define BFC_TESTS_TESTING_FAKE_STREAM_OPS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "bfc/stream_ops.h"
#include "testing/stream_race_checker.h"

namespace bfc::testing {

class FakeStreamOps : public StreamOps {
 public:
  // An op's id: its index in launch order over all streams.
  using OpId = int64_t;

  // What the allocator asked of the device (the test's own Wait and Launch
  // calls are not counted).
  struct Counters {
    int64_t records = 0;          // RecordEvent calls
    int64_t queries = 0;          // QueryEvent calls
    int64_t waits = 0;            // StreamWaitEvent calls
    int64_t syncs = 0;            // SynchronizeEvent calls
    int64_t releases = 0;         // ReleaseEvent calls
    int64_t live_events = 0;      // recorded and not yet released
    int64_t max_live_events = 0;  // the most live at once
    // Released or unknown events used, events released twice, destroyed
    // streams named: each a bug in the caller (see errors()).
    int64_t misuses = 0;
    int64_t would_deadlock = 0;     // SynchronizeEvent refused (held)
    int64_t injected_failures = 0;  // FailEveryNthCall
    // The test's own mistakes: a use outside a live allocation, work on a
    // destroyed stream (see Errors()).
    int64_t test_mistakes = 0;
    int64_t calls() const { return records + queries + waits + syncs; }
  };

  // `final_counters`, when given, receives the counters when the fake is
  // destroyed (the allocator owns it and destroys it with itself).
  explicit FakeStreamOps(std::shared_ptr<Counters> final_counters = nullptr)
      : final_counters_(std::move(final_counters)),
        checker_([this](size_t s) { return StreamName(s); }) {}
  ~FakeStreamOps() override {
    if (final_counters_ != nullptr) *final_counters_ = CountersLocked();
  }

  // --- StreamOps ------------------------------------------------------------
  absl::StatusOr<Event> RecordEvent(StreamId stream) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.records;
    if (Inject()) return absl::InternalError("RecordEvent: injected failure");
    size_t s;
    if (absl::Status st = StreamForCall("RecordEvent", stream, &s); !st.ok()) {
      return st;
    }
    const size_t op = LaunchLocked(s);
    events_.push_back(EventRec{s, op, streams_[s].clock, false});
    ++counters_.live_events;
    counters_.max_live_events =
        std::max(counters_.max_live_events, counters_.live_events);
    return EventHandle(events_.size() - 1);
  }

  absl::StatusOr<bool> QueryEvent(Event event) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.queries;
    if (Inject()) return absl::InternalError("QueryEvent: injected failure");
    EventRec* e = FindEvent("QueryEvent", event);
    if (e == nullptr)
      return absl::InvalidArgumentError("QueryEvent: bad event");
    if (!Done(e->stream, e->op)) return false;
    host_.Join(e->clock);
    return true;
  }

  absl::Status StreamWaitEvent(StreamId stream, Event event) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.waits;
    if (Inject()) {
      return absl::InternalError("StreamWaitEvent: injected failure");
    }
    EventRec* e = FindEvent("StreamWaitEvent", event);
    if (e == nullptr) {
      return absl::InvalidArgumentError("StreamWaitEvent: bad event");
    }
    size_t s;
    if (absl::Status st = StreamForCall("StreamWaitEvent", stream, &s);
        !st.ok()) {
      return st;
    }
    WaitLocked(s, e->stream, e->op, e->clock);
    return absl::OkStatus();
  }

  absl::Status SynchronizeEvent(Event event) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.syncs;
    if (Inject()) {
      return absl::InternalError("SynchronizeEvent: injected failure");
    }
    EventRec* e = FindEvent("SynchronizeEvent", event);
    if (e == nullptr) {
      return absl::InvalidArgumentError("SynchronizeEvent: bad event");
    }
    if (!CompleteFor(e->stream, e->op)) {
      ++counters_.would_deadlock;
      return absl::FailedPreconditionError(
          "SynchronizeEvent: would deadlock: stream held");
    }
    host_.Join(e->clock);
    return absl::OkStatus();
  }

  void ReleaseEvent(Event event) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.releases;
    EventRec* e = FindEvent("ReleaseEvent", event);
    if (e == nullptr) return;
    e->released = true;
    --counters_.live_events;
  }

  // --- The device, driven by the test --------------------------------------
  // A kernel on `stream`.
  OpId Launch(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t s = StreamForTest("Launch", stream);
    LaunchLocked(s);
    return next_op_id_ - 1;
  }
  // Completes up to `n` ops of `stream` in order; stops at the first that
  // cannot complete yet (held stream, unfinished wait). Returns how many.
  int Complete(StreamId stream, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t s = StreamForTest("Complete", stream, true);
    int done = 0;
    while (done < n && TryComplete(s)) ++done;
    return done;
  }
  // Completes everything that can complete (held streams block). Returns
  // how many ops completed.
  int CompleteAll() {
    std::lock_guard<std::mutex> lock(mu_);
    int done = 0;
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t s = 0; s < streams_.size(); ++s) {
        while (TryComplete(s)) {
          ++done;
          progress = true;
        }
      }
    }
    return done;
  }
  void Hold(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[StreamForTest("Hold", stream)].held = true;
  }
  void Release(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[StreamForTest("Release", stream, true)].held = false;
  }
  // Every stream, destroyed ones included.
  void ReleaseAll() {
    std::lock_guard<std::mutex> lock(mu_);
    for (StreamState& st : streams_) st.held = false;
  }
  bool IsDone(OpId op) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto& [s, i] = op_index_.at(static_cast<size_t>(op));
    return Done(s, i);
  }
  // Ops queued on `stream` and not yet complete.
  size_t Pending(StreamId stream) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = handles_.find(stream);
    if (it == handles_.end()) return 0;
    const StreamState& st = streams_[it->second];
    return st.ops.size() - st.next;
  }
  // The test's own cross-stream wait (cudaEventRecord on `producer`, then
  // cudaStreamWaitEvent on `consumer`): later work on `consumer` comes after
  // everything queued on `producer` so far. Not counted.
  void Wait(StreamId consumer, StreamId producer) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t p = StreamForTest("Wait", producer);
    const size_t op = LaunchLocked(p);
    const VectorClock clock = streams_[p].clock;
    WaitLocked(StreamForTest("Wait", consumer), p, op, clock);
  }
  // cuStreamDestroy: the handle may not be named to StreamOps any more (its
  // queued work still runs).
  void DestroyStream(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    streams_[StreamForTest("DestroyStream", stream, true)].destroyed = true;
  }
  // The handle names a new stream from now on (a destroyed one's handle
  // reused by cuStreamCreate).
  void CreateStream(StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    NewStream(stream);
  }

  // --- The checker -----------------------------------------------------------
  // The allocator handed out [ptr, ptr + size).
  void Allocated(const void* ptr, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    checker_.Begin(reinterpret_cast<uintptr_t>(ptr), size);
  }
  // The test is about to free the allocation at `ptr` (call it before
  // Deallocate*: once freed, another thread may be handed the memory).
  void Freed(const void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    checker_.End(reinterpret_cast<uintptr_t>(ptr));
  }
  // A kernel on `stream` that touches [ptr, ptr + size) of a live
  // allocation. Returns false when it races with an earlier lifetime of
  // those bytes (the race is in races()).
  bool Use(const void* ptr, size_t size, StreamId stream) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t s = StreamForTest("Use", stream);
    LaunchLocked(s);
    return checker_.Use(reinterpret_cast<uintptr_t>(ptr), size, s,
                        streams_[s].clock);
  }
  int64_t num_races() const {
    std::lock_guard<std::mutex> lock(mu_);
    return checker_.num_races();
  }
  int64_t uses_checked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return checker_.uses_checked();
  }
  // The first races, one line each ("" when none).
  std::string Races() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const std::string& r : checker_.races()) out += r + "\n";
    return out;
  }
  // Misuses by the allocator (bad events, destroyed streams) and mistakes in
  // the test's own calls, one line each ("" when none).
  std::string Errors() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::string out;
    for (const std::string& e : errors_) out += e + "\n";
    for (const std::string& e : checker_.errors()) out += e + "\n";
    return out;
  }

  // --- Faults ---------------------------------------------------------------
  // Every nth RecordEvent / QueryEvent / StreamWaitEvent / SynchronizeEvent
  // call fails with Internal and changes nothing (0: none).
  void FailEveryNthCall(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_every_ = n;
  }

  Counters counters() const {
    std::lock_guard<std::mutex> lock(mu_);
    return CountersLocked();
  }

 private:
  struct OpRef {
    size_t stream;
    size_t index;
  };
  struct Op {
    std::vector<OpRef> deps;  // event markers it waits for
    bool done = false;
  };
  struct StreamState {
    StreamId handle;
    int generation;  // how many streams this handle named before
    std::vector<Op> ops;
    size_t next = 0;  // ops before it are done
    bool held = false;
    bool destroyed = false;
    VectorClock clock;
    std::vector<OpRef> pending;  // waits for its next op
  };
  struct EventRec {
    size_t stream;
    size_t op;
    VectorClock clock;
    bool released;
  };

  Counters CountersLocked() const {
    Counters c = counters_;
    c.test_mistakes += checker_.num_errors();
    return c;
  }
  static Event EventHandle(size_t index) {
    return reinterpret_cast<Event>((uintptr_t{index} + 1) << 4);
  }
  std::string StreamName(size_t s) const {
    const StreamState& st = streams_[s];
    return st.generation == 0
               ? absl::StrFormat("%p", st.handle)
               : absl::StrFormat("%p(new #%d)", st.handle, st.generation);
  }
  void Misuse(std::string what) {
    ++counters_.misuses;
    if (errors_.size() < 16) errors_.push_back(std::move(what));
  }
  bool Inject() {
    if (fail_every_ <= 0 || ++calls_for_faults_ % fail_every_ != 0) {
      return false;
    }
    ++counters_.injected_failures;
    return true;
  }
  size_t NewStream(StreamId handle) {
    auto it = handles_.find(handle);
    const int generation =
        it == handles_.end() ? 0 : streams_[it->second].generation + 1;
    streams_.push_back(StreamState{
        handle, generation, {}, 0, false, false, VectorClock(), {}});
    handles_[handle] = streams_.size() - 1;
    return streams_.size() - 1;
  }
  // The stream a StreamOps call names; a destroyed one is a misuse.
  absl::Status StreamForCall(const char* call, StreamId handle, size_t* s) {
    auto it = handles_.find(handle);
    *s = it == handles_.end() ? NewStream(handle) : it->second;
    if (streams_[*s].destroyed) {
      Misuse(
          absl::StrFormat("%s names stream %p, destroyed after "
                          "ForgetStream",
                          call, handle));
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: stream %p was destroyed", call, handle));
    }
    return absl::OkStatus();
  }
  // The stream a test call names. Launching, using, holding or waiting on a
  // destroyed stream is a mistake in the test (CreateStream first).
  size_t StreamForTest(const char* call, StreamId handle,
                       bool may_be_destroyed = false) {
    auto it = handles_.find(handle);
    if (it == handles_.end()) return NewStream(handle);
    if (streams_[it->second].destroyed && !may_be_destroyed) {
      ++counters_.test_mistakes;
      if (errors_.size() < 16) {
        errors_.push_back(absl::StrFormat(
            "test: %s on stream %p after DestroyStream", call, handle));
      }
    }
    return it->second;
  }
  EventRec* FindEvent(const char* call, Event event) {
    const auto raw = reinterpret_cast<uintptr_t>(event);
    const size_t index = (raw >> 4) - 1;
    if (raw == 0 || (raw & 0xf) != 0 || index >= events_.size()) {
      Misuse(absl::StrFormat("%s(%p): not an event", call, event));
      return nullptr;
    }
    if (events_[index].released) {
      Misuse(absl::StrFormat("%s(%p): event already released", call, event));
      return nullptr;
    }
    return &events_[index];
  }
  // Queues an op on `s`, after whatever the host has seen complete; returns
  // its index on the stream.
  size_t LaunchLocked(size_t s) {
    StreamState& st = streams_[s];
    st.clock.Join(host_);
    st.clock.Tick(s);
    st.ops.push_back(Op{std::move(st.pending), false});
    st.pending.clear();
    op_index_.emplace_back(s, st.ops.size() - 1);
    ++next_op_id_;
    return st.ops.size() - 1;
  }
  void WaitLocked(size_t consumer, size_t producer, size_t op,
                  const VectorClock& clock) {
    StreamState& c = streams_[consumer];
    c.clock.Join(clock);
    if (!Done(producer, op)) c.pending.push_back(OpRef{producer, op});
  }
  bool Done(size_t s, size_t op) const { return streams_[s].ops[op].done; }
  bool TryComplete(size_t s) {
    StreamState& st = streams_[s];
    if (st.held || st.next >= st.ops.size()) return false;
    for (const OpRef& d : st.ops[st.next].deps) {
      if (!Done(d.stream, d.index)) return false;
    }
    st.ops[st.next++].done = true;
    return true;
  }
  // Completes op `op` of `s` and everything it needs (its stream's earlier
  // ops and, transitively, the events they wait for). False, with nothing
  // completed, when a held stream would block it.
  bool CompleteFor(size_t s, size_t op) {
    const size_t n = streams_.size();
    std::vector<size_t> need(n, 0);  // ops [next, need) are needed
    std::vector<size_t> scanned(n);
    for (size_t j = 0; j < n; ++j) need[j] = scanned[j] = streams_[j].next;
    need[s] = std::max(need[s], op + 1);
    std::vector<size_t> work{s};
    while (!work.empty()) {
      const size_t j = work.back();
      work.pop_back();
      for (; scanned[j] < need[j]; ++scanned[j]) {
        for (const OpRef& d : streams_[j].ops[scanned[j]].deps) {
          if (need[d.stream] < d.index + 1) {
            need[d.stream] = d.index + 1;
            work.push_back(d.stream);
          }
        }
      }
    }
    for (size_t j = 0; j < n; ++j) {
      if (need[j] > streams_[j].next && streams_[j].held) return false;
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t j = 0; j < n; ++j) {
        while (streams_[j].next < need[j] && TryComplete(j)) progress = true;
      }
    }
    return Done(s, op);
  }

  mutable std::mutex mu_;
  std::shared_ptr<Counters> final_counters_;
  std::vector<StreamState> streams_;
  std::map<StreamId, size_t> handles_;  // handle -> its newest stream
  std::vector<std::pair<size_t, size_t>> op_index_;  // OpId -> (stream, op)
  OpId next_op_id_ = 0;
  std::vector<EventRec> events_;
  VectorClock host_;
  StreamRaceChecker checker_;
  Counters counters_;
  std::vector<std::string> errors_;
  int fail_every_ = 0;
  int64_t calls_for_faults_ = 0;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_FAKE_STREAM_OPS_H_
