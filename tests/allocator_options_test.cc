// The option table (bfc/allocator_options.h): every field is in the table
// with its grammar, values round-trip through text, bad values are refused
// with the option named, and the README's table is the generated one.
#include "bfc/allocator_options.h"

#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

using ::testing::HasSubstr;

TEST(AllocatorOptionsTest, DefaultsAreTensorFlows) {
  const Allocator::Options o;  // the TF spelling is the same struct
  EXPECT_TRUE(o.allow_growth);
  EXPECT_TRUE(o.allow_retry_on_failure);
  EXPECT_FALSE(o.garbage_collection);
  EXPECT_EQ(o.fragmentation_fraction, 0.0);
  EXPECT_EQ(o.retry_timeout, absl::Seconds(10));
  EXPECT_FALSE(o.abort_on_invalid_input);
  EXPECT_EQ(o.max_oom_logs, 10);
  EXPECT_FALSE(o.record_allocation_sites);
}

TEST(AllocatorOptionsTest, TableListsEveryFieldOnceWithADoc) {
  std::set<std::string> names;
  for (const OptionField& f : AllocatorOptionFields()) {
    EXPECT_TRUE(names.insert(std::string(f.name)).second) << f.name;
    EXPECT_FALSE(f.doc.empty()) << f.name;
    EXPECT_EQ(f.doc.find('\n'), absl::string_view::npos) << f.name;
    EXPECT_EQ(FindAllocatorOptionField(f.name), &f);
    EXPECT_FALSE(AllocatorOptionToString(AllocatorOptions(), f.name).empty());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"allow_growth",
                                   "allow_retry_on_failure",
                                   "garbage_collection",
                                   "fragmentation_fraction",
                                   "retry_timeout",
                                   "abort_on_invalid_input",
                                   "max_oom_logs",
                                   "record_allocation_sites",
                                   "growth_policy",
                                   "initial_region_bytes",
                                   "max_growth_step_bytes",
                                   "min_growth_step_bytes",
                                   "min_growth_step_max_request_bytes",
                                   "release_before_extend",
                                   "huge_allocation_bytes",
                                   "min_split_remainder_bytes",
                                   "max_split_bytes",
                                   "grow_below_peak_ratio",
                                   "pool_release_threshold",
                                   "extend_by_missing_tail",
                                   "release_partial_regions",
                                   "reuse_follow_dependencies",
                                   "reuse_allow_opportunistic",
                                   "reuse_allow_internal_dependencies"}));
  EXPECT_EQ(FindAllocatorOptionField("colour"), nullptr);
}

TEST(AllocatorOptionsTest, SetsEachKind) {
  AllocatorOptions o;
  ASSERT_TRUE(SetAllocatorOption(o, "allow_growth", "false").ok());
  EXPECT_FALSE(o.allow_growth);
  ASSERT_TRUE(SetAllocatorOption(o, "garbage_collection", "True").ok());
  EXPECT_TRUE(o.garbage_collection);
  ASSERT_TRUE(SetAllocatorOption(o, "fragmentation_fraction", " 0.25 ").ok());
  EXPECT_EQ(o.fragmentation_fraction, 0.25);
  ASSERT_TRUE(SetAllocatorOption(o, "retry_timeout", "500ms").ok());
  EXPECT_EQ(o.retry_timeout, absl::Milliseconds(500));
  ASSERT_TRUE(SetAllocatorOption(o, "max_oom_logs", "0").ok());
  EXPECT_EQ(o.max_oom_logs, 0);
}

TEST(AllocatorOptionsTest, EveryValueRoundTripsThroughText) {
  AllocatorOptions o;
  o.allow_growth = false;
  o.fragmentation_fraction = 0.123456789012345;
  o.retry_timeout = absl::Milliseconds(1234);
  o.max_oom_logs = 7;
  o.record_allocation_sites = true;
  AllocatorOptions back;
  for (const OptionField& f : AllocatorOptionFields()) {
    const std::string text = AllocatorOptionToString(o, f.name);
    ASSERT_TRUE(SetAllocatorOption(back, f.name, text).ok())
        << f.name << "=" << text;
  }
  EXPECT_EQ(back, o);
  EXPECT_NE(back, AllocatorOptions());
}

// PyTorch's settings write True/False; environment variables 1/0.
TEST(AllocatorOptionsTest, BooleansTakeEverySpellingUsersType) {
  for (const char* text : {"true", "True", "TRUE", "1"}) {
    AllocatorOptions o;
    ASSERT_TRUE(SetAllocatorOption(o, "garbage_collection", text).ok()) << text;
    EXPECT_TRUE(o.garbage_collection) << text;
  }
  for (const char* text : {"false", "False", "FALSE", "0"}) {
    AllocatorOptions o;
    o.allow_growth = true;
    ASSERT_TRUE(SetAllocatorOption(o, "allow_growth", text).ok()) << text;
    EXPECT_FALSE(o.allow_growth) << text;
  }
}

