// Built-in collectives against closed forms: every collective x world sizes {1,2,3,4,5,8,64} x
// counts {0,1,7,1000,65536}, each run twice in one launch (to catch leftover state); every op and
// element type; in-place forms.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <tuple>

#include "distlab_testing.hpp"

using namespace distlab::testing;

namespace {

enum class Kind {
  Broadcast,
  Reduce,
  AllReduce,
  AllReduceAsync,
  Gather,
  AllGather,
  Scatter,
  ReduceScatter
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Broadcast:
      return "broadcast";
    case Kind::Reduce:
      return "reduce";
    case Kind::AllReduce:
      return "all_reduce";
    case Kind::AllReduceAsync:
      return "all_reduce_async";
    case Kind::Gather:
      return "gather";
    case Kind::AllGather:
      return "all_gather";
    case Kind::Scatter:
      return "scatter";
    case Kind::ReduceScatter:
      return "reduce_scatter";
  }
  return "?";
}

// The value rank r holds at global index i (small integers: every closed form below is exact).
template <typename T>
T value(int r, std::size_t i, dist::ReduceOp op) {
  if (op == dist::ReduceOp::Product)
    return static_cast<T>((static_cast<std::size_t>(r) + i) % 7 == 0 ? 2 : 1);
  return static_cast<T>(static_cast<long>((static_cast<std::size_t>(r) * 5 + i * 3) % 17) - 8);
}

// Closed form of the reduction over ranks 0..p-1 at index i.
template <typename T>
T reduced(int p, std::size_t i, dist::ReduceOp op) {
  T acc = fold_ranks<T>(op, p, [&](int r) { return value<T>(r, i, op); });
  if (op == dist::ReduceOp::Avg) acc = static_cast<T>(acc / static_cast<T>(p));
  return acc;
}

// Elements per rank for the gather family: `count`, unless p*p*count would need too much memory.
std::size_t block_of(int p, std::size_t count) {
  const auto up = static_cast<std::size_t>(p);
  return up * up * count <= (std::size_t{1} << 22) ? count : std::max<std::size_t>(1, count / up);
}

// Runs collective `kind` on the calling rank and checks the result; returns "" or what is wrong.
template <typename T>
std::string run_and_check(Kind kind, std::size_t count, dist::ReduceOp op) {
  const int p = dist::world_size();
  const int r = dist::rank();
  const T junk = static_cast<T>(-99);
  std::vector<T> got, want;
  switch (kind) {
    case Kind::Broadcast: {
      const int root = p / 2;
      got.assign(count, junk);
      if (r == root) {
        for (std::size_t i = 0; i < count; ++i) got[i] = value<T>(root, i, op);
      }
      dist::broadcast(std::span<T>(got), root);
      for (std::size_t i = 0; i < count; ++i) want.push_back(value<T>(root, i, op));
      break;
    }
    case Kind::Reduce:
    case Kind::AllReduce:
    case Kind::AllReduceAsync: {
      const int root = p - 1;
      for (std::size_t i = 0; i < count; ++i) got.push_back(value<T>(r, i, op));
      if (kind == Kind::Reduce) {
        dist::reduce(std::span<T>(got), root, op);
      } else if (kind == Kind::AllReduce) {
        dist::all_reduce(std::span<T>(got), op);
      } else {
        dist::Work w = dist::all_reduce_async(std::span<T>(got), op);
        w.wait();
        if (!w.is_completed()) return "all_reduce_async: is_completed() is false after wait()";
        w.wait();  // waiting twice is fine
      }
      for (std::size_t i = 0; i < count; ++i) {
        want.push_back(kind == Kind::Reduce && r != root ? value<T>(r, i, op)
                                                         : reduced<T>(p, i, op));
      }
      break;
    }
    case Kind::Gather:
    case Kind::AllGather: {
      const int root = p - 1;
      const std::size_t b = block_of(p, count);
      std::vector<T> in(b);
      for (std::size_t i = 0; i < b; ++i) in[i] = value<T>(r, i, op);
      const bool has_out = kind == Kind::AllGather || r == root;
      got.assign(has_out ? b * static_cast<std::size_t>(p) : 0, junk);
      if (kind == Kind::Gather) {
        dist::gather(std::span<const T>(in), std::span<T>(got), root);
      } else {
        dist::all_gather(std::span<const T>(in), std::span<T>(got));
      }
      if (has_out) {
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = 0; i < b; ++i) want.push_back(value<T>(q, i, op));
        }
      }
      break;
    }
    case Kind::Scatter: {
      const int root = p / 3;
      const std::size_t b = block_of(p, count);
      std::vector<T> in;
      if (r == root) {
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = 0; i < b; ++i) in.push_back(value<T>(q, i, op));
        }
      }
      got.assign(b, junk);
      dist::scatter(std::span<const T>(in), std::span<T>(got), root);
      for (std::size_t i = 0; i < b; ++i) want.push_back(value<T>(r, i, op));
      break;
    }
    case Kind::ReduceScatter: {
      const std::size_t b = block_of(p, count);
      std::vector<T> in(b * static_cast<std::size_t>(p));
      for (std::size_t i = 0; i < in.size(); ++i) in[i] = value<T>(r, i, op);
      got.assign(b, junk);
      dist::reduce_scatter(std::span<const T>(in), std::span<T>(got), op);
      for (std::size_t i = 0; i < b; ++i)
        want.push_back(reduced<T>(p, static_cast<std::size_t>(r) * b + i, op));
      break;
    }
  }
  return mismatch_text(std::span<const T>(got), std::span<const T>(want));
}

