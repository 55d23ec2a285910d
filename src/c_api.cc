// File: src/c_api.cc
// -----------------------------------------------------------------------------
//
// libbfc_alloc.so: the C ABI in bfc/c_api.h over one bfc::Allocator per
// device. The allocators are published through atomics so that the hot path
// (bfc_malloc / bfc_free on an existing device) takes no lock of ours, only
// the allocator's own; creation, configuration and the test reset serialize on
// one mutex. Allocators are deliberately leaked (see the header).
//
// No C++ exception crosses the C boundary: every entry point runs inside
// Guarded(), which turns an escaping exception (std::bad_alloc from a string)
// into the function's failure value and a bfc_last_error() message.
#include "bfc/c_api.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/virtual_sub_allocator.h"

#ifdef BFC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "bfc/cuda_sub_allocator.h"
#endif

#ifndef BFC_VERSION_STRING
#define BFC_VERSION_STRING "0.0.0"
#endif

namespace bfc {
namespace {

constexpr char kEnvVar[] = "BFC_ALLOC_CONF";
constexpr size_t kVirtualDefaultBytes = size_t{64} << 30;

enum class Backend { kCuda, kHost, kVirtual };

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kCuda:
      return "cuda";
    case Backend::kHost:
      return "host";
    case Backend::kVirtual:
      return "virtual";
  }
  return "?";
}

struct Config {
  Backend backend = Backend::kCuda;
  Allocator::Options options;
  std::optional<size_t> memory_limit;
  std::optional<double> memory_fraction;
};

// --- BFC_ALLOC_CONF parsing ------------------------------------------------

constexpr const char* kKeys[] = {"backend",
                                 "allow_growth",
                                 "allow_retry_on_failure",
                                 "garbage_collection",
                                 "abort_on_invalid_input",
                                 "fragmentation_fraction",
                                 "retry_timeout",
                                 "max_oom_logs",
                                 "memory_limit",
                                 "memory_fraction"};

absl::Status BadValue(absl::string_view key, absl::string_view value,
                      absl::string_view accepted) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: bad value \"%s\" for %s (accepted values: %s)",
                      kEnvVar, value, key, accepted));
}

absl::StatusOr<bool> ParseBool(absl::string_view key, absl::string_view value) {
  if (value == "true") return true;
  if (value == "false") return false;
  return BadValue(key, value, "true, false");
}

// "8GiB", "512 MB", "1.5GiB", "4096": bytes (> 0, rounded down).
absl::StatusOr<size_t> ParseBytes(absl::string_view key,
                                  absl::string_view value) {
  static constexpr char kAccepted[] =
      "a byte count > 0 with an optional unit B, KB, KiB, MB, MiB, GB, GiB, "
      "TB, TiB, e.g. 8GiB";
  size_t split = 0;
  while (split < value.size() &&
         (absl::ascii_isdigit(value[split]) || value[split] == '.')) {
    ++split;
  }
  absl::string_view number = value.substr(0, split);
  std::string unit =
      absl::AsciiStrToLower(absl::StripAsciiWhitespace(value.substr(split)));
  double n = 0;
  if (number.empty() || !absl::SimpleAtod(number, &n)) {
    return BadValue(key, value, kAccepted);
  }
  double scale = 0;
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},      {"b", 1},
      {"kb", 1e3},  {"kib", 1024.0},
      {"mb", 1e6},  {"mib", 1048576.0},
      {"gb", 1e9},  {"gib", 1073741824.0},
      {"tb", 1e12}, {"tib", 1099511627776.0}};
  for (const auto& [name, s] : kUnits) {
    if (unit == name) scale = s;
  }
  const double bytes = n * scale;
  // 2^62: far above any device, and exactly representable.
  if (scale == 0 || !(bytes >= 1) || bytes > 4611686018427387904.0) {
    return BadValue(key, value, kAccepted);
  }
  return static_cast<size_t>(bytes);
}

