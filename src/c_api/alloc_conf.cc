// File: src/c_api/alloc_conf.cc
// BFC_ALLOC_CONF: the keys of its own (backend, memory_limit,
// memory_fraction) and, through the option table, every allocator option.
#include "c_api/alloc_conf.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bfc/allocator_options.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"
#include "bfc/units.h"

namespace bfc::c_api {
namespace {

constexpr const char* kOwnKeys[] = {"backend", "memory_limit",
                                    "memory_fraction", "preset"};

// PyTorch's PYTORCH_CUDA_ALLOC_CONF keys, which a PyTorch user types here
// out of habit, that have no bfc option of the same meaning: each is ignored
// with what to use instead, rather than "unknown key". (max_split_size_mb and
// garbage_collection_threshold do have one: PyTorchAlias.)
struct PyTorchKey {
  const char* key;
  const char* instead;
};
constexpr PyTorchKey kPyTorchKeys[] = {
    {"roundup_power2_divisions",
     "bfc rounds requests as TF does (256-byte units, bins by powers of "
     "two); there is no rounding option"},
    {"pinned_use_cuda_host_register",
     "it configures PyTorch's own pinned-memory allocator, not this one"},
    {"pinned_num_register_threads",
     "it configures PyTorch's own pinned-memory allocator, not this one"},
    {"pinned_use_background_threads",
     "it configures PyTorch's own pinned-memory allocator, not this one"},
    {"release_lock_on_cudamalloc",
     "bfc holds its lock across the backend's allocation call, as TF "
     "does; there is no option to release it"},
};

// PyTorch keys that set a bfc option, and the option they set.
struct PyTorchAlias {
  const char* key;
  const char* option;
};
constexpr PyTorchAlias kPyTorchAliases[] = {
    // MiB, as PyTorch reads it; above 20 (its large-buffer size), as
    // PyTorch requires.
    {"max_split_size_mb", "max_split_bytes"},
    // A fraction in (0, 1), as PyTorch requires.
    {"garbage_collection_threshold", "pool_release_threshold"},
};

const PyTorchAlias* FindPyTorchAlias(absl::string_view key) {
  for (const PyTorchAlias& a : kPyTorchAliases) {
    if (key == a.key || key == a.option) return &a;
  }
  return nullptr;
}

const PyTorchKey* FindPyTorchKey(absl::string_view key) {
  for (const PyTorchKey& pt : kPyTorchKeys) {
    if (key == pt.key) return &pt;
  }
  return nullptr;
}

// Levenshtein distance, capped at kNearKeyCap: only "is it at most 2"
// matters. Lengths that differ by the cap or more settle it without the
// table: an unknown key may be as long as the whole text, and thousands of
// them met every accepted key's table (seconds for a 15 KB string in the
// fuzzer's build).
constexpr size_t kNearKeyCap = 3;
size_t EditDistance(absl::string_view a, absl::string_view b) {
  const size_t length_gap =
      a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (length_gap >= kNearKeyCap) return kNearKeyCap;
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return std::min(row[b.size()], kNearKeyCap);
}

// The accepted key a typo most likely meant (at most two edits), or "".
absl::string_view NearestKey(absl::string_view key) {
  absl::string_view best;
  size_t best_distance = kNearKeyCap;
  auto consider = [&](absl::string_view candidate) {
    const size_t d = EditDistance(key, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  };
  for (const char* k : kOwnKeys) consider(k);
  for (const OptionField& f : AllocatorOptionFields()) consider(f.name);
  return best;
}

absl::Status BadValue(absl::string_view key, absl::string_view value,
                      absl::string_view accepted) {
  return absl::InvalidArgumentError(
      bfc::internal::Format("%s: bad value \"%s\" for %s (accepted values: %s)",
                            kAllocConfEnvVar, value, key, accepted));
}

absl::Status ExpandableConflict(absl::string_view backend, bool expandable) {
  return absl::InvalidArgumentError(bfc::internal::Format(
      "%s: expandable_segments:%s contradicts backend:%s (expandable "
      "segments are backend:vmm; give one of them)",
      kAllocConfEnvVar, expandable ? "True" : "False", backend));
}

}  // namespace

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kCuda:
      return "cuda";
    case Backend::kHost:
      return "host";
    case Backend::kVirtual:
      return "virtual";
    case Backend::kSimCudaMalloc:
      return "sim-cudamalloc";
    case Backend::kVmm:
      return "vmm";
  }
  return "?";
}

