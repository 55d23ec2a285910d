// Tests for libbfc_alloc.so (bfc/c_api.h), loaded the way the frameworks load
// it: dlopen the built library, resolve every symbol by name, and call through
// function pointers of exactly the types PyTorch and CuPy declare:
//
//   PyTorch CUDAPluggableAllocator  void*(size_t, int, cudaStream_t)
//                                   void(void*, size_t, int, cudaStream_t)
//                                   reset_fn (empty_cache): void()
//   CuPy CFunctionAllocator         void*(*)(void*, size_t, int)
//                                   void(*)(void*, void*, int)
//
// The host backend's memory is written and read back; the virtual backend's
// is never touched. Each test sets BFC_ALLOC_CONF and calls the exported
// bfc_reset_for_testing() so the library reads it again.
#include "bfc/c_api.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/allocator_options.h"
#include "bfc/internal/mutex.h"
#include "bfc/virtual_sub_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef BFC_HAVE_CUDA
#include <cuda_runtime_api.h>  // cudaStream_t only: nothing links cudart

#include "bfc/cuda_sub_allocator.h"
#else
// What cuda_runtime_api.h declares, for builds without the toolkit.
typedef struct CUstream_st* cudaStream_t;
#endif

extern "C" size_t bfc_c_header_stats_size(void);  // c_api_test_c.c

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The frameworks' types, spelled as they spell them.
using TorchAllocFn = void* (*)(size_t, int, cudaStream_t);
using TorchFreeFn = void (*)(void*, size_t, int, cudaStream_t);
using TorchResetFn = void (*)();
using CupyMallocFn = void* (*)(void*, size_t, int);
using CupyFreeFn = void (*)(void*, void*, int);
using EmptyCacheFn = size_t (*)(int);
using GetStatsFn = int (*)(int, bfc_stats*);
using ResetPeakFn = int (*)(int);
using StringFn = const char* (*)();
using VoidFn = void (*)();

// The header declares exactly those types.
static_assert(std::is_same_v<bfc_stream_t, cudaStream_t>);
static_assert(std::is_same_v<decltype(&bfc_malloc), TorchAllocFn>);
static_assert(std::is_same_v<decltype(&bfc_free), TorchFreeFn>);
static_assert(std::is_same_v<decltype(&bfc_empty_cache_all), TorchResetFn>);
static_assert(std::is_same_v<decltype(&bfc_cupy_malloc), CupyMallocFn>);
static_assert(std::is_same_v<decltype(&bfc_cupy_free), CupyFreeFn>);
static_assert(std::is_same_v<decltype(&bfc_empty_cache), EmptyCacheFn>);
static_assert(std::is_same_v<decltype(&bfc_get_stats), GetStatsFn>);
static_assert(std::is_same_v<decltype(&bfc_reset_peak_stats), ResetPeakFn>);
static_assert(std::is_same_v<decltype(&bfc_last_error), StringFn>);
static_assert(std::is_same_v<decltype(&bfc_version), StringFn>);
static_assert(std::is_same_v<decltype(&bfc_config_warnings), StringFn>);
static_assert(std::is_same_v<decltype(&bfc_reset_for_testing), VoidFn>);

struct Lib {
  void* handle = nullptr;
  TorchAllocFn malloc = nullptr;
  TorchFreeFn free = nullptr;
  TorchResetFn empty_cache_all = nullptr;
  CupyMallocFn cupy_malloc = nullptr;
  CupyFreeFn cupy_free = nullptr;
  EmptyCacheFn empty_cache = nullptr;
  GetStatsFn get_stats = nullptr;
  ResetPeakFn reset_peak_stats = nullptr;
  StringFn last_error = nullptr;
  StringFn version = nullptr;
  StringFn config_warnings = nullptr;
  VoidFn reset_for_testing = nullptr;
  int (*record_memory_history)(int, size_t) = nullptr;
  int (*dump_snapshot)(int, const char*) = nullptr;
  decltype(&bfc_record_stream) record_stream = nullptr;
  decltype(&bfc_forget_stream) forget_stream = nullptr;
  decltype(&bfc_account_create) account_create = nullptr;
  decltype(&bfc_account_set_current) account_set_current = nullptr;
  decltype(&bfc_account_get_stats) account_get_stats = nullptr;
  decltype(&bfc_account_close) account_close = nullptr;
  decltype(&bfc_account_destroy) account_destroy = nullptr;
};

template <typename Fn>
void Resolve(void* handle, const char* name, Fn* out) {
  void* sym = dlsym(handle, name);
  ASSERT_NE(sym, nullptr) << name << ": " << dlerror();
  *out = reinterpret_cast<Fn>(sym);
}

class CApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    lib_.handle = dlopen(BFC_ALLOC_SO, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_.handle, nullptr) << dlerror();
    Resolve(lib_.handle, "bfc_malloc", &lib_.malloc);
    Resolve(lib_.handle, "bfc_free", &lib_.free);
    Resolve(lib_.handle, "bfc_record_memory_history",
            &lib_.record_memory_history);
    Resolve(lib_.handle, "bfc_dump_snapshot", &lib_.dump_snapshot);
    Resolve(lib_.handle, "bfc_record_stream", &lib_.record_stream);
    Resolve(lib_.handle, "bfc_forget_stream", &lib_.forget_stream);
    Resolve(lib_.handle, "bfc_empty_cache_all", &lib_.empty_cache_all);
    Resolve(lib_.handle, "bfc_cupy_malloc", &lib_.cupy_malloc);
    Resolve(lib_.handle, "bfc_cupy_free", &lib_.cupy_free);
    Resolve(lib_.handle, "bfc_empty_cache", &lib_.empty_cache);
    Resolve(lib_.handle, "bfc_get_stats", &lib_.get_stats);
    Resolve(lib_.handle, "bfc_reset_peak_stats", &lib_.reset_peak_stats);
    Resolve(lib_.handle, "bfc_last_error", &lib_.last_error);
    Resolve(lib_.handle, "bfc_version", &lib_.version);
    Resolve(lib_.handle, "bfc_config_warnings", &lib_.config_warnings);
    Resolve(lib_.handle, "bfc_reset_for_testing", &lib_.reset_for_testing);
    Resolve(lib_.handle, "bfc_account_create", &lib_.account_create);
    Resolve(lib_.handle, "bfc_account_set_current", &lib_.account_set_current);
    Resolve(lib_.handle, "bfc_account_get_stats", &lib_.account_get_stats);
    Resolve(lib_.handle, "bfc_account_close", &lib_.account_close);
    Resolve(lib_.handle, "bfc_account_destroy", &lib_.account_destroy);
  }

  void SetUp() override {
    ASSERT_NE(lib_.reset_for_testing, nullptr) << "library not loaded";
  }

  void TearDown() override {
    unsetenv("BFC_ALLOC_CONF");
    lib_.reset_for_testing();
  }

  // Makes the library read `conf` as BFC_ALLOC_CONF on its next call.
  static void Configure(const char* conf) {
    setenv("BFC_ALLOC_CONF", conf, 1);
    lib_.reset_for_testing();
  }

  static bfc_stats Stats(int device) {
    bfc_stats s;
    std::memset(&s, 0xab, sizeof(s));
    EXPECT_EQ(lib_.get_stats(device, &s), 0) << lib_.last_error();
    return s;
  }

  static std::string LastError() { return lib_.last_error(); }

  static Lib lib_;
};

Lib CApiTest::lib_;

const cudaStream_t kNoStream = nullptr;

TEST_F(CApiTest, VersionIsTheProjectVersion) {
  EXPECT_STREQ(lib_.version(), BFC_EXPECTED_VERSION);
}

TEST_F(CApiTest, CHeaderCompilesAsCWithTheSameLayout) {
  EXPECT_EQ(bfc_c_header_stats_size(), sizeof(bfc_stats));
  EXPECT_EQ(sizeof(bfc_stats), 19 * sizeof(int64_t) + sizeof(double));
}

