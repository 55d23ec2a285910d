// File: bfc/allocator_options.h
// -----------------------------------------------------------------------------
//
// bfc::AllocatorOptions (spelled `bfc::Allocator::Options` in code ported from
// TensorFlow): how an Allocator grows, retries and reports. The defaults are
// TensorFlow's BFC behaviour; every bfc addition defaults to "off" or to TF's
// value.
//
// One definition, one table. The fields are declared once, in
// BFC_ALLOCATOR_OPTION_FIELDS below, with their type, default, kind, unit and
// a one-line doc. Everything that names options is produced from that list:
// the struct itself, AllocatorOptionFields() (the table), the BFC_ALLOC_CONF
// parser of libbfc_alloc.so, the "options" section of a memory dump's JSON
// (both directions), the flags and --help of bfc-replay, and the README table
// (checked by a test). Adding an option is one line here, its use in the
// allocator, and its test.
//
// Value grammar, per kind (SetAllocatorOption / AllocatorOptionToString):
//   kBool      true | false | 1 | 0, in any case (PyTorch writes True)
//   kCount     a decimal integer in [0, 2^31 - 1]
//   kFraction  a decimal number in [0, 1]
//   kDuration  a finite duration >= 0: 10s, 500ms, 1m, 1.5s (absl::Duration)
//   kBytes     a byte size < 2^62: 0, 4096, 2MiB, 1.5GiB, 1GB (bfc/units.h)
//   kGrowthPolicy  doubling | same_as_requested | fixed_step
//
// Example:
//
//   bfc::AllocatorOptions options;
//   absl::Status s = bfc::SetAllocatorOption(options, "allow_growth", "false");
//   // s: OK; options.allow_growth == false
//   s = bfc::SetAllocatorOption(options, "retry_timeout", "soon");
//   // s: InvalidArgument naming retry_timeout, "soon" and the grammar
//
// Thread safety: plain values; the functions are thread-safe.
#ifndef BFC_ALLOCATOR_OPTIONS_H_
#define BFC_ALLOCATOR_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace bfc {

// How Extend sizes a new region (allow_growth on). Every policy asks for at
// least what the request needs, then clamps to the limit; max_ and
// min_growth_step_bytes bound the step.
enum class GrowthPolicy {
  // TF: start at initial_region_bytes and double after every Extend.
  kDoubling,
  // ONNX Runtime's kSameAsRequested: exactly what the request needs.
  kSameAsRequested,
  // Paddle's auto-growth chunk: initial_region_bytes each time, or the
  // request when it is larger.
  kFixedStep,
};

