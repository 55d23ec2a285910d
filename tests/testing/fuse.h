// File: tests/testing/fuse.h
// -----------------------------------------------------------------------------
//
// A fuse for tests that could hang (threads, waits, retries): a watchdog
// thread that, unless the Fuse is destroyed first, prints what was running
// and ends the process with a failure after `timeout`. A deadlock then becomes
// a failed test with a message, not a stuck CI job waiting for ctest's own
// timeout.
//
//   TEST(Concurrency, Foo) {
//     bfc::testing::Fuse fuse(absl::Seconds(60), "Concurrency.Foo");
//     ... threads ...
//   }
#ifndef BFC_TESTS_TESTING_FUSE_H_
#define BFC_TESTS_TESTING_FUSE_H_

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/time/time.h"

namespace bfc::testing {

// Sanitizers slow code down 2-20x; fuses and op counts scale with this.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr int kSanitizerSlowdown = 5;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif
#elif defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerSlowdown = 5;
#else
inline constexpr int kSanitizerSlowdown = 1;
#endif

class Fuse {
 public:
  Fuse(absl::Duration timeout, std::string what)
      : what_(std::move(what)), watchdog_([this, timeout] {
          std::unique_lock<std::mutex> lock(mu_);
          const bool disarmed = cv_.wait_for(
              lock, absl::ToChronoMilliseconds(timeout * kSanitizerSlowdown),
              [this] { return disarmed_; });
          if (!disarmed) {
            std::fprintf(
                stderr,
                "\nFUSE BLOWN: '%s' did not finish within %s; "
                "treating it as a hang (deadlock or lost wake-up)\n",
                what_.c_str(),
                absl::FormatDuration(timeout * kSanitizerSlowdown).c_str());
            std::fflush(stderr);
            std::_Exit(3);
          }
        }) {}
  ~Fuse() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disarmed_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }
  Fuse(const Fuse&) = delete;
  Fuse& operator=(const Fuse&) = delete;

 private:
  const std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread watchdog_;  // last: starts after the members it uses
};

}  // namespace bfc::testing

#endif  // BFC_TESTS_TESTING_FUSE_H_
