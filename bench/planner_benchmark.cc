// File: bench/planner_benchmark.cc
// -----------------------------------------------------------------------------
//
// The offline planner's scaling curve (issue: "the planner is quadratic"):
// the usage records of a real trace (tests/data/lstm-train.csv unless
// $BFC_BENCH_PLANNER_TRACE names another) tiled to 1e3..1e6 events, each copy
// shifted past the previous one in time, so sizes, lifetimes and the live set
// are the real ones, repeated.
//
//   BM_Greedy/<strategy>/fast/<events>       the library's strategy
//   BM_Greedy/<strategy>/reference/<events>  the quadratic original
//                                            (tests/planner/greedy_reference.cc)
//                                            on the same records: the baseline,
//                                            up to 1e5 events (the objects form
//                                            of GREEDY_BY_SIZE, still super-
//                                            linear, stops at 1e5 both ways)
//   BM_PlanRecords/default/<events>          what bfc-plan runs with no flags
//                                            (every default strategy, both
//                                            forms, validation included)
//
// Counters: tensors, and ns per tensor. One iteration per size past 1e4
// events (a single run is seconds).
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "benchmark/benchmark.h"
#include "bfc/planner/greedy_by_breadth_assignment.h"
#include "bfc/planner/greedy_by_size_assignment.h"
#include "bfc/planner/plan_report.h"
#include "bfc/planner/trace_records.h"
#include "bfc/replay/trace.h"
#include "planner/greedy_reference.h"

namespace bfc::planner {
namespace {

using Records = std::vector<TensorUsageRecord<size_t>>;

struct Base {
  Records records;
  size_t num_tasks = 0;  // the trace's events
};

const Base& BaseRecords() {
  static const Base* base = [] {
    auto* b = new Base;
    const char* env = std::getenv("BFC_BENCH_PLANNER_TRACE");
    const std::string path =
        env ? env : std::string(BFC_BENCH_TRACE_DIR) + "/lstm-train.csv";
    absl::StatusOr<Trace> trace = ReadTrace(path);
    absl::StatusOr<CompiledTrace> compiled =
        trace.ok() ? CompileTrace(*trace)
                   : absl::StatusOr<CompiledTrace>(trace.status());
    absl::StatusOr<TraceUsage> usage =
        compiled.ok() ? UsageRecordsFromTrace(*compiled)
                      : absl::StatusOr<TraceUsage>(compiled.status());
    if (!usage.ok()) {
      std::fprintf(stderr, "planner benchmark: %s: %s\n", path.c_str(),
                   usage.status().ToString().c_str());
      std::exit(1);
    }
    b->records = std::move(usage->records);
    b->num_tasks = usage->num_tasks;
    return b;
  }();
  return *base;
}

// The base records tiled to `events` events (tensors in proportion), copy c
// shifted by c * num_tasks tasks.
Records Tiled(size_t events) {
  const Base& base = BaseRecords();
  const size_t tensors = static_cast<size_t>(
      double(events) * double(base.records.size()) / double(base.num_tasks));
  Records out;
  out.reserve(tensors);
  for (size_t copy = 0; out.size() < tensors; ++copy) {
    for (size_t i = 0; i < base.records.size() && out.size() < tensors; ++i) {
      const auto& r = base.records[i];
      out.emplace_back(r.tensor_size, r.first_task + copy * base.num_tasks,
                       r.last_task + copy * base.num_tasks);
    }
  }
  return out;
}

enum class Strategy { kBySizeOffsets, kBySizeObjects, kByBreadth };

template <bool kReference>
void BM_Greedy(benchmark::State& state, Strategy strategy) {
  const Records records = Tiled(static_cast<size_t>(state.range(0)));
  size_t total = 0;
  for (auto _ : state) {
    absl::Status status;
    if (strategy == Strategy::kBySizeOffsets) {
      OffsetsAssignment a;
      status = kReference ? reference::GreedyBySizeAssignment(records, 64, &a)
                          : GreedyBySizeAssignment(records, 64, &a);
      total = a.total_size;
    } else {
      ObjectsAssignment<size_t> a;
      if (strategy == Strategy::kBySizeObjects) {
        status = kReference ? reference::GreedyBySizeDistPriorityAssignment(
                                  records, &a)
                            : GreedyBySizeDistPriorityAssignment(records, &a);
      } else {
        status = kReference ? reference::GreedyByBreadthAssignment(records, &a)
                            : GreedyByBreadthAssignment(records, &a);
      }
      total = 0;
      for (size_t s : a.object_sizes) total += s;
    }
    if (!status.ok()) {
      state.SkipWithError(status.ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(total);
  }
  state.counters["tensors"] = double(records.size());
  state.counters["ns/tensor"] = benchmark::Counter(
      double(records.size()), benchmark::Counter::kIsIterationInvariantRate |
                                  benchmark::Counter::kInvert);
  state.counters["total_bytes"] = double(total);
}

void BM_PlanRecordsDefault(benchmark::State& state) {
  const Records records = Tiled(static_cast<size_t>(state.range(0)));
  size_t best = 0;
  for (auto _ : state) {
    absl::StatusOr<PlanReport> report = PlanRecords(records, PlanOptions());
    if (!report.ok()) {
      state.SkipWithError(report.status().ToString().c_str());
      return;
    }
    best = report->BestTotalBytes();
  }
  state.counters["tensors"] = double(records.size());
  state.counters["best_bytes"] = double(best);
}

void Sizes(benchmark::internal::Benchmark* b, long max_events) {
  for (long events = 1000; events <= max_events; events *= 10) {
    b->Arg(events);
  }
  b->Unit(benchmark::kMillisecond)->Iterations(1)->UseRealTime();
}

void Register() {
  struct Named {
    const char* name;
    Strategy strategy;
  };
  for (const Named& s :
       {Named{"GREEDY_BY_SIZE_offsets", Strategy::kBySizeOffsets},
        Named{"GREEDY_BY_SIZE_objects", Strategy::kBySizeObjects},
        Named{"GREEDY_BY_BREADTH", Strategy::kByBreadth}}) {
    Sizes(benchmark::RegisterBenchmark(
              (std::string("BM_Greedy/") + s.name + "/fast").c_str(),
              BM_Greedy<false>, s.strategy),
          s.strategy == Strategy::kBySizeObjects ? 100000 : 1000000);
    Sizes(benchmark::RegisterBenchmark(
              (std::string("BM_Greedy/") + s.name + "/reference").c_str(),
              BM_Greedy<true>, s.strategy),
          100000);
  }
  Sizes(benchmark::RegisterBenchmark("BM_PlanRecords/default",
                                     BM_PlanRecordsDefault),
        1000000);
}

}  // namespace
}  // namespace bfc::planner

int main(int argc, char** argv) {
  bfc::planner::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
