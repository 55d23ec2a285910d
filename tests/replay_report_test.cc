// File: tests/replay_report_test.cc
// BuildReplayReport on a bundled trace: the timeline, the peak and end
// snapshots, the JSON round trip and the self-contained HTML page.
#include "bfc/report/replay_report.h"

#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace bfc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

CompiledTrace Load(const std::string& name) {
  absl::StatusOr<Trace> trace =
      ReadTrace(std::string(BFC_TEST_DATA_DIR) + "/" + name);
  EXPECT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<CompiledTrace> compiled = CompileTrace(*trace);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return *std::move(compiled);
}

std::unique_ptr<Allocator> MakeAllocator() {
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(16 * kGiB), 16 * kGiB, "report", o);
}

class ReplayReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    trace_ = new CompiledTrace(Load("resnet18-train.csv"));
    size_t calls = 0;
    ReplayReportOptions options;
    options.progress = [&](size_t done, size_t total) {
      EXPECT_LE(done, total);
      ++calls;
      progress_total_ = total;
    };
    absl::StatusOr<ReplayReport> r =
        BuildReplayReport(*trace_, MakeAllocator, options);
    ASSERT_TRUE(r.ok()) << r.status();
    report_ = new ReplayReport(*std::move(r));
    progress_calls_ = calls;
  }
  static void TearDownTestSuite() {
    delete report_;
    delete trace_;
  }
  static CompiledTrace* trace_;
  static ReplayReport* report_;
  static size_t progress_calls_;
  static size_t progress_total_;
};
CompiledTrace* ReplayReportTest::trace_ = nullptr;
ReplayReport* ReplayReportTest::report_ = nullptr;
size_t ReplayReportTest::progress_calls_ = 0;
size_t ReplayReportTest::progress_total_ = 0;

TEST_F(ReplayReportTest, TimelineHasOneSamplePerOp) {
  const ReplayTimeline& t = report_->timeline;
  ASSERT_EQ(t.size(), trace_->ops.size());
  EXPECT_EQ(t.live_bytes.size(), t.size());
  EXPECT_EQ(t.fragmentation.size(), t.size());
  int64_t peak_live = 0, peak_in_use = 0, peak_pool = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t.event_index[i], trace_->ops[i].event_index);
    EXPECT_LE(t.live_bytes[i], t.in_use_bytes[i]);
    EXPECT_LE(t.in_use_bytes[i], t.pool_bytes[i]);
    EXPECT_GE(t.fragmentation[i], 0.0);
    EXPECT_LT(t.fragmentation[i], 1.0);
    peak_live = std::max(peak_live, t.live_bytes[i]);
    peak_in_use = std::max(peak_in_use, t.in_use_bytes[i]);
    peak_pool = std::max(peak_pool, t.pool_bytes[i]);
  }
  // The timeline agrees with the replay's own summary.
  EXPECT_EQ(static_cast<size_t>(peak_live), report_->summary.peak_live_bytes);
  EXPECT_EQ(peak_in_use, report_->summary.peak_bytes_in_use);
  EXPECT_EQ(peak_pool, report_->summary.peak_pool_bytes);
  EXPECT_GE(progress_calls_, 2u);
  EXPECT_EQ(progress_total_, 2 * trace_->ops.size());
}

TEST_F(ReplayReportTest, SnapshotsAreAtThePeakAndTheEnd) {
  ASSERT_EQ(report_->snapshots.size(), 2u);
  const ReplaySnapshot& peak = report_->snapshots[0];
  const ReplaySnapshot& end = report_->snapshots[1];
  EXPECT_EQ(peak.label, "peak");
  EXPECT_EQ(end.label, "end");
  EXPECT_EQ(peak.dump.stats.bytes_in_use, report_->summary.peak_bytes_in_use);
  EXPECT_EQ(report_->timeline.in_use_bytes[peak.op_index],
            report_->summary.peak_bytes_in_use);
  EXPECT_EQ(end.op_index, trace_->ops.size() - 1);
  EXPECT_EQ(end.dump.stats.pool_bytes.value_or(-1),
            report_->summary.pool_bytes_at_end);
  EXPECT_EQ(static_cast<size_t>(end.dump.NumChunksInUse()),
            report_->summary.live_at_end);
  // The peak map shows what the peak stats say.
  uint64_t in_use = 0;
  for (const ChunkDump& c : peak.dump.chunks) {
    if (c.in_use) in_use += c.size;
  }
  EXPECT_EQ(in_use, static_cast<uint64_t>(peak.dump.stats.bytes_in_use));
}

