// Checks shared by the public and hidden tests of 03_collectives: values against closed forms,
// per-rank traffic against the algorithm, simulated time against the algorithm's cost formula.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collectives.hpp"
#include "dist/dist.hpp"
#include "distlab_testing.hpp"

namespace ctest {

using dist::ReduceOp;
using BroadcastFn = void (*)(std::span<float>, int);
using ReduceFn = void (*)(std::span<float>, int, ReduceOp);
using AllReduceFn = void (*)(std::span<float>, ReduceOp);
using GatherFn = void (*)(std::span<const float>, std::span<float>, int);
using AllGatherFn = void (*)(std::span<const float>, std::span<float>);
using ReduceScatterFn = void (*)(std::span<const float>, std::span<float>, ReduceOp);

inline const std::vector<ReduceOp> kReduceOps = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min,
                                                 ReduceOp::Max, ReduceOp::Avg};
inline const std::vector<ReduceOp> kAllReduceOps = {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min,
                                                    ReduceOp::Max, ReduceOp::Avg};
constexpr float kSentinel = -12345.0f;

// ---- inputs and closed-form results -----------------------------------------------------------

/// Rank r's element i for op: small integers (sums exact in float), factors in {2, 1, -1} for
/// Product (|product| <= 2^16 for up to 16 ranks, exact), a spread of signs for Min/Max.
inline float input(ReduceOp op, int r, std::size_t i) {
  const auto k = static_cast<long>(i);
  switch (op) {
    case ReduceOp::Product: {
      const long f = (r * 3 + k % 7) % 5;
      return f == 0 ? 2.0f : (f == 1 ? -1.0f : 1.0f);
    }
    case ReduceOp::Min:
    case ReduceOp::Max:
      return static_cast<float>((r * 13 + k * 7) % 17) - 8.0f;
    default:
      return static_cast<float>((r * 7 + k * 3) % 11) - 5.0f;
  }
}

/// op over ranks 0..p-1 of input(op, r, i), computed in double (exact for these inputs).
inline float reduced(ReduceOp op, int p, std::size_t i) {
  double acc = input(op, 0, i);
  for (int r = 1; r < p; ++r) {
    const double x = input(op, r, i);
    switch (op) {
      case ReduceOp::Product:
        acc *= x;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, x);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, x);
        break;
      default:
        acc += x;
        break;
    }
  }
  if (op == ReduceOp::Avg) return static_cast<float>(acc) / static_cast<float>(p);
  return static_cast<float>(acc);
}

/// The value src broadcasts at index i (distinct per src and index, never the sentinel).
inline float bcast_value(int src, std::size_t i) {
  return static_cast<float>(src * 1000 + static_cast<long>(i % 997)) + 0.5f;
}
/// Rank r's block element i for gather / all-gather.
inline float block_value(int r, std::size_t i) {
  return static_cast<float>(r * 10000 + static_cast<long>(i));
}

inline std::vector<int> roots_for(int p, bool all) {
  std::vector<int> roots;
  if (all) {
    for (int r = 0; r < p; ++r) roots.push_back(r);
  } else {
    for (int r : {0, p / 2, p - 1}) {
      if (std::find(roots.begin(), roots.end(), r) == roots.end()) roots.push_back(r);
    }
  }
  return roots;
}

// ---- running ranks ----------------------------------------------------------------------------

inline dist::LaunchOptions options(int p, const dist::NetworkModel& model = dist::NetworkModel{}) {
  dist::LaunchOptions o = distlab::testing::test_options(p, 5000);
  o.network = model;
  return o;
}

