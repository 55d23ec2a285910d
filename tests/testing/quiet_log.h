// File: tests/testing/quiet_log.h
// -----------------------------------------------------------------------------
//
// Silences bfc's log (bfc/log.h) for a scope, while a test provokes errors on
// purpose (refused synchronizations, injected failures, out of memory); the
// previous sink comes back when it ends.
#ifndef BFC_TESTS_TESTING_QUIET_LOG_H_
#define BFC_TESTS_TESTING_QUIET_LOG_H_

#include <string_view>
#include <utility>

#include "bfc/log.h"

namespace bfc::testing {

class QuietLog {
 public:
  QuietLog() : previous_(SetLogSink([](LogSeverity, std::string_view) {})) {}
  ~QuietLog() { SetLogSink(std::move(previous_)); }
  QuietLog(const QuietLog&) = delete;
  QuietLog& operator=(const QuietLog&) = delete;

 private:
  LogSink previous_;
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_QUIET_LOG_H_
