#include "bfc/planner/min_cost_flow_assignment.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace {

// Vertex numbering for n tensors: L(t) = t, R(t) = n + t, H(r) = 2n + r,
// source = 3n, sink = 3n + 1.
struct Layout {
  size_t n;
  size_t Left(size_t t) const { return t; }
  size_t Right(size_t t) const { return n + t; }
  size_t Hub(size_t r) const { return 2 * n + r; }
  size_t Source() const { return 3 * n; }
  size_t Sink() const { return 3 * n + 1; }
  size_t NumVertices() const { return 3 * n + 2; }
};

// Calls edge(from, to, capacity, cost) for every edge of the factored graph
// (see the header), in a fixed order. Records must be valid and non-empty.
// With `fan_in` set, the edges from the hubs into a tensor, which can number
// tensors times distinct sizes, are added to *fan_in uncalled: counting the
// graph then costs O(n log n), so an oversized one is refused at once.
void VisitEdges(
    const std::vector<TensorUsageRecord<size_t>>& records,
    const std::function<void(size_t, size_t, int64_t, int64_t)>& edge,
    size_t* fan_in = nullptr) {
  const size_t n = records.size();
  const Layout g{n};
  std::vector<size_t> sizes;
  sizes.reserve(n);
  for (const auto& rec : records) sizes.push_back(rec.tensor_size);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  auto class_of = [&](size_t i) {
    return static_cast<size_t>(
        std::lower_bound(sizes.begin(), sizes.end(), records[i].tensor_size) -
        sizes.begin());
  };
  const int64_t unbounded = static_cast<int64_t>(n);

  std::vector<size_t> by_last(n);
  std::iota(by_last.begin(), by_last.end(), size_t{0});
  std::stable_sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) {
    return records[a].last_task < records[b].last_task;
  });
  std::vector<size_t> latest(sizes.size(), kNotAssigned);
  std::vector<size_t> active;  // classes with a released hub
  size_t next_release = 0;
  for (size_t t : internal::OrderByFirstTask(records)) {
    while (next_release < n &&
           records[by_last[next_release]].last_task < records[t].first_task) {
      const size_t r = by_last[next_release++];
      const size_t c = class_of(r);
      edge(g.Left(r), g.Hub(r), 1, 0);
      if (latest[c] == kNotAssigned) {
        active.push_back(c);
      } else {
        edge(g.Hub(latest[c]), g.Hub(r), unbounded, 0);
      }
      latest[c] = r;
    }
    const size_t size = records[t].tensor_size;
    edge(g.Source(), g.Left(t), 1, 0);
    edge(g.Right(t), g.Sink(), 1, 0);
    edge(g.Source(), g.Right(t), 1, static_cast<int64_t>(size));
    if (fan_in != nullptr) {
      *fan_in += active.size();
      continue;
    }
    for (size_t c : active) {
      const int64_t cost =
          size > sizes[c] ? static_cast<int64_t>(size - sizes[c]) : 0;
      edge(g.Hub(latest[c]), g.Right(t), 1, cost);
    }
  }
}

// Residual graph in compressed sparse rows: the edges leaving vertex v are
// entries begin[v] .. begin[v + 1] - 1; entry e's reverse is rev[e].
struct ResidualGraph {
  std::vector<uint32_t> begin;
  std::vector<uint32_t> to;
  std::vector<uint32_t> rev;
  std::vector<int64_t> cap;
  std::vector<int64_t> cost;
};

ResidualGraph BuildGraph(const std::vector<TensorUsageRecord<size_t>>& records,
                         size_t num_vertices, size_t num_edges) {
  ResidualGraph g;
  g.begin.assign(num_vertices + 1, 0);
  VisitEdges(records, [&](size_t u, size_t v, int64_t, int64_t) {
    ++g.begin[u + 1];
    ++g.begin[v + 1];
  });
  for (size_t v = 0; v < num_vertices; ++v) g.begin[v + 1] += g.begin[v];
  g.to.resize(2 * num_edges);
  g.rev.resize(2 * num_edges);
  g.cap.resize(2 * num_edges);
  g.cost.resize(2 * num_edges);
  std::vector<uint32_t> fill(g.begin.begin(), g.begin.end() - 1);
  VisitEdges(records, [&](size_t u, size_t v, int64_t cap, int64_t cost) {
    const uint32_t e = fill[u]++;
    const uint32_t r = fill[v]++;
    g.to[e] = static_cast<uint32_t>(v);
    g.cap[e] = cap;
    g.cost[e] = cost;
    g.rev[e] = r;
    g.to[r] = static_cast<uint32_t>(u);
    g.cap[r] = 0;
    g.cost[r] = -cost;
    g.rev[r] = e;
  });
  return g;
}