absl::StatusOr<double> ParseFraction(absl::string_view key,
                                     absl::string_view value, bool allow_zero) {
  double d = 0;
  const char* accepted =
      allow_zero ? "a number in [0, 1]" : "a number in (0, 1]";
  if (!absl::SimpleAtod(value, &d) || !(d >= 0 && d <= 1) ||
      (!allow_zero && d == 0)) {
    return BadValue(key, value, accepted);
  }
  return d;
}

absl::StatusOr<Config> ParseConfig(absl::string_view text) {
  Config config;
  std::vector<std::string> seen;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: entry \"%s\" is not key:value (accepted keys: %s)", kEnvVar,
          entry, absl::StrJoin(kKeys, ", ")));
    }
    const std::string key(absl::StripAsciiWhitespace(entry.substr(0, colon)));
    const absl::string_view value =
        absl::StripAsciiWhitespace(entry.substr(colon + 1));
    for (const std::string& s : seen) {
      if (s == key) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: key %s is given more than once", kEnvVar, key));
      }
    }
    seen.push_back(key);

    Allocator::Options& o = config.options;
    if (key == "backend") {
      if (value == "cuda") {
        config.backend = Backend::kCuda;
      } else if (value == "host") {
        config.backend = Backend::kHost;
      } else if (value == "virtual") {
        config.backend = Backend::kVirtual;
      } else {
        return BadValue(key, value, "cuda, host, virtual");
      }
    } else if (key == "allow_growth") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      o.allow_growth = *b;
    } else if (key == "allow_retry_on_failure") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      o.allow_retry_on_failure = *b;
    } else if (key == "garbage_collection") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      o.garbage_collection = *b;
    } else if (key == "abort_on_invalid_input") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (!b.ok()) return b.status();
      o.abort_on_invalid_input = *b;
    } else if (key == "fragmentation_fraction") {
      absl::StatusOr<double> d = ParseFraction(key, value, true);
      if (!d.ok()) return d.status();
      o.fragmentation_fraction = *d;
    } else if (key == "retry_timeout") {
      absl::Duration d;
      if (!absl::ParseDuration(value, &d) || d < absl::ZeroDuration() ||
          d == absl::InfiniteDuration()) {
        return BadValue(key, value,
                        "a finite duration >= 0 such as 10s, 500ms, 1m");
      }
      o.retry_timeout = d;
    } else if (key == "max_oom_logs") {
      int n = 0;
      if (!absl::SimpleAtoi(value, &n) || n < 0) {
        return BadValue(key, value, "an integer >= 0");
      }
      o.max_oom_logs = n;
    } else if (key == "memory_limit") {
      absl::StatusOr<size_t> bytes = ParseBytes(key, value);
      if (!bytes.ok()) return bytes.status();
      config.memory_limit = *bytes;
    } else if (key == "memory_fraction") {
      absl::StatusOr<double> d = ParseFraction(key, value, false);
      if (!d.ok()) return d.status();
      config.memory_fraction = *d;
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: unknown key \"%s\" (accepted keys: %s)", kEnvVar,
                          key, absl::StrJoin(kKeys, ", ")));
    }
  }
  if (config.memory_limit && config.memory_fraction) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: memory_limit and memory_fraction are both given (accepted: at "
        "most one of them)",
        kEnvVar));
  }
  return config;
}

// --- backends ----------------------------------------------------------------

size_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return size_t{1} << 30;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

size_t Limit(const Config& config, size_t device_bytes, size_t default_bytes) {
  if (config.memory_limit) return *config.memory_limit;
  if (config.memory_fraction) {
    return static_cast<size_t>(*config.memory_fraction *
                               static_cast<double>(device_bytes));
  }
  return default_bytes;
}

#ifdef BFC_HAVE_CUDA
// Total and free memory of `device`, leaving the caller's current device as
// it was.
absl::Status CudaMemInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  int saved = 0;
  cudaError_t err = cudaGetDevice(&saved);
  if (err == cudaSuccess && saved != device) err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemGetInfo(free_bytes, total_bytes);
  if (saved != device) (void)cudaSetDevice(saved);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::UnavailableError(
        absl::StrFormat("cudaMemGetInfo on device %d failed: %s: %s", device,
                        cudaGetErrorName(err), cudaGetErrorString(err)));
  }
  return absl::OkStatus();
}
#endif

absl::StatusOr<std::unique_ptr<Allocator>> CreateAllocator(const Config& config,
                                                           int device) {
  const std::string name =
      absl::StrFormat("bfc_%s_%d", BackendName(config.backend), device);
  std::unique_ptr<SubAllocator> sub;
  size_t limit = 0;
  switch (config.backend) {
    case Backend::kHost: {
      const size_t physical = PhysicalMemoryBytes();
      limit = Limit(config, physical, physical);
      sub = std::make_unique<HostSubAllocator>();
      break;
    }
    case Backend::kVirtual: {
      limit = Limit(config, kVirtualDefaultBytes, kVirtualDefaultBytes);
      sub = std::make_unique<VirtualSubAllocator>(limit);
      break;
    }
    case Backend::kCuda: {
#ifdef BFC_HAVE_CUDA
      std::string error;
      const int count = CudaDeviceCount(&error);
      if (count == 0) {
        return absl::UnavailableError(absl::StrFormat(
            "backend cuda: no usable CUDA device (%s); to run without a GPU "
            "set %s=backend:host or backend:virtual",
            error.empty() ? "the runtime reports 0 devices" : error, kEnvVar));
      }
      if (device >= count) {
        return absl::InvalidArgumentError(
            absl::StrFormat("backend cuda: device %d does not exist (%d CUDA "
                            "device(s) visible)",
                            device, count));
      }
      size_t free_bytes = 0, total_bytes = 0;
      absl::Status s = CudaMemInfo(device, &free_bytes, &total_bytes);
      if (!s.ok()) {
        return absl::UnavailableError(
            absl::StrCat("backend cuda: ", s.message()));
      }
      limit = Limit(config, total_bytes, free_bytes);
      sub = std::make_unique<CudaDeviceSubAllocator>(device);
      break;
#else
      return absl::UnavailableError(absl::StrFormat(
          "backend cuda: this libbfc_alloc was built without CUDA; set "
          "%s=backend:host or backend:virtual, or rebuild with the CUDA "
          "toolkit",
          kEnvVar));
#endif
    }
  }
  if (limit == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the memory limit for device %d works out to 0 bytes", kEnvVar,
        device));
  }
  return std::make_unique<Allocator>(std::move(sub), limit, name,
                                     config.options);
}

// --- process state -----------------------------------------------------------

thread_local std::string t_last_error;

void SetError(std::string message) { t_last_error = std::move(message); }