using Param = std::tuple<Kind, int, std::size_t>;

class Collective : public ::testing::TestWithParam<Param> {};

TEST_P(Collective, MatchesClosedFormTwice) {
  const auto [kind, p, count] = GetParam();
  RankLog failures;
  run_ranks(threads_options(p), [&, kind = kind, count = count] {
    for (int round = 0; round < 2; ++round) {
      const std::string err = run_and_check<float>(kind, count, dist::ReduceOp::Sum);
      if (!err.empty())
        failures.fail(dist::rank(), std::string(kind_name(kind)) + " run " +
                                        std::to_string(round + 1) + ": " + err);
    }
    const auto s = dist::stats();
    if (s.builtin_collectives != 2)
      failures.fail(dist::rank(), "builtin_collectives = " + std::to_string(s.builtin_collectives));
  });
  failures.check();
}

INSTANTIATE_TEST_SUITE_P(
    AllSizes, Collective,
    ::testing::Combine(::testing::Values(Kind::Broadcast, Kind::Reduce, Kind::AllReduce,
                                         Kind::AllReduceAsync, Kind::Gather, Kind::AllGather,
                                         Kind::Scatter, Kind::ReduceScatter),
                       ::testing::Values(1, 2, 3, 4, 5, 8, 64),
                       ::testing::Values(std::size_t{0}, std::size_t{1}, std::size_t{7},
                                         std::size_t{1000}, std::size_t{65536})),
    [](const ::testing::TestParamInfo<Param>& param_info) {
      const auto& v = param_info.param;
      return std::string(kind_name(std::get<0>(v))) + "_p" + std::to_string(std::get<1>(v)) + "_n" +
             std::to_string(std::get<2>(v));
    });

// ---- every op and element type ---------------------------------------------------------------------

template <typename T>
class TypedOps : public ::testing::Test {};
using Types = ::testing::Types<float, double, std::int32_t, std::int64_t>;
TYPED_TEST_SUITE(TypedOps, Types);