// Pushes `demand` units from source to sink at minimum cost (primal-dual:
// Dijkstra on reduced costs, then blocking flows on the zero-reduced-cost
// subgraph). Returns the units pushed.
size_t SolveMinCostFlow(ResidualGraph& g, uint32_t source, uint32_t sink,
                        size_t demand, bool* out_of_budget) {
  const size_t num_vertices = g.begin.size() - 1;
  constexpr int64_t kInfinity = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> potential(num_vertices, 0);
  std::vector<int64_t> dist(num_vertices);
  std::vector<int32_t> level(num_vertices);
  std::vector<uint32_t> next_arc(num_vertices);
  std::vector<uint32_t> path;
  std::vector<uint32_t> bfs;
  using Entry = std::pair<int64_t, uint32_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;

  auto admissible = [&](uint32_t u, uint32_t e) {
    const uint32_t v = g.to[e];
    return g.cap[e] > 0 && dist[v] < kInfinity &&
           g.cost[e] + potential[u] - potential[v] == 0;
  };

  size_t flow = 0;
  *out_of_budget = false;
  while (flow < demand) {
    // A phase costs a search over the graph; distinct sizes make one phase
    // per tensor (quadratic in all).
    if (!internal::ChargeWork(g.to.size() + num_vertices)) {
      *out_of_budget = true;
      return flow;
    }
    std::fill(dist.begin(), dist.end(), kInfinity);
    dist[source] = 0;
    heap.push({0, source});
    while (!heap.empty()) {
      const auto [d, u] = heap.top();
      heap.pop();
      if (d > dist[u]) continue;
      for (uint32_t e = g.begin[u]; e < g.begin[u + 1]; ++e) {
        if (g.cap[e] <= 0) continue;
        const uint32_t v = g.to[e];
        const int64_t nd = d + g.cost[e] + potential[u] - potential[v];
        if (nd < dist[v]) {
          dist[v] = nd;
          heap.push({nd, v});
        }
      }
    }
    if (dist[sink] >= kInfinity) break;
    for (size_t v = 0; v < num_vertices; ++v) {
      if (dist[v] < kInfinity) potential[v] += dist[v];
    }

    // Max flow (Dinic) restricted to edges of zero reduced cost.
    while (flow < demand) {
      std::fill(level.begin(), level.end(), -1);
      level[source] = 0;
      bfs.assign(1, source);
      for (size_t head = 0; head < bfs.size(); ++head) {
        const uint32_t u = bfs[head];
        for (uint32_t e = g.begin[u]; e < g.begin[u + 1]; ++e) {
          const uint32_t v = g.to[e];
          if (level[v] < 0 && admissible(u, e)) {
            level[v] = level[u] + 1;
            bfs.push_back(v);
          }
        }
      }
      if (level[sink] < 0) break;
      std::copy(g.begin.begin(), g.begin.end() - 1, next_arc.begin());
      path.clear();
      uint32_t u = source;
      while (flow < demand) {
        if (u == sink) {
          for (uint32_t e : path) {
            g.cap[e] -= 1;
            g.cap[g.rev[e]] += 1;
          }
          ++flow;
          path.clear();
          u = source;
          continue;
        }
        bool advanced = false;
        for (; next_arc[u] < g.begin[u + 1]; ++next_arc[u]) {
          const uint32_t e = next_arc[u];
          const uint32_t v = g.to[e];
          if (level[v] == level[u] + 1 && admissible(u, e)) {
            path.push_back(e);
            u = v;
            advanced = true;
            break;
          }
        }
        if (advanced) continue;
        if (u == source) break;
        level[u] = -1;  // dead end for this phase
        const uint32_t e = path.back();
        path.pop_back();
        u = g.to[g.rev[e]];
        ++next_arc[u];
      }
    }
  }
  return flow;
}

}  // namespace

size_t MinCostFlowEdgeCount(
    const std::vector<TensorUsageRecord<size_t>>& usage_records) {
  if (usage_records.empty()) return 0;
  size_t count = 0;
  size_t fan_in = 0;
  VisitEdges(
      usage_records, [&](size_t, size_t, int64_t, int64_t) { ++count; },
      &fan_in);
  return count + fan_in;
}

