// File: tests/tool_io_test.cc
// -----------------------------------------------------------------------------
//
// Tests for the command-line tools' shared helpers (tools/tool_io.h) that
// are not reached through a tool's output: RowProgress's redraw decisions.
#include "tool_io.h"

#include <cstdint>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace bfc::tools {
namespace {

// Planner progress: a row is drawn when it starts, then at most four times
// a second while it runs, with how long it has run; a new row, a new row
// count or Reset start over.
TEST(RowProgressTest, DrawsARowWhenItStartsThenAtMostFourTimesASecond) {
  RowProgress rows;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Duration ms = absl::Milliseconds(1);
  int64_t seconds = -1;
  ASSERT_TRUE(rows.Update(0, 3, t0, &seconds));
  EXPECT_EQ(seconds, 0);
  EXPECT_FALSE(rows.Update(0, 3, t0 + 249 * ms, &seconds));
  ASSERT_TRUE(rows.Update(0, 3, t0 + 250 * ms, &seconds));
  EXPECT_EQ(seconds, 0);
  EXPECT_FALSE(rows.Update(0, 3, t0 + 400 * ms, &seconds));
  ASSERT_TRUE(rows.Update(0, 3, t0 + 1600 * ms, &seconds));
  EXPECT_EQ(seconds, 1);  // whole seconds since the row started
  // The next row starts over, at once.
  ASSERT_TRUE(rows.Update(1, 3, t0 + 1700 * ms, &seconds));
  EXPECT_EQ(seconds, 0);
  // Another trace with a different row count, at once too.
  EXPECT_TRUE(rows.Update(1, 4, t0 + 1710 * ms, &seconds));
  // The same row of the next trace: after Reset.
  EXPECT_FALSE(rows.Update(1, 4, t0 + 1720 * ms, &seconds));
  rows.Reset();
  ASSERT_TRUE(rows.Update(1, 4, t0 + 5000 * ms, &seconds));
  EXPECT_EQ(seconds, 0);
}

}  // namespace
}  // namespace bfc::tools