TEST_F(ReplayReportTest, JsonRoundTrips) {
  const std::string json = ReplayReportToJson(*report_);
  absl::StatusOr<ReplayReport> back = ReplayReportFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->trace_name, report_->trace_name);
  EXPECT_EQ(back->summary.peak_pool_bytes, report_->summary.peak_pool_bytes);
  EXPECT_EQ(back->summary.events, report_->summary.events);
  EXPECT_DOUBLE_EQ(back->summary.footprint_ratio,
                   report_->summary.footprint_ratio);
  EXPECT_EQ(back->timeline.pool_bytes, report_->timeline.pool_bytes);
  EXPECT_EQ(back->timeline.live_bytes, report_->timeline.live_bytes);
  EXPECT_EQ(back->timeline.fragmentation, report_->timeline.fragmentation);
  ASSERT_EQ(back->snapshots.size(), 2u);
  EXPECT_EQ(back->snapshots[0].dump.chunks.size(),
            report_->snapshots[0].dump.chunks.size());
  // Serializing what was read gives the same text: nothing was lost.
  EXPECT_EQ(ReplayReportToJson(*back), json);

  EXPECT_FALSE(ReplayReportFromJson("{}").ok());
  EXPECT_FALSE(ReplayReportFromJson(json.substr(0, json.size() - 2)).ok());
  std::string other = json;
  other.replace(other.find("bfc-replay-report"), 17, "bfc-replay-rep0rt");
  EXPECT_FALSE(ReplayReportFromJson(other).ok());
}

TEST_F(ReplayReportTest, HtmlIsSelfContained) {
  const std::string html = RenderReplayReportHtml(*report_);
  EXPECT_THAT(html, HasSubstr("<!DOCTYPE html>"));
  EXPECT_THAT(html, Not(HasSubstr("/*BFC_REPORT_JSON*/")));  // data went in
  EXPECT_THAT(html, HasSubstr("\"format\":\"bfc-replay-report\""));
  // No network: no external scripts, styles, images or fetches.
  EXPECT_THAT(html, Not(HasSubstr("<script src")));
  EXPECT_THAT(html, Not(HasSubstr("<link")));
  EXPECT_THAT(html, Not(HasSubstr("http://")));
  EXPECT_THAT(html, Not(HasSubstr("https://")));
  EXPECT_THAT(html, Not(HasSubstr("fetch(")));
}

// A report broken in one field at a time: InvalidArgument naming the JSON
// path, down into the embedded dumps.
// The history replayed forward ends in the end snapshot's chunks and
// regions, and its bytes in use after each op are the timeline's (both come
// from the allocator's stats and maps, not from the history).
TEST_F(ReplayReportTest, HistoryReplaysToTheTimelineAndTheEndMap) {
  const std::vector<ReplayHistoryEvent>& h = report_->history;
  ASSERT_FALSE(h.empty());
  std::map<uint64_t, uint64_t> live;     // address -> chunk bytes
  std::map<uint64_t, uint64_t> regions;  // base -> bytes
  int64_t in_use = 0;
  size_t e = 0;
  size_t allocations = 0;
  for (size_t op = 0; op < report_->timeline.size(); ++op) {
    for (; e < h.size() && h[e].op_index == op; ++e) {
      const MemoryEvent& m = h[e].event;
      switch (m.action) {
        case MemoryEvent::Action::kAllocate:
          ASSERT_TRUE(live.emplace(m.address, m.size).second) << e;
          in_use += static_cast<int64_t>(m.size);
          ++allocations;
          break;
        case MemoryEvent::Action::kFree:
          ASSERT_EQ(live[m.address], m.size) << e;
          live.erase(m.address);
          in_use -= static_cast<int64_t>(m.size);
          break;
        case MemoryEvent::Action::kRegionAlloc:
          regions[m.address] = m.size;
          break;
        case MemoryEvent::Action::kRegionExtend: {
          // Joins the region that ends where it starts (this trace's
          // virtual backend hands out adjacent memory in increasing order).
          auto it = regions.lower_bound(m.address);
          ASSERT_NE(it, regions.begin()) << e;
          --it;
          ASSERT_EQ(it->first + it->second, m.address) << e;
          it->second += m.size;
          break;
        }
        case MemoryEvent::Action::kRegionFree:
          regions.erase(m.address);
          break;
        case MemoryEvent::Action::kOutOfMemory:
          break;
      }
    }
    ASSERT_EQ(in_use, report_->timeline.in_use_bytes[op]) << "op " << op;
  }
  EXPECT_EQ(e, h.size());
  EXPECT_EQ(allocations, report_->summary.allocations);
  const MemoryDump& end = report_->snapshots[1].dump;
  std::map<uint64_t, uint64_t> end_live, end_regions;
  for (const ChunkDump& c : end.chunks)
    if (c.in_use) end_live[c.address] = c.size;
  for (const RegionDump& r : end.regions) end_regions[r.base] = r.size;
  EXPECT_EQ(live, end_live);
  EXPECT_EQ(regions, end_regions);
}