// X(type, name, default, kind, unit, doc). Kinds and units are described in
// the file comment; `doc` is one line, used verbatim by --help and the README.
#define BFC_ALLOCATOR_OPTION_FIELDS(X)                                        \
  X(bool, allow_growth, true, kBool, "",                                      \
    "Grow from 2 MiB by doubling; false: the first Extend takes the whole "   \
    "limit (TF: allow_growth)")                                               \
  X(bool, allow_retry_on_failure, true, kBool, "",                            \
    "On out-of-memory, wait up to retry_timeout for other threads' frees "    \
    "(TF: allow_retry_on_failure)")                                           \
  X(bool, garbage_collection, false, kBool, "",                               \
    "On out-of-memory, give fully-free regions back, then extend again "      \
    "(TF: garbage_collection)")                                               \
  X(double, fragmentation_fraction, 0.0, kFraction, "of the limit",           \
    "Split cap: a leftover at least this fraction of the limit is split off " \
    "(0: 128 MiB, TF's default)")                                             \
  X(absl::Duration, retry_timeout, absl::Seconds(10), kDuration, "",          \
    "How long a retrying allocation waits for frees (TF: 10 s)")              \
  X(bool, abort_on_invalid_input, false, kBool, "",                           \
    "Abort the process on an invalid free or request instead of reporting "   \
    "it (TF always aborts on an invalid free)")                               \
  X(int, max_oom_logs, 10, kCount, "",                                        \
    "At most this many out-of-memory reports are logged per allocator")       \
  X(bool, record_allocation_sites, false, kBool, "",                          \
    "Capture the call stack of every allocation for dumps and leak and OOM "  \
    "reports (a stack walk per allocation)")                                  \
  X(GrowthPolicy, growth_policy, GrowthPolicy::kDoubling, kGrowthPolicy, "",  \
    "How a new region is sized: doubling (TF), same_as_requested (ONNX "      \
    "Runtime), fixed_step (initial_region_bytes each time)")                  \
  X(uint64_t, initial_region_bytes, uint64_t{2} << 20, kBytes, "",            \
    "The first region with growth on (TF: 2 MiB); fixed_step's step")         \
  X(uint64_t, max_growth_step_bytes, 0, kBytes, "",                           \
    "Cap on one region (the request still fits; 0: none; ONNX Runtime's "     \
    "max_power_of_two_extend_bytes)")                                         \
  X(uint64_t, min_growth_step_bytes, 0, kBytes, "",                           \
    "Floor on one region (0: none; Paddle's auto_growth_chunk_size)")         \
  X(uint64_t, min_growth_step_max_request_bytes, 0, kBytes, "",               \
    "The floor applies only to requests of at most this many bytes; larger "  \
    "ones are not raised to it (0: every request; PyTorch grows 2 MiB "       \
    "segments for requests of at most 1 MiB)")                                \
  X(bool, release_before_extend, false, kBool, "",                            \
    "Before taking a new region, give fully-free ones back, least recently "  \
    "freed first, until the grown pool is no larger than its peak so far "    \
    "(Paddle's free_idle_chunk)")                                             \
  X(uint64_t, huge_allocation_bytes, 0, kBytes, "",                           \
    "Requests of at least this many bytes get a region of their own, never "  \
    "split or reused, given back on free (0: off; Paddle's HUGE_CHUNK)")      \
  X(uint64_t, min_split_remainder_bytes, 0, kBytes, "",                       \
    "Also split a chunk when the rest is at least this (TF's rule always "    \
    "applies: the chunk is at least twice the request or the rest reaches "   \
    "the split cap; 0: only TF's rule)")                                      \
  X(uint64_t, max_split_bytes, 0, kBytes, "",                                 \
    "PyTorch's max_split_size: requests this large are not split unless "     \
    "20 MiB would be left, and take no chunk 20 MiB larger; smaller ones "    \
    "take no chunk this large (without a coalescing sub-allocator) (0: off)") \
  X(int, grow_below_peak_ratio, 0, kCount, "",                                \
    "While the pool, grown, stays within its peak so far, a request whose "   \
    "best fit is at least this many times the region it would grow gets "     \
    "that region instead, keeping the large free chunk whole (without a "     \
    "coalescing sub-allocator) (0: off)")                                     \
  X(double, pool_release_threshold, 0.0, kFraction, "of the limit",           \
    "Before growing the pool past this fraction of the limit, give the "      \
    "least recently freed fully-free regions back (0: off; PyTorch's "        \
    "garbage_collection_threshold)")                                          \
  X(bool, extend_by_missing_tail, false, kBool, "",                           \
    "With a coalescing sub-allocator, grow by what the free tail of the "     \
    "newest region lacks rather than by the whole request (PyTorch's "        \
    "expandable segments)")                                                   \
  X(bool, release_partial_regions, false, kBool, "",                          \
    "Over a sub-allocator that frees parts of regions (backend vmm), the "    \
    "releases above and the out-of-memory path also give back the whole "     \
    "pages inside free chunks (PyTorch's expandable segments)")               \
  X(bool, reuse_follow_dependencies, true, kBool, "",                         \
    "A stream may reuse memory freed on another stream it is known to wait "  \
    "for (CUDA: cudaMemPoolReuseFollowEventDependencies)")                    \
  X(bool, reuse_allow_opportunistic, true, kBool, "",                         \
    "A stream may reuse memory whose free on another stream has completed "   \
    "(CUDA: cudaMemPoolReuseAllowOpportunistic)")                             \
  X(bool, reuse_allow_internal_dependencies, true, kBool, "",                 \
    "A stream may reuse memory still pending on another stream after the "    \
    "allocator makes it wait for that work, before growing the pool (CUDA: "  \
    "cudaMemPoolReuseAllowInternalDependencies)")