TYPED_TEST(TypedOps, ReductionsMatchClosedForms) {
  using T = TypeParam;
  const dist::ReduceOp ops[] = {dist::ReduceOp::Sum, dist::ReduceOp::Product, dist::ReduceOp::Min,
                                dist::ReduceOp::Max, dist::ReduceOp::Avg};
  for (int p : {1, 3, 4, 7}) {
    RankLog failures;
    run_ranks(threads_options(p), [&] {
      for (dist::ReduceOp op : ops) {
        for (Kind kind :
             {Kind::AllReduce, Kind::AllReduceAsync, Kind::Reduce, Kind::ReduceScatter}) {
          for (std::size_t count : {std::size_t{7}, std::size_t{1000}}) {
            const std::string err = run_and_check<T>(kind, count, op);
            if (!err.empty()) {
              failures.fail(dist::rank(), std::string(kind_name(kind)) + "(" + dist::to_string(op) +
                                              ", p=" + std::to_string(p) +
                                              ", n=" + std::to_string(count) + "): " + err);
            }
          }
        }
      }
    });
    failures.check();
  }
}

TYPED_TEST(TypedOps, DataMovementWorksForEveryType) {
  using T = TypeParam;
  RankLog failures;
  run_ranks(threads_options(5), [&] {
    for (Kind kind : {Kind::Broadcast, Kind::Gather, Kind::AllGather, Kind::Scatter}) {
      const std::string err = run_and_check<T>(kind, 13, dist::ReduceOp::Sum);
      if (!err.empty()) failures.fail(dist::rank(), std::string(kind_name(kind)) + ": " + err);
    }
  });
  failures.check();
}

// ---- in place -----------------------------------------------------------------------------------------

TEST(InPlace, AllGatherWithInputInsideOutput) {
  for (int p : {1, 2, 5}) {
    RankLog failures;
    run_ranks(threads_options(p), [&] {
      const int r = dist::rank();
      const std::size_t b = 9;
      std::vector<float> buf(b * static_cast<std::size_t>(p), -1.f);
      for (std::size_t i = 0; i < b; ++i)
        buf[static_cast<std::size_t>(r) * b + i] = value<float>(r, i, dist::ReduceOp::Sum);
      std::span<float> out(buf);
      dist::all_gather(std::span<const float>(out.subspan(static_cast<std::size_t>(r) * b, b)),
                       out);
      std::vector<float> want;
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < b; ++i) want.push_back(value<float>(q, i, dist::ReduceOp::Sum));
      }
      const auto err = mismatch_text(std::span<const float>(buf), std::span<const float>(want));
      if (!err.empty()) failures.fail(r, err);
    });
    failures.check();
  }
}

TEST(InPlace, ReduceScatterWithOutputInsideInput) {
  for (int p : {1, 3, 4}) {
    RankLog failures;
    run_ranks(threads_options(p), [&] {
      const int r = dist::rank();
      const std::size_t b = 11;
      std::vector<std::int32_t> buf(b * static_cast<std::size_t>(p));
      for (std::size_t i = 0; i < buf.size(); ++i)
        buf[i] = value<std::int32_t>(r, i, dist::ReduceOp::Sum);
      std::span<std::int32_t> all(buf);
      auto mine = all.subspan(static_cast<std::size_t>(r) * b, b);
      dist::reduce_scatter(std::span<const std::int32_t>(all), mine, dist::ReduceOp::Sum);
      std::vector<std::int32_t> want;
      for (std::size_t i = 0; i < b; ++i)
        want.push_back(
            reduced<std::int32_t>(p, static_cast<std::size_t>(r) * b + i, dist::ReduceOp::Sum));
      const auto err =
          mismatch_text(std::span<const std::int32_t>(mine), std::span<const std::int32_t>(want));
      if (!err.empty()) failures.fail(r, err);
    });
    failures.check();
  }
}

