// File: bfc/internal/check.h
// -----------------------------------------------------------------------------
//
// The debug-check ladder. One build option, BFC_CHECK_LEVEL, picks how much
// the library checks its own invariants (mimalloc's debug levels, snmalloc's
// "expensive checks"):
//
//   0  No checks: what benchmarks and releases build. The macros below compile
//      to nothing; their arguments are type-checked but never evaluated.
//   1  Cheap checks on what each operation touches (the default when the tests
//      are built): a bin insert finds its key absent and an erase finds it
//      present, a map insert finds its key unmapped, a split cuts a free chunk
//      at a multiple of kMinAllocationSize, a merge finds both chunks free and
//      adjacent, a free finds its chunk in use. O(1) or O(log n) each.
//   2  Level 1, plus Allocator::Validate() (every invariant of every component
//      and across them, DESIGN.md "Invariants") after every mutating public
//      call: O(chunks) per call. A level-1 build rises to this level at run
//      time when the environment variable BFC_CHECK_LEVEL is 2 (read once per
//      process): CI runs every unit test that way on the README's build
//      instead of compiling everything again (the CMake preset `check2`
//      builds at level 2 outright).
//
// BFC_CHECK_LEVEL is a PUBLIC compile definition of target bfc, so the inline
// code of the installed internal headers checks at the library's level in
// every translation unit. Undefined (a header used without the target): 0.
//
// These macros guard internal invariants, never caller input: a caller's
// mistake (a bad alignment, a foreign pointer) is reported through
// absl::Status or a logged error and leaves the state intact (DESIGN.md,
// error policy). A failed check is a bug in this library; it prints one line
//
//   bfc: check failed at src/core/allocator.cc:612: erased
//   bfc: check failed at include/bfc/internal/chunk.h:80: h < size_ (7 vs. 3)
//
// to stderr and aborts.
#ifndef BFC_INTERNAL_CHECK_H_
#define BFC_INTERNAL_CHECK_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "bfc/internal/str_format.h"

#ifndef BFC_CHECK_LEVEL
#define BFC_CHECK_LEVEL 0
#endif

namespace bfc::internal::check_internal {

// Prints "bfc: check failed at <file>:<line>: <what>" and aborts. Out of line
// and cold, so a check costs its comparison and a never-taken branch.
[[noreturn]] ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD inline void Fail(
    const char* file, int line, absl::string_view what) {
  std::fprintf(stderr, "bfc: check failed at %s:%d: %.*s\n", file, line,
               static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

// A value in a failed comparison, as a person reads it: pointers in hex,
// bools as words, characters and enums as numbers.
template <typename T>
std::string Value(const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_pointer_v<T>) {
    return bfc::internal::Format("%p", static_cast<const volatile void*>(v));
  } else if constexpr (std::is_enum_v<T>) {
    return absl::StrCat(+static_cast<std::underlying_type_t<T>>(v));
  } else if constexpr (std::is_arithmetic_v<T>) {
    return absl::StrCat(+v);
  } else {
    return absl::StrCat(v);
  }
}

template <typename A, typename B>
[[noreturn]] ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD void OpFailed(
    const char* file, int line, const char* expr, const A& a, const B& b) {
  Fail(file, line, absl::StrCat(expr, " (", Value(a), " vs. ", Value(b), ")"));
}

}  // namespace bfc::internal::check_internal

namespace bfc::internal {

// Whether Allocator::Validate() runs after every mutating call: always at
// level 2, never at level 0 (whose builds have no checks to raise), and at
// level 1 when the environment says BFC_CHECK_LEVEL=2. "0" and "1" change
// nothing (the cheap checks are compiled in); any other value is named on
// stderr once and ignored.
#if BFC_CHECK_LEVEL >= 2
constexpr bool ValidateEveryCall() { return true; }
#elif BFC_CHECK_LEVEL == 1
inline bool ValidateEveryCall() {
  static const bool on = [] {
    const char* v = std::getenv("BFC_CHECK_LEVEL");
    if (v == nullptr) return false;
    const absl::string_view level(v);
    if (level == "2") return true;
    if (level != "0" && level != "1" && !level.empty()) {
      std::fprintf(stderr,
                   "bfc: BFC_CHECK_LEVEL in the environment is '%.*s', not 0, "
                   "1 or 2; ignored (this build checks at level 1)\n",
                   static_cast<int>(std::min<size_t>(level.size(), 32)),
                   level.data());
    }
    return false;
  }();
  return on;
}
#else
constexpr bool ValidateEveryCall() { return false; }
#endif

}  // namespace bfc::internal

#if BFC_CHECK_LEVEL >= 1

// BFC_DCHECK(cond): aborts with "bfc: check failed at file:line: cond" when
// `cond` is false. An expression of type void: usable anywhere a statement is.
#define BFC_DCHECK(cond)      \
  (ABSL_PREDICT_TRUE(cond)    \
       ? static_cast<void>(0) \
       : ::bfc::internal::check_internal::Fail(__FILE__, __LINE__, #cond))

// BFC_DCHECK_EQ(a, b) and friends: as BFC_DCHECK(a == b), and the message
// shows both values: "... a == b (3 vs. 4)". Each operand is evaluated once.
// Statements (not expressions): use them where a statement goes.
#define BFC_DCHECK_OP_(op, a, b)                                              \
  do {                                                                        \
    const auto& bfc_check_a_ = (a);                                           \
    const auto& bfc_check_b_ = (b);                                           \
    if (ABSL_PREDICT_FALSE(!(bfc_check_a_ op bfc_check_b_))) {                \
      ::bfc::internal::check_internal::OpFailed(                              \
          __FILE__, __LINE__, #a " " #op " " #b, bfc_check_a_, bfc_check_b_); \
    }                                                                         \
  } while (false)

#else  // BFC_CHECK_LEVEL == 0

// Type-checked, never evaluated, no code: `false && x` does not evaluate x.
#define BFC_DCHECK(cond) static_cast<void>(false && (cond))
#define BFC_DCHECK_OP_(op, a, b) static_cast<void>(false && ((a)op(b)))

#endif  // BFC_CHECK_LEVEL >= 1

#define BFC_DCHECK_EQ(a, b) BFC_DCHECK_OP_(==, a, b)
#define BFC_DCHECK_NE(a, b) BFC_DCHECK_OP_(!=, a, b)
#define BFC_DCHECK_LT(a, b) BFC_DCHECK_OP_(<, a, b)
#define BFC_DCHECK_LE(a, b) BFC_DCHECK_OP_(<=, a, b)
#define BFC_DCHECK_GT(a, b) BFC_DCHECK_OP_(>, a, b)
#define BFC_DCHECK_GE(a, b) BFC_DCHECK_OP_(>=, a, b)

#endif  // BFC_INTERNAL_CHECK_H_