TEST_F(ReplayReportTest, HistoryRoundTripsAndIsChecked) {
  using nlohmann::json;
  const json good = json::parse(ReplayReportToJson(*report_));
  absl::StatusOr<ReplayReport> back = ReplayReportFromJson(good.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->history.size(), report_->history.size());
  for (size_t i = 0; i < back->history.size(); ++i) {
    const ReplayHistoryEvent& a = back->history[i];
    const ReplayHistoryEvent& b = report_->history[i];
    ASSERT_EQ(a.event.action, b.event.action) << i;
    ASSERT_EQ(a.event.address, b.event.address) << i;
    ASSERT_EQ(a.event.size, b.event.size) << i;
    ASSERT_EQ(a.op_index, b.op_index) << i;
  }
  // Reports written before the history existed still read.
  json old = good;
  old.erase("history");
  back = ReplayReportFromJson(old.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->history.empty());
  // ... and are written back without one, so that the viewer turns
  // scrubbing off (an empty "history" made it scrub an empty pool).
  EXPECT_FALSE(back->has_history);
  EXPECT_FALSE(json::parse(ReplayReportToJson(*back)).contains("history"));
  // So is a report built without it; a trace that recorded nothing still
  // has its (empty) history.
  ReplayReportOptions no_history;
  no_history.history = false;
  absl::StatusOr<ReplayReport> without =
      BuildReplayReport(*trace_, MakeAllocator, no_history);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_FALSE(json::parse(ReplayReportToJson(*without)).contains("history"));
  EXPECT_TRUE(good.contains("history"));

  const std::vector<std::pair<std::string, json>> bad = {
      {"/history/action/0", 9},
      {"/history/action/0", -1},
      {"/history/op_index/0", json(uint64_t{1} << 40)},
      {"/history/pointer/0", "0xZZ"},
      {"/history/pointer/0", "12"},
      {"/history/size/0", -5},
      {"/history/line", "x"},
  };
  for (const auto& [pointer, value] : bad) {
    SCOPED_TRACE(pointer + " = " + value.dump());
    json doc = good;
    doc[json::json_pointer(pointer)] = value;
    absl::StatusOr<ReplayReport> r = ReplayReportFromJson(doc.dump());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("history"));
  }
  json shorter = good;
  shorter["history"]["size"].erase(0);
  EXPECT_FALSE(ReplayReportFromJson(shorter.dump()).ok());
}

