// One conformance suite for every front end of bfc (RMM's typed-suite style):
// the same cases run, through a small adapter per front end, over
//
//   StatusApi    Allocator::Allocate / Deallocate        (bfc/allocator.h)
//   RawApi       Allocator::AllocateRaw / DeallocateRaw  (bfc/allocator.h)
//   CApi         bfc_malloc / bfc_free of libbfc_alloc.so, loaded with dlopen
//                as PyTorch and CuPy load it, BFC_ALLOC_CONF=backend:host
//                (bfc/c_api.h)
//   Pmr          bfc::PmrResource, std::pmr::memory_resource (bfc/pmr.h)
//   CcclDevice   bfc::CudaDeviceResource through cuda::mr::resource_ref
//   CcclPinned   bfc::CudaPinnedResource through cuda::mr::resource_ref
//                (bfc/cuda_resource.h; both need a CUDA device and skip,
//                saying why, without one)
//
// Where front ends differ by design (what a zero-byte request, a bad
// alignment, running out of memory or an invalid free look like), each
// adapter states its front end's documented behaviour as constants, quoting
// the header; the cases check every front end against its own statement.
// Everything else (alignment honoured, blocks distinct and writable, nullptr
// free a no-op, state intact after bad input, stats that add up) is the same
// for all.
//
// Every pool has the same limit (kLimit) and does not wait for frees on out of
// memory (allow_retry_on_failure: false; the default would wait
// retry_timeout, then fail the same way).
#include <dlfcn.h>
#include <stdlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bfc/allocator.h"
#include "bfc/c_api.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/pmr.h"
#include "gtest/gtest.h"

#ifdef BFC_TEST_HAVE_CCCL
#include "bfc/cuda_resource.h"
#include "bfc/cuda_sub_allocator.h"
#endif

namespace {

constexpr size_t kLimit = size_t{256} << 20;
constexpr size_t kGranule = bfc::kMinAllocationSize;

size_t RoundUp(size_t n) { return (n + kGranule - 1) / kGranule * kGranule; }
bool IsAligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// --- the suite's common terms ------------------------------------------------

// What one call did.
enum class Outcome {
  kOk,                 // success (or, for a free: silently accepted)
  kNull,               // nullptr, no exception, no status
  kInvalidArgument,    // absl::StatusCode::kInvalidArgument
  kResourceExhausted,  // absl::StatusCode::kResourceExhausted
  kBadAlloc,           // std::bad_alloc thrown
  kReported,           // a free that returned nothing but reported the error
                       // (logged, or bfc_last_error() set)
};

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kNull:
      return "nullptr";
    case Outcome::kInvalidArgument:
      return "InvalidArgument";
    case Outcome::kResourceExhausted:
      return "ResourceExhausted";
    case Outcome::kBadAlloc:
      return "std::bad_alloc";
    case Outcome::kReported:
      return "reported";
  }
  return "?";
}

void PrintTo(Outcome o, std::ostream* os) { *os << OutcomeName(o); }

Outcome FromStatus(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return Outcome::kOk;
    case absl::StatusCode::kInvalidArgument:
      return Outcome::kInvalidArgument;
    case absl::StatusCode::kResourceExhausted:
      return Outcome::kResourceExhausted;
    default:
      ADD_FAILURE() << "unexpected status " << s;
      return Outcome::kOk;
  }
}

struct Allocation {
  void* ptr = nullptr;
  Outcome outcome = Outcome::kOk;
  // What the caller is told: the status message, the exception's what(), the
  // bfc_last_error() this call set, or what the library logged during it.
  std::string message;
};

struct Freed {
  Outcome outcome = Outcome::kOk;
  std::string message;
};

// The stats a front end exposes, in one shape.
struct Stats {
  int64_t num_allocs = 0;
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t bytes_requested_in_use = 0;
  int64_t bytes_limit = 0;
  int64_t num_invalid_frees = 0;
  int64_t num_invalid_requests = 0;
  int64_t num_ooms = 0;
};

Stats FromAllocator(const bfc::Allocator& a) {
  const std::optional<bfc::AllocatorStats> s = a.GetStats();
  EXPECT_TRUE(s.has_value());
  if (!s) return Stats();
  Stats out;
  out.num_allocs = s->num_allocs;
  out.bytes_in_use = s->bytes_in_use;
  out.peak_bytes_in_use = s->peak_bytes_in_use;
  out.bytes_requested_in_use = s->bytes_requested_in_use;
  out.bytes_limit = s->bytes_limit.value_or(-1);
  out.num_invalid_frees = s->num_invalid_frees;
  out.num_invalid_requests = s->num_invalid_requests;
  out.num_ooms = s->num_ooms;
  return out;
}

// Collects what the library (linked into this test) logs, warnings and
// errors, so that "logged" can be checked and the output stays readable.
// libbfc_alloc.so has its own copy of the library and its own sink (stderr).
class LogCapture {
 public:
  LogCapture() {
    previous_ =
        bfc::SetLogSink([this](bfc::LogSeverity s, std::string_view message) {
          if (s == bfc::LogSeverity::kInfo) return;
          std::lock_guard<std::mutex> lock(mu_);
          text_.append(message.data(), message.size());
          text_ += '\n';
        });
  }
  ~LogCapture() { bfc::SetLogSink(std::move(previous_)); }

