// File: src/c_api/c_api.cc
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

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/internal/mutex.h"
#include "bfc/pytorch_snapshot.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "c_api/alloc_conf.h"

#ifdef BFC_HAVE_CUDA
#include "bfc/cuda_stream_ops.h"
#include "bfc/cuda_sub_allocator.h"
#include "bfc/cuda_vmm_sub_allocator.h"
#include "bfc/internal/str_format.h"
#endif

#ifndef BFC_VERSION_STRING
#define BFC_VERSION_STRING "0.0.0"
#endif

namespace bfc {
namespace {

using c_api::AllocConf;
using c_api::Backend;
using c_api::BackendName;
using c_api::ParseAllocConf;

constexpr const char* kEnvVar = c_api::kAllocConfEnvVar;
constexpr size_t kVirtualDefaultBytes = size_t{64} << 30;

// --- backends ----------------------------------------------------------------

size_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return size_t{1} << 30;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size);
}

size_t Limit(const AllocConf& config, size_t device_bytes,
             size_t default_bytes) {
  if (config.memory_limit) return *config.memory_limit;
  if (config.memory_fraction) {
    return static_cast<size_t>(*config.memory_fraction *
                               static_cast<double>(device_bytes));
  }
  return default_bytes;
}

// *transient: the failure came from a driver call that may succeed later
// (a context or the memory query failing while the device is busy or
// short); a later call tries again. Every other failure (the configuration,
// no driver, no such device, no VMM support) is for good.
absl::StatusOr<std::unique_ptr<Allocator>> CreateAllocator(
    const AllocConf& config, int device, bool* transient) {
  *transient = false;
  const std::string name =
      bfc::internal::Format("bfc_%s_%d", BackendName(config.backend), device);
  std::unique_ptr<SubAllocator> sub;
  size_t limit = 0;
  switch (config.backend) {
    case Backend::kHost: {
      const size_t physical = PhysicalMemoryBytes();
      limit = Limit(config, physical, physical);
      sub = std::make_unique<HostSubAllocator>();
      break;
    }
    case Backend::kVirtual:
    case Backend::kSimCudaMalloc: {
      limit = Limit(config, kVirtualDefaultBytes, kVirtualDefaultBytes);
      if (limit == 0) break;  // reported below
      auto virt = MakeVirtualSubAllocator(config.backend, limit);
      // A range the kernel will not reserve can never be handed out: say so
      // once, now, instead of failing every allocation as out of memory.
      if (virt->base() == nullptr) {
        return absl::UnavailableError(bfc::internal::Format(
            "backend virtual: cannot reserve %s of address space for device "
            "%d (the kernel refused the mapping); set a smaller memory_limit "
            "in %s",
            HumanReadableBytesExact(limit), device, kEnvVar));
      }
      sub = std::move(virt);
      break;
    }
    case Backend::kCuda:
    case Backend::kVmm: {
#ifdef BFC_HAVE_CUDA
      const char* backend = BackendName(config.backend);
      std::string error;
      const int count = CudaDeviceCount(&error);
      if (count == 0) {
        return absl::UnavailableError(bfc::internal::Format(
            "backend %s: no usable CUDA device (%s); to run without a GPU "
            "set %s=backend:host or backend:virtual",
            backend, error.empty() ? "the runtime reports 0 devices" : error,
            kEnvVar));
      }
      if (device >= count) {
        return absl::InvalidArgumentError(bfc::internal::Format(
            "backend %s: device %d does not exist (%d CUDA "
            "device(s) visible)",
            backend, device, count));
      }
      size_t free_bytes = 0, total_bytes = 0;
      absl::Status s = CudaMemGetInfo(device, &free_bytes, &total_bytes);
      if (!s.ok()) {
        *transient = true;
        return absl::UnavailableError(
            absl::StrCat("backend ", backend, ": ", s.message()));
      }
      limit = Limit(config, total_bytes, free_bytes);
      if (config.backend == Backend::kCuda) {
        sub = std::make_unique<CudaDeviceSubAllocator>(device);
        break;
      }
      // One address range per device, reserved now: its absence is said
      // once, here, not at every allocation.
      auto vmm = std::make_unique<CudaVmmSubAllocator>(device);
      if (absl::Status a = vmm->Availability(); !a.ok()) {
        return absl::UnavailableError(bfc::internal::Format(
            "backend vmm: %s; set %s=backend:cuda for cudaMalloc'ed regions",
            a.message(), kEnvVar));
      }
      sub = std::move(vmm);
      break;
#else
      return absl::UnavailableError(bfc::internal::Format(
          "backend %s: this libbfc_alloc was built without CUDA; set "
          "%s=backend:host or backend:virtual, or rebuild with the CUDA "
          "toolkit",
          BackendName(config.backend), kEnvVar));
#endif
    }
  }
  // FailedPrecondition, not InvalidArgument: the configuration is wrong, not
  // the call, and abort_on_invalid_input must not end the process for it.
  if (limit == 0) {
    return absl::FailedPreconditionError(bfc::internal::Format(
        "%s: the memory limit for device %d works out to 0 bytes", kEnvVar,
        device));
  }
  auto allocator =
      std::make_unique<Allocator>(std::move(sub), limit, name, config.options);
#ifdef BFC_HAVE_CUDA
  if (config.backend == Backend::kCuda || config.backend == Backend::kVmm) {
    // Stream-ordered reuse: the streams PyTorch and CuPy pass are honoured.
    absl::StatusOr<std::unique_ptr<CudaStreamOps>> ops =
        CudaStreamOps::Create(device);
    if (!ops.ok()) {
      *transient = true;
      return absl::UnavailableError(
          absl::StrCat("backend cuda: ", ops.status().message()));
    }
    absl::Status s = allocator->SetStreamOps(*std::move(ops));
    if (!s.ok()) {
      *transient = true;
      return absl::UnavailableError(
          absl::StrCat("backend cuda: ", s.message()));
    }
  }
#endif
  return allocator;
}