TEST_F(CApiTest, ExportsOnlyTheCSymbols) {
  const std::string command =
      std::string("nm -D --defined-only ") + BFC_ALLOC_SO + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::set<std::string> exported;
  char line[1024];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    char address[64], type[8], name[900];
    if (std::sscanf(line, "%63s %7s %899s", address, type, name) != 3) continue;
    exported.insert(name);
  }
  const int rc = pclose(pipe);
  if (exported.empty() && rc != 0) GTEST_SKIP() << "nm is not available";
  const std::set<std::string> expected = {"bfc_malloc",
                                          "bfc_malloc_or_throw",
                                          "bfc_free",
                                          "bfc_record_stream",
                                          "bfc_forget_stream",
                                          "bfc_empty_cache_all",
                                          "bfc_cupy_malloc",
                                          "bfc_cupy_free",
                                          "bfc_empty_cache",
                                          "bfc_get_stats",
                                          "bfc_reset_peak_stats",
                                          "bfc_last_error",
                                          "bfc_version",
                                          "bfc_config_warnings",
                                          "bfc_reset_for_testing",
                                          "bfc_record_memory_history",
                                          "bfc_dump_snapshot",
                                          "bfc_account_create",
                                          "bfc_account_set_current",
                                          "bfc_account_get_stats",
                                          "bfc_account_close",
                                          "bfc_account_destroy"};
  EXPECT_EQ(exported, expected);
}

// From a review: PyTorch's CUDAPluggableAllocator wraps whatever its alloc
// function returns without a check, so bfc_malloc's NULL became a tensor at
// address 0. bfc_malloc_or_throw throws std::bad_alloc with the failure's
// message instead, which PyTorch's bindings raise as a Python error.
TEST_F(CApiTest, MallocOrThrowThrowsTheFailureForPyTorch) {
  Configure("backend:host,memory_limit:1MiB,allow_retry_on_failure:false");
  auto malloc_or_throw = reinterpret_cast<decltype(&bfc_malloc_or_throw)>(
      dlsym(lib_.handle, "bfc_malloc_or_throw"));
  ASSERT_NE(malloc_or_throw, nullptr) << dlerror();
  void* p = malloc_or_throw(1000, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  EXPECT_EQ(malloc_or_throw(0, 0, kNoStream), nullptr);  // not a failure
  std::string what;
  try {
    (void)malloc_or_throw(size_t{2} << 20, 0, kNoStream);
  } catch (const std::bad_alloc& e) {
    what = e.what();
  }
  EXPECT_THAT(what, HasSubstr("bfc_malloc(2097152 bytes, device 0)"));
  EXPECT_EQ(what, LastError());
  what.clear();
  try {
    (void)malloc_or_throw(1000, -1, kNoStream);
  } catch (const std::bad_alloc& e) {
    what = e.what();
  }
  EXPECT_THAT(what, HasSubstr("device -1 is out of range"));
  lib_.free(p, 1000, 0, kNoStream);
  EXPECT_EQ(Stats(0).bytes_in_use, 0);
}

TEST_F(CApiTest, HostBackendTorchPairGivesWritableMemory) {
  Configure("backend:host,memory_limit:64MiB");
  void* p = lib_.malloc(1000, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  std::memset(p, 0x5a, 1000);
  EXPECT_EQ(static_cast<unsigned char*>(p)[999], 0x5a);

  bfc_stats s = Stats(0);
  EXPECT_EQ(s.num_allocs, 1);
  EXPECT_EQ(s.bytes_in_use, 1024);
  EXPECT_EQ(s.bytes_limit, int64_t{64} << 20);
  EXPECT_EQ(s.bytes_reservable_limit, -1);  // unset in the C++ stats

  lib_.free(p, 1000, 0, kNoStream);
  EXPECT_EQ(Stats(0).bytes_in_use, 0);
  EXPECT_EQ(Stats(0).num_invalid_frees, 0);
}

TEST_F(CApiTest, HostBackendCupyPairIsPerDevice) {
  Configure("backend:host,memory_limit:64MiB");
  void* a = lib_.cupy_malloc(nullptr, 4096, 1);
  ASSERT_NE(a, nullptr) << LastError();
  std::memset(a, 1, 4096);
  EXPECT_EQ(Stats(1).bytes_in_use, 4096);
  EXPECT_EQ(Stats(0).bytes_in_use, 0);  // device 0 is a separate allocator
  // Freeing on the wrong device is reported, not honoured.
  lib_.cupy_free(nullptr, a, 0);
  EXPECT_THAT(LastError(), HasSubstr("bfc_cupy_free"));
  EXPECT_EQ(Stats(0).num_invalid_frees, 1);
  EXPECT_EQ(Stats(1).bytes_in_use, 4096);
  lib_.cupy_free(nullptr, a, 1);
  EXPECT_EQ(Stats(1).bytes_in_use, 0);
}

TEST_F(CApiTest, HostBackendFromManyThreadsNeverOverlaps) {
  Configure("backend:host,memory_limit:256MiB");
  constexpr int kThreads = 8;
  constexpr int kIters = 300;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      std::vector<std::pair<unsigned char*, size_t>> live;
      for (int i = 0; i < kIters; ++i) {
        const size_t size = 64 + ((i * 7919 + t * 131) % 20000);
        const bool torch = (i + t) % 2 == 0;
        void* p = torch ? lib_.malloc(size, t % 2, kNoStream)
                        : lib_.cupy_malloc(nullptr, size, t % 2);
        if (p == nullptr) {
          ++failures;
          continue;
        }
        // A per-thread, per-iteration pattern: another thread's block
        // overlapping ours would overwrite it.
        std::memset(p, (t * 31 + i) & 0xff, size);
        live.emplace_back(static_cast<unsigned char*>(p), size);
        if (i % 3 == 2) {
          auto [q, n] = live.front();
          live.erase(live.begin());
          const int expected = q[0];
          for (size_t k = 0; k < n; ++k) {
            if (q[k] != expected) {
              ++failures;
              break;
            }
          }
          if (torch) {
            lib_.free(q, n, t % 2, kNoStream);
          } else {
            lib_.cupy_free(nullptr, q, t % 2);
          }
        }
      }
      for (auto [q, n] : live) lib_.free(q, n, t % 2, kNoStream);
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  for (int device : {0, 1}) {
    bfc_stats s = Stats(device);
    EXPECT_EQ(s.bytes_in_use, 0) << device;
    EXPECT_EQ(s.num_allocs, kThreads / 2 * kIters) << device;
    EXPECT_EQ(s.num_invalid_frees, 0) << device;
  }
}

TEST_F(CApiTest, VirtualBackendFromManyThreadsGivesDistinctAddresses) {
  // Virtual memory is never dereferenced: only addresses are checked.
  Configure("backend:virtual,memory_limit:1GiB");
  constexpr int kThreads = 8;
  constexpr int kIters = 500;
  bfc::internal::Mutex mu;
  std::set<uintptr_t> live_all;  // starts of every live block, all threads
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> live;
      for (int i = 0; i < kIters; ++i) {
        const size_t size = 256 + ((i * 104729 + t) % (1 << 20));
        void* p = (i % 2) ? lib_.malloc(size, 0, kNoStream)
                          : lib_.cupy_malloc(nullptr, size, 0);
        if (p == nullptr) {
          ++failures;
          continue;
        }
        {
          bfc::internal::MutexLock lock(&mu);
          if (!live_all.insert(reinterpret_cast<uintptr_t>(p)).second) {
            ++failures;
          }
        }
        live.push_back(p);
        if (i % 2 == 1) {
          void* q = live.front();
          live.erase(live.begin());
          {
            bfc::internal::MutexLock lock(&mu);
            live_all.erase(reinterpret_cast<uintptr_t>(q));
          }
          lib_.free(q, 0, 0, kNoStream);
        }
      }
      for (void* q : live) {
        {
          bfc::internal::MutexLock lock(&mu);
          live_all.erase(reinterpret_cast<uintptr_t>(q));
        }
        lib_.cupy_free(nullptr, q, 0);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0) << LastError();
  bfc_stats s = Stats(0);
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.num_allocs, kThreads * kIters);
  EXPECT_EQ(s.num_invalid_frees, 0);
}

bool SameStats(const bfc_stats& c, const bfc::AllocatorStats& s,
               std::string* diff) {
  auto v = [](const std::optional<int64_t>& o) { return o ? *o : -1; };
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"num_allocs", {c.num_allocs, s.num_allocs}},
      {"bytes_in_use", {c.bytes_in_use, s.bytes_in_use}},
      {"peak_bytes_in_use", {c.peak_bytes_in_use, s.peak_bytes_in_use}},
      {"largest_alloc_size", {c.largest_alloc_size, s.largest_alloc_size}},
      {"bytes_limit", {c.bytes_limit, v(s.bytes_limit)}},
      {"bytes_reserved", {c.bytes_reserved, s.bytes_reserved}},
      {"peak_bytes_reserved", {c.peak_bytes_reserved, s.peak_bytes_reserved}},
      {"bytes_reservable_limit",
       {c.bytes_reservable_limit, v(s.bytes_reservable_limit)}},
      {"largest_free_block_bytes",
       {c.largest_free_block_bytes, s.largest_free_block_bytes}},
      {"pool_bytes", {c.pool_bytes, v(s.pool_bytes)}},
      {"peak_pool_bytes", {c.peak_pool_bytes, v(s.peak_pool_bytes)}},
      {"num_invalid_frees", {c.num_invalid_frees, s.num_invalid_frees}},
      {"num_invalid_requests",
       {c.num_invalid_requests, s.num_invalid_requests}},
      {"num_ooms", {c.num_ooms, s.num_ooms}},
      {"num_extends", {c.num_extends, s.num_extends}},
      {"num_regions_released",
       {c.num_regions_released, s.num_regions_released}},
      {"num_sub_allocator_rejects",
       {c.num_sub_allocator_rejects, s.num_sub_allocator_rejects}},
      {"num_retries", {c.num_retries, s.num_retries}},
      {"bytes_requested_in_use",
       {c.bytes_requested_in_use, s.bytes_requested_in_use}},
  };
  bool same = c.fragmentation == s.fragmentation;
  if (!same) {
    *diff += "fragmentation: C " + std::to_string(c.fragmentation) +
             " vs C++ " + std::to_string(s.fragmentation) + "\n";
  }
  for (const auto& [name, values] : fields) {
    if (values.first != values.second) {
      same = false;
      *diff += std::string(name) + ": C " + std::to_string(values.first) +
               " vs C++ " + std::to_string(values.second) + "\n";
    }
  }
  return same;
}