TEST(AllocatorOptionsTest, BadValuesNameTheOptionAndLeaveItAlone) {
  struct Case {
    const char* name;
    const char* value;
    const char* accepted;
  };
  for (const Case& c : {
           Case{"allow_growth", "yes", "true, false"},
           Case{"allow_growth", "2", "true, false"},
           Case{"allow_growth", "on", "true, false"},
           Case{"fragmentation_fraction", "1.5", "a number in [0, 1]"},
           Case{"fragmentation_fraction", "-0.1", "a number in [0, 1]"},
           Case{"fragmentation_fraction", "nan", "a number in [0, 1]"},
           Case{"retry_timeout", "soon", "a finite duration >= 0"},
           Case{"retry_timeout", "-1s", "a finite duration >= 0"},
           Case{"retry_timeout", "inf", "a finite duration >= 0"},
           Case{"max_oom_logs", "-1", "an integer >= 0"},
           Case{"max_oom_logs", "2.5", "an integer >= 0"},
           Case{"max_oom_logs", "99999999999", "an integer >= 0"},
       }) {
    AllocatorOptions o;
    absl::Status s = SetAllocatorOption(o, c.name, c.value);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(s.message(), std::string("bad value \"") + c.value +
                               "\" for option " + c.name + " (accepted: " +
                               std::string(OptionKindGrammar(
                                   FindAllocatorOptionField(c.name)->kind)) +
                               ")");
    EXPECT_THAT(s.message(), HasSubstr(c.accepted));
    EXPECT_EQ(o, AllocatorOptions()) << c.name << " changed on failure";
  }
  AllocatorOptions o;
  absl::Status s = SetAllocatorOption(o, "colour", "red");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown option \"colour\" (accepted: "
                                     "allow_growth, allow_retry_on_failure"));
}

// Options set in code skip the parser: ValidateAllocatorOptions applies the
// same ranges, naming the field; an Allocator given such options says so.
TEST(AllocatorOptionsTest, OutOfRangeFieldsSetInCodeAreNamed) {
  EXPECT_TRUE(ValidateAllocatorOptions(AllocatorOptions()).ok());
  struct Case {
    std::function<void(AllocatorOptions&)> set;
    const char* text;  // what the message must say
  };
  const Case cases[] = {
      {[](AllocatorOptions& o) {
         o.fragmentation_fraction = std::numeric_limits<double>::quiet_NaN();
       },
       "option fragmentation_fraction = nan is out of range"},
      {[](AllocatorOptions& o) { o.fragmentation_fraction = -0.5; },
       "option fragmentation_fraction = -0.5 is out of range"},
      {[](AllocatorOptions& o) { o.fragmentation_fraction = 1e300; },
       "option fragmentation_fraction = 1e+300 is out of range"},
      {[](AllocatorOptions& o) { o.max_oom_logs = -1; },
       "option max_oom_logs = -1 is out of range"},
      {[](AllocatorOptions& o) { o.retry_timeout = absl::Seconds(-1); },
       "option retry_timeout = -1s is out of range"},
      {[](AllocatorOptions& o) { o.retry_timeout = absl::InfiniteDuration(); },
       "option retry_timeout = inf is out of range"},
  };
  for (const Case& c : cases) {
    AllocatorOptions o;
    c.set(o);
    const absl::Status s = ValidateAllocatorOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(s.message(), HasSubstr(c.text));
    // Every accepted value is valid.
    AllocatorOptions fine;
    fine.fragmentation_fraction = 1.0;
    fine.max_oom_logs = 0;
    fine.retry_timeout = absl::ZeroDuration();
    EXPECT_TRUE(ValidateAllocatorOptions(fine).ok());
  }
  std::vector<std::string> logged;
  LogSink previous = SetLogSink(
      [&](LogSeverity, std::string_view m) { logged.emplace_back(m); });
  {
    AllocatorOptions o;
    o.max_oom_logs = -3;
    Allocator a(nullptr, 1 << 20, "opts", o);
  }
  SetLogSink(std::move(previous));
  bool named = false;
  for (const std::string& m : logged) {
    if (m.find("option max_oom_logs = -3 is out of range") != m.npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named);
}

// The README's options table is AllocatorOptionsMarkdownTable(), pasted
// between two markers; regenerate it from this test's failure message.
TEST(AllocatorOptionsTest, ReadmeTableIsTheGeneratedOne) {
  std::ifstream in(BFC_TEST_DATA_DIR "/../../README.md");
  ASSERT_TRUE(in) << "README.md not found";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string readme = buffer.str();
  const std::string begin =
      "<!-- options table: generated by "
      "AllocatorOptionsMarkdownTable() -->\n";
  const std::string end = "<!-- end of options table -->";
  const size_t b = readme.find(begin);
  const size_t e = readme.find(end);
  ASSERT_NE(b, std::string::npos) << "marker missing: " << begin;
  ASSERT_NE(e, std::string::npos) << "marker missing: " << end;
  EXPECT_EQ(readme.substr(b + begin.size(), e - b - begin.size()),
            AllocatorOptionsMarkdownTable())
      << "README.md's options table is out of date; paste this:\n"
      << AllocatorOptionsMarkdownTable();
}

}  // namespace
}  // namespace bfc