// The viewer draws the first snapshot as the peak and the last as the end,
// at their place on the timeline: a report without one, or with one off the
// timeline, is refused (the page threw on "snapshots": []).
TEST_F(ReplayReportTest, SnapshotsAreRequiredAndOnTheTimeline) {
  using nlohmann::json;
  const json good = json::parse(ReplayReportToJson(*report_));
  json none = good;
  none["snapshots"] = json::array();
  absl::StatusOr<ReplayReport> r = ReplayReportFromJson(none.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("\"snapshots\" is empty"));
  json past = good;
  past["snapshots"][0]["op_index"] = trace_->ops.size();
  r = ReplayReportFromJson(past.dump());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr("snapshots[0].op_index\" is past the timeline"));
  json last = good;
  last["snapshots"][0]["op_index"] = trace_->ops.size() - 1;
  EXPECT_TRUE(ReplayReportFromJson(last.dump()).ok());
}

TEST_F(ReplayReportTest, EveryFieldIsCheckedForTypeAndRange) {
  using nlohmann::json;
  const json good = json::parse(ReplayReportToJson(*report_));
  ASSERT_TRUE(ReplayReportFromJson(good.dump()).ok());
  ASSERT_GE(good["timeline"]["event_index"].size(), 2u);
  struct Case {
    std::string pointer;
    json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/version", 1.0, "\"version\" is not an integer"},
      {"/trace", 7, "\"trace\" is not a string"},
      {"/summary", json::array(), "\"summary\" is not an object"},
      {"/summary/ops", -1, "\"summary.ops\" is out of range"},
      {"/summary/ops", 1.9, "\"summary.ops\" is not an integer"},
      {"/summary/peak_pool_bytes", -1,
       "\"summary.peak_pool_bytes\" is out of range"},
      {"/summary/wall_seconds", -1, "\"summary.wall_seconds\" is out of range"},
      {"/summary/footprint_ratio", "1", "\"summary.footprint_ratio\" is not a"},
      {"/timeline/live_bytes/0", -1, "\"timeline.live_bytes[0]\""},
      {"/timeline/live_bytes/1", 1.5,
       "\"timeline.live_bytes[1]\" is not an integer"},
      {"/timeline/fragmentation/0", 2, "\"timeline.fragmentation[0]\""},
      {"/timeline/event_index/0", json(uint64_t{1} << 50),
       "\"timeline.event_index[1]\" goes back"},
      {"/timeline/pool_bytes", "x", "\"timeline.pool_bytes\" is not an array"},
      {"/snapshots", json::object(), "\"snapshots\" is not an array"},
      {"/snapshots/0/op_index", -1, "\"snapshots[0].op_index\" is out of"},
      {"/snapshots/1/dump/limit", -1, "\"snapshots[1].dump.limit\" is out of"},
      {"/snapshots/0/dump/chunks/0/size", -256,
       "\"snapshots[0].dump.chunks[0].size\" is out of range"},
      {"/snapshots/0/dump/stats/bytes_in_use", -1,
       "\"snapshots[0].dump.stats.bytes_in_use\" is out of range"},
      {"/snapshots/0/dump/bins/0/bin", 99,
       "\"snapshots[0].dump.bins[0].bin\" is out of range"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.pointer + " = " + c.value.dump());
    json doc = good;
    doc[json::json_pointer(c.pointer)] = c.value;
    absl::StatusOr<ReplayReport> r = ReplayReportFromJson(doc.dump());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
  }
  EXPECT_FALSE(ReplayReportFromJson("[1]").ok());
  EXPECT_FALSE(ReplayReportFromJson("7").ok());
}