/// Runs body on p ranks. Fails the test (and returns false) when a rank threw, when a rank logged
/// a wrong result, or when a rank called a built-in collective of dist.
inline bool run_case(const std::string& what, const std::string& fn_name, int p,
                     const std::function<void(distlab::testing::RankLog&)>& body,
                     const dist::NetworkModel& model = dist::NetworkModel{}) {
  distlab::testing::RankLog log;
  try {
    dist::launch(options(p, model), [&] {
      dist::reset_stats();
      body(log);
      const auto builtins = dist::stats().builtin_collectives;
      if (builtins != 0) {
        log.fail(dist::rank(), fn_name +
                                   " called a built-in collective of dist (dist::broadcast, "
                                   "reduce, all_reduce, gather, ...; calls: " +
                                   std::to_string(builtins) +
                                   "): implement it with dist::send, recv, isend and irecv only");
      }
    });
  } catch (const std::exception& e) {
    ADD_FAILURE() << fn_name << ", " << what << ": " << e.what();
    return false;
  }
  const auto failures = log.failures();
  if (!failures.empty()) {
    std::ostringstream os;
    os << fn_name << ", " << what << ":";
    for (std::size_t k = 0; k < failures.size() && k < 6; ++k) os << "\n  " << failures[k];
    if (failures.size() > 6) os << "\n  ... (" << failures.size() - 6 << " more)";
    ADD_FAILURE() << os.str();
    return false;
  }
  return true;
}

/// Logs a failure on this rank when got differs from want (first wrong index).
inline void expect_values(distlab::testing::RankLog& log, const std::string& ctx,
                          std::span<const float> got, std::span<const float> want,
                          double tol = 0.0) {
  auto r = distlab::testing::elements_near(got, want, tol, tol);
  if (!r) log.fail(dist::rank(), ctx + ": " + r.message());
}

inline std::string case_name(int p, std::size_t count) {
  return "world size " + std::to_string(p) + ", count " + std::to_string(count);
}

inline std::string op_ctx(ReduceOp op, int root, int rep) {
  std::string s = std::string("op ") + dist::to_string(op);
  if (root >= 0) s += ", root " + std::to_string(root);
  return s + ", call " + std::to_string(rep + 1) + " of 2";
}

// ---- values -----------------------------------------------------------------------------------

inline void check_broadcast_values(BroadcastFn fn, const std::string& name,
                                   const std::vector<int>& world_sizes,
                                   const std::vector<std::size_t>& counts, bool all_roots) {
  for (int p : world_sizes) {
    for (std::size_t n : counts) {
      const bool ok = run_case(case_name(p, n), name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        for (int root : roots_for(p, all_roots)) {
          std::vector<float> want(n);
          for (std::size_t i = 0; i < n; ++i) want[i] = bcast_value(root, i);
          for (int rep = 0; rep < 2; ++rep) {
            std::vector<float> buf(n, kSentinel);
            if (me == root) buf = want;
            fn(buf, root);
            expect_values(log, "root " + std::to_string(root) + ", call " + std::to_string(rep + 1),
                          buf, want);
          }
        }
      });
      if (!ok) return;
    }
  }
}

inline void check_reduce_values(ReduceFn fn, const std::string& name,
                                const std::vector<int>& world_sizes,
                                const std::vector<std::size_t>& counts, bool all_roots) {
  for (int p : world_sizes) {
    for (std::size_t n : counts) {
      const bool ok = run_case(case_name(p, n), name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        for (int root : roots_for(p, all_roots)) {
          for (ReduceOp op : kReduceOps) {
            std::vector<float> want(n);
            for (std::size_t i = 0; i < n; ++i) want[i] = reduced(op, p, i);
            for (int rep = 0; rep < 2; ++rep) {
              std::vector<float> buf(n);
              for (std::size_t i = 0; i < n; ++i) buf[i] = input(op, me, i);
              fn(buf, root, op);
              // Avg: sum / p on the root, however the division is written.
              if (me == root)
                expect_values(log, op_ctx(op, root, rep), buf, want,
                              op == ReduceOp::Avg ? 1e-6 : 0.0);
            }
          }
        }
      });
      if (!ok) return;
    }
  }
}

inline void check_all_reduce_values(AllReduceFn fn, const std::string& name,
                                    const std::vector<int>& world_sizes,
                                    const std::vector<std::size_t>& counts) {
  for (int p : world_sizes) {
    for (std::size_t n : counts) {
      const bool ok = run_case(case_name(p, n), name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        for (ReduceOp op : kAllReduceOps) {
          std::vector<float> want(n);
          for (std::size_t i = 0; i < n; ++i) want[i] = reduced(op, p, i);
          for (int rep = 0; rep < 2; ++rep) {
            std::vector<float> buf(n);
            for (std::size_t i = 0; i < n; ++i) buf[i] = input(op, me, i);
            fn(buf, op);
            // Avg: sum / p, however the division is written (x / p or x * (1/p)).
            expect_values(log, op_ctx(op, -1, rep), buf, want, op == ReduceOp::Avg ? 1e-6 : 0.0);
          }
        }
      });
      if (!ok) return;
    }
  }
}