// empty_cache: the fully free regions, and with release_partial_regions
// (backend:vmm) the free pages inside the others, as PyTorch's empty_cache
// unmaps the free pages of expandable segments.
size_t EmptyCache(Allocator* a) {
  return a->options().release_partial_regions ? a->ReleaseFreeMemory()
                                              : a->ReleaseFreeRegions();
}

// --- process state -----------------------------------------------------------

thread_local std::string t_last_error;

void SetError(std::string message) { t_last_error = std::move(message); }

// Writes `data` to a new file beside `path` and renames it over `path` only
// once all of it is on disk, so that a full disk or a crash never leaves a
// truncated file where a good one was. The tools' WriteFileAtomically
// (tools/tool_io.cc) also removes its temporary file on a signal; a library
// inside another program's process must not take over its signal handlers,
// so this one only cleans up on the errors it sees.
absl::Status WriteAllTo(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& named_path,
                                 std::string_view data) {
  struct stat st;
  // A device or a pipe (/dev/null, a FIFO, /dev/stdout or /dev/fd/N on a
  // pipe) is written to, never replaced: renaming over it would put a
  // regular file in its place (as root, over /dev/null for everyone).
  // stat() follows a symlink: /dev/fd/N of a pipe leads to no path, which
  // realpath() refused (a review).
  if (stat(named_path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) {
      return absl::InternalError(absl::StrCat(named_path, ": is a directory"));
    }
    // Never waits for a FIFO's reader to appear (O_NONBLOCK fails at once
    // without one); once open, the writes block for a slow reader (they
    // failed after 64 KiB, leaving the reader a truncated file: a review).
    const int fd = open(named_path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat(
          named_path, ": cannot open for writing: ", std::strerror(errno)));
    }
    const int flags = fcntl(fd, F_GETFL);
    absl::Status s = absl::OkStatus();
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      s = absl::InternalError(std::strerror(errno));
    }
    if (s.ok()) s = WriteAllTo(fd, data);
    if (close(fd) != 0 && s.ok()) s = absl::InternalError(std::strerror(errno));
    if (!s.ok()) {
      return absl::InternalError(
          absl::StrCat(named_path, ": cannot write: ", s.message()));
    }
    return absl::OkStatus();
  }
  // A symlink to a file is written through, not replaced by a file of its
  // own.
  std::string path = named_path;
  if (lstat(named_path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char* resolved = realpath(named_path.c_str(), nullptr);
    if (resolved == nullptr) {
      return absl::InternalError(absl::StrCat(
          named_path,
          ": a symlink that leads nowhere: ", std::strerror(errno)));
    }
    path = resolved;
    std::free(resolved);
  }
  // A file replaced keeps its permissions; a new one gets 0666 less the
  // umask, applied by the kernel (reading the umask is not thread-safe).
  // It used to be 0644 always: a private file came back world-readable (a
  // review).
  struct stat target;
  const bool replacing = stat(path.c_str(), &target) == 0;
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base =
      slash == std::string::npos ? path : path.substr(slash + 1);
  std::string tmp;
  int fd = -1;
  std::random_device entropy;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = absl::StrCat(dir, ".", base, ".tmp-", entropy(), "-", getpid());
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(
        path,
        ": cannot create a temporary file beside it: ", std::strerror(errno)));
  }
  auto fail = [&](const char* what) {
    const int e = errno;
    close(fd);
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat(path, ": ", what, ": ", std::strerror(e)));
  };
  if (!WriteAllTo(fd, data).ok()) return fail("cannot write");
  if (replacing && fchmod(fd, target.st_mode & 07777) != 0) {
    return fail("cannot set permissions");
  }
  if (fsync(fd) != 0) return fail("cannot flush to disk");
  if (close(fd) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat(path, ": cannot write: ", std::strerror(e)));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat(path, ": cannot rename into place: ", std::strerror(e)));
  }
  return absl::OkStatus();
}