TEST_F(CApiTest, StatsAgreeWithTheCppAllocator) {
  // The same requests through the C ABI and through a bfc::Allocator built
  // the way the library builds its virtual backend: every field must match.
  Configure(
      "backend:virtual,memory_limit:64MiB,garbage_collection:true,"
      "fragmentation_fraction:0.05,allow_retry_on_failure:false");
  bfc::Allocator::Options opts;
  opts.garbage_collection = true;
  opts.fragmentation_fraction = 0.05;
  opts.allow_retry_on_failure = false;
  bfc::Allocator cpp(std::make_unique<bfc::VirtualSubAllocator>(64 << 20),
                     64 << 20, "reference", opts);

  std::vector<void*> c_live, cpp_live;
  auto check = [&](const char* when) {
    std::string diff;
    EXPECT_TRUE(SameStats(Stats(0), *cpp.GetStats(), &diff)) << when << "\n"
                                                             << diff;
  };
  for (int i = 0; i < 200; ++i) {
    const size_t size = 1 + (i * 48271u) % (1 << 20);
    void* c = lib_.malloc(size, 0, kNoStream);
    void* r = cpp.AllocateRaw(bfc::kMinAllocationSize, size);
    ASSERT_EQ(c == nullptr, r == nullptr) << i;
    if (c != nullptr) {
      c_live.push_back(c);
      cpp_live.push_back(r);
    }
    if (i % 3 == 0 && !c_live.empty()) {
      lib_.free(c_live.front(), 0, 0, kNoStream);
      cpp.DeallocateRaw(cpp_live.front());
      c_live.erase(c_live.begin());
      cpp_live.erase(cpp_live.begin());
    }
  }
  check("after the mixed sequence");
  // An out-of-memory request and an invalid free count on both sides.
  EXPECT_EQ(lib_.malloc(size_t{1} << 30, 0, kNoStream), nullptr);
  EXPECT_THAT(LastError(), HasSubstr("bfc_malloc(1073741824 bytes, device 0)"));
  EXPECT_EQ(cpp.AllocateRaw(bfc::kMinAllocationSize, size_t{1} << 30), nullptr);
  int local = 0;
  lib_.free(&local, 4, 0, kNoStream);
  cpp.DeallocateRaw(&local);
  check("after an OOM and an invalid free");

  const int64_t allocs_before = Stats(0).num_allocs;
  EXPECT_EQ(lib_.reset_peak_stats(0), 0);
  cpp.ResetPeakStats();
  check("after reset_peak_stats / ResetPeakStats");
  EXPECT_EQ(Stats(0).peak_bytes_in_use, Stats(0).bytes_in_use);
  EXPECT_EQ(Stats(0).num_allocs, allocs_before);  // counters are kept

  for (size_t k = 0; k < c_live.size(); ++k) {
    lib_.cupy_free(nullptr, c_live[k], 0);
    cpp.DeallocateRaw(cpp_live[k]);
  }
  EXPECT_EQ(lib_.empty_cache(0), cpp.ReleaseFreeRegions());
  check("after everything is freed and the cache emptied");
  EXPECT_EQ(Stats(0).pool_bytes, 0);
}