inline void check_gather_values(GatherFn fn, const std::string& name,
                                const std::vector<int>& world_sizes,
                                const std::vector<std::size_t>& counts, bool all_roots) {
  for (int p : world_sizes) {
    for (std::size_t m : counts) {
      const bool ok = run_case(case_name(p, m), name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        std::vector<float> in(m);
        for (std::size_t i = 0; i < m; ++i) in[i] = block_value(me, i);
        std::vector<float> want(m * static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < m; ++i)
            want[static_cast<std::size_t>(r) * m + i] = block_value(r, i);
        }
        for (int root : roots_for(p, all_roots)) {
          for (int rep = 0; rep < 2; ++rep) {
            // Call 1: out is empty on ranks other than root (allowed); call 2: full size.
            std::vector<float> out(me == root || rep == 1 ? want.size() : 0, kSentinel);
            fn(in, out, root);
            if (me == root) {
              expect_values(log,
                            "root " + std::to_string(root) + ", call " + std::to_string(rep + 1),
                            out, want);
            }
          }
        }
      });
      if (!ok) return;
    }
  }
}

inline void check_all_gather_values(AllGatherFn fn, const std::string& name,
                                    const std::vector<int>& world_sizes,
                                    const std::vector<std::size_t>& counts) {
  for (int p : world_sizes) {
    for (std::size_t m : counts) {
      const bool ok = run_case(case_name(p, m), name, p, [&](distlab::testing::RankLog& log) {
        const int me = dist::rank();
        std::vector<float> in(m);
        for (std::size_t i = 0; i < m; ++i) in[i] = block_value(me, i);
        std::vector<float> want(m * static_cast<std::size_t>(p));
        for (int r = 0; r < p; ++r) {
          for (std::size_t i = 0; i < m; ++i)
            want[static_cast<std::size_t>(r) * m + i] = block_value(r, i);
        }
        for (int rep = 0; rep < 2; ++rep) {
          std::vector<float> out(want.size(), kSentinel);
          fn(in, out);
          expect_values(log, "call " + std::to_string(rep + 1), out, want);
        }
      });
      if (!ok) return;
    }
  }
}

/// counts: elements per rank's output chunk (the input has world_size times as many).
inline void check_reduce_scatter_values(ReduceScatterFn fn, const std::string& name,
                                        const std::vector<int>& world_sizes,
                                        const std::vector<std::size_t>& counts) {
  for (int p : world_sizes) {
    for (std::size_t m : counts) {
      const bool ok =
          run_case(case_name(p, m) + " per rank", name, p, [&](distlab::testing::RankLog& log) {
            const int me = dist::rank();
            const std::size_t total = m * static_cast<std::size_t>(p);
            for (ReduceOp op : kAllReduceOps) {
              std::vector<float> in(total), want(m);
              for (std::size_t i = 0; i < total; ++i) in[i] = input(op, me, i);
              for (std::size_t i = 0; i < m; ++i)
                want[i] = reduced(op, p, static_cast<std::size_t>(me) * m + i);
              for (int rep = 0; rep < 2; ++rep) {
                std::vector<float> out(m, kSentinel);
                fn(in, out, op);
                expect_values(log, op_ctx(op, -1, rep), out, want,
                              op == ReduceOp::Avg ? 1e-6 : 0.0);
              }
            }
          });
      if (!ok) return;
    }
  }
}

// ---- traffic ----------------------------------------------------------------------------------