class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry();  // never destroyed
    return *registry;
  }

  // The device's allocator, created on first use when `create`. nullptr with
  // *error set when it cannot be had: InvalidArgument for a device out of
  // range (the caller's mistake), the configuration's or the backend's error
  // otherwise; nullptr with *error OK when it does not exist and !create.
  Allocator* Find(int device, bool create, absl::Status* error)
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (device < 0 || device >= BFC_MAX_DEVICES) {
      *error = absl::InvalidArgumentError(bfc::internal::Format(
          "device %d is out of range [0, %d)", device, BFC_MAX_DEVICES));
      return nullptr;
    }
    Allocator* a = allocators_[device].load(std::memory_order_acquire);
    if (a != nullptr) return a;
    internal::MutexLock lock(&mu_);
    const absl::Status config = ConfigureLocked();
    if (!config.ok()) {
      *error = config;
      return nullptr;
    }
    a = allocators_[device].load(std::memory_order_relaxed);
    if (a != nullptr || !create) return a;
    if (!device_errors_[device].ok()) {
      *error = device_errors_[device];
      return nullptr;
    }
    bool transient = false;
    absl::StatusOr<std::unique_ptr<Allocator>> made =
        CreateAllocator(config_, device, &transient);
    if (!made.ok()) {
      // Sticky: a device that cannot be set up fails fast from then on,
      // unless a driver call failed that may succeed next time (a review:
      // one busy moment disabled the device for the process).
      if (transient) {
        *error = made.status();
        return nullptr;
      }
      device_errors_[device] = made.status();
      *error = device_errors_[device];
      return nullptr;
    }
    a = made->release();
    allocators_[device].store(a, std::memory_order_release);
    return a;
  }

  // abort_on_invalid_input of the configuration (read now if no call has
  // yet); false for a malformed one.
  bool AbortOnInvalidInput() ABSL_LOCKS_EXCLUDED(mu_) {
    if (!configured_.load(std::memory_order_acquire)) {
      internal::MutexLock lock(&mu_);
      (void)ConfigureLocked();
    }
    return abort_on_invalid_input_.load(std::memory_order_acquire);
  }

  // The messages of the keys BFC_ALLOC_CONF gave for nothing (read now if no
  // call has yet), one per line; "" when none. Stable until Reset().
  const char* ConfigWarnings() ABSL_LOCKS_EXCLUDED(mu_) {
    internal::MutexLock lock(&mu_);
    (void)ConfigureLocked();
    return config_warnings_.c_str();
  }

  // Every allocator created so far.
  std::vector<Allocator*> All() ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Allocator*> all;
    for (auto& slot : allocators_) {
      if (Allocator* a = slot.load(std::memory_order_acquire)) all.push_back(a);
    }
    return all;
  }

  // Remembers an account made on `device`'s allocator, so that Reset does
  // not destroy the allocator under it.
  void TrackAccount(int device, const std::shared_ptr<Account>& account)
      ABSL_LOCKS_EXCLUDED(mu_) {
    internal::MutexLock lock(&mu_);
    std::vector<std::weak_ptr<Account>>& list = accounts_[device];
    // The expired go first, so the list stays as long as what is alive.
    list.erase(std::remove_if(
                   list.begin(), list.end(),
                   [](const std::weak_ptr<Account>& w) { return w.expired(); }),
               list.end());
    list.push_back(account);
  }

  void Reset() ABSL_LOCKS_EXCLUDED(mu_) {
    // Deleted after the registry's lock, as `doomed` goes: a destructor logs
    // (leaks) through the user's sink, which may call bfc_* and so take it.
    std::array<std::unique_ptr<Allocator>, BFC_MAX_DEVICES> doomed;
    internal::MutexLock lock(&mu_);
    for (size_t device = 0; device < allocators_.size(); ++device) {
      Allocator* a =
          allocators_[device].exchange(nullptr, std::memory_order_acq_rel);
      const bool accounts_alive = std::any_of(
          accounts_[device].begin(), accounts_[device].end(),
          [](const std::weak_ptr<Account>& w) { return !w.expired(); });
      accounts_[device].clear();
      if (a == nullptr) continue;
      if (!accounts_alive) {
        doomed[device].reset(a);
        continue;
      }
      // An account's destruction locks its allocator (a review: destroying
      // a handle after the reset used the deleted allocator): set aside for
      // good instead, in a test-only call (kept reachable: not a leak).
      try {
        set_aside_.push_back(a);
      } catch (...) {
      }
      std::fprintf(stderr,
                   "bfc: bfc_reset_for_testing: device %zu's allocator has "
                   "accounts still alive; it is set aside, not destroyed\n",
                   device);
      std::fflush(stderr);
    }
    for (absl::Status& e : device_errors_) e = absl::OkStatus();
    config_ = AllocConf();
    config_warnings_.clear();
    abort_on_invalid_input_.store(false, std::memory_order_release);
    config_status_ = absl::OkStatus();
    configured_.store(false, std::memory_order_release);
  }

 private:
  Registry() = default;

  absl::Status ConfigureLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (configured_.load(std::memory_order_relaxed)) return config_status_;
    const char* text = std::getenv(kEnvVar);
    absl::StatusOr<AllocConf> parsed =
        ParseAllocConf(text == nullptr ? "" : text);
    if (parsed.ok()) {
      config_ = *parsed;
      config_status_ = absl::OkStatus();
      // A key given for nothing does not stop the program (alloc_conf.h);
      // it is said once, where the person running it sees it.
      for (const std::string& message : config_.ignored) {
        absl::StrAppend(&config_warnings_, config_warnings_.empty() ? "" : "\n",
                        message, " (ignored)");
      }
      if (!config_warnings_.empty()) {
        std::fprintf(
            stderr, "%s\n",
            absl::StrReplaceAll(absl::StrCat("bfc: ", config_warnings_),
                                {{"\n", "\nbfc: "}})
                .c_str());
      }
      std::fflush(stderr);
      abort_on_invalid_input_.store(config_.options.abort_on_invalid_input,
                                    std::memory_order_release);
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

  // The outermost lock (bfc/internal/mutex.h, "Locks"): held while an
  // allocator is created or destroyed, which may log. Allocator::mutex_ is
  // private and cannot be named here; TSan checks that edge at run time.
  internal::Mutex mu_ ABSL_ACQUIRED_BEFORE(internal::log_sink_mutex);
  // Written only under mu_; an atomic so that it may be read without it.
  std::atomic<bool> configured_{false};
  std::atomic<bool> abort_on_invalid_input_{false};
  absl::Status config_status_ ABSL_GUARDED_BY(mu_);
  std::string config_warnings_ ABSL_GUARDED_BY(mu_);
  AllocConf config_ ABSL_GUARDED_BY(mu_);
  std::array<std::atomic<Allocator*>, BFC_MAX_DEVICES> allocators_{};
  std::array<absl::Status, BFC_MAX_DEVICES> device_errors_ ABSL_GUARDED_BY(mu_);
  // The accounts made on each device's allocator (TrackAccount).
  std::array<std::vector<std::weak_ptr<Account>>, BFC_MAX_DEVICES> accounts_
      ABSL_GUARDED_BY(mu_);
  // Allocators Reset could not destroy (their accounts were alive).
  std::vector<Allocator*> set_aside_ ABSL_GUARDED_BY(mu_);
};