TEST_F(CApiTest, EmptyCacheReleasesFreeRegions) {
  Configure("backend:host,memory_limit:256MiB");
  // An unused device releases nothing and is not created.
  EXPECT_EQ(lib_.empty_cache(3), 0u);
  void* p = lib_.malloc(5 << 20, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  EXPECT_EQ(lib_.empty_cache(0), 0u);  // in use: nothing to release
  lib_.free(p, 5 << 20, 0, kNoStream);
  const int64_t pool = Stats(0).pool_bytes;
  EXPECT_GT(pool, 0);
  EXPECT_EQ(lib_.empty_cache(0), static_cast<size_t>(pool));
  EXPECT_EQ(Stats(0).pool_bytes, 0);

  // PyTorch's reset_fn form empties every device.
  void* a = lib_.malloc(1024, 0, kNoStream);
  void* b = lib_.cupy_malloc(nullptr, 1024, 2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  lib_.free(a, 1024, 0, kNoStream);
  lib_.cupy_free(nullptr, b, 2);
  lib_.empty_cache_all();
  EXPECT_EQ(Stats(0).pool_bytes, 0);
  EXPECT_EQ(Stats(2).pool_bytes, 0);
}

TEST_F(CApiTest, MemoryLimitIsEnforcedAndReported) {
  Configure("backend:virtual,memory_limit:1MiB,allow_growth:false");
  void* p = lib_.malloc(2 << 20, 0, kNoStream);
  EXPECT_EQ(p, nullptr);
  EXPECT_THAT(LastError(), HasSubstr("bfc_malloc(2097152 bytes, device 0)"));
  EXPECT_EQ(Stats(0).num_ooms, 1);
  EXPECT_EQ(Stats(0).bytes_limit, 1 << 20);
}

TEST_F(CApiTest, ConfigurationValuesAreParsed) {
  Configure(" backend : host , memory_limit: 1.5GiB ,garbage_collection:true");
  EXPECT_EQ(Stats(0).bytes_limit, int64_t{3} << 29);
  Configure("backend:virtual,memory_limit:8GB");
  EXPECT_EQ(Stats(0).bytes_limit, int64_t{8000000000});
  Configure("backend:virtual,memory_limit:4096");
  EXPECT_EQ(Stats(0).bytes_limit, 4096);
  Configure("backend:virtual,memory_fraction:0.5");  // of a nominal 64 GiB
  EXPECT_EQ(Stats(0).bytes_limit, int64_t{32} << 30);
  Configure("backend:virtual");
  EXPECT_EQ(Stats(0).bytes_limit, int64_t{64} << 30);
  Configure("backend:host");
  const int64_t physical =
      int64_t{sysconf(_SC_PHYS_PAGES)} * int64_t{sysconf(_SC_PAGESIZE)};
  EXPECT_EQ(Stats(0).bytes_limit, physical);
  Configure(
      "backend:virtual,allow_growth:false,allow_retry_on_failure:false,"
      "abort_on_invalid_input:false,retry_timeout:250ms,max_oom_logs:0,"
      "fragmentation_fraction:1,memory_limit:16MiB,");
  // allow_growth:false: the first allocation takes the whole limit.
  void* p = lib_.malloc(256, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  EXPECT_EQ(Stats(0).pool_bytes, 16 << 20);
  lib_.free(p, 256, 0, kNoStream);
}

struct BadConf {
  const char* conf;
  std::vector<const char*> message;  // substrings of the one message
};

TEST_F(CApiTest, BadConfigurationsFailCleanlyWithTheDocumentedMessage) {
  const BadConf cases[] = {
      {"allow_growth:maybe",
       {"bad value \"maybe\" for allow_growth",
        "accepted values: true, false"}},
      {"backend:gpu",
       {"bad value \"gpu\" for backend",
        "accepted values: cuda (or native), host, virtual"}},
      {"backend:host,garbage_collection:2",
       {"for garbage_collection", "true, false, 1, 0"}},
      {"memory_limit:8XB", {"for memory_limit", "GiB"}},
      {"memory_limit:0", {"for memory_limit", "a byte count of at least 256"}},
      {"memory_limit:255", {"for memory_limit", "at least 256"}},
      {"memory_limit:1.5", {"for memory_limit", "at least 256"}},
      {"memory_fraction:1.5", {"for memory_fraction", "(0, 1]"}},
      {"memory_fraction:0", {"for memory_fraction", "(0, 1]"}},
      {"fragmentation_fraction:-0.1", {"for fragmentation_fraction", "[0, 1]"}},
      {"retry_timeout:soon", {"for retry_timeout", "10s, 500ms"}},
      {"max_oom_logs:-1", {"for max_oom_logs", "an integer >= 0"}},
      {"allow_growth", {"\"allow_growth\" is not key:value", "accepted keys"}},
      {"memory_limit:1GiB,memory_fraction:0.5",
       {"memory_limit and memory_fraction", "at most one"}},
      {"backend:host,backend:virtual", {"key backend is given more than once"}},
  };
  for (const BadConf& c : cases) {
    SCOPED_TRACE(c.conf);
    ::testing::internal::CaptureStderr();
    Configure(c.conf);
    EXPECT_EQ(lib_.malloc(1024, 0, kNoStream), nullptr);
    const std::string first = LastError();
    EXPECT_THAT(first, HasSubstr("BFC_ALLOC_CONF: "));
    for (const char* part : c.message) EXPECT_THAT(first, HasSubstr(part));
    // Every later call fails the same way; the message is printed once.
    EXPECT_EQ(lib_.cupy_malloc(nullptr, 1024, 1), nullptr);
    EXPECT_THAT(LastError(), HasSubstr(c.message[0]));
    bfc_stats s;
    EXPECT_EQ(lib_.get_stats(0, &s), -1);
    EXPECT_EQ(lib_.reset_peak_stats(0), -1);
    EXPECT_EQ(lib_.empty_cache(0), 0u);
    EXPECT_THAT(LastError(), HasSubstr(c.message[0]));
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::string::size_type at = err.find(c.message[0]);
    EXPECT_NE(at, std::string::npos) << err;
    EXPECT_EQ(err.find(c.message[0], at + 1), std::string::npos)
        << "printed more than once:\n"
        << err;
  }
}

// The snapshot calls from C (the sanitizer builds run this; Python's ctypes
// cannot load an instrumented .so, so pytorch_snapshot_test checks the
// file's contents there only in the plain build): a pickle framed as
// protocol 4, with the history's actions in it; -1 with a message for a NULL
// path, an unused device or an unwritable path, and an earlier file whole.
// The virtual backend coalesces, so its growing region is "segment_map"ped.
TEST_F(CApiTest, HistoryAndSnapshotFromC) {
  Configure("backend:virtual,memory_limit:64MiB");
  ASSERT_EQ(lib_.record_memory_history(0, 1000), 0) << LastError();
  void* a = lib_.malloc(1000, 0, kNoStream);
  void* b = lib_.malloc(3 << 20, 0, kNoStream);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  lib_.free(b, 0, 0, kNoStream);
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/c_api_snapshot.pickle";
  ASSERT_EQ(lib_.dump_snapshot(0, path.c_str()), 0) << LastError();
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 4u);
  EXPECT_EQ(bytes.substr(0, 2), std::string("\x80\x04", 2));
  EXPECT_EQ(bytes.back(), '.');
  for (const char* key :
       {"segments", "device_traces", "segment_map", "alloc", "free_requested",
        "free_completed", "active_allocated"}) {
    EXPECT_NE(bytes.find(key), std::string::npos) << key;
  }
  EXPECT_EQ(lib_.dump_snapshot(0, nullptr), -1);
  EXPECT_THAT(LastError(), HasSubstr("NULL"));
  EXPECT_EQ(lib_.dump_snapshot(7, path.c_str()), -1);
  EXPECT_THAT(LastError(), HasSubstr("no allocator yet"));
  EXPECT_EQ(lib_.dump_snapshot(0, (dir + "/no/such/dir/x").c_str()), -1);
  EXPECT_THAT(LastError(), HasSubstr("no/such/dir"));
  std::ifstream again(path, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(again)),
                        std::istreambuf_iterator<char>()),
            bytes);
  EXPECT_EQ(lib_.record_memory_history(-1, 10), -1);

  // What is not a plain file is never replaced (this test may run as root):
  // a FIFO is written to in place, and fails at once without a reader; a
  // symlink is written through, its target replaced, the link kept.
  const std::string fifo = dir + "/c_api_snapshot.fifo";
  (void)unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(lib_.dump_snapshot(0, fifo.c_str()), -1);
  EXPECT_THAT(LastError(), HasSubstr("cannot open for writing"));
  struct stat st;
  ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced";
  const std::string link = dir + "/c_api_snapshot.link";
  (void)unlink(link.c_str());
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  ASSERT_EQ(lib_.dump_snapshot(0, link.c_str()), 0) << LastError();
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the symlink was replaced";
  (void)unlink(fifo.c_str());
  (void)unlink(link.c_str());
  lib_.free(a, 0, 0, kNoStream);
}

// What a PyTorch user copies from PYTORCH_CUDA_ALLOC_CONF, and typos: each
// key bfc does not take is said once, at first use, and the rest of the
// configuration applies -- allocations work.
TEST_F(CApiTest, KeysGivenForNothingAreSaidOnceAndAllocationsWork) {
  ::testing::internal::CaptureStderr();
  Configure(
      "backend:host,memory_limt:64MiB,roundup_power2_divisions:4,"
      "garbage_collection:True,expandable_segments:False,colour:blue");
  void* p = lib_.malloc(1024, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  void* q = lib_.malloc(1 << 20, 0, kNoStream);
  ASSERT_NE(q, nullptr) << LastError();
  lib_.free(p, 1024, 0, kNoStream);
  lib_.free(q, 1 << 20, 0, kNoStream);
  const std::string warnings = lib_.config_warnings();
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (const char* part :
       {"unknown key \"memory_limt\" (did you mean memory_limit?) (accepted "
        "keys: backend,",
        "roundup_power2_divisions is a PyTorch allocator setting that bfc "
        "does not take: ",
        "there is no rounding option (ignored)",
        "unknown key \"colour\" (accepted keys: backend,"}) {
    EXPECT_THAT(warnings, HasSubstr(part));
    const std::string::size_type at = err.find(part);
    EXPECT_NE(at, std::string::npos) << err;
    EXPECT_EQ(err.find(part, at + 1), std::string::npos)
        << "printed more than once:\n"
        << err;
  }
  // expandable_segments:False is PyTorch's default: nothing to say.
  EXPECT_THAT(warnings, Not(HasSubstr("expandable_segments")));
  // Three lines: garbage_collection:True is a boolean (PyTorch's spelling),
  // not a key given for nothing.
  EXPECT_EQ(std::count(warnings.begin(), warnings.end(), '\n'), 2) << warnings;
  // The host backend and its default limit were used, not a failure.
  EXPECT_EQ(Stats(0).bytes_in_use, 0);

  Configure("backend:host");
  EXPECT_STREQ(lib_.config_warnings(), "");
}

TEST_F(CApiTest, CudaBackendWithoutAGpuFailsCleanly) {
#ifdef BFC_HAVE_CUDA
  if (bfc::CudaDeviceCount() > 0) {
    // With a driver and a device the default backend must work.
    Configure("");
    void* p = lib_.malloc(1 << 20, 0, kNoStream);
    ASSERT_NE(p, nullptr) << LastError();
    lib_.free(p, 1 << 20, 0, kNoStream);
    EXPECT_EQ(Stats(0).bytes_in_use, 0);
    return;
  }
  const char* why = "no usable CUDA device";
#else
  const char* why = "built without CUDA";
#endif
  for (const char* conf : {"", "backend:cuda,memory_fraction:0.9"}) {
    SCOPED_TRACE(conf);
    Configure(conf);
    EXPECT_EQ(lib_.malloc(1024, 0, kNoStream), nullptr);
    EXPECT_THAT(LastError(), HasSubstr("backend cuda: "));
    EXPECT_THAT(LastError(), HasSubstr(why));
    EXPECT_THAT(LastError(), HasSubstr("backend:host"));
    // Sticky and cheap: the same answer again, and no crash.
    EXPECT_EQ(lib_.cupy_malloc(nullptr, 1024, 0), nullptr);
    EXPECT_THAT(LastError(), HasSubstr(why));
    bfc_stats s;
    EXPECT_EQ(lib_.get_stats(0, &s), -1);
    lib_.free(nullptr, 0, 0, kNoStream);  // a no-op
  }
}

TEST_F(CApiTest, CallerMistakesAreReportedNotFatal) {
  Configure("backend:host,memory_limit:64MiB");
  EXPECT_EQ(lib_.malloc(1024, -1, kNoStream), nullptr);
  EXPECT_THAT(LastError(), HasSubstr("device -1 is out of range [0, 64)"));
  EXPECT_EQ(lib_.malloc(1024, BFC_MAX_DEVICES, kNoStream), nullptr);
  EXPECT_THAT(LastError(), HasSubstr("device 64 is out of range"));
  int local = 0;
  lib_.free(&local, 4, 5, kNoStream);  // device 5 never used
  EXPECT_THAT(LastError(),
              HasSubstr("no allocation was ever made on this device"));
  EXPECT_EQ(lib_.get_stats(0, nullptr), -1);
  EXPECT_THAT(LastError(), HasSubstr("out is NULL"));

  // size 0: NULL, not an error.
  const std::string before = LastError();
  EXPECT_EQ(lib_.malloc(0, 0, kNoStream), nullptr);
  EXPECT_EQ(LastError(), before);

  // Double free: reported and counted, state untouched.
  void* p = lib_.malloc(512, 0, kNoStream);
  ASSERT_NE(p, nullptr);
  lib_.free(p, 512, 0, kNoStream);
  lib_.free(p, 512, 0, kNoStream);
  EXPECT_THAT(LastError(), HasSubstr("bfc_free("));
  EXPECT_EQ(Stats(0).num_invalid_frees, 1);
  EXPECT_EQ(Stats(0).bytes_in_use, 0);
}

TEST_F(CApiTest, LastErrorIsPerThread) {
  Configure("backend:host,memory_limit:64MiB");
  EXPECT_EQ(lib_.malloc(1, -7, kNoStream), nullptr);
  std::string other;
  std::thread([&] { other = lib_.last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_THAT(LastError(), HasSubstr("device -7"));
}

// --- every BFC_ALLOC_CONF key changes what a caller sees --------------------

// Runs `body` in a forked child (stderr silenced) and says how it ended:
// "aborted" (SIGABRT), "returned" (it came back), or what else happened.
std::string HowAChildEnds(const std::function<void()>& body) {
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 2);
    body();
    _exit(0);
  }
  if (pid < 0) return "fork failed";
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return "waitpid failed";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) return "aborted";
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "returned";
  return "ended with status " + std::to_string(status);
}