  // What was logged since the last call.
  std::string Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(text_, std::string());
  }

 private:
  bfc::LogSink previous_;
  std::mutex mu_;
  std::string text_;
};

LogCapture* g_log = nullptr;  // the fixture's, while a test runs

std::string TakeLog() { return g_log != nullptr ? g_log->Take() : ""; }

bfc::Allocator::Options PoolOptions() {
  bfc::Allocator::Options opts;
  opts.allow_retry_on_failure = false;  // see the file comment
  return opts;
}

// --- adapters ----------------------------------------------------------------
//
// Each adapter has:
//   kName, kTakesAlignment, kHostAccessible
//   kZeroBytes, kBadAlignment, kOutOfMemory, kInvalidFree: the documented
//     outcome of each kind of request
//   kFreesNullptr: whether freeing nullptr is part of the front end's contract
//   std::string Open()   "" or why the front end cannot run here (skip)
//   void Close()
//   Allocation Allocate(size_t bytes, size_t alignment)
//   Freed Free(void* p, size_t bytes, size_t alignment)
//   std::optional<Stats> GetStats()
//   std::optional<absl::Status> Validate()   nullopt where not exposed

// A fresh host pool per test, for the in-process front ends.
class HostPoolAdapter {
 public:
  static constexpr bool kHostAccessible = true;
  std::string Open() {
    pool_ = std::make_unique<bfc::Allocator>(
        std::make_unique<bfc::HostSubAllocator>(), kLimit, "conformance",
        PoolOptions());
    return "";
  }
  void Close() { pool_.reset(); }
  std::optional<Stats> GetStats() { return FromAllocator(*pool_); }
  std::optional<absl::Status> Validate() { return pool_->Validate(); }

 protected:
  std::unique_ptr<bfc::Allocator> pool_;
};

// bfc/allocator.h, the status calls:
//   "InvalidArgument: num_bytes == 0, bad alignment, overflowing size.
//    ResourceExhausted: out of memory"; Deallocate: "OK for nullptr.
//    InvalidArgument (state untouched) for a pointer this allocator did not
//    hand out or already took back."
class StatusApi : public HostPoolAdapter {
 public:
  static constexpr const char* kName = "StatusApi";
  static constexpr bool kTakesAlignment = true;
  static constexpr Outcome kZeroBytes = Outcome::kInvalidArgument;
  static constexpr Outcome kBadAlignment = Outcome::kInvalidArgument;
  static constexpr Outcome kOutOfMemory = Outcome::kResourceExhausted;
  static constexpr Outcome kInvalidFree = Outcome::kInvalidArgument;
  static constexpr bool kFreesNullptr = true;

  Allocation Allocate(size_t bytes, size_t alignment) {
    absl::StatusOr<void*> p = pool_->Allocate(bytes, alignment);
    TakeLog();  // the status is what the caller is told
    if (p.ok()) return {*p, Outcome::kOk, ""};
    return {nullptr, FromStatus(p.status()), std::string(p.status().message())};
  }
  Freed Free(void* p, size_t, size_t) {
    const absl::Status s = pool_->Deallocate(p);
    TakeLog();
    return {FromStatus(s), std::string(s.message())};
  }
};

// bfc/allocator.h, the TF-style calls: "nullptr on failure; 0 bytes ->
// nullptr. ... Bad alignment or an overflowing size: nullptr, a logged error
// and num_invalid_requests counted." DeallocateRaw: "nullptr: no-op. A pointer
// this allocator did not hand out (foreign, interior, already free): logged,
// counted in num_invalid_frees, state untouched."
class RawApi : public HostPoolAdapter {
 public:
  static constexpr const char* kName = "RawApi";
  static constexpr bool kTakesAlignment = true;
  static constexpr Outcome kZeroBytes = Outcome::kNull;
  static constexpr Outcome kBadAlignment = Outcome::kNull;
  static constexpr Outcome kOutOfMemory = Outcome::kNull;
  static constexpr Outcome kInvalidFree = Outcome::kReported;
  static constexpr bool kFreesNullptr = true;

  Allocation Allocate(size_t bytes, size_t alignment) {
    TakeLog();
    void* p = pool_->AllocateRaw(alignment, bytes);
    std::string logged = TakeLog();
    if (p != nullptr) return {p, Outcome::kOk, ""};
    return {nullptr, Outcome::kNull, std::move(logged)};
  }
  Freed Free(void* p, size_t, size_t) {
    TakeLog();
    pool_->DeallocateRaw(p);
    std::string logged = TakeLog();
    if (logged.empty()) return {Outcome::kOk, ""};
    return {Outcome::kReported, std::move(logged)};
  }
};