// What bfc_malloc_or_throw throws: std::bad_alloc, which PyTorch's bindings
// turn into a Python error, carrying the failure's message.
class AllocationFailure : public std::bad_alloc {
 public:
  explicit AllocationFailure(const char* message) {
    // Copied into a fixed buffer: building a std::string could itself fail
    // for want of memory.
    std::snprintf(message_, sizeof(message_), "%s", message);
  }
  const char* what() const noexcept override { return message_; }

 private:
  char message_[512];
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

// A caller's mistake: an invalid free (a pointer this library did not hand
// out, a double free, a device never used or out of range) or an invalid
// request (a size whose rounding overflows, a device out of range). Reported
// like any failure; with abort_on_invalid_input the process ends here instead,
// as the C++ raw calls do (bfc/allocator_options.h).
void ReportMistake(std::string message) {
  if (Registry::Get().AbortOnInvalidInput()) {
    std::fprintf(stderr,
                 "bfc: %s\nbfc: aborting: abort_on_invalid_input is "
                 "set in %s\n",
                 message.c_str(), kEnvVar);
    std::fflush(stderr);
    std::abort();
  }
  SetError(std::move(message));
}

// Reports `status` for `call`: as a mistake when it is InvalidArgument.
void Report(const std::string& call, const absl::Status& status) {
  std::string message = absl::StrCat(call, ": ", status.message());
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    ReportMistake(std::move(message));
  } else {
    SetError(std::move(message));
  }
}