/// Every rank's counters after one call of body (stats reset just before). Empty on failure.
inline std::vector<dist::Stats> traffic(const std::string& what, const std::string& fn_name, int p,
                                        const std::function<void()>& body) {
  std::vector<dist::Stats> all(static_cast<std::size_t>(p));
  const bool ok = run_case(what, fn_name, p, [&](distlab::testing::RankLog&) {
    dist::barrier();
    dist::reset_stats();
    body();
    all[static_cast<std::size_t>(dist::rank())] = dist::stats();
  });
  if (!ok) all.clear();
  return all;
}

/// A p x p matrix: m[r][q] = messages (or bytes) from rank r to rank q.
using Matrix = std::vector<std::vector<std::uint64_t>>;
inline Matrix zeros(int p) {
  return Matrix(static_cast<std::size_t>(p),
                std::vector<std::uint64_t>(static_cast<std::size_t>(p), 0));
}

/// Compares who sent how many messages (and bytes, when given) to whom with the algorithm's
/// pattern; reports the first difference with the algorithm's rule.
inline void expect_pattern(const std::vector<dist::Stats>& stats, const Matrix& msgs,
                           const Matrix* bytes, const std::string& fn_name, const std::string& what,
                           const std::string& rule) {
  const auto p = stats.size();
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t q = 0; q < p; ++q) {
      const auto got_m = stats[r].messages_sent_to.at(q);
      if (got_m != msgs[r][q]) {
        ADD_FAILURE() << fn_name << ", " << what << ": rank " << r << " sent " << got_m
                      << " messages to rank " << q << " but the algorithm sends " << msgs[r][q]
                      << " (" << rule << ")";
        return;
      }
      const auto got_in = stats[q].messages_received_from.at(r);
      if (got_in != msgs[r][q]) {
        ADD_FAILURE() << fn_name << ", " << what << ": rank " << q << " received " << got_in
                      << " messages from rank " << r << " but the algorithm sends " << msgs[r][q]
                      << " (" << rule << ")";
        return;
      }
      if (bytes != nullptr && stats[r].bytes_sent_to.at(q) != (*bytes)[r][q]) {
        ADD_FAILURE() << fn_name << ", " << what << ": rank " << r << " sent "
                      << stats[r].bytes_sent_to.at(q) << " bytes to rank " << q
                      << " but the algorithm sends " << (*bytes)[r][q] << " (" << rule << ")";
        return;
      }
    }
  }
}

// ---- simulated time ---------------------------------------------------------------------------

/// Max over ranks of the simulated time one call of body takes (clocks aligned by a barrier),
/// checked for two calls in a row. Returns -1 after a failure.
inline double sim_time_of(const std::string& what, const std::string& fn_name, int p,
                          const dist::NetworkModel& model, const std::function<void()>& body) {
  std::vector<double> elapsed(2 * static_cast<std::size_t>(p), 0.0);
  const bool ok = run_case(
      what, fn_name, p,
      [&](distlab::testing::RankLog&) {
        for (std::size_t rep = 0; rep < 2; ++rep) {
          dist::barrier();
          const double t0 = dist::sim_time();
          body();
          elapsed[rep * static_cast<std::size_t>(p) + static_cast<std::size_t>(dist::rank())] =
              dist::sim_time() - t0;
        }
      },
      model);
  if (!ok) return -1.0;
  const auto half = elapsed.begin() + p;
  const double first = *std::max_element(elapsed.begin(), half);
  const double second = *std::max_element(half, elapsed.end());
  if (std::abs(first - second) > 1e-3 * std::max(first, 1e-12)) {
    ADD_FAILURE() << fn_name << ", " << what << ": the first call took " << first * 1e6
                  << " us of simulated time but the second " << second * 1e6
                  << " us: does a call leave messages or unfinished isends behind?";
    return -1.0;
  }
  return first;
}

/// Checks the simulated time against the algorithm's cost within 1%.
inline void expect_time(double got, double want, const std::string& fn_name,
                        const std::string& what, const std::string& formula,
                        const std::string& hint) {
  if (got < 0) return;  // already reported
  const double tol = 0.01 * want + 1e-12;
  if (std::abs(got - want) > tol) {
    ADD_FAILURE() << fn_name << ", " << what << ": simulated time " << got * 1e6
                  << " us, but the algorithm costs " << want * 1e6 << " us = " << formula
                  << (got > want ? " (slower: " : " (faster: ") << hint << ")";
  }
}