// bfc/pmr.h: "a failed allocation (out of memory, memory type not
// host-accessible) throws std::bad_alloc"; do_allocate: "At least `bytes` (0
// is served as 1, so the pointer is unique) aligned to `alignment` (a power
// of two, as pmr guarantees; above 256 is honoured). Throws std::bad_alloc
// when the allocator cannot serve the request." "Deallocating a pointer the
// allocator did not hand out is reported and counted by the allocator
// (num_invalid_frees) and otherwise ignored; it never throws."
class Pmr : public HostPoolAdapter {
 public:
  static constexpr const char* kName = "Pmr";
  static constexpr bool kTakesAlignment = true;
  static constexpr Outcome kZeroBytes = Outcome::kOk;  // a unique pointer
  // std::pmr makes a power-of-two alignment the caller's precondition;
  // bfc::PmrResource cannot serve another and says so with bad_alloc.
  static constexpr Outcome kBadAlignment = Outcome::kBadAlloc;
  static constexpr Outcome kOutOfMemory = Outcome::kBadAlloc;
  static constexpr Outcome kInvalidFree = Outcome::kReported;
  // std::pmr::memory_resource::deallocate takes only what allocate returned
  // (never nullptr; libstdc++ declares the pointer nonnull), and pmr.h
  // promises nothing for nullptr.
  static constexpr bool kFreesNullptr = false;

  std::string Open() {
    std::string why = HostPoolAdapter::Open();
    resource_.emplace(*pool_);
    return why;
  }
  void Close() {
    resource_.reset();
    HostPoolAdapter::Close();
  }
  Allocation Allocate(size_t bytes, size_t alignment) {
    std::pmr::memory_resource& r = *resource_;
    try {
      void* p = r.allocate(bytes, alignment);
      TakeLog();
      return {p, Outcome::kOk, ""};
    } catch (const std::bad_alloc& e) {
      TakeLog();
      return {nullptr, Outcome::kBadAlloc, e.what()};
    }
  }
  Freed Free(void* p, size_t bytes, size_t alignment) {
    std::pmr::memory_resource& r = *resource_;
    TakeLog();
    try {
      r.deallocate(p, bytes, alignment);
    } catch (...) {
      ADD_FAILURE() << "PmrResource::deallocate threw";
    }
    std::string logged = TakeLog();
    if (logged.empty()) return {Outcome::kOk, ""};
    return {Outcome::kReported, std::move(logged)};
  }
  // The pool's stats cover the resource's memory (pmr.h, "The model").
  std::optional<Stats> GetStats() {
    return FromAllocator(resource_->allocator());
  }

 private:
  std::optional<bfc::PmrResource> resource_;
};

// bfc/c_api.h: bfc_malloc: "`size` bytes on `device`, aligned to 256, or NULL
// (out of memory, ...: see bfc_last_error()). size 0 returns NULL without an
// error." bfc_free: "NULL is a no-op. A pointer the device's allocator did not
// hand out is reported (bfc_last_error(), the allocator's num_invalid_frees)
// and ignored." "Successful calls leave the message alone (like errno)."
//
// The library's allocators are process-global and its configuration is read
// once: BFC_ALLOC_CONF is set before the first call and never changed. Each
// test gets a device ordinal of its own (the host backend has one allocator
// per ordinal), so tests do not see each other's blocks; stats are compared
// as differences all the same.
class CApi {
 public:
  static constexpr const char* kName = "CApi";
  static constexpr bool kTakesAlignment = false;  // always 256-aligned
  static constexpr bool kHostAccessible = true;   // backend:host
  static constexpr Outcome kZeroBytes = Outcome::kNull;
  // No alignment parameter, so no bad alignment (the case is skipped).
  static constexpr Outcome kBadAlignment = Outcome::kOk;
  static constexpr Outcome kOutOfMemory = Outcome::kNull;
  static constexpr Outcome kInvalidFree = Outcome::kReported;
  static constexpr bool kFreesNullptr = true;
  // max_oom_logs:0 keeps the library's own (stderr) dumps out of the test
  // output; the failure still sets bfc_last_error().
  static constexpr const char* kConf =
      "backend:host,memory_limit:256MiB,allow_retry_on_failure:false,"
      "max_oom_logs:0";
  static_assert(kLimit == size_t{256} << 20, "kConf names the limit");

  std::string Open() {
    const Lib& lib = Load();
    if (!lib.error.empty()) return lib.error;
    static int next_device = 0;
    device_ = next_device++ % BFC_MAX_DEVICES;
    // A reused ordinal (--gtest_repeat) starts from no regions and no peak.
    lib.empty_cache(device_);
    lib.reset_peak_stats(device_);
    bfc_stats s;
    if (lib.get_stats(device_, &s) != 0) {
      ADD_FAILURE() << "bfc_get_stats: " << lib.last_error();
    } else if (s.bytes_limit != static_cast<int64_t>(kLimit)) {
      ADD_FAILURE() << "BFC_ALLOC_CONF=" << kConf
                    << " did not take effect: bytes_limit " << s.bytes_limit
                    << " (was BFC_ALLOC_CONF read before this test set it?)";
    }
    return "";
  }
  void Close() { Load().empty_cache(device_); }