// CUDA's special stream handles (cuda.h: CU_STREAM_LEGACY,
// CU_STREAM_PER_THREAD; the runtime's cudaStreamLegacy and
// cudaStreamPerThread have the same values).
constexpr uintptr_t kLegacyStreamHandle = 0x1;
constexpr uintptr_t kPerThreadStreamHandle = 0x2;

// cudaStreamPerThread names a different stream on each thread, which no
// event recorded under that one handle can tell apart (a review: memory one
// thread freed on it went to another thread's at once, with no wait).
bool IsPerThreadStream(const Allocator& a, bfc_stream_t stream) {
  return a.HasStreamOps() &&
         reinterpret_cast<uintptr_t>(stream) == kPerThreadStreamHandle;
}

// The allocator's stream for a caller's: the caller's on an allocator with
// events (backend:cuda), cudaStreamLegacy being the implicit stream (the
// legacy default stream, as NULL is); host and virtual memory is not
// stream-ordered, so there every call uses the implicit stream.
StreamId StreamFor(const Allocator& a, bfc_stream_t stream) {
  if (!a.HasStreamOps() ||
      reinterpret_cast<uintptr_t>(stream) == kLegacyStreamHandle) {
    return kImplicitStream;
  }
  return static_cast<StreamId>(stream);
}

}  // namespace
}  // namespace bfc

// The C handle of an account.
struct bfc_account {
  int device;
  std::shared_ptr<bfc::Account> account;
};

