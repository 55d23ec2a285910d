// File: tests/testing/sim_streams.h
// -----------------------------------------------------------------------------
//
// A simulated device for stream-ordered reuse, with a race checker.
//
// SimStreams is a bfc::StreamOps: each stream is a FIFO of ops (kernels the
// test launches with Launch, and event markers RecordEvent appends). An op
// completes only after the op before it on its stream and after every event
// its stream was made to wait for before it was queued; the test decides
// when ops complete (Advance, CompleteAll, Hold/Release). SynchronizeEvent
// completes what the event needs, as the host would wait for it.
//
// The race checker keeps a vector clock per stream: each op ticks its
// stream's entry; an event captures its stream's clock; StreamWaitEvent joins
// it into the waiting stream; when the host learns that an event completed
// (QueryEvent true, SynchronizeEvent) the host clock joins it, and every op
// launched afterwards joins the host clock (work launched after the host saw
// completion is ordered after it). Memory: every op the test launches "uses"
// a byte range; when a range is handed out again, the new owner's first use
// must be ordered after every use of every earlier lifetime overlapping it,
// else it is a race.
//
// Thread-safe: one mutex (a test with a thread per stream serializes each
// allocator call and its model update under step_mu()).
#ifndef BFC_TESTS_TESTING_SIM_STREAMS_H_
#define BFC_TESTS_TESTING_SIM_STREAMS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "bfc/stream_ops.h"

namespace bfc::testing {

class SimStreams : public StreamOps {
 public:
  using Clock = std::map<StreamId, uint64_t>;

  // --- StreamOps -------------------------------------------------------------
  absl::StatusOr<Event> RecordEvent(StreamId stream) override {
    std::lock_guard<std::mutex> l(mu_);
    ++records_;
    if (destroyed_.count(stream) != 0) {
      ++misuses_;  // the stream no longer exists
      return absl::InvalidArgumentError("a destroyed stream");
    }
    const size_t op = Append(stream);
    events_.push_back(EventState{stream, op, Clock(), false});
    events_.back().clock = ops_[stream].back().clock;
    return reinterpret_cast<Event>(events_.size());
  }
  absl::StatusOr<bool> QueryEvent(Event e) override {
    std::lock_guard<std::mutex> l(mu_);
    ++queries_;
    EventState* s = Find(e);
    if (s == nullptr) return absl::InvalidArgumentError("a released event");
    const bool done = Done(s->stream, s->op);
    if (done) Join(host_, s->clock);
    return done;
  }
  absl::Status StreamWaitEvent(StreamId stream, Event e) override {
    std::lock_guard<std::mutex> l(mu_);
    ++waits_;
    if (destroyed_.count(stream) != 0) {
      ++misuses_;
      return absl::InvalidArgumentError("a destroyed stream");
    }
    EventState* s = Find(e);
    if (s == nullptr) return absl::InvalidArgumentError("a released event");
    WaitLocked(stream, *s);
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event e) override {
    std::lock_guard<std::mutex> l(mu_);
    ++syncs_;
    EventState* s = Find(e);
    if (s == nullptr) return absl::InvalidArgumentError("a released event");
    if (!CompleteUpTo(s->stream, s->op)) {
      return absl::FailedPreconditionError("would deadlock: a stream is held");
    }
    Join(host_, s->clock);
    return absl::OkStatus();
  }
  void ReleaseEvent(Event e) override {
    std::lock_guard<std::mutex> l(mu_);
    EventState* s = Find(e);
    if (s == nullptr) {
      ++misuses_;
      return;
    }
    s->released = true;
  }

  // --- The test's side
  // --------------------------------------------------------- For a test with a
  // thread per stream: held around one allocator call and its model update, so
  // that the model sees the calls in the allocator's order (the model's own
  // calls take a different mutex).
  std::mutex& step_mu() { return step_mu_; }

