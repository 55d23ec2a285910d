// File: tests/stream_race_test.cc
// -----------------------------------------------------------------------------
//
// Stream-ordered reuse against a race checker (testing/sim_streams.h): memory
// handed out again is never used before every use of its previous lifetime
// is ordered before it. Randomized schedules over 2-8 streams and every
// combination of the three reuse rules, Validate() after each step, and
// scenarios modelled on the reports behind the design (rmm#2489,
// onnxruntime#29351, onnxruntime PR #12913, PyTorch's record_stream).
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/allocator.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/sim_streams.h"

namespace bfc {
namespace {

using testing::SimStreams;

StreamId S(int i) { return reinterpret_cast<StreamId>(uintptr_t{0x1000} * i); }

struct Rig {
  explicit Rig(Allocator::Options o = Allocator::Options(),
               size_t limit = size_t{64} << 20) {
    o.allow_retry_on_failure = false;
    alloc = std::make_unique<Allocator>(
        std::make_unique<VirtualSubAllocator>(size_t{1} << 30), limit, "race",
        o);
    auto ops = std::make_unique<SimStreams>();
    sim = ops.get();
    EXPECT_TRUE(alloc->SetStreamOps(std::move(ops)).ok());
  }
  // Allocates on `s` and uses it there; "" or the race.
  std::string AllocUse(StreamId s, size_t n, void** out) {
    absl::StatusOr<void*> p = alloc->AllocateOnStream(s, n);
    if (!p.ok()) {
      *out = nullptr;
      return "";
    }
    *out = *p;
    return sim->Use(s, reinterpret_cast<uintptr_t>(*p), n,
                    alloc->AllocationId(*p));
  }
  std::string Use(void* p, StreamId s) {
    return sim->Use(s, reinterpret_cast<uintptr_t>(p), alloc->RequestedSize(p),
                    alloc->AllocationId(p));
  }
  void Free(void* p, StreamId s) {
    const int64_t id = alloc->AllocationId(p);
    ASSERT_TRUE(alloc->DeallocateOnStream(p, s).ok());
    sim->End(id);
  }
  std::unique_ptr<Allocator> alloc;
  SimStreams* sim = nullptr;
};

// --- Scenarios --------------------------------------------------------------

// rapidsai/rmm#2489: a block freed on A while A's kernel runs is taken by B
// after a wait, freed on B, then taken by C. C must be ordered after A's
// kernel too: the fence B's free leaves keeps A's point (never re-keyed to
// B's alone).
TEST(StreamRaceTest, ThreeStreamsRmm2489) {
  Rig r;
  r.sim->Hold(S(1));
  void* p;
  ASSERT_EQ(r.AllocUse(S(1), 1 << 20, &p), "");
  r.Free(p, S(1));  // A's kernel still pending
  void* q;
  ASSERT_EQ(r.AllocUse(S(2), 1 << 20, &q), "");  // after a wait, or elsewhere
  r.Free(q, S(2));
  void* t;
  ASSERT_EQ(r.AllocUse(S(3), 1 << 20, &t), "");
  EXPECT_TRUE(r.alloc->Validate().ok());
  r.sim->Release(S(1));
  r.sim->CompleteAll();
}

// A split remainder keeps its parent's fence (onnxruntime PR #12913).
TEST(StreamRaceTest, SplitRemainderKeepsTheFence) {
  Rig r;
  void* big;
  ASSERT_EQ(r.AllocUse(S(1), 4 << 20, &big), "");
  r.sim->Hold(S(1));
  ASSERT_EQ(r.Use(big, S(1)), "");
  r.Free(big, S(1));
  // Small pieces on S(2) cut from the freed block must not run before A.
  for (int i = 0; i < 8; ++i) {
    void* piece;
    ASSERT_EQ(r.AllocUse(S(2), 300 << 10, &piece), "") << i;
  }
  EXPECT_TRUE(r.alloc->Validate().ok());
  r.sim->Release(S(1));
}

// PyTorch's record_stream: memory also used by a second stream is not given
// to a third before that use completes.
TEST(StreamRaceTest, RecordStreamUseDelaysReuse) {
  Allocator::Options o;
  o.reuse_allow_internal_dependencies = false;
  Rig r(o);
  void* p;
  ASSERT_EQ(r.AllocUse(S(1), 1 << 20, &p), "");
  ASSERT_TRUE(r.alloc->RecordStreamUse(p, S(2)).ok());
  r.sim->Hold(S(2));
  ASSERT_EQ(r.Use(p, S(2)), "");
  r.sim->CompleteAll();  // S(1)'s own work is done; S(2)'s is held
  r.Free(p, S(1));
  void* q;
  ASSERT_EQ(r.AllocUse(S(3), 1 << 20, &q), "");
  EXPECT_NE(q, p) << "handed to S(3) while S(2) still uses it";
  r.sim->Release(S(2));
  r.sim->CompleteAll();
  // Once S(2)'s use completed, the memory is S(3)'s to take.
  std::vector<void*> more;
  bool reused = false;
  for (int i = 0; i < 64 && !reused; ++i) {
    void* m;
    ASSERT_EQ(r.AllocUse(S(3), 1 << 20, &m), "");
    reused = m == p;
  }
  EXPECT_TRUE(reused);
  EXPECT_TRUE(r.alloc->Validate().ok());
}

// Waits are inserted only when needed, and same-stream reuse makes no
// StreamOps call at all.
TEST(StreamRaceTest, WaitsOnlyWhenNeeded) {
  Rig r;  // the first region is 2 MiB: p is all of it, the only fit
  void* p;
  ASSERT_EQ(r.AllocUse(S(1), 2 << 20, &p), "");
  r.Free(p, S(1));
  const int64_t calls =
      r.sim->records() + r.sim->queries() + r.sim->waits() + r.sim->syncs();
  void* again;
  ASSERT_EQ(r.AllocUse(S(1), 2 << 20, &again), "");
  EXPECT_EQ(again, p);
  EXPECT_EQ(
      r.sim->records() + r.sim->queries() + r.sim->waits() + r.sim->syncs(),
      calls);
  // A wait the caller already made (NotifyStreamWait): none inserted.
  r.sim->Hold(S(1));
  r.Free(again, S(1));
  r.sim->TestWait(S(2), S(1));
  ASSERT_TRUE(r.alloc->NotifyStreamWait(S(2), S(1)).ok());
  void* q;
  ASSERT_EQ(r.AllocUse(S(2), 2 << 20, &q), "");
  EXPECT_EQ(q, p);
  EXPECT_EQ(r.alloc->GetStreamStats().waits_inserted, 0);
  // Without it: exactly one wait.
  r.Free(q, S(2));
  void* t;
  ASSERT_EQ(r.AllocUse(S(3), 2 << 20, &t), "");
  EXPECT_EQ(t, p);
  EXPECT_EQ(r.alloc->GetStreamStats().waits_inserted, 1);
  r.sim->Release(S(1));
}

// A fence from a stream that never runs again (onnxruntime#29351's stale
// tag) is reclaimed once its work completes; a forgotten stream is never
// named to StreamOps again.
TEST(StreamRaceTest, StaleAndForgottenStreamsAreReclaimed) {
  Allocator::Options o;
  o.reuse_allow_internal_dependencies = false;
  Rig r(o, size_t{8} << 20);
  void* p;
  ASSERT_EQ(r.AllocUse(S(1), 6 << 20, &p), "");
  r.sim->Hold(S(1));
  r.Free(p, S(1));
  ASSERT_TRUE(r.alloc->ForgetStream(S(1)).ok());
  r.sim->Destroy(S(1));  // cuStreamDestroy: pending work still runs
  void* early;
  ASSERT_EQ(r.AllocUse(S(2), 6 << 20, &early), "");
  EXPECT_EQ(early, nullptr) << "taken before the forgotten stream's work ran";
  r.sim->Release(S(1));
  r.sim->CompleteAll();
  // The limit leaves no room for another region: only reclaiming the
  // forgotten stream's memory can serve this.
  void* q;
  ASSERT_EQ(r.AllocUse(S(2), 6 << 20, &q), "");
  EXPECT_EQ(q, p);
  EXPECT_EQ(r.sim->misuses(), 0);
  EXPECT_TRUE(r.alloc->Validate().ok());
}

// One stream: the same placements as the plain calls.
TEST(StreamRaceTest, OneStreamPlacesAsThePlainCalls) {
  Rig r;
  Allocator plain(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                  size_t{64} << 20, "plain");
  std::mt19937_64 rng(7);
  std::vector<void*> a, b;
  for (int i = 0; i < 2000; ++i) {
    if (a.empty() || (a.size() < 300 && rng() % 2)) {
      const size_t n = 256 + rng() % (1 << 16);
      a.push_back(*r.alloc->AllocateOnStream(kImplicitStream, n));
      b.push_back(plain.AllocateRaw(256, n));
      ASSERT_EQ(reinterpret_cast<uintptr_t>(a.back()) -
                    reinterpret_cast<uintptr_t>(a.front()),
                reinterpret_cast<uintptr_t>(b.back()) -
                    reinterpret_cast<uintptr_t>(b.front()))
          << i;
    } else {
      const size_t k = rng() % a.size();
      ASSERT_TRUE(r.alloc->DeallocateOnStream(a[k], kImplicitStream).ok());
      plain.DeallocateRaw(b[k]);
      a.erase(a.begin() + static_cast<long>(k));
      b.erase(b.begin() + static_cast<long>(k));
      if (a.empty()) {
        a.push_back(*r.alloc->AllocateOnStream(kImplicitStream, 256));
        b.push_back(plain.AllocateRaw(256, 256));
      }
    }
  }
  EXPECT_EQ(r.sim->records(), 0);
}

// --- Randomized schedules ---------------------------------------------------

struct Block {
  void* p;
  StreamId owner;
};

void RunSchedule(int num_streams, int rules, uint64_t seed, int steps) {
  Allocator::Options o;
  o.reuse_follow_dependencies = rules & 1;
  o.reuse_allow_opportunistic = rules & 2;
  o.reuse_allow_internal_dependencies = rules & 4;
  Rig r(o, size_t{16} << 20);
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<StreamId> streams;
  for (int i = 0; i < num_streams; ++i) streams.push_back(S(i + 1));
  streams[0] = kImplicitStream;  // the legacy stream is one of them
  std::vector<Block> live;
  const std::string where =
      absl::StrCat("streams ", num_streams, " rules ", rules, " seed ", seed);
  for (int step = 0; step < steps; ++step) {
    const int what = static_cast<int>(rng() % 100);
    if (what < 35) {
      const StreamId s = streams[pick(streams.size())];
      void* p;
      const std::string race = r.AllocUse(s, 256 + rng() % (1 << 20), &p);
      ASSERT_EQ(race, "") << where << " step " << step;
      if (p != nullptr) live.push_back({p, s});
    } else if (what < 60 && !live.empty()) {
      const size_t k = pick(live.size());
      r.Free(live[k].p, live[k].owner);
      live.erase(live.begin() + static_cast<long>(k));
    } else if (what < 70 && !live.empty()) {
      // A use on another stream, declared first (record_stream).
      const Block& b = live[pick(live.size())];
      const StreamId u = streams[pick(streams.size())];
      ASSERT_TRUE(r.alloc->RecordStreamUse(b.p, u).ok());
      ASSERT_EQ(r.Use(b.p, u), "") << where << " step " << step;
    } else if (what < 75) {
      const StreamId c = streams[pick(streams.size())];
      const StreamId p = streams[pick(streams.size())];
      r.sim->TestWait(c, p);
      ASSERT_TRUE(r.alloc->NotifyStreamWait(c, p).ok());
    } else if (what < 80) {
      const StreamId s = streams[pick(streams.size())];
      if (rng() % 2) {
        r.sim->Hold(s);
      } else {
        r.sim->Release(s);
      }
    } else {
      r.sim->Advance(1 + static_cast<int>(rng() % 8), pick);
    }
    const absl::Status v = r.alloc->Validate();
    ASSERT_TRUE(v.ok()) << where << " step " << step << ": " << v;
  }
  for (StreamId s : streams) r.sim->Release(s);
  for (const Block& b : live) r.Free(b.p, b.owner);
  EXPECT_TRUE(r.alloc->Validate().ok());
  EXPECT_EQ(r.sim->misuses(), 0) << where;
}

TEST(StreamRaceTest, RandomSchedulesAreRaceFree) {
  for (int streams = 2; streams <= 8; streams += 2) {
    for (int rules = 0; rules < 8; ++rules) {
      for (uint64_t seed = 1; seed <= 6; ++seed) {
        RunSchedule(streams, rules, seed * 1000 + streams * 10 + rules, 400);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A thread per stream, one allocator (TSan runs this): each step is an
// allocator call plus its model update under the model's lock, so the
// allocator's own locking is what the threads exercise.
TEST(StreamRaceTest, ThreadPerStream) {
  Rig r(Allocator::Options(), size_t{32} << 20);
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<std::string> races(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const StreamId s = S(t + 1);
      std::mt19937_64 rng(t + 1);
      std::vector<void*> mine;
      for (int i = 0; i < 300 && races[t].empty(); ++i) {
        std::lock_guard<std::mutex> l(r.sim->step_mu());
        if (mine.empty() || rng() % 2) {
          void* p;
          races[t] = r.AllocUse(s, 256 + rng() % (256 << 10), &p);
          if (p != nullptr) mine.push_back(p);
        } else {
          const size_t k = rng() % mine.size();
          r.Free(mine[k], s);
          mine.erase(mine.begin() + static_cast<long>(k));
        }
        r.sim->Advance(2, [&](size_t n) { return rng() % n; });
      }
      std::lock_guard<std::mutex> l(r.sim->step_mu());
      for (void* p : mine) r.Free(p, s);
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& race : races) EXPECT_EQ(race, "");
  EXPECT_TRUE(r.alloc->Validate().ok());
}

}  // namespace
}  // namespace bfc