namespace bfc {
namespace {

// The account this thread's allocations are charged to
// (bfc_account_set_current). The thread holds a reference of its own: a
// handle destroyed by another thread meanwhile freed the account under it
// (a review: a use after free).
struct CurrentAccount {
  bfc_account* handle = nullptr;  // what bfc_account_set_current returns
  int device = -1;
  std::shared_ptr<Account> account;
};
thread_local CurrentAccount t_current_account;

void* Malloc(const char* function, size_t size, int device,
             bfc_stream_t stream) {
  if (size == 0) return nullptr;
  const std::string call =
      bfc::internal::Format("%s(%d bytes, device %d)", function, size, device);
  absl::Status error;
  Allocator* a = Registry::Get().Find(device, /*create=*/true, &error);
  if (a == nullptr) {
    Report(call, error);
    return nullptr;
  }
  AllocationAttributes attr;
  attr.stream = StreamFor(*a, stream);
  if (IsPerThreadStream(*a, stream)) {
    // Memory ready for any stream, as cudaMalloc's (the CCCL resources do
    // the same for this handle).
    attr.stream = kImplicitStream;
    attr.host_ready = true;
  }
  if (t_current_account.account != nullptr &&
      t_current_account.device == device) {
    attr.account = t_current_account.account.get();
  }
  absl::StatusOr<void*> p = a->Allocate(size, kMinAllocationSize, attr);
  if (!p.ok()) {
    Report(call, p.status());
    return nullptr;
  }
  return *p;
}

void Free(const char* function, void* ptr, int device, bfc_stream_t stream) {
  if (ptr == nullptr) return;
  const std::string call =
      bfc::internal::Format("%s(%p, device %d)", function, ptr, device);
  absl::Status error;
  Allocator* a = Registry::Get().Find(device, /*create=*/false, &error);
  if (a == nullptr) {
    Report(call, error.ok() ? absl::InvalidArgumentError(
                                  "no allocation was ever made on this device")
                            : error);
    return;
  }
  StreamId on = StreamFor(*a, stream);
#ifdef BFC_HAVE_CUDA
  if (IsPerThreadStream(*a, stream)) {
    // The calling thread's stream is synchronized now, so the memory is
    // ready for any stream; if that fails the memory is kept out of use
    // (not returned) rather than handed to work it may overlap.
    // The device's stream, not the current context's: the free may come
    // under another device's guard.
    const absl::Status synced = CudaStreamSynchronize(stream, device);
    if (!synced.ok()) {
      Report(call, absl::Status(synced.code(),
                                absl::StrCat(synced.message(),
                                             "; the memory is not returned "
                                             "while the stream may use it")));
      return;
    }
    on = kImplicitStream;
  }
#endif
  const absl::Status s = a->DeallocateOnStream(ptr, on);
  if (!s.ok()) Report(call, s);
}

int RecordStream(void* ptr, int device, bfc_stream_t stream) {
  const std::string call =
      bfc::internal::Format("bfc_record_stream(%p, device %d)", ptr, device);
  if (ptr == nullptr) {
    // NULL is never invalid input (no abort): a failure, as for the others.
    SetError(absl::StrCat(call, ": NULL pointer"));
    return -1;
  }
  absl::Status error;
  Allocator* a = Registry::Get().Find(device, /*create=*/false, &error);
  if (a == nullptr) {
    Report(call, error.ok() ? absl::InvalidArgumentError(
                                  "no allocation was ever made on this device")
                            : error);
    return -1;
  }
  if (IsPerThreadStream(*a, stream)) {
    // No event recorded at the free could name this thread's stream.
    SetError(absl::StrCat(
        call,
        ": cudaStreamPerThread names a different stream on each thread; "
        "record the stream itself, or synchronize it before the free"));
    return -1;
  }
  const absl::Status s = a->RecordStreamUse(ptr, StreamFor(*a, stream));
  if (!s.ok()) {
    Report(call, s);
    return -1;
  }
  return 0;
}

int ForgetStream(int device, bfc_stream_t stream) {
  const std::string call =
      bfc::internal::Format("bfc_forget_stream(device %d, stream %p)", device,
                            static_cast<const void*>(stream));
  absl::Status error;
  Allocator* a = Registry::Get().Find(device, /*create=*/false, &error);
  if (a == nullptr) {
    if (error.ok()) return 0;  // no allocator: it never saw the stream
    Report(call, error);
    return -1;
  }
  if (!a->HasStreamOps()) return 0;  // not stream-ordered
  const absl::Status s = a->ForgetStream(static_cast<StreamId>(stream));
  if (!s.ok()) {
    SetError(absl::StrCat(call, ": ", s.message()));
    return -1;
  }
  return 0;
}

int64_t OrMinusOne(const std::optional<int64_t>& v) { return v ? *v : -1; }

}  // namespace
}  // namespace bfc