  // A kernel on `stream` that uses [addr, addr + size) of `owner`'s
  // lifetime (the allocation's id). Returns a race description, or "".
  std::string Use(StreamId stream, uintptr_t addr, size_t size,
                  int64_t lifetime) {
    std::lock_guard<std::mutex> l(mu_);
    const size_t op = Append(stream);
    const Clock& c = ops_[stream][op].clock;
    Lifetime& life = lifetimes_[lifetime];
    std::string race;
    if (life.uses.empty()) {
      // The first use of this memory since it was handed out: after every
      // use of every earlier lifetime of any byte of it.
      for (const auto& [id, old] : lifetimes_) {
        if (id == lifetime || !old.dead) continue;
        if (old.addr >= addr + size || addr >= old.addr + old.size) continue;
        for (const auto& [s, t] : old.uses) {
          auto it = c.find(s);
          if (it == c.end() || it->second < t) {
            race = absl::StrFormat(
                "race: %p+%d used on stream %p before the use on stream %p "
                "(tick %d) of an earlier lifetime [%p, +%d) completed",
                reinterpret_cast<void*>(addr), size, stream, s, t,
                reinterpret_cast<void*>(old.addr), old.size);
          }
        }
      }
    }
    life.addr = addr;
    life.size = size;
    life.uses.emplace_back(stream, c.at(stream));
    return race;
  }
  // The lifetime ended (its memory was freed).
  void End(int64_t lifetime) {
    std::lock_guard<std::mutex> l(mu_);
    lifetimes_[lifetime].dead = true;
  }
  // A wait the test inserts itself (then tells the allocator).
  void TestWait(StreamId consumer, StreamId producer) {
    std::lock_guard<std::mutex> l(mu_);
    const size_t op = Append(producer);
    EventState e{producer, op, ops_[producer][op].clock, false};
    WaitLocked(consumer, e);
  }
  // The stream was destroyed (after ForgetStream): naming it is a misuse.
  // Its queued work still runs (events recorded on it stay valid).
  void Destroy(StreamId s) {
    std::lock_guard<std::mutex> l(mu_);
    destroyed_[s] = true;
  }
  void Hold(StreamId s) {
    std::lock_guard<std::mutex> l(mu_);
    held_[s] = true;
  }
  void Release(StreamId s) {
    std::lock_guard<std::mutex> l(mu_);
    held_[s] = false;
  }
  // Completes up to `n` ops that may complete, picked by `pick`.
  template <typename Pick>
  void Advance(int n, Pick pick) {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<StreamId> streams;
    for (const auto& [s, ops] : ops_) streams.push_back(s);
    if (streams.empty()) return;
    for (int i = 0; i < n; ++i) {
      (void)TryComplete(streams[pick(streams.size())]);
    }
  }
  void CompleteAll() {
    std::lock_guard<std::mutex> l(mu_);
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& [s, ops] : ops_) {
        while (TryComplete(s)) progress = true;
      }
    }
  }
  int64_t records() const { return records_; }
  int64_t queries() const { return queries_; }
  int64_t waits() const { return waits_; }
  int64_t syncs() const { return syncs_; }
  int64_t misuses() const { return misuses_; }

 private:
  struct Op {
    Clock clock;
    std::vector<std::pair<StreamId, size_t>> deps;  // ops it waits for
    bool done = false;
  };
  struct EventState {
    StreamId stream;
    size_t op;
    Clock clock;
    bool released;
  };
  struct Lifetime {
    uintptr_t addr = 0;
    size_t size = 0;
    bool dead = false;
    std::vector<std::pair<StreamId, uint64_t>> uses;
  };

  static void Join(Clock& into, const Clock& from) {
    for (const auto& [s, t] : from) into[s] = std::max(into[s], t);
  }
  // Queues an op on `s`: after its stream's earlier ops and pending waits,
  // and after whatever the host has seen complete.
  size_t Append(StreamId s) {
    Clock& sc = stream_clock_[s];
    Join(sc, host_);
    ++sc[s];
    Op op;
    op.clock = sc;
    op.deps = pending_deps_[s];
    pending_deps_[s].clear();
    ops_[s].push_back(std::move(op));
    return ops_[s].size() - 1;
  }
  void WaitLocked(StreamId consumer, const EventState& e) {
    Join(stream_clock_[consumer], e.clock);
    pending_deps_[consumer].emplace_back(e.stream, e.op);
  }
  EventState* Find(Event e) {
    const auto i = reinterpret_cast<uintptr_t>(e);
    if (i == 0 || i > events_.size() || events_[i - 1].released) {
      ++misuses_;
      return nullptr;
    }
    return &events_[i - 1];
  }
  bool Done(StreamId s, size_t op) { return ops_[s][op].done; }
  bool TryComplete(StreamId s) {
    if (held_[s]) return false;
    std::vector<Op>& ops = ops_[s];
    size_t& next = next_[s];
    if (next >= ops.size()) return false;
    for (const auto& [t, o] : ops[next].deps) {
      if (!ops_[t][o].done) return false;
    }
    ops[next].done = true;
    ++next;
    return true;
  }
  // Completes what op `op` of `s` needs; false when a held stream blocks it.
  bool CompleteUpTo(StreamId s, size_t op) {
    while (!ops_[s][op].done) {
      bool progress = false;
      for (auto& [t, ops] : ops_) progress |= TryComplete(t);
      if (!progress) return false;
    }
    return true;
  }

  std::mutex mu_;
  std::mutex step_mu_;
  std::map<StreamId, std::vector<Op>> ops_;
  std::map<StreamId, size_t> next_;
  std::map<StreamId, bool> held_;
  std::map<StreamId, bool> destroyed_;
  std::map<StreamId, Clock> stream_clock_;
  std::map<StreamId, std::vector<std::pair<StreamId, size_t>>> pending_deps_;
  Clock host_;
  std::vector<EventState> events_;
  std::map<int64_t, Lifetime> lifetimes_;
  int64_t records_ = 0, queries_ = 0, waits_ = 0, syncs_ = 0, misuses_ = 0;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_SIM_STREAMS_H_
