// BFC_ALLOC_CONF's parser (src/c_api/alloc_conf.h), tested directly: its own
// keys, every option of the table by name, and the messages for what it
// refuses. (tests/c_api_test.cc checks the same through the loaded .so.)
#include "c_api/alloc_conf.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bfc/allocator_options.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc::c_api {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(AllocConfTest, EmptyIsTheDefaults) {
  for (const char* text : {"", " ", ",", " , ,"}) {
    absl::StatusOr<AllocConf> c = ParseAllocConf(text);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->backend, Backend::kCuda);
    EXPECT_EQ(c->options, AllocatorOptions());
    EXPECT_FALSE(c->memory_limit.has_value());
    EXPECT_FALSE(c->memory_fraction.has_value());
  }
}

TEST(AllocConfTest, OwnKeys) {
  absl::StatusOr<AllocConf> c =
      ParseAllocConf(" backend : host , memory_limit: 1.5GiB ");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, Backend::kHost);
  EXPECT_EQ(c->memory_limit, uint64_t{3} << 29);
  c = ParseAllocConf("backend:virtual,memory_fraction:0.5");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backend, Backend::kVirtual);
  EXPECT_EQ(c->memory_fraction, 0.5);
  EXPECT_EQ(c->keys, (std::vector<std::string>{"backend", "memory_fraction"}));
  EXPECT_STREQ(BackendName(Backend::kCuda), "cuda");
}

TEST(AllocConfTest, EveryOptionOfTheTableIsAKey) {
  AllocatorOptions changed;
  changed.allow_growth = false;
  changed.allow_retry_on_failure = false;
  changed.garbage_collection = true;
  changed.fragmentation_fraction = 0.5;
  changed.retry_timeout = absl::Seconds(2);
  changed.abort_on_invalid_input = true;
  changed.max_oom_logs = 3;
  changed.record_allocation_sites = true;
  std::string text;
  for (const OptionField& f : AllocatorOptionFields()) {
    absl::StrAppend(&text, f.name, ":",
                    AllocatorOptionToString(changed, f.name), ",");
  }
  absl::StatusOr<AllocConf> c = ParseAllocConf(text);
  ASSERT_TRUE(c.ok()) << text << ": " << c.status();
  EXPECT_EQ(c->options, changed) << text;
}

TEST(AllocConfTest, RefusalsNameTheKeyAndWhatIsAccepted) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {
           Case{"allow_growth",
                "BFC_ALLOC_CONF: entry \"allow_growth\" is not "
                "key:value (accepted keys: backend, "
                "memory_limit, memory_fraction, preset, allow_growth"},
           Case{"backend:tpu",
                "BFC_ALLOC_CONF: bad value \"tpu\" for backend "
                "(accepted values: cuda (or native), host, virtual, "
                "sim-cudamalloc, vmm)"},
           Case{"expandable_segments:maybe",
                "bad value \"maybe\" for expandable_segments (accepted "
                "values: True or False"},
           Case{"backend:cuda,expandable_segments:True",
                "expandable_segments:True contradicts backend:cuda"},
           Case{"expandable_segments:True,backend:host",
                "expandable_segments:True contradicts backend:host"},
           Case{"backend:vmm,expandable_segments:false",
                "expandable_segments:False contradicts backend:vmm"},
           Case{"allow_growth:maybe",
                "bad value \"maybe\" for allow_growth (accepted values: true, "
                "false, 1, 0 (any case))"},
           Case{"retry_timeout:soon",
                "bad value \"soon\" for retry_timeout (accepted values: a "
                "finite duration >= 0"},
           Case{"memory_limit:0",
                "bad value \"0\" for memory_limit (accepted "
                "values: a byte count of at least 256"},
           Case{"memory_limit:8G", "bad value \"8G\" for memory_limit"},
           Case{"memory_limit:99999999PiB", "bad value \"99999999PiB\""},
           Case{"memory_fraction:0", "(accepted values: a number in (0, 1])"},
           Case{"memory_fraction:1.5", "(accepted values: a number in (0, 1])"},
           // strtod's other spellings are no decimal numbers.
           Case{"memory_fraction:0x1p-1",
                "(accepted values: a number in (0, 1])"},
           Case{"memory_fraction:+0.5",
                "(accepted values: a number in (0, 1])"},
           Case{"memory_fraction:0.5.5",
                "(accepted values: a number in (0, 1])"},
           Case{"memory_fraction:5e", "(accepted values: a number in (0, 1])"},
           Case{"pool_release_threshold:0x1p-2",
                "bad value \"0x1p-2\" for pool_release_threshold"},
           Case{"pool_release_threshold:infinity",
                "bad value \"infinity\" for pool_release_threshold"},
           Case{"allow_growth:true,allow_growth:false",
                "BFC_ALLOC_CONF: key allow_growth is given more than once"},
           Case{"memory_limit:1GiB,memory_fraction:0.5",
                "memory_limit and memory_fraction are both given"},
       }) {
    absl::StatusOr<AllocConf> conf = ParseAllocConf(c.text);
    ASSERT_FALSE(conf.ok()) << c.text;
    EXPECT_EQ(conf.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(conf.status().message(), HasSubstr(c.message)) << c.text;
  }
}

