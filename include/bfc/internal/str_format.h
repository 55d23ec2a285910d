// File: bfc/internal/str_format.h
// -----------------------------------------------------------------------------
//
// Formatting that survives the host running out of memory.
//
// With Debian's Abseil, a std::bad_alloc raised inside absl::StrFormat or
// absl::StrAppendFormat does not reach the caller's catch: the process ends
// in std::terminate (absl::StrCat and absl::Status throw it normally). So
// the library formats with Format and AppendFormat instead. They format into
// a buffer on the stack with absl::SNPrintF, which takes no host memory, and
// only then build the std::string themselves: out of memory, that throws
// std::bad_alloc like any other allocation, and the caller's catch (or the
// library's noexcept boundary) handles it.
//
// The format strings are absl's, checked the same way.
//
// Internal: not part of the API. Thread-safe.
#ifndef BFC_INTERNAL_STR_FORMAT_H_
#define BFC_INTERNAL_STR_FORMAT_H_

#include <cstddef>
#include <string>

#include "absl/strings/str_format.h"

namespace bfc::internal {

// What fits here is formatted in one pass; a longer text is measured by
// that pass and formatted again into a string of its length.
inline constexpr size_t kFormatStackBytes = 512;

// absl::StrFormat, except that running out of host memory throws
// std::bad_alloc to the caller.
template <typename... Args>
std::string Format(const absl::FormatSpec<Args...>& format,
                   const Args&... args) {
  char buffer[kFormatStackBytes];
  const int n = absl::SNPrintF(buffer, sizeof(buffer), format, args...);
  if (n <= 0) return std::string();  // empty, or a spec absl rejected
  const size_t length = static_cast<size_t>(n);
  if (length < sizeof(buffer)) return std::string(buffer, length);
  std::string out(length, '\0');
  // size() + 1: SNPrintF ends what it writes with the '\0' that a
  // std::string already keeps after its last character.
  absl::SNPrintF(out.data(), out.size() + 1, format, args...);
  return out;
}

// absl::StrAppendFormat, with Format's behaviour out of memory (`*out` is
// then unchanged).
template <typename... Args>
std::string& AppendFormat(std::string* out,
                          const absl::FormatSpec<Args...>& format,
                          const Args&... args) {
  return out->append(Format(format, args...));
}

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_STR_FORMAT_H_
