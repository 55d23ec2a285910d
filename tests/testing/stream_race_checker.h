// File: tests/testing/stream_race_checker.h
// -----------------------------------------------------------------------------
//
// A vector-clock race checker for memory reused across streams: it flags any
// use of memory that is not ordered after every use of every earlier
// lifetime of the same bytes.
//
// The model. Streams are small integers 0..n-1 (FakeStreamOps maps stream
// handles to them; a handle that names a new stream after its old one was
// destroyed gets a new index). A VectorClock holds, per stream, how many of
// that stream's ops are known to happen before some point. A use of memory is
// an op on a stream with the clock that op carries when it is launched; it is
// ordered after an earlier use (stream j, tick t) iff its clock's entry j is
// at least t.
//
// Lifetimes. Begin(addr, size) starts one (the allocator handed the bytes
// out), End(addr) ends it (the caller freed them). Use(...) checks the use
// against the "shadow" of the bytes it touches: for every byte, the latest
// use per stream of every ended lifetime that covered it. Every use is
// checked, not only the first: a use on a second stream is correct only when
// that stream was ordered after the allocation (the test makes it wait), and
// then it is ordered after the old uses too.
//
// Besides races it reports a lifetime that overlaps a live one (memory
// handed out twice), and uses or ends that match no live lifetime (mistakes
// in the test itself: see errors()).
//
// Thread-compatible: FakeStreamOps calls it under its own mutex.
#ifndef BFC_TESTS_TESTING_STREAM_RACE_CHECKER_H_
#define BFC_TESTS_TESTING_STREAM_RACE_CHECKER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace bfc::testing {

// Per stream index, the number of that stream's ops ordered before a point.
// Missing entries are 0.
class VectorClock {
 public:
  uint64_t at(size_t stream) const {
    return stream < ticks_.size() ? ticks_[stream] : 0;
  }
  // Makes this clock's own entry for `stream` one larger; returns it.
  uint64_t Tick(size_t stream) {
    Grow(stream + 1);
    return ++ticks_[stream];
  }
  // Raises the entry for `stream` to at least `tick`.
  void Raise(size_t stream, uint64_t tick) {
    Grow(stream + 1);
    ticks_[stream] = std::max(ticks_[stream], tick);
  }
  // Everything ordered before `other` is ordered before this too.
  void Join(const VectorClock& other) {
    Grow(other.ticks_.size());
    for (size_t i = 0; i < other.ticks_.size(); ++i) {
      ticks_[i] = std::max(ticks_[i], other.ticks_[i]);
    }
  }
  // The first stream whose entry in `earlier` is not covered by this clock,
  // or -1: this point is ordered after everything `earlier` names.
  int64_t FirstNotAfter(const VectorClock& earlier) const {
    for (size_t i = 0; i < earlier.ticks_.size(); ++i) {
      if (earlier.ticks_[i] > at(i)) return static_cast<int64_t>(i);
    }
    return -1;
  }
  size_t size() const { return ticks_.size(); }

 private:
  void Grow(size_t n) {
    if (ticks_.size() < n) ticks_.resize(n, 0);
  }
  std::vector<uint64_t> ticks_;
};

class StreamRaceChecker {
 public:
  // Names stream indices in messages (FakeStreamOps passes "handle#gen").
  using StreamNamer = std::function<std::string(size_t stream)>;

  explicit StreamRaceChecker(StreamNamer namer = nullptr)
      : namer_(std::move(namer)) {}