std::unique_ptr<VirtualSubAllocator> MakeVirtualSubAllocator(Backend backend,
                                                             size_t limit) {
  if (backend != Backend::kSimCudaMalloc) {
    return std::make_unique<VirtualSubAllocator>(limit);
  }
  VirtualSubAllocator::Options o;
  o.supports_coalescing = false;
  o.gap_bytes = kMinAllocationSize;
  // Every block is at least 256 bytes and is followed by a 256-byte gap.
  const size_t capacity =
      limit <= std::numeric_limits<size_t>::max() / 2 ? 2 * limit : limit;
  return std::make_unique<VirtualSubAllocator>(capacity, o);
}

std::string AllocConfKeys() {
  std::string keys;
  for (const char* k : kOwnKeys)
    absl::StrAppend(&keys, keys.empty() ? "" : ", ", k);
  for (const OptionField& f : AllocatorOptionFields()) {
    absl::StrAppend(&keys, ", ", f.name);
  }
  return keys;
}

std::string AllocConfSetting(absl::string_view key) {
  if (key == "expandable_segments") return "backend";
  if (const PyTorchAlias* a = FindPyTorchAlias(key)) return a->option;
  return std::string(key);
}

// How many unknown-key messages list the accepted keys.
constexpr int kUnknownKeysListingAll = 8;