// What a PyTorch user types out of habit: every PyTorch allocator key has an
// outcome -- mapped (backend:native, backend:cudaMallocAsync,
// expandable_segments:False) or ignored with what to use instead, never
// "unknown key" and never a failed configuration.
TEST(AllocConfTest, PyTorchKeysAreMappedOrIgnoredWithWhatToUseInstead) {
  // Two set bfc options, with PyTorch's units and ranges.
  {
    absl::StatusOr<AllocConf> mapped = ParseAllocConf(
        "max_split_size_mb:128,garbage_collection_threshold:0.8");
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    EXPECT_TRUE(mapped->ignored.empty());
    EXPECT_EQ(mapped->options.max_split_bytes, uint64_t{128} << 20);
    EXPECT_EQ(mapped->options.pool_release_threshold, 0.8);
    for (const char* bad :
         {"max_split_size_mb:20", "max_split_size_mb:0", "max_split_size_mb:x",
          "max_split_size_mb:-64", "max_split_size_mb:1.5",
          "max_split_size_mb:99999999999999999999",
          "garbage_collection_threshold:0", "garbage_collection_threshold:1",
          "garbage_collection_threshold:nan",
          "garbage_collection_threshold:0x1p-1",
          "garbage_collection_threshold:"}) {
      SCOPED_TRACE(bad);
      absl::StatusOr<AllocConf> c = ParseAllocConf(bad);
      ASSERT_FALSE(c.ok());
      EXPECT_THAT(c.status().message(), HasSubstr("PyTorch's rule"));
    }
    // Both spellings of one option: refused, naming both.
    for (const char* twice :
         {"max_split_size_mb:64,max_split_bytes:1GiB",
          "pool_release_threshold:0.5,garbage_collection_threshold:0.5"}) {
      SCOPED_TRACE(twice);
      absl::StatusOr<AllocConf> c = ParseAllocConf(twice);
      ASSERT_FALSE(c.ok());
      EXPECT_THAT(c.status().message(), HasSubstr("set the same option"));
    }
  }
  absl::StatusOr<AllocConf> conf = ParseAllocConf("backend:native");
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->backend, Backend::kCuda);
  EXPECT_TRUE(conf->ignored.empty());
  conf = ParseAllocConf("expandable_segments:False,backend:host");
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->backend, Backend::kHost);
  EXPECT_TRUE(conf->ignored.empty());
  conf = ParseAllocConf("expandable_segments:0");
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_TRUE(conf->ignored.empty());
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {
           Case{"roundup_power2_divisions:4", "no rounding option"},
           Case{"pinned_use_cuda_host_register:True",
                "PyTorch's own pinned-memory allocator"},
           Case{"pinned_num_register_threads:8",
                "PyTorch's own pinned-memory allocator"},
           Case{"pinned_use_background_threads:True",
                "PyTorch's own pinned-memory allocator"},
           Case{"release_lock_on_cudamalloc:True",
                "holds its lock across the backend's allocation"},
           Case{"backend:cudaMallocAsync", "serving backend:cuda"},
       }) {
    SCOPED_TRACE(c.text);
    conf = ParseAllocConf(
        absl::StrCat("memory_limit:1GiB,", c.text, ",allow_growth:false"));
    ASSERT_TRUE(conf.ok()) << conf.status();
    ASSERT_EQ(conf->ignored.size(), 1u);
    EXPECT_THAT(conf->ignored[0], HasSubstr("BFC_ALLOC_CONF: "));
    EXPECT_THAT(conf->ignored[0], HasSubstr(c.says));
    EXPECT_THAT(conf->ignored[0], Not(HasSubstr("unknown key")));
    // The keys around it still apply.
    EXPECT_EQ(conf->memory_limit, uint64_t{1} << 30);
    EXPECT_FALSE(conf->options.allow_growth);
  }
  conf = ParseAllocConf("backend:cudaMallocAsync");
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->backend, Backend::kCuda);
}

