// File: src/c_api/alloc_conf.cc
// BFC_ALLOC_CONF: the keys of its own (backend, memory_limit,
// memory_fraction) and, through the option table, every allocator option.
#include "c_api/alloc_conf.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bfc/allocator_options.h"
#include "bfc/units.h"

namespace bfc::c_api {
namespace {

constexpr const char* kOwnKeys[] = {"backend", "memory_limit",
                                    "memory_fraction"};

// PyTorch's PYTORCH_CUDA_ALLOC_CONF keys, which a PyTorch user types here
// out of habit. None has a bfc option of the same meaning (yet), so each is
// refused with what to use instead, rather than "unknown key".
struct PyTorchKey {
  const char* key;
  const char* instead;
};
constexpr PyTorchKey kPyTorchKeys[] = {
    {"expandable_segments",
     "bfc has no expandable (VMM) backend yet; leave it out (False is "
     "accepted) or use backend:cuda, which grows its pool like TF"},
    {"max_split_size_mb",
     "PyTorch's never-split-above size has no bfc equivalent; bfc splits as "
     "TF does, with its internal-fragmentation cap set by "
     "fragmentation_fraction (a fraction of the memory limit)"},
    {"garbage_collection_threshold",
     "bfc has no usage threshold; use garbage_collection:true to give fully "
     "free regions back when an allocation would otherwise fail"},
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
     "bfc never holds its lock across a driver allocation's wait"},
};

absl::Status BadValue(absl::string_view key, absl::string_view value,
                      absl::string_view accepted) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: bad value \"%s\" for %s (accepted values: %s)",
                      kAllocConfEnvVar, value, key, accepted));
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
  }
  return "?";
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

absl::StatusOr<AllocConf> ParseAllocConf(absl::string_view text) {
  AllocConf conf;
  std::vector<std::string>& seen = conf.keys;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: entry \"%s\" is not key:value (accepted keys: %s)",
          kAllocConfEnvVar, entry, AllocConfKeys()));
    }
    const std::string key(absl::StripAsciiWhitespace(entry.substr(0, colon)));
    const absl::string_view value =
        absl::StripAsciiWhitespace(entry.substr(colon + 1));
    for (const std::string& s : seen) {
      if (s == key) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: key %s is given more than once", kAllocConfEnvVar, key));
      }
    }
    seen.push_back(key);

    if (key == "backend") {
      // PyTorch's "native" is its caching allocator over cudaMalloc: bfc's
      // cuda backend plays that part.
      if (value == "cuda" || value == "native") {
        conf.backend = Backend::kCuda;
      } else if (value == "host") {
        conf.backend = Backend::kHost;
      } else if (value == "virtual") {
        conf.backend = Backend::kVirtual;
      } else if (value == "cudaMallocAsync") {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: backend:cudaMallocAsync is PyTorch's setting for CUDA's own "
            "stream-ordered pool; with bfc loaded, bfc is the allocator: use "
            "backend:cuda (or native)",
            kAllocConfEnvVar));
      } else {
        return BadValue(key, value, "cuda (or native), host, virtual");
      }
    } else if (key == "memory_limit") {
      absl::StatusOr<uint64_t> bytes = ParseByteSize(value);
      if (!bytes.ok() || *bytes == 0) {
        return BadValue(
            key, value,
            absl::StrCat("a byte count > 0 (", kByteSizeGrammar, ")"));
      }
      conf.memory_limit = *bytes;
    } else if (key == "memory_fraction") {
      double d = 0;
      if (!absl::SimpleAtod(value, &d) || !(d > 0 && d <= 1)) {
        return BadValue(key, value, "a number in (0, 1]");
      }
      conf.memory_fraction = d;
    } else if (const OptionField* field = FindAllocatorOptionField(key)) {
      if (!SetAllocatorOption(conf.options, key, value).ok()) {
        return BadValue(key, value, OptionKindGrammar(field->kind));
      }
    } else {
      for (const PyTorchKey& pt : kPyTorchKeys) {
        if (key != pt.key) continue;
        // PyTorch's default, which changes nothing.
        if (key == "expandable_segments" &&
            (absl::EqualsIgnoreCase(value, "false") || value == "0")) {
          break;
        }
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: %s is a PyTorch allocator setting that bfc does not take: "
            "%s",
            kAllocConfEnvVar, key, pt.instead));
      }
      bool pytorch_default = false;
      for (const PyTorchKey& pt : kPyTorchKeys) {
        pytorch_default |= key == pt.key;
      }
      if (pytorch_default) continue;
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: unknown key \"%s\" (accepted keys: %s)",
                          kAllocConfEnvVar, key, AllocConfKeys()));
    }
  }
  if (conf.memory_limit && conf.memory_fraction) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: memory_limit and memory_fraction are both given (accepted: at "
        "most one of them)",
        kAllocConfEnvVar));
  }
  return conf;
}

}  // namespace bfc::c_api