  Allocation Allocate(size_t bytes, size_t /*alignment*/) {
    const Lib& lib = Load();
    Mark();
    void* p = lib.malloc(bytes, device_, nullptr);
    if (p != nullptr) return {p, Outcome::kOk, ""};
    return {nullptr, Outcome::kNull, MessageSinceMark()};
  }
  Freed Free(void* p, size_t bytes, size_t) {
    Mark();
    Load().free(p, bytes, device_, nullptr);
    std::string message = MessageSinceMark();
    if (message.empty()) return {Outcome::kOk, ""};
    return {Outcome::kReported, std::move(message)};
  }
  std::optional<Stats> GetStats() {
    bfc_stats s;
    if (Load().get_stats(device_, &s) != 0) {
      ADD_FAILURE() << "bfc_get_stats: " << Load().last_error();
      return Stats();
    }
    Stats out;
    out.num_allocs = s.num_allocs;
    out.bytes_in_use = s.bytes_in_use;
    out.peak_bytes_in_use = s.peak_bytes_in_use;
    out.bytes_requested_in_use = s.bytes_requested_in_use;
    out.bytes_limit = s.bytes_limit;
    out.num_invalid_frees = s.num_invalid_frees;
    out.num_invalid_requests = s.num_invalid_requests;
    out.num_ooms = s.num_ooms;
    return out;
  }
  std::optional<absl::Status> Validate() { return std::nullopt; }

 private:
  struct Lib {
    std::string error;  // why it could not be loaded
    void* (*malloc)(size_t, int, bfc_stream_t) = nullptr;
    void (*free)(void*, size_t, int, bfc_stream_t) = nullptr;
    size_t (*empty_cache)(int) = nullptr;
    int (*get_stats)(int, bfc_stats*) = nullptr;
    int (*reset_peak_stats)(int) = nullptr;
    const char* (*last_error)() = nullptr;
  };

  template <typename Fn>
  static bool Resolve(void* handle, const char* name, Fn* out,
                      std::string* error) {
    void* sym = dlsym(handle, name);
    if (sym == nullptr) {
      *error = std::string("dlsym ") + name + ": " + dlerror();
      return false;
    }
    *out = reinterpret_cast<Fn>(sym);
    return true;
  }

  static const Lib& Load() {
    static const Lib lib = [] {
      Lib l;
      // Configured once, before the library's first call reads it.
      setenv("BFC_ALLOC_CONF", kConf, 1);
      void* h = dlopen(BFC_ALLOC_SO, RTLD_NOW | RTLD_LOCAL);
      if (h == nullptr) {
        l.error = std::string("dlopen: ") + dlerror();
        ADD_FAILURE() << l.error;
        return l;
      }
      const bool ok =
          Resolve(h, "bfc_malloc", &l.malloc, &l.error) &&
          Resolve(h, "bfc_free", &l.free, &l.error) &&
          Resolve(h, "bfc_empty_cache", &l.empty_cache, &l.error) &&
          Resolve(h, "bfc_get_stats", &l.get_stats, &l.error) &&
          Resolve(h, "bfc_reset_peak_stats", &l.reset_peak_stats, &l.error) &&
          Resolve(h, "bfc_last_error", &l.last_error, &l.error);
      if (!ok) ADD_FAILURE() << l.error;
      return l;
    }();
    return lib;
  }

  // bfc_last_error() keeps its message across successful calls, so a call's
  // own message is told apart from an older one by first setting a known
  // one: bfc_get_stats with a NULL `out` fails with it.
  void Mark() {
    const Lib& lib = Load();
    EXPECT_EQ(lib.get_stats(device_, nullptr), -1);
    mark_ = lib.last_error();
    EXPECT_FALSE(mark_.empty());
  }
  std::string MessageSinceMark() const {
    const std::string now = Load().last_error();
    return now == mark_ ? "" : now;
  }

  int device_ = 0;
  std::string mark_;
};

// bfc/cuda_resource.h: allocate: "`bytes` aligned to `alignment` (a power of
// two; <= 256 gives 256), or nullptr: out of memory, bytes == 0, or the
// allocator's memory is not of kMemoryType." "Errors: a request the pool
// cannot serve ... returns nullptr and is logged by the allocator; nothing
// throws. Deallocation never fails visibly: a foreign pointer is reported and
// counted by the allocator (num_invalid_frees)."
template <bool kPinned>
class Cccl {
 public:
  static constexpr const char* kName = kPinned ? "CcclPinned" : "CcclDevice";
  static constexpr bool kTakesAlignment = true;
  static constexpr bool kHostAccessible = kPinned;
  static constexpr Outcome kZeroBytes = Outcome::kNull;
  static constexpr Outcome kBadAlignment = Outcome::kNull;
  static constexpr Outcome kOutOfMemory = Outcome::kNull;
  static constexpr Outcome kInvalidFree = Outcome::kReported;
  static constexpr bool kFreesNullptr = true;

#ifndef BFC_TEST_HAVE_CCCL
  std::string Open() {
    return "bfc was built without CUDA or without CCCL's headers "
           "(no bfc::cuda_resource target)";
  }
  void Close() {}
  Allocation Allocate(size_t, size_t) { return {}; }
  Freed Free(void*, size_t, size_t) { return {}; }
  std::optional<Stats> GetStats() { return std::nullopt; }
  std::optional<absl::Status> Validate() { return std::nullopt; }
#else
  using Resource = std::conditional_t<kPinned, bfc::CudaPinnedResource,
                                      bfc::CudaDeviceResource>;
  using Ref =
      std::conditional_t<kPinned,
                         cuda::mr::resource_ref<cuda::mr::host_accessible,
                                                cuda::mr::device_accessible>,
                         cuda::mr::resource_ref<cuda::mr::device_accessible>>;