// A key nobody takes is said and skipped; a typo names the key it is near.
// PyTorch's expandable segments are bfc's vmm backend.
TEST(AllocConfTest, ExpandableSegmentsIsTheVmmBackend) {
  for (const char* text :
       {"backend:vmm", "expandable_segments:True", "expandable_segments:true",
        "expandable_segments:1", "backend:vmm,expandable_segments:True",
        "expandable_segments:True,backend:vmm"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<AllocConf> conf = ParseAllocConf(text);
    ASSERT_TRUE(conf.ok()) << conf.status();
    EXPECT_EQ(conf->backend, Backend::kVmm);
    EXPECT_TRUE(conf->ignored.empty());
  }
  for (const char* text : {"expandable_segments:False", "expandable_segments:0",
                           "backend:host,expandable_segments:false"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<AllocConf> conf = ParseAllocConf(text);
    ASSERT_TRUE(conf.ok()) << conf.status();
    EXPECT_NE(conf->backend, Backend::kVmm);
    EXPECT_TRUE(conf->ignored.empty());
  }
  EXPECT_STREQ(BackendName(Backend::kVmm), "vmm");
}

TEST(AllocConfTest, UnknownKeysAreIgnoredWithTheNearestKey) {
  absl::StatusOr<AllocConf> conf =
      ParseAllocConf("memory_limt:8GiB,colour:red,alow_growth:false");
  ASSERT_TRUE(conf.ok()) << conf.status();
  ASSERT_EQ(conf->ignored.size(), 3u);
  EXPECT_THAT(conf->ignored[0],
              HasSubstr("BFC_ALLOC_CONF: unknown key \"memory_limt\" "
                        "(did you mean memory_limit?) (accepted keys: "));
  EXPECT_THAT(conf->ignored[1], HasSubstr("unknown key \"colour\" "
                                          "(accepted keys: backend, "));
  EXPECT_THAT(conf->ignored[2], HasSubstr("(did you mean allow_growth?)"));
  EXPECT_FALSE(conf->memory_limit.has_value());
  EXPECT_TRUE(conf->options.allow_growth);
  // Still one key each: a repeated unknown key is an error like any other.
  conf = ParseAllocConf("colour:red,colour:blue");
  ASSERT_FALSE(conf.ok());
  EXPECT_THAT(conf.status().message(), HasSubstr("given more than once"));
}

TEST(AllocConfTest, ManyEntriesCostLinearTime) {
  // A fuzzer's string of n distinct unknown keys took O(n^2) (each key
  // compared with every earlier one) and ~600 bytes of message per key.
  std::string text;
  constexpr int kKeys = 50000;
  for (int i = 0; i < kKeys; ++i) absl::StrAppend(&text, "k", i, ":1,");
  absl::StatusOr<AllocConf> conf = ParseAllocConf(text);
  ASSERT_TRUE(conf.ok()) << conf.status();
  ASSERT_EQ(conf->ignored.size(), size_t{kKeys});
  size_t message_bytes = 0;
  for (const std::string& m : conf->ignored) message_bytes += m.size();
  EXPECT_LT(message_bytes, 64u * kKeys);
  EXPECT_THAT(conf->ignored.front(), HasSubstr("(accepted keys: backend, "));
  EXPECT_THAT(conf->ignored.back(), HasSubstr("unknown key \"k49999\""));
  // A repeat far from its first is still found.
  absl::StrAppend(&text, "k0:2");
  EXPECT_THAT(ParseAllocConf(text).status().message(),
              HasSubstr("key k0 is given more than once"));
}

// bfc/c_api.h is where a framework user reads the grammar: it lists every
// key the parser accepts (record_allocation_sites was missing once).
// A preset sets its bundle first, wherever it stands; keys given beside it
// win; its option keys are listed (for layering callers such as bfc-replay)
// before the keys given.
TEST(AllocConfTest, APresetIsItsBundleAndKeysBesideItWin) {
  absl::StatusOr<AllocConf> c =
      ParseAllocConf("min_growth_step_bytes:4MiB,preset:low_footprint");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->options.growth_policy, GrowthPolicy::kSameAsRequested);
  EXPECT_TRUE(c->options.release_before_extend);
  EXPECT_EQ(c->options.min_split_remainder_bytes, 256u);
  EXPECT_EQ(c->options.min_growth_step_bytes, uint64_t{4} << 20);
  ASSERT_FALSE(c->keys.empty());
  EXPECT_EQ(c->keys.front(), "growth_policy");
  EXPECT_EQ(c->keys.back(), "min_growth_step_bytes");

  AllocatorOptions tf;
  ASSERT_TRUE(ApplyAllocatorPreset(tf, "low_footprint").ok());
  ASSERT_TRUE(ApplyAllocatorPreset(tf, "tf").ok());
  EXPECT_EQ(tf, AllocatorOptions()) << "preset tf is not the defaults";

  absl::StatusOr<AllocConf> bad = ParseAllocConf("preset:smallest");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              HasSubstr("bad value \"smallest\" for preset (accepted values: "
                        "tf, low_footprint)"));
  EXPECT_FALSE(ParseAllocConf("preset:tf,preset:tf").ok());
}

TEST(AllocConfTest, TheCHeaderDocumentsEveryKey) {
  std::ifstream in(std::string(BFC_TEST_DATA_DIR) +
                   "/../../include/bfc/c_api.h");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  const std::string header = text.str();
  for (absl::string_view key : absl::StrSplit(AllocConfKeys(), ", ")) {
    EXPECT_THAT(header, HasSubstr(absl::StrCat(" *       ", key, " ")))
        << "bfc/c_api.h does not document " << key;
  }
}

}  // namespace
}  // namespace bfc::c_api