// One row per key: the key given (`with`) and the same configuration without
// it (`without`, the key's default), and a scenario whose outcome differs.
struct KeyCase {
  const char* key;
  const char* with;
  const char* without;
  std::function<std::string()> observe;  // run after Configure
  const char* expected_with;
  const char* expected_without;
};

class CApiKeyTest : public CApiTest {
 protected:
  static std::string Limit() {
    bfc_stats s;
    if (lib_.get_stats(0, &s) != 0) return "no allocator";
    return "limit " + std::to_string(s.bytes_limit);
  }
  static std::string NullOr(void* p, const char* yes) {
    return p == nullptr ? "NULL" : yes;
  }
  // A 4 MiB pool, 3 MiB of it held; then 3 MiB more is asked for while
  // another thread frees the hog after `free_after` (never if negative).
  static std::string AskWhileHeld(std::chrono::milliseconds free_after) {
    void* hog = lib_.malloc(3 << 20, 0, kNoStream);
    if (hog == nullptr) return "hog failed: " + LastError();
    std::thread freer;
    if (free_after.count() >= 0) {
      freer = std::thread([hog, free_after] {
        std::this_thread::sleep_for(free_after);
        lib_.free(hog, 3 << 20, 0, kNoStream);
      });
    }
    void* p = lib_.malloc(3 << 20, 0, kNoStream);
    if (freer.joinable()) {
      freer.join();
    } else {
      lib_.free(hog, 3 << 20, 0, kNoStream);
    }
    if (p != nullptr) lib_.free(p, 3 << 20, 0, kNoStream);
    return NullOr(p, "allocated");
  }
  // The same pool, 3 MiB held, a 2 MiB request that fails; what stderr got.
  static std::string OomLog() {
    void* hog = lib_.malloc(3 << 20, 0, kNoStream);
    if (hog == nullptr) return "hog failed: " + LastError();
    ::testing::internal::CaptureStderr();
    void* p = lib_.malloc(2 << 20, 0, kNoStream);
    const std::string err = ::testing::internal::GetCapturedStderr();
    lib_.free(hog, 3 << 20, 0, kNoStream);
    if (p != nullptr) return "allocated";
    return err;
  }
  static std::vector<KeyCase> KeyCases();
  // The pool after one 256-byte allocation (freed again).
  static std::string PoolAfter256();
};

std::string CApiKeyTest::PoolAfter256() {
  void* p = lib_.malloc(256, 0, kNoStream);
  bfc_stats s;
  lib_.get_stats(0, &s);
  lib_.free(p, 0, 0, kNoStream);
  return "pool " + std::to_string(s.pool_bytes);
}