absl::StatusOr<AllocConf> ParseAllocConf(absl::string_view text) {
  AllocConf conf;
  // Keys given so far: a set, so that a string of n entries costs O(n).
  absl::flat_hash_set<std::string> seen;
  // Unknown keys so far: the first few messages list every accepted key, the
  // rest only name theirs (thousands of unknown keys would otherwise make a
  // message list ~600 times the text's size).
  int unknown_keys = 0;
  // expandable_segments' value, when given: it must agree with `backend`.
  std::optional<bool> expandable;
  // A preset is a bundle of option keys: applied first, wherever it stands,
  // so that the keys given beside it override its values.
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos ||
        absl::StripAsciiWhitespace(entry.substr(0, colon)) != "preset") {
      continue;
    }
    const absl::string_view name =
        absl::StripAsciiWhitespace(entry.substr(colon + 1));
    std::string names;
    for (const AllocatorPreset& p : AllocatorPresets()) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", p.name);
      if (p.name != name) continue;
      (void)ApplyAllocatorPreset(conf.options, name);
      for (absl::string_view set : absl::StrSplit(p.conf, ',')) {
        conf.keys.emplace_back(set.substr(0, set.find(':')));
      }
    }
    if (conf.keys.empty()) return BadValue("preset", name, names);
    break;  // a second preset entry is refused below as a repeated key
  }
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(bfc::internal::Format(
          "%s: entry \"%s\" is not key:value (accepted keys: %s)",
          kAllocConfEnvVar, entry, AllocConfKeys()));
    }
    const std::string key(absl::StripAsciiWhitespace(entry.substr(0, colon)));
    const absl::string_view value =
        absl::StripAsciiWhitespace(entry.substr(colon + 1));
    if (seen.contains(key)) {
      return absl::InvalidArgumentError(bfc::internal::Format(
          "%s: key %s is given more than once", kAllocConfEnvVar, key));
    }
    // PyTorch's spelling and bfc's set the same option.
    if (const PyTorchAlias* a = FindPyTorchAlias(key);
        a != nullptr && (seen.contains(a->key) || seen.contains(a->option))) {
      return absl::InvalidArgumentError(bfc::internal::Format(
          "%s: %s and %s set the same option (give one of them)",
          kAllocConfEnvVar, a->key, a->option));
    }
    seen.insert(key);
    if (key != "preset") conf.keys.push_back(key);

    if (key == "preset") {
      // Applied above.
    } else if (key == "backend") {
      // PyTorch's "native" is its caching allocator over cudaMalloc: bfc's
      // cuda backend plays that part.
      if (value == "cuda" || value == "native") {
        conf.backend = Backend::kCuda;
      } else if (value == "host") {
        conf.backend = Backend::kHost;
      } else if (value == "virtual") {
        conf.backend = Backend::kVirtual;
      } else if (value == "sim-cudamalloc") {
        conf.backend = Backend::kSimCudaMalloc;
      } else if (value == "vmm") {
        conf.backend = Backend::kVmm;
      } else if (value == "cudaMallocAsync") {
        // Device memory is what the user asked for; whose pool serves it is
        // decided by loading bfc.
        conf.backend = Backend::kCuda;
        conf.ignored.push_back(bfc::internal::Format(
            "%s: backend:cudaMallocAsync is PyTorch's setting for CUDA's own "
            "stream-ordered pool; with bfc loaded, bfc is the allocator: "
            "serving backend:cuda (write backend:cuda or native)",
            kAllocConfEnvVar));
      } else {
        return BadValue(key, value,
                        "cuda (or native), host, virtual, sim-cudamalloc, "
                        "vmm");
      }
      if (expandable.has_value() &&
          *expandable != (conf.backend == Backend::kVmm)) {
        return ExpandableConflict(value, *expandable);
      }
    } else if (key == "expandable_segments") {
      // PyTorch's spelling of backend:vmm (any case, as PyTorch reads it).
      if (absl::EqualsIgnoreCase(value, "true") || value == "1") {
        expandable = true;
      } else if (absl::EqualsIgnoreCase(value, "false") || value == "0") {
        expandable = false;
      } else {
        return BadValue(key, value, "True or False (PyTorch's spelling)");
      }
      const bool backend_given = seen.contains("backend");
      if (backend_given && *expandable != (conf.backend == Backend::kVmm)) {
        return ExpandableConflict(BackendName(conf.backend), *expandable);
      }
      if (*expandable) conf.backend = Backend::kVmm;
    } else if (key == "memory_limit") {
      // Below the smallest chunk no allocation could ever succeed (a
      // review: memory_limit:255 was taken, and every call then failed).
      absl::StatusOr<uint64_t> bytes = ParseByteSize(value);
      if (!bytes.ok() || *bytes < kMinAllocationSize) {
        return BadValue(
            key, value,
            absl::StrCat("a byte count of at least ", kMinAllocationSize, " (",
                         kByteSizeGrammar, ")"));
      }
      conf.memory_limit = *bytes;
    } else if (key == "memory_fraction") {
      absl::StatusOr<double> d = ParseDecimalNumber(value);
      if (!d.ok() || !(*d > 0 && *d <= 1)) {
        return BadValue(key, value, "a number in (0, 1]");
      }
      conf.memory_fraction = *d;
    } else if (const OptionField* field = FindAllocatorOptionField(key)) {
      if (!SetAllocatorOption(conf.options, key, value).ok()) {
        return BadValue(key, value, OptionKindGrammar(field->kind));
      }
    } else if (key == "max_split_size_mb") {
      uint64_t mb = 0;
      if (!absl::SimpleAtoi(value, &mb) || mb <= 20 ||
          mb > (uint64_t{1} << 40)) {
        return BadValue(key, value,
                        "an integer number of MiB above 20 (PyTorch's rule); "
                        "sets max_split_bytes");
      }
      conf.options.max_split_bytes = mb << 20;
      conf.keys.back() = "max_split_bytes";
    } else if (key == "garbage_collection_threshold") {
      absl::StatusOr<double> d = ParseDecimalNumber(value);
      if (!d.ok() || !(*d > 0 && *d < 1)) {
        return BadValue(key, value,
                        "a number in (0, 1) (PyTorch's rule); sets "
                        "pool_release_threshold");
      }
      conf.options.pool_release_threshold = *d;
      conf.keys.back() = "pool_release_threshold";
    } else if (const PyTorchKey* pt = FindPyTorchKey(key)) {
      conf.ignored.push_back(bfc::internal::Format(
          "%s: %s is a PyTorch allocator setting that bfc does not take: %s",
          kAllocConfEnvVar, key, pt->instead));
    } else {
      std::string message = bfc::internal::Format("%s: unknown key \"%s\"",
                                                  kAllocConfEnvVar, key);
      if (absl::string_view near = NearestKey(key); !near.empty()) {
        absl::StrAppend(&message, " (did you mean ", near, "?)");
      }
      if (++unknown_keys <= kUnknownKeysListingAll) {
        absl::StrAppend(&message, " (accepted keys: ", AllocConfKeys(), ")");
      }
      conf.ignored.push_back(std::move(message));
    }
  }
  if (conf.memory_limit && conf.memory_fraction) {
    return absl::InvalidArgumentError(bfc::internal::Format(
        "%s: memory_limit and memory_fraction are both given (accepted: at "
        "most one of them)",
        kAllocConfEnvVar));
  }
  return conf;
}

}  // namespace bfc::c_api