struct AllocatorOptions {
#define BFC_INTERNAL_DECLARE_OPTION(type, name, default_value, kind, unit, \
                                    doc)                                   \
  type name = default_value;
  BFC_ALLOCATOR_OPTION_FIELDS(BFC_INTERNAL_DECLARE_OPTION)
#undef BFC_INTERNAL_DECLARE_OPTION
};

enum class OptionKind {
  kBool,
  kCount,
  kFraction,
  kDuration,
  kBytes,
  kGrowthPolicy,
};

// "doubling", "same_as_requested", "fixed_step".
absl::string_view GrowthPolicyName(GrowthPolicy policy);

// A named bundle of the growth and footprint options, so that users need not
// learn each knob: `conf` is what it sets, in the BFC_ALLOC_CONF grammar
// (every growth option, so a preset fully decides growth; the rest keep
// their values). "tf" is the defaults; "low_footprint" trades sub-allocator
// calls for a pool close to the live bytes.
struct AllocatorPreset {
  absl::string_view name;
  absl::string_view conf;
  absl::string_view doc;  // one line
};
absl::Span<const AllocatorPreset> AllocatorPresets();
// Sets the options of preset `name`; InvalidArgument naming the presets for
// an unknown name (`options` unchanged).
[[nodiscard]] absl::Status ApplyAllocatorPreset(AllocatorOptions& options,
                                                absl::string_view name);

// One row of the table. The default, as text in the value grammar, is
// AllocatorOptionToString(AllocatorOptions(), name).
struct OptionField {
  absl::string_view name;  // as in BFC_ALLOC_CONF: allow_growth
  OptionKind kind;
  absl::string_view unit;  // "" when the kind says it all
  absl::string_view doc;   // one line
};

// Every option, in declaration order.
absl::Span<const OptionField> AllocatorOptionFields();
// The row for `name`, or nullptr.
const OptionField* FindAllocatorOptionField(absl::string_view name);
// What each kind accepts, for messages and --help: "true or false".
absl::string_view OptionKindGrammar(OptionKind kind);

// Sets option `name` from `value` (grammar above). InvalidArgument naming the
// option, the value and what is accepted (or, for an unknown name, every
// accepted name); `options` is unchanged on failure.
[[nodiscard]] absl::Status SetAllocatorOption(AllocatorOptions& options,
                                              absl::string_view name,
                                              absl::string_view value);
// OK when every field lies in the range its grammar accepts; otherwise
// InvalidArgument naming the first field out of range and its value
// ("option fragmentation_fraction = nan is out of range (accepted: ...)").
// For options set in code rather than parsed: an Allocator given such options
// logs this and falls back to the default behaviour for the field
// (fragmentation_fraction: the 128 MiB cap; max_oom_logs < 0: none logged;
// retry_timeout < 0: no wait).
[[nodiscard]] absl::Status ValidateAllocatorOptions(
    const AllocatorOptions& options);

// The value of option `name` in the same grammar ("true", "0.5", "10s"), so
// that SetAllocatorOption(o, n, AllocatorOptionToString(o, n)) is a no-op.
// Empty for an unknown name.
std::string AllocatorOptionToString(const AllocatorOptions& options,
                                    absl::string_view name);

// The README's table of options: name, kind/unit, default, doc (Markdown).
std::string AllocatorOptionsMarkdownTable();

bool operator==(const AllocatorOptions& a, const AllocatorOptions& b);
inline bool operator!=(const AllocatorOptions& a, const AllocatorOptions& b) {
  return !(a == b);
}

}  // namespace bfc

#endif  // BFC_ALLOCATOR_OPTIONS_H_