  // [addr, addr + size) was handed out. Overlapping a live lifetime is a
  // race (the same memory owned twice).
  void Begin(uintptr_t addr, size_t size) {
    if (size == 0) return;
    const uintptr_t end = addr + size;
    auto next = live_.lower_bound(addr);
    bool overlap = next != live_.end() && next->first < end;
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      overlap |= prev->first + prev->second.size > addr;
    }
    if (overlap) {
      AddRace(absl::StrFormat(
          "[%#x, +%d) handed out while part of it is still live", addr, size));
      return;
    }
    live_.emplace(addr, Lifetime{size, VectorClock(), 0});
  }

  // The lifetime starting at `addr` ended: its uses join the shadow of its
  // bytes.
  void End(uintptr_t addr) {
    auto it = live_.find(addr);
    if (it == live_.end()) {
      AddError(
          absl::StrFormat("End(%#x): no live lifetime starts there", addr));
      return;
    }
    ShadowJoin(addr, addr + it->second.size, it->second.uses);
    live_.erase(it);
  }

  // A use of [addr, addr + size) by an op on `stream` whose clock (after its
  // own tick, so clock.at(stream) is the op's tick) is `clock`. Returns false
  // when it races with an earlier lifetime (recorded in races()).
  bool Use(uintptr_t addr, size_t size, size_t stream,
           const VectorClock& clock) {
    if (size == 0) return true;
    const uintptr_t end = addr + size;
    auto it = live_.upper_bound(addr);
    if (it == live_.begin() ||
        std::prev(it)->first + std::prev(it)->second.size < end) {
      AddError(absl::StrFormat(
          "Use([%#x, +%d)) on stream %s: not inside a live allocation", addr,
          size, Name(stream)));
      return true;
    }
    Lifetime& life = std::prev(it)->second;
    life.uses.Raise(stream, clock.at(stream));
    ++life.num_uses;
    ++uses_checked_;
    auto seg = shadow_.upper_bound(addr);
    if (seg != shadow_.begin() && std::prev(seg)->second.end > addr) --seg;
    for (; seg != shadow_.end() && seg->first < end; ++seg) {
      const int64_t j = clock.FirstNotAfter(seg->second.uses);
      if (j < 0) continue;
      AddRace(absl::StrFormat(
          "race: [%#x, +%d) used on stream %s (its op %d) while bytes "
          "[%#x, %#x) of an earlier lifetime may still be in use by op %d of "
          "stream %s (this use is ordered after only %d of that stream's "
          "ops)",
          addr, size, Name(stream), clock.at(stream), seg->first,
          seg->second.end, seg->second.uses.at(static_cast<size_t>(j)),
          Name(static_cast<size_t>(j)), clock.at(static_cast<size_t>(j))));
      return false;
    }
    return true;
  }

  bool IsLive(uintptr_t addr) const { return live_.count(addr) != 0; }
  size_t num_live() const { return live_.size(); }
  int64_t num_races() const { return num_races_; }
  int64_t uses_checked() const { return uses_checked_; }
  int64_t num_errors() const { return num_errors_; }
  // The first races found (at most kKeep) and mistakes in the test's calls.
  const std::vector<std::string>& races() const { return races_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  static constexpr size_t kKeep = 16;
  struct Lifetime {
    size_t size;
    VectorClock uses;  // per stream, its latest op that used this lifetime
    int64_t num_uses;
  };
  struct Segment {
    uintptr_t end;
    VectorClock uses;  // per stream, its latest use of these bytes
  };

  std::string Name(size_t stream) const {
    return namer_ ? namer_(stream) : absl::StrFormat("#%d", stream);
  }
  void AddRace(std::string what) {
    ++num_races_;
    if (races_.size() < kKeep) races_.push_back(std::move(what));
  }
  void AddError(std::string what) {
    ++num_errors_;
    if (errors_.size() < kKeep) errors_.push_back(std::move(what));
  }
  // A segment boundary at `at` (splits the segment containing it).
  void SplitAt(uintptr_t at) {
    auto it = shadow_.upper_bound(at);
    if (it == shadow_.begin()) return;
    --it;
    if (it->first < at && at < it->second.end) {
      Segment tail{it->second.end, it->second.uses};
      it->second.end = at;
      shadow_.emplace(at, std::move(tail));
    }
  }
  void ShadowJoin(uintptr_t begin, uintptr_t end, const VectorClock& uses) {
    if (uses.size() == 0) return;  // never used: nothing to order after
    SplitAt(begin);
    SplitAt(end);
    auto it = shadow_.lower_bound(begin);
    for (uintptr_t pos = begin; pos < end;) {
      if (it == shadow_.end() || it->first > pos) {
        const uintptr_t gap_end =
            it == shadow_.end() ? end : std::min(end, it->first);
        shadow_.emplace_hint(it, pos, Segment{gap_end, uses});
        pos = gap_end;
      } else {
        it->second.uses.Join(uses);
        pos = it->second.end;
        ++it;
      }
    }
  }

  StreamNamer namer_;
  std::map<uintptr_t, Lifetime> live_;
  // Disjoint segments: start -> (end, uses of ended lifetimes).
  std::map<uintptr_t, Segment> shadow_;
  std::vector<std::string> races_;
  std::vector<std::string> errors_;
  int64_t num_races_ = 0;
  int64_t uses_checked_ = 0;
  int64_t num_errors_ = 0;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_STREAM_RACE_CHECKER_H_