TEST(InPlace, GatherAndScatterAtTheRoot) {
  RankLog failures;
  run_ranks(threads_options(4), [&] {
    const int r = dist::rank();
    const int root = 2;
    const std::size_t b = 5;
    // gather: the root's input is already in its slot of the output.
    std::vector<double> out(r == root ? b * 4 : 0, -1.0);
    std::vector<double> in(b);
    for (std::size_t i = 0; i < b; ++i) in[i] = value<double>(r, i, dist::ReduceOp::Sum);
    if (r == root) {
      std::copy(in.begin(), in.end(), out.begin() + static_cast<long>(root * b));
      std::span<double> o(out);
      dist::gather(std::span<const double>(o.subspan(root * b, b)), o, root);
    } else {
      dist::gather(std::span<const double>(in), std::span<double>(out), root);
    }
    if (r == root) {
      std::vector<double> want;
      for (int q = 0; q < 4; ++q) {
        for (std::size_t i = 0; i < b; ++i)
          want.push_back(value<double>(q, i, dist::ReduceOp::Sum));
      }
      const auto err = mismatch_text(std::span<const double>(out), std::span<const double>(want));
      if (!err.empty()) failures.fail(r, "gather: " + err);
    }
    // scatter: the root's output is its own slot of the input.
    std::vector<double> all(r == root ? b * 4 : 0);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<double>(i);
    std::vector<double> mine(b, -1.0);
    if (r == root) {
      std::span<double> a(all);
      dist::scatter(std::span<const double>(a), a.subspan(root * b, b), root);
      for (std::size_t i = 0; i < b; ++i) {
        if (all[root * b + i] != static_cast<double>(root * b + i))
          failures.fail(r, "scatter in place changed the root's slot");
      }
    } else {
      dist::scatter(std::span<const double>(all), std::span<double>(mine), root);
      for (std::size_t i = 0; i < b; ++i) {
        if (mine[i] != static_cast<double>(static_cast<std::size_t>(r) * b + i)) {
          failures.fail(r, "scatter: wrong element " + std::to_string(i));
          break;
        }
      }
    }
  });
  failures.check();
}

TEST(Collectives, ReduceLeavesOtherRanksBuffersUnchanged) {
  RankLog failures;
  run_ranks(threads_options(5), [&] {
    std::vector<float> v(100, static_cast<float>(dist::rank()));
    dist::reduce(std::span<float>(v), 0, dist::ReduceOp::Max);
    const float want = dist::rank() == 0 ? 4.f : static_cast<float>(dist::rank());
    if (v[57] != want) failures.fail(dist::rank(), "got " + std::to_string(v[57]));
  });
  failures.check();
}

TEST(Collectives, AsyncAllReducesOverlapWithPointToPoint) {
  RankLog failures;
  run_ranks(threads_options(4), [&] {
    const int r = dist::rank();
    const int p = dist::world_size();
    std::vector<float> a(1000, 1.f), b(500, static_cast<float>(r));
    dist::Work wa = dist::all_reduce_async(std::span<float>(a));
    dist::Work wb = dist::all_reduce_async(std::span<float>(b), dist::ReduceOp::Max);
    // Point-to-point traffic while the all-reduces are in flight.
    std::vector<int> token(1, r);
    if (r == 0) {
      dist::send(std::span<const int>(token), 1);
      dist::recv(std::span<int>(token), p - 1);
    } else {
      dist::recv(std::span<int>(token), r - 1);
      dist::send(std::span<const int>(token), (r + 1) % p);
    }
    wb.wait();
    wa.wait();
    if (a[999] != static_cast<float>(p)) failures.fail(r, "a wrong");
    if (b[0] != static_cast<float>(p - 1)) failures.fail(r, "b wrong");
    if (token[0] != 0) failures.fail(r, "token wrong: " + std::to_string(token[0]));
  });
  failures.check();
}

TEST(Collectives, AsyncAndBlockingAllReduceMatchEachOther) {
  RankLog failures;
  run_ranks(threads_options(3), [&] {
    std::vector<double> v(10, 2.0);
    if (dist::rank() == 1) {
      dist::all_reduce(std::span<double>(v));
    } else {
      dist::all_reduce_async(std::span<double>(v)).wait();
    }
    if (v[9] != 6.0) failures.fail(dist::rank(), "got " + std::to_string(v[9]));
  });
  failures.check();
}

}  // namespace