/// A flat network with a reduction cost, so that alpha, beta and gamma all show in the times.
inline dist::NetworkModel timing_model(bool with_gamma) {
  dist::NetworkModel m;
  m.latency_s = 5e-6;
  m.bandwidth_Bps = 1e9;
  m.reduce_Bps = with_gamma ? 2e9 : 0.0;
  return m;
}

inline bool is_pow2(int p) { return (p & (p - 1)) == 0; }
inline int floor_log2(int p) {
  int k = 0;
  while ((2 << k) <= p) ++k;
  return k;
}

inline std::string model_text(const dist::NetworkModel& m, std::size_t bytes) {
  std::ostringstream os;
  os << "with alpha " << m.latency_s * 1e6 << " us, n " << bytes << " bytes, beta 1/"
     << m.bandwidth_Bps << " s/B";
  if (m.reduce_Bps > 0) os << ", gamma 1/" << m.reduce_Bps << " s/B";
  if (m.ranks_per_node > 0) {
    os << ", nodes of " << m.ranks_per_node << " ranks (between nodes alpha "
       << m.inter_node_latency_s * 1e6 << " us, beta 1/" << m.inter_node_bandwidth_Bps << " s/B)";
  }
  return os.str();
}

// ---- one call of any collective, by name ------------------------------------------------------

/// One call of a collective on `count` floats per rank (the block or chunk size for gather,
/// all-gather and reduce-scatter), with root `root` (-1 for the functions without one).
using Call = std::function<void(std::size_t count, int root)>;

inline Call call_of(const std::string& fn) {
  using namespace collectives;
  static const std::map<std::string, Call> calls = {
      {"broadcast_naive",
       [](std::size_t n, int r) {
         std::vector<float> b(n, 1.0f);
         broadcast_naive(b, r);
       }},
      {"broadcast_tree",
       [](std::size_t n, int r) {
         std::vector<float> b(n, 1.0f);
         broadcast_tree(b, r);
       }},
      {"broadcast_ring",
       [](std::size_t n, int r) {
         std::vector<float> b(n, 1.0f);
         broadcast_ring(b, r);
       }},
      {"reduce_naive",
       [](std::size_t n, int r) {
         std::vector<float> b(n, 1.0f);
         reduce_naive(b, r, ReduceOp::Sum);
       }},
      {"reduce_tree",
       [](std::size_t n, int r) {
         std::vector<float> b(n, 1.0f);
         reduce_tree(b, r, ReduceOp::Sum);
       }},
      {"all_reduce_naive",
       [](std::size_t n, int) {
         std::vector<float> b(n, 1.0f);
         all_reduce_naive(b, ReduceOp::Sum);
       }},
      {"all_reduce_butterfly",
       [](std::size_t n, int) {
         std::vector<float> b(n, 1.0f);
         all_reduce_butterfly(b, ReduceOp::Sum);
       }},
      {"all_reduce_ring",
       [](std::size_t n, int) {
         std::vector<float> b(n, 1.0f);
         all_reduce_ring(b, ReduceOp::Sum);
       }},
      {"gather_naive",
       [](std::size_t n, int r) {
         std::vector<float> in(n, 1.0f), out(n * static_cast<std::size_t>(dist::world_size()));
         gather_naive(in, out, r);
       }},
      {"gather_tree",
       [](std::size_t n, int r) {
         std::vector<float> in(n, 1.0f), out(n * static_cast<std::size_t>(dist::world_size()));
         gather_tree(in, out, r);
       }},
      {"all_gather_ring",
       [](std::size_t n, int) {
         std::vector<float> in(n, 1.0f), out(n * static_cast<std::size_t>(dist::world_size()));
         all_gather_ring(in, out);
       }},
      {"reduce_scatter_ring",
       [](std::size_t n, int) {
         std::vector<float> in(n * static_cast<std::size_t>(dist::world_size()), 1.0f), out(n);
         reduce_scatter_ring(in, out, ReduceOp::Sum);
       }},
  };
  return calls.at(fn);
}

}  // namespace ctest