extern "C" {

void* bfc_malloc(size_t size, int device, bfc_stream_t stream) {
  return bfc::Guarded<void*>("bfc_malloc", nullptr, [&] {
    return bfc::Malloc("bfc_malloc", size, device, stream);
  });
}

void* bfc_malloc_or_throw(size_t size, int device, bfc_stream_t stream) {
  void* p = bfc_malloc(size, device, stream);
  if (p == nullptr && size != 0) {
    const char* message = bfc_last_error();
    throw bfc::AllocationFailure(*message != '\0' ? message
                                                  : "bfc_malloc failed");
  }
  return p;
}

void bfc_free(void* ptr, size_t /*size*/, int device, bfc_stream_t stream) {
  bfc::Guarded<int>("bfc_free", 0, [&] {
    bfc::Free("bfc_free", ptr, device, stream);
    return 0;
  });
}

int bfc_record_stream(void* ptr, int device, bfc_stream_t stream) {
  return bfc::Guarded<int>("bfc_record_stream", -1, [&] {
    return bfc::RecordStream(ptr, device, stream);
  });
}

int bfc_forget_stream(int device, bfc_stream_t stream) {
  return bfc::Guarded<int>("bfc_forget_stream", -1,
                           [&] { return bfc::ForgetStream(device, stream); });
}

void* bfc_cupy_malloc(void* /*param*/, size_t size, int device) {
  return bfc::Guarded<void*>("bfc_cupy_malloc", nullptr, [&] {
    // CuPy's C hook carries no stream: the implicit one.
    return bfc::Malloc("bfc_cupy_malloc", size, device, nullptr);
  });
}

void bfc_cupy_free(void* /*param*/, void* ptr, int device) {
  bfc::Guarded<int>("bfc_cupy_free", 0, [&] {
    bfc::Free("bfc_cupy_free", ptr, device, nullptr);
    return 0;
  });
}

void bfc_empty_cache_all(void) {
  bfc::Guarded<int>("bfc_empty_cache_all", 0, [&] {
    for (bfc::Allocator* a : bfc::Registry::Get().All()) bfc::EmptyCache(a);
    return 0;
  });
}

size_t bfc_empty_cache(int device) {
  return bfc::Guarded<size_t>("bfc_empty_cache", 0, [&]() -> size_t {
    absl::Status error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/false, &error);
    if (a == nullptr) {
      if (!error.ok()) {
        bfc::SetError(bfc::internal::Format("bfc_empty_cache(device %d): %s",
                                            device, error.message()));
      }
      return 0;
    }
    return bfc::EmptyCache(a);
  });
}

int bfc_get_stats(int device, bfc_stats* out) {
  return bfc::Guarded<int>("bfc_get_stats", -1, [&] {
    if (out == nullptr) {
      bfc::SetError("bfc_get_stats: out is NULL");
      return -1;
    }
    absl::Status error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/true, &error);
    if (a == nullptr) {
      bfc::SetError(bfc::internal::Format("bfc_get_stats(device %d): %s",
                                          device, error.message()));
      return -1;
    }
    const std::optional<bfc::AllocatorStats> s = a->GetStats();
    if (!s) {
      bfc::SetError(bfc::internal::Format(
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
    absl::Status error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/true, &error);
    if (a == nullptr) {
      bfc::SetError(bfc::internal::Format("bfc_reset_peak_stats(device %d): %s",
                                          device, error.message()));
      return -1;
    }
    a->ResetPeakStats();
    return 0;
  });
}

int bfc_record_memory_history(int device, size_t max_entries) {
  return bfc::Guarded<int>("bfc_record_memory_history", -1, [&] {
    absl::Status error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/true, &error);
    if (a == nullptr) {
      bfc::SetError(bfc::internal::Format(
          "bfc_record_memory_history(device %d): %s", device, error.message()));
      return -1;
    }
    a->RecordMemoryHistory(max_entries);
    return 0;
  });
}

int bfc_dump_snapshot(int device, const char* path) {
  return bfc::Guarded<int>("bfc_dump_snapshot", -1, [&] {
    if (path == nullptr || *path == '\0') {
      bfc::SetError("bfc_dump_snapshot: path is NULL or empty");
      return -1;
    }
    absl::Status error;
    bfc::Allocator* a =
        bfc::Registry::Get().Find(device, /*create=*/false, &error);
    if (a == nullptr) {
      bfc::SetError(bfc::internal::Format(
          "bfc_dump_snapshot(device %d): %s", device,
          error.ok() ? "the device has no allocator yet (nothing allocated)"
                     : error.message()));
      return -1;
    }
    bfc::PyTorchSnapshotOptions options;
    options.device = device;
    // The history first: events after it are then at most missing from the
    // trace, never in it without their effect on the state.
    const bfc::MemoryHistory history = a->GetMemoryHistory();
    const std::string pickle = bfc::PyTorchSnapshotPickle(
        a->RecordMemoryMap(), history.events, options);
    if (absl::Status s = bfc::WriteFileAtomically(path, pickle); !s.ok()) {
      bfc::SetError(absl::StrCat("bfc_dump_snapshot: ", s.message()));
      return -1;
    }
    return 0;
  });
}

const char* bfc_last_error(void) { return bfc::t_last_error.c_str(); }

const char* bfc_version(void) { return BFC_VERSION_STRING; }