absl::Status MinCostFlowAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment, size_t max_edges) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  assignment->object_ids.assign(n, kNotAssigned);
  assignment->object_sizes.clear();
  if (n == 0) return absl::OkStatus();

  // CheckRecords bounded the total by 2^62, so this sum cannot wrap.
  size_t total = 0;
  for (const TensorUsageRecord<size_t>& r : usage_records) {
    total += r.tensor_size;
  }
  if (total > kMaxMinCostFlowTotalSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MINCOSTFLOW: the tensors total ", total, " bytes, over its limit of ",
        kMaxMinCostFlowTotalSize,
        " (kMaxMinCostFlowTotalSize: its int64 path costs must stay exact); "
        "use a GREEDY strategy"));
  }

  // 32-bit entry indices: both directions of every edge must fit.
  constexpr size_t kIndexLimit = std::numeric_limits<uint32_t>::max() / 2;
  const size_t num_edges = MinCostFlowEdgeCount(usage_records);
  if (num_edges > max_edges || num_edges > kIndexLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MINCOSTFLOW: ", n, " tensors need a flow graph of ", num_edges,
        " edges, over the limit of ", std::min(max_edges, kIndexLimit),
        " (kMaxMinCostFlowEdges; the graph grows with tensors times distinct "
        "sizes); use a GREEDY strategy"));
  }
  const Layout layout{n};
  ResidualGraph g = BuildGraph(usage_records, layout.NumVertices(), num_edges);
  bool out_of_budget = false;
  const size_t flow =
      SolveMinCostFlow(g, static_cast<uint32_t>(layout.Source()),
                       static_cast<uint32_t>(layout.Sink()), n, &out_of_budget);
  if (out_of_budget) return internal::WorkBudgetSpent();
  if (flow != n) {
    return absl::InternalError(
        absl::StrCat("MINCOSTFLOW pushed ", flow, " of ", n, " units"));
  }

  // Read the chains off the flow. R(t) holds, as reverse entries with
  // positive capacity, where its unit came from: the source (a new object) or
  // a hub (t succeeds some tensor released at or before that hub).
  std::vector<bool> opens_object(n, false);
  std::vector<std::vector<size_t>> exits(n);  // hub r -> tensors fed there
  std::vector<bool> enters(n, false);         // L(r) -> H(r) carries flow
  for (size_t t = 0; t < n; ++t) {
    const size_t right = layout.Right(t);
    for (uint32_t e = g.begin[right]; e < g.begin[right + 1]; ++e) {
      const size_t from = g.to[e];
      if (from == layout.Sink() || g.cap[e] <= 0) continue;
      if (from == layout.Source()) {
        opens_object[t] = true;
      } else {
        exits[from - layout.Hub(0)].push_back(t);
      }
    }
    const size_t hub = layout.Hub(t);
    for (uint32_t e = g.begin[hub]; e < g.begin[hub + 1]; ++e) {
      if (g.to[e] == layout.Left(t) && g.cap[e] > 0) enters[t] = true;
    }
  }
  // Within a size class, units travel along the release chain; match them
  // first in, first out (any matching is valid: a unit leaves at or after the
  // hub where it entered, i.e. after its tensor was released).
  std::vector<size_t> next(n, kNotAssigned);
  {
    std::vector<size_t> by_last(n);
    std::iota(by_last.begin(), by_last.end(), size_t{0});
    std::stable_sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) {
      return usage_records[a].last_task < usage_records[b].last_task;
    });
    std::vector<size_t> sizes;
    for (const auto& rec : usage_records) sizes.push_back(rec.tensor_size);
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    std::vector<std::deque<size_t>> waiting(sizes.size());
    for (size_t r : by_last) {
      const size_t c =
          static_cast<size_t>(std::lower_bound(sizes.begin(), sizes.end(),
                                               usage_records[r].tensor_size) -
                              sizes.begin());
      if (enters[r]) waiting[c].push_back(r);
      for (size_t t : exits[r]) {
        if (waiting[c].empty()) {
          return absl::InternalError("MINCOSTFLOW: flow is not conserved");
        }
        next[waiting[c].front()] = t;
        waiting[c].pop_front();
      }
    }
  }
  for (size_t t : internal::OrderByFirstTask(usage_records)) {
    if (!opens_object[t]) continue;
    const size_t id = assignment->object_sizes.size();
    size_t size = 0;
    for (size_t u = t; u != kNotAssigned; u = next[u]) {
      if (assignment->object_ids[u] != kNotAssigned) {
        return absl::InternalError("MINCOSTFLOW: chains overlap");
      }
      assignment->object_ids[u] = id;
      size = std::max(size, usage_records[u].tensor_size);
    }
    assignment->object_sizes.push_back(size);
  }
  for (size_t t = 0; t < n; ++t) {
    if (assignment->object_ids[t] == kNotAssigned) {
      return absl::InternalError(
          absl::StrCat("MINCOSTFLOW: tensor ", t, " left unassigned"));
    }
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc
