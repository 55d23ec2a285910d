#include "planner/internal.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

namespace bfc {
namespace planner {
namespace internal {
namespace {

thread_local uint64_t t_work_left = std::numeric_limits<uint64_t>::max();
thread_local uint64_t t_work_budget = 0;  // 0: none set
thread_local const std::function<void()>* t_tick = nullptr;
thread_local uint64_t t_until_tick = kWorkStepsPerTick;

}  // namespace

WorkBudgetScope::WorkBudgetScope(uint64_t steps,
                                 const std::function<void()>* tick)
    : saved_left_(t_work_left),
      saved_budget_(t_work_budget),
      saved_tick_(t_tick),
      saved_until_tick_(t_until_tick) {
  t_work_left = steps;
  t_work_budget = steps;
  t_tick = tick != nullptr && *tick ? tick : nullptr;
  t_until_tick = kWorkStepsPerTick;
}

WorkBudgetScope::~WorkBudgetScope() {
  t_work_left = saved_left_;
  t_work_budget = saved_budget_;
  t_tick = saved_tick_;
  t_until_tick = saved_until_tick_;
}

bool ChargeWork(uint64_t steps) {
  if (steps > t_work_left) {
    t_work_left = 0;
    return false;
  }
  t_work_left -= steps;
  if (steps >= t_until_tick) {
    t_until_tick = kWorkStepsPerTick;
    if (t_tick != nullptr) (*t_tick)();
  } else {
    t_until_tick -= steps;
  }
  return true;
}

absl::Status WorkBudgetSpent() {
  return absl::ResourceExhaustedError(absl::StrCat(
      "stopped: its work passed the budget of ", t_work_budget,
      " steps (max_quadratic_tensors squared, plus 4096 per tensor); raise "
      "max_quadratic_tensors (0: no limit) to run it to the end"));
}

namespace {

// Indices of the records sorted by last_task (ties by index).
std::vector<size_t> OrderByLastTask(
    const std::vector<TensorUsageRecord<size_t>>& usage_records) {
  std::vector<size_t> order(usage_records.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return usage_records[a].last_task < usage_records[b].last_task;
  });
  return order;
}

// Calls visit(task) at every start task with the live set updated: records
// whose interval contains the task have been added (add(i)) and those ending
// before it removed (remove(i)).
template <typename Add, typename Remove, typename Visit>
void SweepStartTasks(const std::vector<TensorUsageRecord<size_t>>& records,
                     Add add, Remove remove, Visit visit) {
  const std::vector<size_t> by_first = OrderByFirstTask(records);
  const std::vector<size_t> by_last = OrderByLastTask(records);
  size_t next_start = 0;
  size_t next_end = 0;
  while (next_start < by_first.size()) {
    const TaskId task = records[by_first[next_start]].first_task;
    while (next_end < by_last.size() &&
           records[by_last[next_end]].last_task < task) {
      remove(by_last[next_end++]);
    }
    while (next_start < by_first.size() &&
           records[by_first[next_start]].first_task == task) {
      add(by_first[next_start++]);
    }
    visit(task);
  }
}

}  // namespace

void ObjectsToOffsets(const ObjectsAssignment<size_t>& objects,
                      size_t base_addr_align_bytes,
                      OffsetsAssignment* offsets) {
  std::vector<size_t> object_offsets(objects.object_sizes.size());
  size_t end = 0;
  for (size_t id = 0; id < objects.object_sizes.size(); ++id) {
    object_offsets[id] = AlignByN(end, base_addr_align_bytes);
    end = object_offsets[id] + objects.object_sizes[id];
  }
  offsets->total_size = end;
  offsets->offsets.resize(objects.object_ids.size());
  for (size_t i = 0; i < objects.object_ids.size(); ++i) {
    offsets->offsets[i] = object_offsets[objects.object_ids[i]];
  }
}

size_t PeakLiveSize(
    const std::vector<TensorUsageRecord<size_t>>& usage_records) {
  size_t live = 0;
  size_t peak = 0;
  SweepStartTasks(
      usage_records, [&](size_t i) { live += usage_records[i].tensor_size; },
      [&](size_t i) { live -= usage_records[i].tensor_size; },
      [&](TaskId) { peak = std::max(peak, live); });
  return peak;
}

std::vector<size_t> CalculatePositionalMaximums(
    const std::vector<TensorUsageRecord<size_t>>& usage_records) {
  std::multiset<size_t, std::greater<size_t>> live;
  std::vector<size_t> positional_max;
  SweepStartTasks(
      usage_records,
      [&](size_t i) { live.insert(usage_records[i].tensor_size); },
      [&](size_t i) { live.erase(live.find(usage_records[i].tensor_size)); },
      [&](TaskId) {
        if (positional_max.size() < live.size()) {
          positional_max.resize(live.size(), 0);
        }
        size_t k = 0;
        for (size_t size : live) {
          positional_max[k] = std::max(positional_max[k], size);
          ++k;
        }
      });
  return positional_max;
}

std::vector<TaskId> StartTasks(
    const std::vector<TensorUsageRecord<size_t>>& usage_records) {
  std::vector<TaskId> starts;
  starts.reserve(usage_records.size());
  for (const auto& record : usage_records) starts.push_back(record.first_task);
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  return starts;
}

}  // namespace internal
}  // namespace planner
}  // namespace bfc