  std::string Open() {
    std::string error;
    if (bfc::CudaDeviceCount(&error) == 0) {
      return "needs a CUDA device to allocate (" + error + ")";
    }
    std::unique_ptr<bfc::SubAllocator> sub;
    if constexpr (kPinned) {
      sub = std::make_unique<bfc::CudaPinnedSubAllocator>();
    } else {
      sub = std::make_unique<bfc::CudaDeviceSubAllocator>(0);
    }
    pool_ = std::make_unique<bfc::Allocator>(std::move(sub), kLimit, kName,
                                             PoolOptions());
    resource_.emplace(*pool_);
    return "";
  }
  void Close() {
    resource_.reset();
    pool_.reset();
  }
  Allocation Allocate(size_t bytes, size_t alignment) {
    Ref ref{*resource_};
    TakeLog();
    void* p = ref.allocate(bytes, alignment);
    std::string logged = TakeLog();
    if (p != nullptr) return {p, Outcome::kOk, ""};
    return {nullptr, Outcome::kNull, std::move(logged)};
  }
  Freed Free(void* p, size_t bytes, size_t alignment) {
    Ref ref{*resource_};
    TakeLog();
    ref.deallocate(p, bytes, alignment);
    std::string logged = TakeLog();
    if (logged.empty()) return {Outcome::kOk, ""};
    return {Outcome::kReported, std::move(logged)};
  }
  std::optional<Stats> GetStats() { return FromAllocator(*pool_); }
  std::optional<absl::Status> Validate() { return pool_->Validate(); }

 private:
  std::unique_ptr<bfc::Allocator> pool_;
  std::optional<Resource> resource_;
#endif
};
using CcclDevice = Cccl<false>;
using CcclPinned = Cccl<true>;

// --- the suite ---------------------------------------------------------------

template <typename Adapter>
class FrontendConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_log = &log_;
    const std::string why = adapter_.Open();
    if (!why.empty()) GTEST_SKIP() << Adapter::kName << ": " << why;
    opened_ = true;
    const std::optional<Stats> s = adapter_.GetStats();
    before_ = s.value_or(Stats());
  }
  void TearDown() override {
    if (opened_) adapter_.Close();
    g_log = nullptr;
  }

  // Allocates and expects success, aligned as asked (and at least to 256).
  void* MustAllocate(size_t bytes, size_t alignment = kGranule) {
    Allocation a = adapter_.Allocate(bytes, alignment);
    EXPECT_EQ(a.outcome, Outcome::kOk)
        << Adapter::kName << ": " << bytes << " bytes, alignment " << alignment
        << ": " << a.message;
    EXPECT_NE(a.ptr, nullptr);
    EXPECT_TRUE(IsAligned(a.ptr, std::max(alignment, kGranule)))
        << a.ptr << " for alignment " << alignment;
    return a.ptr;
  }
  void MustFree(void* p, size_t bytes, size_t alignment = kGranule) {
    const Freed f = adapter_.Free(p, bytes, alignment);
    EXPECT_EQ(f.outcome, Outcome::kOk) << f.message;
  }

  // Host-accessible memory is written through, first to last byte.
  void Fill(void* p, size_t bytes, unsigned char value) {
    if (Adapter::kHostAccessible && bytes > 0) std::memset(p, value, bytes);
  }
  bool Holds(const void* p, size_t bytes, unsigned char value) {
    if (!Adapter::kHostAccessible) return true;
    const auto* b = static_cast<const unsigned char*>(p);
    return std::all_of(b, b + bytes,
                       [&](unsigned char c) { return c == value; });
  }

  // Stats now minus stats at SetUp (limit and peak as they are).
  Stats Delta() {
    Stats now = adapter_.GetStats().value_or(Stats());
    now.num_allocs -= before_.num_allocs;
    now.bytes_in_use -= before_.bytes_in_use;
    now.bytes_requested_in_use -= before_.bytes_requested_in_use;
    now.num_invalid_frees -= before_.num_invalid_frees;
    now.num_invalid_requests -= before_.num_invalid_requests;
    now.num_ooms -= before_.num_ooms;
    return now;
  }
  bool HasStats() { return adapter_.GetStats().has_value(); }

  void ExpectValid() {
    if (std::optional<absl::Status> s = adapter_.Validate()) {
      EXPECT_TRUE(s->ok()) << *s;
    }
  }

  LogCapture log_;
  Adapter adapter_;
  Stats before_;
  bool opened_ = false;
};

struct AdapterName {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};