const char* bfc_config_warnings(void) {
  return bfc::Guarded<const char*>("bfc_config_warnings", "", [] {
    return bfc::Registry::Get().ConfigWarnings();
  });
}

bfc_account* bfc_account_create(int device, bfc_account* parent,
                                const char* name, int64_t limit_bytes,
                                int64_t reservation_bytes) {
  return bfc::Guarded<bfc_account*>(
      "bfc_account_create", nullptr, [&]() -> bfc_account* {
        const std::string call =
            bfc::internal::Format("bfc_account_create(device %d, \"%s\")",
                                  device, name == nullptr ? "(null)" : name);
        if (name == nullptr) {
          bfc::SetError(call + ": name is NULL");
          return nullptr;
        }
        bfc::AccountOptions o;
        o.name = name;
        o.limit_bytes = limit_bytes < 0 ? bfc::kNoAccountLimit : limit_bytes;
        o.reservation_bytes = reservation_bytes;
        absl::StatusOr<std::shared_ptr<bfc::Account>> made;
        if (parent != nullptr) {
          if (parent->device != device) {
            bfc::SetError(bfc::internal::Format(
                "%s: the parent '%s' is on device %d", call,
                parent->account->path(), parent->device));
            return nullptr;
          }
          made = parent->account->CreateChild(std::move(o));
        } else {
          absl::Status error;
          bfc::Allocator* a =
              bfc::Registry::Get().Find(device, /*create=*/true, &error);
          if (a == nullptr) {
            bfc::SetError(absl::StrCat(call, ": ", error.message()));
            return nullptr;
          }
          made = bfc::Account::CreateRoot(a, std::move(o));
        }
        if (!made.ok()) {
          bfc::SetError(absl::StrCat(call, ": ", made.status().message()));
          return nullptr;
        }
        bfc::Registry::Get().TrackAccount(device, *made);
        return new bfc_account{device, *std::move(made)};
      });
}

bfc_account* bfc_account_set_current(bfc_account* account) {
  bfc::CurrentAccount next;  // copies a shared_ptr: never throws
  if (account != nullptr) next = {account, account->device, account->account};
  return std::exchange(bfc::t_current_account, std::move(next)).handle;
}

int bfc_account_get_stats(const bfc_account* account, bfc_account_stats* out) {
  return bfc::Guarded<int>("bfc_account_get_stats", -1, [&] {
    if (account == nullptr || out == nullptr) {
      bfc::SetError("bfc_account_get_stats: NULL argument");
      return -1;
    }
    const bfc::AccountStats s = account->account->GetStats();
    auto limit = [](int64_t v) { return v == bfc::kNoAccountLimit ? -1 : v; };
    *out = bfc_account_stats{s.bytes_in_use,
                             s.own_bytes,
                             s.peak_bytes_in_use,
                             s.allocations,
                             s.frees,
                             s.failures,
                             s.live_allocations,
                             limit(s.limit_bytes),
                             s.reservation_bytes,
                             limit(s.headroom_bytes)};
    return 0;
  });
}

int bfc_account_close(bfc_account* account) {
  return bfc::Guarded<int>("bfc_account_close", -1, [&] {
    if (account == nullptr) {
      bfc::SetError("bfc_account_close: NULL account");
      return -1;
    }
    const absl::Status s = account->account->Close();
    if (s.ok()) return 0;
    bfc::SetError(absl::StrCat("bfc_account_close: ", s.message()));
    return account->account->closed() ? 1 : -1;
  });
}

void bfc_account_destroy(bfc_account* account) {
  bfc::Guarded<int>("bfc_account_destroy", 0, [&] {
    if (account == nullptr) return 0;
    if (bfc::t_current_account.handle == account) {
      bfc::t_current_account = bfc::CurrentAccount();
    }
    std::shared_ptr<bfc::Account> held = std::move(account->account);
    delete account;
    // Current on another thread, the account lives on there: closed now,
    // so that thread's allocations fail instead of charging it. Otherwise
    // it closes itself (logging leaks) as the last reference goes.
    if (held.use_count() > 1) (void)held->Close();
    return 0;
  });
}

void bfc_reset_for_testing(void) {
  bfc::Guarded<int>("bfc_reset_for_testing", 0, [&] {
    bfc::t_current_account = bfc::CurrentAccount();
    bfc::Registry::Get().Reset();
    return 0;
  });
}

}  // extern "C"