// Accounts: every op charged to one of three accounts by its index; each
// account's series is what its allocations have in use, summed here from
// the trace itself (rounded to 256 B, as charges are).
TEST(ReplayReportAccountsTest, SeriesFollowTheChargedAllocations) {
  const CompiledTrace trace = Load("resnet50-infer.csv");
  ReplayReportOptions options;
  options.history = false;
  options.account_names = {"a", "b", "c"};
  options.account_of_op = [](size_t i) -> size_t { return i % 3; };
  absl::StatusOr<ReplayReport> r =
      BuildReplayReport(trace, MakeAllocator, options);
  ASSERT_TRUE(r.ok()) << r.status();
  const ReplayTimeline& t = r->timeline;
  ASSERT_EQ(t.accounts.size(), 3u);
  EXPECT_EQ(t.accounts[0].path, "replay/a");
  EXPECT_EQ(t.accounts[2].path, "replay/c");
  std::vector<int64_t> want(3, 0);
  std::map<uint32_t, std::pair<size_t, int64_t>> live;  // slot: account, bytes
  for (size_t i = 0; i < trace.ops.size(); ++i) {
    const ReplayOp& op = trace.ops[i];
    const int64_t rounded = static_cast<int64_t>((op.size + 255) / 256 * 256);
    if (op.kind == ReplayOp::Kind::kAllocate) {
      live[op.slot] = {i % 3, rounded};
      want[i % 3] += rounded;
    } else {
      const auto it = live.find(op.slot);
      ASSERT_NE(it, live.end());
      want[it->second.first] -= it->second.second;
      live.erase(it);
    }
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_EQ(t.accounts[k].bytes_in_use[i], want[k])
          << "op " << i << " account " << k;
    }
  }

  // The series round-trip, and a report without them still reads.
  using nlohmann::json;
  const json good = json::parse(ReplayReportToJson(*r));
  absl::StatusOr<ReplayReport> back = ReplayReportFromJson(good.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->timeline.accounts.size(), 3u);
  EXPECT_EQ(back->timeline.accounts[1].path, "replay/b");
  EXPECT_EQ(back->timeline.accounts[1].bytes_in_use,
            t.accounts[1].bytes_in_use);
  json old = good;
  old["timeline"].erase("accounts");
  back = ReplayReportFromJson(old.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->timeline.accounts.empty());
  for (const auto& [pointer, value, message] :
       std::vector<std::tuple<std::string, json, std::string>>{
           {"/timeline/accounts/0/bytes_in_use/3", -1,
            "\"timeline.accounts[0].bytes_in_use[3]\" is negative"},
           {"/timeline/accounts/1/path", 5,
            "\"timeline.accounts[1].path\" is not a string"},
           {"/timeline/accounts", json::object(),
            "\"timeline.accounts\" is not an array"},
       }) {
    SCOPED_TRACE(pointer);
    json doc = good;
    doc[json::json_pointer(pointer)] = value;
    absl::StatusOr<ReplayReport> bad = ReplayReportFromJson(doc.dump());
    ASSERT_FALSE(bad.ok());
    EXPECT_THAT(bad.status().message(), HasSubstr(message));
  }
  json shorter = good;
  shorter["timeline"]["accounts"][2]["bytes_in_use"].erase(0);
  absl::StatusOr<ReplayReport> bad = ReplayReportFromJson(shorter.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("differs in length"));

  // A name no account can have is refused, naming it.
  options.account_names = {"ok", "x/y"};
  r = BuildReplayReport(trace, MakeAllocator, options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("account 'x/y'"));
}

// The data <script> of the page, between its start tag and the first
// "</script" after it (where an HTML parser ends the element).
std::string DataScript(const std::string& html) {
  const std::string start =
      "<script id=\"bfc-data\" type=\"application/json\">";
  const size_t from = html.find(start);
  if (from == std::string::npos) return "<no data script>";
  const size_t end = html.find("</script", from + start.size());
  return html.substr(from + start.size(), end - from - start.size());
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

// Names that would end the data element early ("</script"), make the HTML
// tokenizer swallow the rest of the page ("<!--" then "<script": the script
// data escaped states), or are not UTF-8, in the trace name, the allocator
// name and a frame: the element holds exactly the report, as JSON that parses
// back, with the bad bytes as U+FFFD.
TEST(ReplayReportHtmlTest, HostileNamesCannotEndOrHideTheDataScript) {
  const std::vector<std::string> names = {
      "</script><script>alert(1)</script>",
      "</SCRIPT >",
      "x<!--<script>y",
      "<!--",
      "a<script>b",
      "--><!-- ]]> & \"q\" 'a'",
      std::string("line\xE2\x80\xA8sep\xE2\x80\xA9para"),
      std::string("bad\xFF\xC0\x80utf8"),
  };
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ReplayReport r;
    r.trace_name = name;
    r.summary.trace_name = name;
    r.snapshots.resize(2);
    r.snapshots[0].dump.allocator_name = name;
    const std::string html = RenderReplayReportHtml(r);
    const std::string data = DataScript(html);
    for (const char* bad : {"<!--", "<script", "</script", "-->"}) {
      EXPECT_THAT(Lower(data), Not(HasSubstr(bad)));
    }
    EXPECT_THAT(data, Not(HasSubstr("\xE2\x80\xA8")));
    EXPECT_THAT(data, Not(HasSubstr("\xE2\x80\xA9")));
    absl::StatusOr<ReplayReport> back = ReplayReportFromJson(data);
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << data;
    EXPECT_EQ(back->snapshots.size(), 2u);
    if (name.find('\xFF') == std::string::npos) {
      EXPECT_EQ(back->trace_name, name);
      EXPECT_EQ(back->snapshots[0].dump.allocator_name, name);
    } else {
      EXPECT_EQ(back->trace_name,
                "bad\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDutf8");
    }
    // The page itself: one data element, then the viewer's script.
    EXPECT_THAT(html.substr(html.find("</script", html.find("bfc-data"))),
                HasSubstr("JSON.parse(document.getElementById(\"bfc-data\")"));
  }
}

