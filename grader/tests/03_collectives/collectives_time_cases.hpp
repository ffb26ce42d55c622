// The simulated-time cases of 03_collectives that are compared with the reference's own run
// instead of a closed form: every function that reduces, with a reduction cost (gamma > 0), on a
// flat network at world sizes that are not powers of two (where the cost formulas of the SimTime
// tests leave gamma out) and on the two-level network (fast links inside a node, slow between).
// golden_03_collectives runs the reference on each case and writes
// grader/golden/03_collectives/sim_times.txt (./distlab golden 03_collectives); the tests
// <Suite>.SimTimeWithReductionCostMatchesTheReference run the submitted function on the same cases
// and compare within 1%. A reduction done by hand (not through dist::reduce_into) costs no
// simulated time and so comes out faster than the reference.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "dist/dist.hpp"

namespace ctime03 {

constexpr std::size_t kN = 1680;  // floats of a buffer (divisible by every world size below)
constexpr std::size_t kM = 210;   // floats of reduce_scatter_ring's output chunk

struct TimeCase {
  std::string fn;
  int p;     // world size
  int g;     // ranks per node; 0 = flat network
  int root;  // -1: the function has no root
};

/// The model of a case: the flat timing model of the SimTime tests or the two-level defaults,
/// both with a reduction cost.
inline dist::NetworkModel model_of(const TimeCase& c) {
  dist::NetworkModel m;
  if (c.g > 0) {
    m = dist::NetworkModel::two_level(c.g);
  } else {
    m.latency_s = 5e-6;
    m.bandwidth_Bps = 1e9;
  }
  m.reduce_Bps = 2e9;
  return m;
}

inline const std::vector<std::string>& reducing_functions() {
  static const std::vector<std::string> fns = {"reduce_naive",     "reduce_tree",
                                               "all_reduce_naive", "all_reduce_butterfly",
                                               "all_reduce_ring",  "reduce_scatter_ring"};
  return fns;
}

inline bool has_root(const std::string& fn) { return fn == "reduce_naive" || fn == "reduce_tree"; }

inline std::vector<TimeCase> time_cases() {
  struct Layout {
    int p, g;
  };
  const std::vector<Layout> layouts = {{3, 0}, {5, 0}, {6, 0},  {7, 0},
                                       {8, 4}, {8, 2}, {12, 4}, {16, 4}};
  std::vector<TimeCase> cases;
  for (const auto& fn : reducing_functions()) {
    for (const auto& l : layouts) {
      if (!has_root(fn)) {
        cases.push_back({fn, l.p, l.g, -1});
        continue;
      }
      // A root that is neither rank 0 nor the last rank, and (two-level) not a node's first rank.
      cases.push_back({fn, l.p, l.g, l.g > 0 ? l.g + 1 : l.p - 2});
    }
  }
  return cases;
}

/// One call of the case's function on fresh buffers (op Sum).
inline void call(const TimeCase& c) {
  using dist::ReduceOp;
  if (c.fn == "reduce_scatter_ring") {
    std::vector<float> in(kM * static_cast<std::size_t>(c.p), 1.0f), out(kM);
    collectives::reduce_scatter_ring(in, out, ReduceOp::Sum);
    return;
  }
  std::vector<float> buf(kN, 1.0f);
  if (c.fn == "reduce_naive") collectives::reduce_naive(buf, c.root, ReduceOp::Sum);
  if (c.fn == "reduce_tree") collectives::reduce_tree(buf, c.root, ReduceOp::Sum);
  if (c.fn == "all_reduce_naive") collectives::all_reduce_naive(buf, ReduceOp::Sum);
  if (c.fn == "all_reduce_butterfly") collectives::all_reduce_butterfly(buf, ReduceOp::Sum);
  if (c.fn == "all_reduce_ring") collectives::all_reduce_ring(buf, ReduceOp::Sum);
}

/// The case's line in sim_times.txt before its time: "<fn> p <p> g <g> root <root>".
inline std::string key(const TimeCase& c) {
  std::ostringstream os;
  os << c.fn << " p " << c.p << " g " << c.g << " root " << c.root;
  return os.str();
}

/// The case in words, for failure messages.
inline std::string describe(const TimeCase& c) {
  std::ostringstream os;
  os << (c.g > 0 ? "two-level network (" + std::to_string(c.g) + " ranks per node)"
                 : std::string("flat network"))
     << " with a reduction cost, world size " << c.p;
  if (c.root >= 0) os << ", root " << c.root;
  os << ", count " << (c.fn == "reduce_scatter_ring" ? kM : kN)
     << (c.fn == "reduce_scatter_ring" ? " per rank" : "");
  return os.str();
}

}  // namespace ctime03