using Adapters =
#ifdef BFC_TEST_CCCL_FRONTENDS
    // The CCCL resources alone: frontend_conformance_cuda_test (label cuda),
    // run on the fake driver in CI.
    ::testing::Types<CcclDevice, CcclPinned>;
#else
    ::testing::Types<StatusApi, RawApi, CApi, Pmr>;
#endif
TYPED_TEST_SUITE(FrontendConformanceTest, Adapters, AdapterName);

TYPED_TEST(FrontendConformanceTest, ZeroBytes) {
  using A = TypeParam;
  Allocation a = this->adapter_.Allocate(0, kGranule);
  EXPECT_EQ(a.outcome, A::kZeroBytes) << a.message;
  if (A::kZeroBytes == Outcome::kOk) {
    // Served as a unique block (pmr.h: "0 is served as 1").
    ASSERT_NE(a.ptr, nullptr);
    void* b = this->MustAllocate(0);
    EXPECT_NE(a.ptr, b);
    EXPECT_EQ(this->Delta().num_allocs, 2);
    EXPECT_EQ(this->Delta().bytes_requested_in_use, 2);
    this->MustFree(a.ptr, 0);
    this->MustFree(b, 0);
  } else {
    EXPECT_EQ(a.ptr, nullptr);
    // nullptr is TF's answer, not an error: nothing logged or set
    // (c_api.h: "size 0 returns NULL without an error").
    if (A::kZeroBytes == Outcome::kNull) {
      EXPECT_EQ(a.message, "");
    }
    // A status names the problem.
    if (A::kZeroBytes == Outcome::kInvalidArgument) {
      EXPECT_NE(a.message, "");
    }
    EXPECT_EQ(this->Delta().num_allocs, 0);
    EXPECT_EQ(this->Delta().num_invalid_requests, 0);
  }
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, OneByte) {
  // A small alignment still gives 256-aligned memory (every front end
  // documents "aligned to 256" or "<= 256 gives 256").
  void* p = this->MustAllocate(1, alignof(std::max_align_t));
  ASSERT_NE(p, nullptr);
  this->Fill(p, 1, 0x5a);
  EXPECT_TRUE(this->Holds(p, 1, 0x5a));
  EXPECT_EQ(this->Delta().num_allocs, 1);
  EXPECT_EQ(this->Delta().bytes_in_use, static_cast<int64_t>(kGranule));
  EXPECT_EQ(this->Delta().bytes_requested_in_use, 1);
  this->MustFree(p, 1, alignof(std::max_align_t));
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  EXPECT_EQ(this->Delta().num_invalid_frees, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, SizesAcrossBins) {
  // Bin b holds [256 << b, 256 << (b + 1)): each bin's edges and one byte
  // either side, up to a quarter of the limit (bins 0 .. 18).
  for (int b = 0; b < bfc::kNumBins; ++b) {
    const size_t edge = kGranule << b;
    if (edge > kLimit / 4) break;
    for (size_t bytes : {edge - 1, edge, edge + 1}) {
      SCOPED_TRACE(testing::Message()
                   << "bin " << b << ", " << bytes << " bytes");
      void* p = this->MustAllocate(bytes);
      if (p == nullptr) continue;
      this->Fill(p, 1, 0x11);  // first and last byte are ours
      this->Fill(static_cast<char*>(p) + bytes - 1, 1, 0x22);
      EXPECT_GE(this->Delta().bytes_in_use,
                static_cast<int64_t>(RoundUp(bytes)));
      EXPECT_EQ(this->Delta().bytes_requested_in_use,
                static_cast<int64_t>(bytes));
      this->MustFree(p, bytes);
      EXPECT_EQ(this->Delta().bytes_in_use, 0);
    }
  }
  EXPECT_EQ(this->Delta().num_ooms, 0);
  EXPECT_EQ(this->Delta().num_invalid_frees, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, Alignment256IsHonoured) {
  std::vector<std::pair<void*, size_t>> live;
  for (size_t bytes : {size_t{1}, size_t{300}, size_t{5000}, size_t{70000}}) {
    void* p = this->MustAllocate(bytes, 256);
    if (p != nullptr) live.emplace_back(p, bytes);
  }
  for (auto& [p, bytes] : live) this->MustFree(p, bytes, 256);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, LargerPowerOfTwoAlignmentIsHonoured) {
  if (!TypeParam::kTakesAlignment) {
    GTEST_SKIP() << TypeParam::kName
                 << " takes no alignment: every block is 256-aligned "
                    "(c_api.h, bfc_malloc)";
  }
  // A 1-byte block first, so that the free space does not start aligned.
  void* first = this->MustAllocate(1);
  for (size_t alignment : {size_t{512}, size_t{4096}, size_t{65536},
                           size_t{1} << 20, size_t{16} << 20}) {
    SCOPED_TRACE(testing::Message() << "alignment " << alignment);
    void* p = this->MustAllocate(1000, alignment);  // checks the alignment
    if (p == nullptr) continue;
    this->Fill(p, 1000, 0x33);
    EXPECT_TRUE(this->Holds(p, 1000, 0x33));
    this->MustFree(p, 1000, alignment);
  }
  this->MustFree(first, 1);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  EXPECT_EQ(this->Delta().num_invalid_requests, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, NonPowerOfTwoAlignmentIsRejected) {
  using A = TypeParam;
  if (!A::kTakesAlignment) {
    GTEST_SKIP() << A::kName
                 << " takes no alignment, so none can be wrong (c_api.h)";
  }
  // Through a volatile, so that no compiler sees a constant non-power-of-two
  // alignment (pmr's allocate carries __attribute__((alloc_align))).
  for (volatile size_t alignment : {size_t{3}, size_t{384}, size_t{1000}}) {
    SCOPED_TRACE(testing::Message() << "alignment " << alignment);
    Allocation a = this->adapter_.Allocate(4096, alignment);
    EXPECT_EQ(a.outcome, A::kBadAlignment);
    EXPECT_EQ(a.ptr, nullptr);
    EXPECT_NE(a.message, "") << "a rejected alignment must be reported";
  }
  // Counted as invalid requests; nothing allocated.
  EXPECT_EQ(this->Delta().num_invalid_requests, 3);
  EXPECT_EQ(this->Delta().num_allocs, 0);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, LiveBlocksAreDistinctAndDoNotOverlap) {
  struct Block {
    char* ptr;
    size_t bytes;
    unsigned char fill;
  };
  const size_t sizes[] = {1,     255,   256,    257,     1000,   4096,
                          10000, 65536, 100000, 1 << 20, 3 << 20};
  std::vector<Block> blocks;
  int64_t requested = 0;
  int64_t rounded = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t bytes : sizes) {
      void* p = this->MustAllocate(bytes);
      if (p == nullptr) continue;
      const auto fill = static_cast<unsigned char>(blocks.size() + 1);
      blocks.push_back({static_cast<char*>(p), bytes, fill});
      this->Fill(p, bytes, fill);
      requested += static_cast<int64_t>(bytes);
      rounded += static_cast<int64_t>(RoundUp(bytes));
    }
  }
  ASSERT_EQ(blocks.size(), 3 * std::size(sizes));
  EXPECT_EQ(this->Delta().num_allocs, static_cast<int64_t>(blocks.size()));
  EXPECT_EQ(this->Delta().bytes_requested_in_use, requested);
  EXPECT_GE(this->Delta().bytes_in_use, rounded);

  std::vector<Block> by_address = blocks;
  std::sort(by_address.begin(), by_address.end(),
            [](const Block& a, const Block& b) { return a.ptr < b.ptr; });
  for (size_t i = 1; i < by_address.size(); ++i) {
    EXPECT_LE(by_address[i - 1].ptr + by_address[i - 1].bytes,
              by_address[i].ptr)
        << "blocks of " << by_address[i - 1].bytes << " and "
        << by_address[i].bytes << " bytes overlap";
  }
  // Every block still holds its own bytes: no block was handed out twice.
  for (const Block& b : blocks) {
    EXPECT_TRUE(this->Holds(b.ptr, b.bytes, b.fill))
        << "block of " << b.bytes << " bytes";
  }
  // Free every other block, check the rest, then free the rest.
  for (size_t i = 0; i < blocks.size(); i += 2) {
    this->MustFree(blocks[i].ptr, blocks[i].bytes);
  }
  for (size_t i = 1; i < blocks.size(); i += 2) {
    EXPECT_TRUE(this->Holds(blocks[i].ptr, blocks[i].bytes, blocks[i].fill));
    this->MustFree(blocks[i].ptr, blocks[i].bytes);
  }
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  EXPECT_EQ(this->Delta().bytes_requested_in_use, 0);
  EXPECT_EQ(this->Delta().num_invalid_frees, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, FreeOfNullptrIsANoOp) {
  if (!TypeParam::kFreesNullptr) {
    GTEST_SKIP() << TypeParam::kName
                 << ": freeing nullptr is outside the front end's contract";
  }
  void* keep = this->MustAllocate(1000);
  this->Fill(keep, 1000, 0x44);
  const Stats before = this->Delta();
  const Freed f = this->adapter_.Free(nullptr, 0, kGranule);
  EXPECT_EQ(f.outcome, Outcome::kOk);
  EXPECT_EQ(f.message, "");
  const Stats after = this->Delta();
  EXPECT_EQ(after.num_invalid_frees, 0);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_TRUE(this->Holds(keep, 1000, 0x44));
  this->MustFree(keep, 1000);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, DoubleFreeIsReportedAndChangesNothing) {
  using A = TypeParam;
  void* keep = this->MustAllocate(1000);
  void* p = this->MustAllocate(5000);
  ASSERT_NE(keep, nullptr);
  ASSERT_NE(p, nullptr);
  this->Fill(keep, 1000, 0x55);
  this->MustFree(p, 5000);
  const Stats before = this->Delta();

  const Freed again = this->adapter_.Free(p, 5000, kGranule);
  EXPECT_EQ(again.outcome, A::kInvalidFree);
  EXPECT_NE(again.message, "") << "a double free must be reported";
  const Stats after = this->Delta();
  EXPECT_EQ(after.num_invalid_frees, before.num_invalid_frees + 1);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  this->ExpectValid();

  // The live block is untouched, and the allocator still works.
  EXPECT_TRUE(this->Holds(keep, 1000, 0x55));
  void* q = this->MustAllocate(5000);
  this->Fill(q, 5000, 0x66);
  EXPECT_TRUE(this->Holds(keep, 1000, 0x55));
  this->MustFree(q, 5000);
  this->MustFree(keep, 1000);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest,
           ForeignPointersAreReportedAndChangeNothing) {
  using A = TypeParam;
  void* keep = this->MustAllocate(1000);
  ASSERT_NE(keep, nullptr);
  this->Fill(keep, 1000, 0x77);
  const Stats before = this->Delta();

  alignas(256) static char not_ours[1024];
  auto heap = std::make_unique<char[]>(4096);
  void* const foreign[] = {
      not_ours,                       // static storage
      heap.get(),                     // the C++ heap
      static_cast<char*>(keep) + 256  // inside a live block of ours
  };
  for (void* f : foreign) {
    const Freed r = this->adapter_.Free(f, 256, kGranule);
    EXPECT_EQ(r.outcome, A::kInvalidFree) << f;
    EXPECT_NE(r.message, "") << "a foreign pointer must be reported";
  }
  const Stats after = this->Delta();
  EXPECT_EQ(
      after.num_invalid_frees,
      before.num_invalid_frees + static_cast<int64_t>(std::size(foreign)));
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_TRUE(this->Holds(keep, 1000, 0x77));
  this->ExpectValid();
  this->MustFree(keep, 1000);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, OutOfMemoryFailsCleanly) {
  using A = TypeParam;
  // More than the limit: fails at once.
  Allocation huge = this->adapter_.Allocate(2 * kLimit, kGranule);
  EXPECT_EQ(huge.outcome, A::kOutOfMemory);
  EXPECT_EQ(huge.ptr, nullptr);
  EXPECT_NE(huge.message, "") << "out of memory must be reported";

  // Within the limit, but not while another large block is live.
  const size_t big = kLimit / 8 * 5;
  void* first = this->MustAllocate(big);
  ASSERT_NE(first, nullptr);
  Allocation second = this->adapter_.Allocate(big, kGranule);
  EXPECT_EQ(second.outcome, A::kOutOfMemory);
  EXPECT_EQ(second.ptr, nullptr);
  EXPECT_NE(second.message, "");
  EXPECT_EQ(this->Delta().num_ooms, 2);
  EXPECT_EQ(this->Delta().num_allocs, 1);
  EXPECT_EQ(this->Delta().bytes_requested_in_use, static_cast<int64_t>(big));
  this->ExpectValid();

  // Nothing was lost: once the first is freed the same request succeeds.
  this->MustFree(first, big);
  void* third = this->MustAllocate(big);
  this->Fill(third, 1, 0x12);
  this->MustFree(third, big);
  EXPECT_EQ(this->Delta().bytes_in_use, 0);
  this->ExpectValid();
}

TYPED_TEST(FrontendConformanceTest, StatsAgreeWithWhatWasAllocated) {
  if (!this->HasStats()) {
    GTEST_SKIP() << TypeParam::kName << " exposes no stats";
  }
  const size_t sizes[] = {1000, 5000, 70000, 300000};
  std::vector<void*> live;
  int64_t requested = 0;
  int64_t rounded = 0;
  for (size_t bytes : sizes) {
    live.push_back(this->MustAllocate(bytes));
    requested += static_cast<int64_t>(bytes);
    rounded += static_cast<int64_t>(RoundUp(bytes));
  }
  Stats s = this->Delta();
  EXPECT_EQ(s.num_allocs, 4);
  EXPECT_EQ(s.bytes_requested_in_use, requested);
  // Each block was split off a larger free chunk, so it holds exactly its
  // rounded size.
  EXPECT_EQ(s.bytes_in_use, rounded);
  EXPECT_EQ(s.peak_bytes_in_use, this->before_.bytes_in_use + rounded);
  EXPECT_EQ(s.bytes_limit, static_cast<int64_t>(kLimit));

  // Free the two smallest: in-use drops by their rounded sizes, peak stays.
  this->MustFree(live[0], sizes[0]);
  this->MustFree(live[1], sizes[1]);
  s = this->Delta();
  EXPECT_EQ(s.bytes_in_use, rounded - static_cast<int64_t>(RoundUp(sizes[0]) +
                                                           RoundUp(sizes[1])));
  EXPECT_EQ(s.bytes_requested_in_use,
            requested - static_cast<int64_t>(sizes[0] + sizes[1]));
  EXPECT_EQ(s.peak_bytes_in_use, this->before_.bytes_in_use + rounded);
  this->MustFree(live[2], sizes[2]);
  this->MustFree(live[3], sizes[3]);
  s = this->Delta();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.bytes_requested_in_use, 0);
  EXPECT_EQ(s.num_allocs, 4);
  EXPECT_EQ(s.num_invalid_frees, 0);
  EXPECT_EQ(s.num_invalid_requests, 0);
  EXPECT_EQ(s.num_ooms, 0);
  this->ExpectValid();
}

}  // namespace