class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry();  // never destroyed
    return *registry;
  }

  // The device's allocator, created on first use when `create`. nullptr with
  // *error set when it cannot be had; nullptr with an empty *error when it
  // does not exist and !create.
  Allocator* Find(int device, bool create, std::string* error)
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (device < 0 || device >= BFC_MAX_DEVICES) {
      *error = absl::StrFormat("device %d is out of range [0, %d)", device,
                               BFC_MAX_DEVICES);
      return nullptr;
    }
    Allocator* a = allocators_[device].load(std::memory_order_acquire);
    if (a != nullptr) return a;
    absl::MutexLock lock(&mu_);
    const absl::Status config = ConfigureLocked();
    if (!config.ok()) {
      *error = std::string(config.message());
      return nullptr;
    }
    a = allocators_[device].load(std::memory_order_relaxed);
    if (a != nullptr || !create) return a;
    if (!device_errors_[device].empty()) {
      *error = device_errors_[device];
      return nullptr;
    }
    absl::StatusOr<std::unique_ptr<Allocator>> made =
        CreateAllocator(config_, device);
    if (!made.ok()) {
      // Sticky: a device that cannot be set up fails fast from then on.
      device_errors_[device] = std::string(made.status().message());
      *error = device_errors_[device];
      return nullptr;
    }
    a = made->release();
    allocators_[device].store(a, std::memory_order_release);
    return a;
  }

  // Every allocator created so far.
  std::vector<Allocator*> All() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Allocator*> all;
    for (auto& slot : allocators_) {
      if (Allocator* a = slot.load(std::memory_order_acquire)) all.push_back(a);
    }
    return all;
  }

  void Reset() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (auto& slot : allocators_) {
      delete slot.exchange(nullptr, std::memory_order_acq_rel);
    }
    for (std::string& e : device_errors_) e.clear();
    config_ = Config();
    config_status_ = absl::OkStatus();
    configured_.store(false, std::memory_order_release);
  }

 private:
  Registry() = default;

  absl::Status ConfigureLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (configured_.load(std::memory_order_relaxed)) return config_status_;
    const char* text = std::getenv(kEnvVar);
    absl::StatusOr<Config> parsed = ParseConfig(text == nullptr ? "" : text);
    if (parsed.ok()) {
      config_ = *parsed;
      config_status_ = absl::OkStatus();
    } else {
      config_status_ = parsed.status();
      // Once per configuration, where a person running the program sees it.
      std::fprintf(stderr, "bfc: %s\n",
                   std::string(config_status_.message()).c_str());
      std::fflush(stderr);
    }
    configured_.store(true, std::memory_order_release);
    return config_status_;
  }

  absl::Mutex mu_;
  // Written only under mu_ before configured_ is released; read freely after.
  std::atomic<bool> configured_{false};
  absl::Status config_status_;
  Config config_;
  std::array<std::atomic<Allocator*>, BFC_MAX_DEVICES> allocators_{};
  std::array<std::string, BFC_MAX_DEVICES> device_errors_ ABSL_GUARDED_BY(mu_);
};

// Runs `body`; an exception becomes `on_error` plus a message.
template <typename R, typename F>
R Guarded(const char* function, R on_error, F&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    try {
      SetError(absl::StrCat(function, ": ", e.what()));
    } catch (...) {
    }
  } catch (...) {
    try {
      SetError(absl::StrCat(function, ": unknown exception"));
    } catch (...) {
    }
  }
  return on_error;
}

void* Malloc(const char* function, size_t size, int device) {
  if (size == 0) return nullptr;
  std::string error;
  Allocator* a = Registry::Get().Find(device, /*create=*/true, &error);
  if (a == nullptr) {
    SetError(absl::StrFormat("%s(%d bytes, device %d): %s", function, size,
                             device, error));
    return nullptr;
  }
  absl::StatusOr<void*> p = a->Allocate(size);
  if (!p.ok()) {
    SetError(absl::StrFormat("%s(%d bytes, device %d): %s", function, size,
                             device, p.status().message()));
    return nullptr;
  }
  return *p;
}

void Free(const char* function, void* ptr, int device) {
  if (ptr == nullptr) return;
  std::string error;
  Allocator* a = Registry::Get().Find(device, /*create=*/false, &error);
  if (a == nullptr) {
    SetError(absl::StrFormat(
        "%s(%p, device %d): %s", function, ptr, device,
        error.empty() ? "no allocation was ever made on this device" : error));
    return;
  }
  absl::Status s = a->Deallocate(ptr);
  if (!s.ok()) {
    SetError(absl::StrFormat("%s(%p, device %d): %s", function, ptr, device,
                             s.message()));
  }
}

int64_t OrMinusOne(const std::optional<int64_t>& v) { return v ? *v : -1; }

}  // namespace
}  // namespace bfc