// The report's text is written directly, not as an nlohmann tree (which
// held ~0.7 KB per trace operation: 780 MB for a million events). It must be
// exactly what nlohmann writes for the same value, in every layout, so
// readers of either see one format: with history, with accounts, and with
// empty timelines.
TEST(ReplayReportJsonTest, TheTextIsNlohmannsDumpOfItsOwnValue) {
  using nlohmann::json;
  const CompiledTrace trace = Load("resnet50-infer.csv");
  ReplayReportOptions options;
  options.account_names = {"a", "b"};
  options.account_of_op = [](size_t i) -> size_t { return i % 2; };
  absl::StatusOr<ReplayReport> with_all =
      BuildReplayReport(trace, MakeAllocator, options);
  ASSERT_TRUE(with_all.ok()) << with_all.status();
  ASSERT_FALSE(with_all->history.empty());
  ASSERT_FALSE(with_all->timeline.accounts.empty());
  // A name that needs escaping, and one that is not UTF-8 (replaced).
  with_all->trace_name = "a \"name\"\n\xff";
  CompiledTrace empty;
  empty.name = "empty";
  absl::StatusOr<ReplayReport> none = BuildReplayReport(empty, MakeAllocator);
  ASSERT_TRUE(none.ok()) << none.status();
  ReplayReportOptions no_history;
  no_history.history = false;
  absl::StatusOr<ReplayReport> plain =
      BuildReplayReport(trace, MakeAllocator, no_history);
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const ReplayReport* r : {&*with_all, &*none, &*plain}) {
    for (int indent : {-1, 0, 1, 2}) {
      SCOPED_TRACE(absl::StrCat(r->trace_name, " indent ", indent));
      const std::string text = ReplayReportToJson(*r, indent);
      const json value = json::parse(text);
      const std::string want =
          value.dump(indent, ' ', false, json::error_handler_t::replace);
      // Where they part, not the whole texts (megabytes: gtest's diff of
      // them would take minutes).
      size_t at = 0;
      while (at < want.size() && at < text.size() && want[at] == text[at]) {
        ++at;
      }
      EXPECT_TRUE(want == text)
          << "first difference at byte " << at << " of " << text.size()
          << ": written \"" << text.substr(at, 40) << "\", nlohmann \""
          << want.substr(at, 40) << "\"";
      EXPECT_EQ(value.contains("history"), r->has_history);
      EXPECT_EQ(value["timeline"].contains("accounts"),
                !r->timeline.accounts.empty());
    }
  }
  EXPECT_EQ(json::parse(ReplayReportToJson(*with_all))["trace"],
            "a \"name\"\n\xef\xbf\xbd");
}

TEST(ReplayReportEmptyTest, EmptyTraceGivesEmptyTimeline) {
  CompiledTrace empty;
  empty.name = "empty";
  absl::StatusOr<ReplayReport> r = BuildReplayReport(empty, MakeAllocator);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->timeline.size(), 0u);
  EXPECT_EQ(r->snapshots.size(), 2u);
  EXPECT_FALSE(BuildReplayReport(empty, [] {
                 return std::unique_ptr<Allocator>();
               }).ok());
}

}  // namespace
}  // namespace bfc