std::vector<KeyCase> CApiKeyTest::KeyCases() {
  using std::chrono::milliseconds;
  const std::string k64GiB = std::to_string(int64_t{64} << 30);
  return {
      // Default backend cuda: no allocator on a machine without a GPU; a
      // limit that is the device's free memory (not 64 GiB) with one.
      {"backend", "backend:virtual", "", Limit, "limit 68719476736", nullptr},
      {"memory_limit", "backend:virtual,memory_limit:1MiB", "backend:virtual",
       Limit, "limit 1048576", "limit 68719476736"},
      {"memory_fraction", "backend:virtual,memory_fraction:0.25",
       "backend:virtual", Limit, "limit 17179869184", "limit 68719476736"},
      // Growth starts at 2 MiB; without it the first region is the limit.
      {"allow_growth", "backend:virtual,memory_limit:16MiB,allow_growth:false",
       "backend:virtual,memory_limit:16MiB",
       [] {
         void* p = lib_.malloc(256, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(p, 256, 0, kNoStream);
         return "pool " + std::to_string(s.pool_bytes);
       },
       "pool 16777216", "pool 2097152"},
      // Without retrying the request fails at once (no thread frees); with
      // it (the default) it waits for the free another thread makes.
      {"allow_retry_on_failure",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,"
       "allow_retry_on_failure:false,max_oom_logs:0",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,max_oom_logs:0",
       [] { return AskWhileHeld(milliseconds(500)); }, "NULL", "allocated"},
      {"retry_timeout",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,max_oom_logs:0,"
       "retry_timeout:0s",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,max_oom_logs:0",
       [] { return AskWhileHeld(milliseconds(500)); }, "NULL", "allocated"},
      // 2 MiB then 4 MiB regions fill 6 of 8 MiB; with the 2 MiB one free, a
      // second 4 MiB fits only once that region is given back. (Host regions
      // never merge; the virtual backend's contiguous ones would.)
      {"garbage_collection",
       "backend:host,memory_limit:8MiB,allow_retry_on_failure:false,"
       "max_oom_logs:0,garbage_collection:true",
       "backend:host,memory_limit:8MiB,allow_retry_on_failure:false,"
       "max_oom_logs:0",
       [] {
         void* a = lib_.malloc(2 << 20, 0, kNoStream);
         void* b = lib_.malloc(4 << 20, 0, kNoStream);
         lib_.free(a, 2 << 20, 0, kNoStream);
         void* c = lib_.malloc(4 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(b, 4 << 20, 0, kNoStream);
         lib_.free(c, 4 << 20, 0, kNoStream);
         return NullOr(c, "allocated") + ", released " +
                std::to_string(s.num_regions_released);
       },
       "allocated, released 1", "NULL, released 0"},
      // A 40 MiB request in a 64 MiB region leaves 24 MiB: kept whole under
      // TF's 128 MiB cap, split off under a cap of a quarter of the limit.
      {"fragmentation_fraction",
       "backend:virtual,memory_limit:64MiB,allow_growth:false,"
       "fragmentation_fraction:0.25",
       "backend:virtual,memory_limit:64MiB,allow_growth:false",
       [] {
         void* p = lib_.malloc(40 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(p, 40 << 20, 0, kNoStream);
         return "in use " + std::to_string(s.bytes_in_use);
       },
       "in use 41943040", "in use 67108864"},
      // The first region: 2 MiB (TF) or exactly the 256-byte request.
      {"growth_policy",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested",
       "backend:host,memory_limit:64MiB", PoolAfter256, "pool 256",
       "pool 2097152"},
      // low_footprint's regions are what is missing (2 MiB for requests up
      // to 1 MiB): the 3 MiB request gets 3 MiB, not the 4 MiB TF doubles
      // to.
      {"preset", "backend:host,memory_limit:64MiB,preset:low_footprint",
       "backend:host,memory_limit:64MiB,preset:tf",
       [] {
         void* a = lib_.malloc(3 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(a, 0, 0, kNoStream);
         return "pool " + std::to_string(s.pool_bytes);
       },
       "pool 3145728", "pool 4194304"},
      {"initial_region_bytes",
       "backend:host,memory_limit:64MiB,initial_region_bytes:1MiB",
       "backend:host,memory_limit:64MiB", PoolAfter256, "pool 1048576",
       "pool 2097152"},
      // 2 MiB, then a region that doubled to 4 MiB -- or only 1 MiB under a
      // 1 MiB cap (the 1 MiB request still fits).
      {"max_growth_step_bytes",
       "backend:host,memory_limit:64MiB,max_growth_step_bytes:1MiB",
       "backend:host,memory_limit:64MiB",
       [] {
         void* a = lib_.malloc(2 << 20, 0, kNoStream);
         void* b = lib_.malloc(1 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(a, 0, 0, kNoStream);
         lib_.free(b, 0, 0, kNoStream);
         return "pool " + std::to_string(s.pool_bytes);
       },
       "pool 3145728", "pool 6291456"},
      {"min_growth_step_bytes",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested,"
       "min_growth_step_bytes:1MiB",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested",
       PoolAfter256, "pool 1048576", "pool 256"},
      // A 1.5 MiB request under a 2 MiB floor: raised to the floor, or, above
      // a 1 MiB bound on the requests it applies to, a region of its size.
      {"min_growth_step_max_request_bytes",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested,"
       "min_growth_step_bytes:2MiB,min_growth_step_max_request_bytes:1MiB",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested,"
       "min_growth_step_bytes:2MiB",
       [] {
         void* a = lib_.malloc(3 << 19, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(a, 0, 0, kNoStream);
         return "pool " + std::to_string(s.pool_bytes);
       },
       "pool 1572864", "pool 2097152"},
      // A fully free 2 MiB region does not fit 3 MiB: given back before the
      // pool grows, or kept.
      {"release_before_extend",
       "backend:host,memory_limit:64MiB,release_before_extend:true",
       "backend:host,memory_limit:64MiB",
       [] {
         void* a = lib_.malloc(2 << 20, 0, kNoStream);
         void* b = lib_.malloc(4 << 20, 0, kNoStream);
         lib_.free(a, 0, 0, kNoStream);
         void* c = lib_.malloc(3 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(b, 0, 0, kNoStream);
         lib_.free(c, 0, 0, kNoStream);
         return "released " + std::to_string(s.num_regions_released);
       },
       "released 1", "released 0"},
      // A huge allocation's region goes back when it is freed.
      {"huge_allocation_bytes",
       "backend:host,memory_limit:64MiB,huge_allocation_bytes:1MiB",
       "backend:host,memory_limit:64MiB",
       [] {
         void* p = lib_.malloc(4 << 20, 0, kNoStream);
         lib_.free(p, 0, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         return NullOr(p, "allocated") + ", pool " +
                std::to_string(s.pool_bytes);
       },
       "allocated, pool 0", "allocated, pool 4194304"},
      // 40 MiB in a 64 MiB region: TF keeps the 24 MiB rest in the chunk;
      // any rest of 256 bytes or more is split off.
      {"min_split_remainder_bytes",
       "backend:virtual,memory_limit:64MiB,allow_growth:false,"
       "min_split_remainder_bytes:256",
       "backend:virtual,memory_limit:64MiB,allow_growth:false",
       [] {
         void* p = lib_.malloc(40 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(p, 0, 0, kNoStream);
         return "in use " + std::to_string(s.bytes_in_use);
       },
       "in use 41943040", "in use 67108864"},
      // A freed 4 MiB region is at least max_split_bytes: a 256-byte request
      // does not take it but grows a region below the bound (1 MiB less
      // 256 bytes) -- or is carved from it.
      {"max_split_bytes",
       "backend:host,memory_limit:64MiB,max_split_bytes:1MiB",
       "backend:host,memory_limit:64MiB",
       [] {
         void* a = lib_.malloc(4 << 20, 0, kNoStream);
         lib_.free(a, 0, 0, kNoStream);
         return PoolAfter256();
       },
       "pool 5242624", "pool 4194304"},
      // 8 MiB free in a pool 2 MiB under its peak: 1 MiB gets a region of
      // its own (growing within the peak), or is carved from the 8 MiB.
      {"grow_below_peak_ratio",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested,"
       "grow_below_peak_ratio:4",
       "backend:host,memory_limit:64MiB,growth_policy:same_as_requested",
       [] {
         void* a = lib_.malloc(8 << 20, 0, kNoStream);
         void* c = lib_.malloc(2 << 20, 0, kNoStream);
         lib_.free(c, 0, 0, kNoStream);
         lib_.empty_cache(0);  // the pool is 2 MiB under its peak
         lib_.free(a, 0, 0, kNoStream);
         void* b = lib_.malloc(1 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(b, 0, 0, kNoStream);
         return NullOr(b, "allocated") + ", pool " +
                std::to_string(s.pool_bytes);
       },
       "allocated, pool 9437184", "allocated, pool 8388608"},
      // 2 MiB held and freed, then 3 MiB: the pool would pass half of the
      // 8 MiB limit, so the free region goes back first.
      {"pool_release_threshold",
       "backend:host,memory_limit:8MiB,pool_release_threshold:0.5",
       "backend:host,memory_limit:8MiB",
       [] {
         void* a = lib_.malloc(2 << 20, 0, kNoStream);
         lib_.free(a, 0, 0, kNoStream);
         void* b = lib_.malloc(3 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(b, 0, 0, kNoStream);
         return NullOr(b, "allocated") + ", released " +
                std::to_string(s.num_regions_released);
       },
       "allocated, released 1", "allocated, released 0"},
      // 1 MiB free at the end of the (coalescing) pool: 3 MiB needs only
      // 2 MiB more, appended to it.
      {"extend_by_missing_tail",
       "backend:virtual,memory_limit:64MiB,growth_policy:same_as_requested,"
       "extend_by_missing_tail:true",
       "backend:virtual,memory_limit:64MiB,growth_policy:same_as_requested",
       [] {
         void* a = lib_.malloc(1 << 20, 0, kNoStream);
         lib_.free(a, 0, 0, kNoStream);
         void* b = lib_.malloc(3 << 20, 0, kNoStream);
         bfc_stats s;
         lib_.get_stats(0, &s);
         lib_.free(b, 0, 0, kNoStream);
         return "pool " + std::to_string(s.pool_bytes);
       },
       "pool 3145728", "pool 4194304"},
      {"abort_on_invalid_input",
       "backend:host,memory_limit:64MiB,abort_on_invalid_input:true",
       "backend:host,memory_limit:64MiB",
       [] {
         return HowAChildEnds([] {
           void* p = lib_.malloc(1024, 0, kNoStream);
           lib_.free(p, 1024, 0, kNoStream);
           lib_.free(p, 1024, 0, kNoStream);  // double free
         });
       },
       "aborted", "returned"},
      {"max_oom_logs",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,"
       "allow_retry_on_failure:false,max_oom_logs:0",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,"
       "allow_retry_on_failure:false",
       [] {
         return OomLog().find("bfc_virtual_0") == std::string::npos ? "silent"
                                                                    : "logged";
       },
       "silent", "logged"},
      // The OOM report lists the live allocations; without sites it says
      // how to get them.
      {"record_allocation_sites",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,"
       "allow_retry_on_failure:false,record_allocation_sites:true",
       "backend:virtual,memory_limit:4MiB,allow_growth:false,"
       "allow_retry_on_failure:false",
       [] {
         const std::string log = OomLog();
         if (log.find("bfc_virtual_0") == std::string::npos) return "no log";
         return log.find("record_allocation_sites to") == std::string::npos
                    ? "no hint"
                    : "hint";
       },
       "no hint", "hint"},
  };
}

TEST_F(CApiKeyTest, EveryConfigurationKeyChangesWhatACallerSees) {
  std::set<std::string> covered;
  for (const KeyCase& c : KeyCases()) {
    SCOPED_TRACE(c.key);
    covered.insert(c.key);
    Configure(c.with);
    const std::string with = c.observe();
    Configure(c.without);
    const std::string without = c.observe();
    EXPECT_EQ(with, c.expected_with) << c.with;
    if (c.expected_without != nullptr) {
      EXPECT_EQ(without, c.expected_without) << c.without;
    }
    EXPECT_NE(with, without);
  }
  // A key added to the grammar needs a row here.
  std::set<std::string> keys = {"preset", "backend", "memory_limit",
                                "memory_fraction"};
  for (const bfc::OptionField& f : bfc::AllocatorOptionFields()) {
    keys.insert(std::string(f.name));
  }
  // The stream-reuse keys act only with backend:cuda (the other backends
  // ignore streams): their cases are in tests/c_api_cuda_host.c, on the fake
  // driver's held streams (each key changes which blocks a second stream
  // gets and how many waits are inserted).
  // release_partial_regions acts only over backend:vmm (a sub-allocator
  // that frees parts of regions): its case is there too, on the fake
  // driver's virtual memory.
  for (const char* k :
       {"reuse_follow_dependencies", "reuse_allow_opportunistic",
        "reuse_allow_internal_dependencies", "release_partial_regions"}) {
    keys.erase(k);
  }
  EXPECT_EQ(covered, keys);
}

// abort_on_invalid_input: every invalid free or request through the C ABI
// ends the process with the reason on stderr; without it the same calls
// report and return. Out of memory, size 0 and NULL are not invalid.
TEST_F(CApiTest, AbortOnInvalidInputAbortsOnEveryInvalidFreeAndRequest) {
  static int local = 0;
  const std::vector<std::pair<const char*, std::function<void()>>> mistakes = {
      {"double free",
       [] {
         void* p = lib_.malloc(1024, 0, kNoStream);
         lib_.free(p, 1024, 0, kNoStream);
         lib_.free(p, 1024, 0, kNoStream);
       }},
      {"foreign pointer",
       [] {
         void* p = lib_.malloc(1024, 0, kNoStream);
         lib_.cupy_free(nullptr, &local, 0);
         lib_.free(p, 1024, 0, kNoStream);
       }},
      {"device never used", [] { lib_.free(&local, 4, 5, kNoStream); }},
      {"device out of range", [] { lib_.malloc(1024, -1, kNoStream); }},
      {"size that overflows", [] { lib_.cupy_malloc(nullptr, SIZE_MAX, 0); }},
  };
  for (const auto& [what, call] : mistakes) {
    SCOPED_TRACE(what);
    Configure("backend:host,memory_limit:64MiB,abort_on_invalid_input:true");
    EXPECT_EQ(HowAChildEnds(call), "aborted");
    Configure("backend:host,memory_limit:64MiB,abort_on_invalid_input:false");
    EXPECT_EQ(HowAChildEnds(call), "returned");
    Configure("backend:host,memory_limit:64MiB");
    EXPECT_EQ(HowAChildEnds(call), "returned");
  }
  // The reason is printed before the abort.
  Configure("backend:host,memory_limit:64MiB,abort_on_invalid_input:true");
  EXPECT_DEATH(lib_.free(&local, 4, 0, kNoStream),
               "bfc_free.*device 0.*abort_on_invalid_input");
  // Not invalid input: no abort.
  Configure(
      "backend:virtual,memory_limit:1MiB,allow_retry_on_failure:false,"
      "abort_on_invalid_input:true,max_oom_logs:0");
  EXPECT_EQ(HowAChildEnds([] {
              lib_.malloc(0, 0, kNoStream);
              lib_.free(nullptr, 0, 0, kNoStream);
              lib_.malloc(2 << 20, 0, kNoStream);  // out of memory
              // NULL is never invalid input (record_stream aborted on it).
              lib_.record_stream(nullptr, 0, kNoStream);
            }),
            "returned");
  // A configuration whose limit works out to 0 bytes fails every call but
  // is not the caller's mistake (a review: it aborted).
  Configure("backend:host,memory_fraction:1e-30,abort_on_invalid_input:true");
  EXPECT_EQ(HowAChildEnds([] {
              if (lib_.malloc(1, 0, kNoStream) != nullptr) std::abort();
            }),
            "returned");
  EXPECT_EQ(lib_.malloc(1, 0, kNoStream), nullptr);
  EXPECT_THAT(LastError(), HasSubstr("works out to 0 bytes"));
}

// A backend that can never hand out memory fails the call at once, with the
// reason, not after the retry timeout (20 s here) as "out of memory".
TEST_F(CApiTest, ABackendThatCannotReserveFailsFastWithTheCause) {
  struct Case {
    const char* conf;
    const char* why;
  };
#ifdef BFC_HAVE_CUDA
  const bool have_gpu = bfc::CudaDeviceCount() > 0;
#else
  const bool have_gpu = false;
#endif
  std::vector<Case> cases = {
      // More address space than x86-64 or arm64 user space has.
      {"backend:virtual,memory_limit:1000TiB,retry_timeout:20s",
       "backend virtual: cannot reserve 1000.00 TiB"},
  };
  if (!have_gpu) {
    cases.push_back({"backend:cuda,retry_timeout:20s", "backend cuda: "});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.conf);
    Configure(c.conf);
    for (int call = 0; call < 2; ++call) {
      const auto start = std::chrono::steady_clock::now();
      EXPECT_EQ(lib_.malloc(1 << 20, 0, kNoStream), nullptr);
      const auto waited = std::chrono::steady_clock::now() - start;
      EXPECT_LT(waited, std::chrono::seconds(10)) << "waited for a retry";
      EXPECT_THAT(LastError(), HasSubstr(c.why));
      EXPECT_THAT(LastError(), Not(HasSubstr("out of memory")));
    }
  }
}

// Accounts through the C ABI, as a framework uses them: one per memory
// pool, set current around the pool's use.
TEST_F(CApiTest, AccountsChargeTheCurrentThreadsAllocations) {
  Configure("backend:virtual,memory_limit:64MiB");
  constexpr int64_t kMiB = 1 << 20;
  bfc_account* root = lib_.account_create(0, nullptr, "root", 4 * kMiB, 0);
  ASSERT_NE(root, nullptr) << LastError();
  bfc_account* pool = lib_.account_create(0, root, "pool", -1, kMiB);
  ASSERT_NE(pool, nullptr) << LastError();
  EXPECT_EQ(lib_.account_create(1, root, "x", -1, 0), nullptr);  // device
  EXPECT_NE(LastError().find("device 0"), std::string::npos) << LastError();
  EXPECT_EQ(lib_.account_create(0, root, "pool", -1, 0), nullptr);  // taken
  EXPECT_EQ(lib_.account_create(0, root, nullptr, -1, 0), nullptr);
  EXPECT_EQ(lib_.account_set_current(pool), nullptr);
  void* a = lib_.malloc(3 * kMiB, 0, nullptr);
  ASSERT_NE(a, nullptr) << LastError();
  // 3 + 2 MiB in the pool: 5 MiB at the root, past its 4 MiB.
  EXPECT_EQ(lib_.malloc(2 * kMiB, 0, nullptr), nullptr);
  EXPECT_NE(LastError().find("limit of account 'root'"), std::string::npos)
      << LastError();
  // Another device is not the pool's: uncharged.
  void* other = lib_.malloc(kMiB, 1, nullptr);
  bfc_account_stats st;
  ASSERT_EQ(lib_.account_get_stats(pool, &st), 0);
  EXPECT_EQ(st.bytes_in_use, 3 * kMiB);
  EXPECT_EQ(st.failures, 1);
  EXPECT_EQ(st.limit_bytes, -1);
  EXPECT_EQ(st.reservation_bytes, kMiB);
  EXPECT_EQ(st.headroom_bytes, kMiB);
  ASSERT_EQ(lib_.account_get_stats(root, &st), 0);
  EXPECT_EQ(st.bytes_in_use, 3 * kMiB);
  EXPECT_EQ(lib_.account_get_stats(nullptr, &st), -1);
  EXPECT_EQ(lib_.account_set_current(nullptr), pool);
  void* b = lib_.malloc(kMiB, 0, nullptr);  // no account: uncharged
  ASSERT_EQ(lib_.account_get_stats(root, &st), 0);
  EXPECT_EQ(st.bytes_in_use, 3 * kMiB);
  // Open child: the root does not close. The pool closes with a leak.
  EXPECT_EQ(lib_.account_close(root), -1);
  EXPECT_EQ(lib_.account_close(pool), 1);
  EXPECT_NE(LastError().find("still charged"), std::string::npos)
      << LastError();
  // A late free (any thread, through bfc_free) still credits the chain.
  lib_.free(a, 0, 0, nullptr);
  ASSERT_EQ(lib_.account_get_stats(root, &st), 0);
  EXPECT_EQ(st.bytes_in_use, 0);
  EXPECT_EQ(lib_.account_close(pool), 0);
  EXPECT_EQ(lib_.account_close(root), 0);
  lib_.account_set_current(pool);
  lib_.account_destroy(pool);
  EXPECT_EQ(lib_.account_set_current(nullptr), nullptr);  // cleared
  lib_.account_destroy(root);
  lib_.account_destroy(nullptr);
  lib_.free(b, 0, 0, nullptr);
  if (other != nullptr) lib_.free(other, 0, 1, nullptr);
}

// From a review: an account current on one thread and destroyed by another
// was used after it was freed by the first thread's next allocation. The
// thread now holds the account: closed by the destroy, its allocations fail.
TEST_F(CApiTest, AnAccountDestroyedWhileCurrentOnAnotherThread) {
  Configure("backend:virtual,memory_limit:64MiB");
  bfc_account* root = lib_.account_create(0, nullptr, "root", -1, 0);
  ASSERT_NE(root, nullptr) << LastError();
  std::mutex mu;
  std::condition_variable cv;
  int step = 0;
  void* during = &mu;
  std::string error;
  void* after = &mu;
  std::thread worker([&] {
    lib_.account_set_current(root);
    during = lib_.malloc(4096, 0, kNoStream);
    lib_.free(during, 0, 0, kNoStream);
    {
      std::unique_lock<std::mutex> lock(mu);
      step = 1;
      cv.notify_all();
      cv.wait(lock, [&] { return step == 2; });
    }
    after = lib_.malloc(4096, 0, kNoStream);  // read the freed handle
    error = LastError();
    EXPECT_EQ(lib_.account_set_current(nullptr), root);  // only compared
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return step == 1; });
  }
  lib_.account_destroy(root);
  {
    std::lock_guard<std::mutex> lock(mu);
    step = 2;
  }
  cv.notify_all();
  worker.join();
  EXPECT_NE(during, nullptr);
  EXPECT_EQ(after, nullptr);
  EXPECT_THAT(error, HasSubstr("closed"));
  // The account is gone with the worker's reference; the device works.
  void* p = lib_.malloc(4096, 0, kNoStream);
  EXPECT_NE(p, nullptr) << LastError();
  lib_.free(p, 0, 0, kNoStream);
}

// From a review: bfc_reset_for_testing destroyed an allocator an open
// account still used; destroying the handle afterwards crashed. Such an
// allocator is now set aside instead, and the handle stays usable.
TEST_F(CApiTest, ResetForTestingLeavesAnOpenAccountUsable) {
  Configure("backend:host,memory_limit:64MiB");
  bfc_account* root = lib_.account_create(0, nullptr, "root", -1, 0);
  ASSERT_NE(root, nullptr) << LastError();
  lib_.account_set_current(root);
  void* p = lib_.malloc(1000, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  testing::internal::CaptureStderr();
  lib_.reset_for_testing();
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_THAT(said, HasSubstr("set aside"));
  // No account is current on this thread after the reset.
  EXPECT_EQ(lib_.account_set_current(nullptr), nullptr);
  bfc_account_stats st;
  ASSERT_EQ(lib_.account_get_stats(root, &st), 0);
  EXPECT_EQ(st.bytes_in_use, 1024);
  EXPECT_EQ(lib_.account_close(root), 1);  // the leak, listed
  lib_.account_destroy(root);
  // A reset with no account alive destroys the allocators, says nothing.
  void* q = lib_.malloc(1000, 0, kNoStream);
  ASSERT_NE(q, nullptr) << LastError();
  lib_.free(q, 0, 0, kNoStream);
  testing::internal::CaptureStderr();
  lib_.reset_for_testing();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

// bfc_forget_stream without stream-ordered memory: nothing to do, 0; a
// device out of range is the caller's mistake, -1.
TEST_F(CApiTest, ForgetStreamWithoutStreams) {
  Configure("backend:host,memory_limit:64MiB");
  const auto s = reinterpret_cast<bfc_stream_t>(uintptr_t{0x1234});
  EXPECT_EQ(lib_.forget_stream(0, s), 0);  // no allocator yet
  void* p = lib_.malloc(1000, 0, s);
  ASSERT_NE(p, nullptr);
  lib_.free(p, 0, 0, s);
  EXPECT_EQ(lib_.forget_stream(0, s), 0);  // host memory: no streams
  EXPECT_EQ(lib_.forget_stream(-1, s), -1);
  EXPECT_THAT(LastError(), HasSubstr("out of range"));
}

// From a review of bfc_dump_snapshot: a replaced file kept mode 0644 only
// (a private 0600 file came back world-readable) and a new one ignored the
// umask; a FIFO with a slow reader got a truncated snapshot (non-blocking
// writes failed after 64 KiB); /dev/fd/N of a pipe was refused as "a
// symlink that leads nowhere".
TEST_F(CApiTest, SnapshotFilesKeepTheirModeAndTheUmask) {
  Configure("backend:host,memory_limit:64MiB");
  void* p = lib_.malloc(1000, 0, kNoStream);
  ASSERT_NE(p, nullptr) << LastError();
  std::string dir = ::testing::TempDir() + "/c_api_mode_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string path = dir + "/private.pickle";
  {
    std::ofstream out(path);
    out << "secret";
  }
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ASSERT_EQ(lib_.dump_snapshot(0, path.c_str()), 0) << LastError();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const mode_t old = umask(077);
  const std::string fresh = dir + "/fresh.pickle";
  const int rc = lib_.dump_snapshot(0, fresh.c_str());
  umask(old);
  ASSERT_EQ(rc, 0) << LastError();
  ASSERT_EQ(stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << std::oct << (st.st_mode & 0777);
  (void)unlink(path.c_str());
  (void)unlink(fresh.c_str());
  (void)rmdir(dir.c_str());
  lib_.free(p, 0, 0, kNoStream);
}

TEST_F(CApiTest, SnapshotToAFifoWithASlowReaderIsWhole) {
  Configure("backend:host,memory_limit:64MiB");
  ASSERT_EQ(lib_.record_memory_history(0, 100000), 0) << LastError();
  for (int i = 0; i < 3000; ++i) {  // a snapshot well over 64 KiB
    void* p = lib_.malloc(1000, 0, kNoStream);
    ASSERT_NE(p, nullptr);
    lib_.free(p, 0, 0, kNoStream);
  }
  std::string dir = ::testing::TempDir() + "/c_api_fifo_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const int rfd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rfd, 0);
  ASSERT_EQ(fcntl(rfd, F_SETFL, 0), 0);  // blocking reads
  std::string got;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // slow
    char buf[65536];
    ssize_t n;
    while ((n = read(rfd, buf, sizeof buf)) > 0) got.append(buf, n);
  });
  const int rc = lib_.dump_snapshot(0, fifo.c_str());
  const std::string error = LastError();
  reader.join();
  close(rfd);
  EXPECT_EQ(rc, 0) << error;
  ASSERT_GT(got.size(), size_t{65536});
  EXPECT_EQ(got.back(), '.') << "the reader got a truncated pickle";
  (void)unlink(fifo.c_str());
  (void)rmdir(dir.c_str());
}

TEST_F(CApiTest, SnapshotToDevFdOfAPipe) {
  Configure("backend:host,memory_limit:64MiB");
  void* p = lib_.malloc(1000, 0, kNoStream);
  ASSERT_NE(p, nullptr);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string path = "/dev/fd/" + std::to_string(fds[1]);
  EXPECT_EQ(lib_.dump_snapshot(0, path.c_str()), 0) << LastError();
  char first[2] = {0, 0};
  close(fds[1]);
  EXPECT_EQ(read(fds[0], first, 2), 2);
  EXPECT_EQ(std::string(first, 2), std::string("\x80\x04", 2));
  close(fds[0]);
  lib_.free(p, 0, 0, kNoStream);
}

}  // namespace