extern "C" {

void* bfc_malloc(size_t size, int device, bfc_stream_t /*stream*/) {
  return bfc::Guarded<void*>("bfc_malloc", nullptr, [&] {
    return bfc::Malloc("bfc_malloc", size, device);
  });
}

void bfc_free(void* ptr, size_t /*size*/, int device, bfc_stream_t /*stream*/) {
  bfc::Guarded<int>("bfc_free", 0, [&] {
    bfc::Free("bfc_free", ptr, device);
    return 0;
  });
}

void* bfc_cupy_malloc(void* /*param*/, size_t size, int device) {
  return bfc::Guarded<void*>("bfc_cupy_malloc", nullptr, [&] {
    return bfc::Malloc("bfc_cupy_malloc", size, device);
  });
}

void bfc_cupy_free(void* /*param*/, void* ptr, int device) {
  bfc::Guarded<int>("bfc_cupy_free", 0, [&] {
    bfc::Free("bfc_cupy_free", ptr, device);
    return 0;
  });
}

void bfc_empty_cache_all(void) {
  bfc::Guarded<int>("bfc_empty_cache_all", 0, [&] {
    for (bfc::Allocator* a : bfc::Registry::Get().All()) {
      a->ReleaseFreeRegions();
    }
    return 0;
  });
}

size_t bfc_empty_cache(int device) {
  return bfc::Guarded<size_t>("bfc_empty_cache", 0, [&]() -> size_t {
    std::string error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/false, &error);
    if (a == nullptr) {
      if (!error.empty()) {
        bfc::SetError(
            absl::StrFormat("bfc_empty_cache(device %d): %s", device, error));
      }
      return 0;
    }
    return a->ReleaseFreeRegions();
  });
}

int bfc_get_stats(int device, bfc_stats* out) {
  return bfc::Guarded<int>("bfc_get_stats", -1, [&] {
    if (out == nullptr) {
      bfc::SetError("bfc_get_stats: out is NULL");
      return -1;
    }
    std::string error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/true, &error);
    if (a == nullptr) {
      bfc::SetError(
          absl::StrFormat("bfc_get_stats(device %d): %s", device, error));
      return -1;
    }
    const std::optional<bfc::AllocatorStats> s = a->GetStats();
    if (!s) {
      bfc::SetError(absl::StrFormat(
          "bfc_get_stats(device %d): the allocator has no stats", device));
      return -1;
    }
    bfc_stats c;
    c.num_allocs = s->num_allocs;
    c.bytes_in_use = s->bytes_in_use;
    c.peak_bytes_in_use = s->peak_bytes_in_use;
    c.largest_alloc_size = s->largest_alloc_size;
    c.bytes_limit = bfc::OrMinusOne(s->bytes_limit);
    c.bytes_reserved = s->bytes_reserved;
    c.peak_bytes_reserved = s->peak_bytes_reserved;
    c.bytes_reservable_limit = bfc::OrMinusOne(s->bytes_reservable_limit);
    c.largest_free_block_bytes = s->largest_free_block_bytes;
    c.pool_bytes = bfc::OrMinusOne(s->pool_bytes);
    c.peak_pool_bytes = bfc::OrMinusOne(s->peak_pool_bytes);
    c.num_invalid_frees = s->num_invalid_frees;
    c.num_invalid_requests = s->num_invalid_requests;
    c.num_ooms = s->num_ooms;
    c.num_extends = s->num_extends;
    c.num_regions_released = s->num_regions_released;
    c.num_sub_allocator_rejects = s->num_sub_allocator_rejects;
    c.num_retries = s->num_retries;
    c.bytes_requested_in_use = s->bytes_requested_in_use;
    c.fragmentation = s->fragmentation;
    *out = c;
    return 0;
  });
}

int bfc_reset_peak_stats(int device) {
  return bfc::Guarded<int>("bfc_reset_peak_stats", -1, [&] {
    std::string error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/true, &error);
    if (a == nullptr) {
      bfc::SetError(absl::StrFormat("bfc_reset_peak_stats(device %d): %s",
                                    device, error));
      return -1;
    }
    a->ResetPeakStats();
    return 0;
  });
}

const char* bfc_last_error(void) { return bfc::t_last_error.c_str(); }

const char* bfc_version(void) { return BFC_VERSION_STRING; }

void bfc_reset_for_testing(void) {
  bfc::Guarded<int>("bfc_reset_for_testing", 0, [&] {
    bfc::Registry::Get().Reset();
    return 0;
  });
}

}  // extern "C"
