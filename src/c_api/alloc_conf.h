// File: src/c_api/alloc_conf.h
// -----------------------------------------------------------------------------
//
// The BFC_ALLOC_CONF grammar of libbfc_alloc.so (and of bfc-replay --conf),
// parsed into an AllocConf. PyTorch's PYTORCH_CUDA_ALLOC_CONF shape:
//
//   key:value[,key:value...]     spaces around keys and values are ignored
//
// Keys: `backend` (cuda | host | virtual | sim-cudamalloc | vmm;
// `expandable_segments:True`, PyTorch's spelling, is backend:vmm),
// `memory_limit` (a byte size, bfc/units.h, > 0) or `memory_fraction` (a number
// in (0, 1], of the device's total memory), and every option of the table in
// bfc/allocator_options.h by its name, with that option's value grammar. A key
// given twice, an unknown key, a bad value, or both memory_limit and
// memory_fraction is InvalidArgument naming the key, the value and what is
// accepted; the caller then fails every allocation with that message rather
// than run with a configuration the user did not ask for (a limit it would not
// keep).
//
// PyTorch's spellings of bfc options are accepted as aliases:
// max_split_size_mb (max_split_bytes, in MiB) and
// garbage_collection_threshold (pool_release_threshold).
//
// A key bfc does not know -- a typo, or a PyTorch setting without a bfc
// meaning (roundup_power2_divisions, ...) -- is not a reason to fail every
// allocation of a program that ran fine under PyTorch: it lands in
// AllocConf::ignored, a message each that says what to use instead (or which
// key a typo was near), for the caller to show once. bfc-replay refuses them.
//
// Thread safety: stateless functions.
#ifndef BFC_C_API_ALLOC_CONF_H_
#define BFC_C_API_ALLOC_CONF_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bfc/allocator_options.h"
#include "bfc/virtual_sub_allocator.h"

namespace bfc::c_api {

inline constexpr char kAllocConfEnvVar[] = "BFC_ALLOC_CONF";

// kSimCudaMalloc: the virtual backend's reserved address space handed out as
// cudaMalloc does, in regions that never touch, so none ever merge.
// kVmm: CudaVmmSubAllocator, expandable regions on CUDA virtual memory.
enum class Backend { kCuda, kHost, kVirtual, kSimCudaMalloc, kVmm };
// "cuda", "host", "virtual", "sim-cudamalloc", "vmm".
const char* BackendName(Backend backend);

// The address-space backends over `limit` bytes: kVirtual hands out adjacent
// blocks (coalescing, like VMM); kSimCudaMalloc leaves a gap after every
// block and reports no coalescing, as cudaMalloc's regions behave (twice the
// limit is reserved so that the gaps never run it out). base() is nullptr
// when the kernel refused the reservation.
std::unique_ptr<VirtualSubAllocator> MakeVirtualSubAllocator(Backend backend,
                                                             size_t limit);

struct AllocConf {
  Backend backend = Backend::kCuda;
  AllocatorOptions options;
  std::optional<uint64_t> memory_limit;   // bytes
  std::optional<double> memory_fraction;  // of the device's total memory
  // The keys the text gave, in order, a preset's option keys first: what a
  // caller layering one setting
  // over another (bfc-replay: --conf over BFC_ALLOC_CONF) takes from it.
  std::vector<std::string> keys;
  // One message per key that was taken for nothing (see above), in order.
  std::vector<std::string> ignored;
};

// Parses `text` (empty: the defaults). Messages start with "BFC_ALLOC_CONF: ".
[[nodiscard]] absl::StatusOr<AllocConf> ParseAllocConf(absl::string_view text);

// Every accepted key, comma-separated, for messages and --help.
std::string AllocConfKeys();

// What an accepted key sets: "backend" for expandable_segments, the option's
// name for a PyTorch alias (max_split_size_mb: "max_split_bytes"), else the
// key itself. For a caller layering AllocConf::keys over other settings.
std::string AllocConfSetting(absl::string_view key);

}  // namespace bfc::c_api

#endif  // BFC_C_API_ALLOC_CONF_H_
