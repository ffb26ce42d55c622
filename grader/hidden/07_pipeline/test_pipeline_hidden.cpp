// 07_pipeline hidden tests: the public checks at other stage counts, microbatch counts and layer
// counts; ReLU; microbatches of unequal sizes (a batch of 15 rows in 4 microbatches: 4, 4, 4, 3
// rows, each loss gradient weighted by its rows / 15); three steps in a row. ZB-H1 and
// recomputation at p = 5..7, on a network with latency, and the peak stash with unequal
// microbatches (the largest microbatches are the ones in flight at the peak). run_ops with lists
// in which the last stage forwards several microbatches before their B; W before its B in every
// step, not only the first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline_harness.hpp"

namespace {

using pp::Schedule;
using namespace pptest;

void values(Schedule s) {
  struct Case {
    int layers, batch, p;
    mlp::Activation act;
  };
  const Case cases[] = {{7, 15, 3, mlp::Activation::ReLU},
                        {7, 15, 5, mlp::Activation::Tanh},
                        {6, 12, 6, mlp::Activation::ReLU},
                        {9, 16, 4, mlp::Activation::Tanh}};
  for (const Case& k : cases) {
    const mlp::Config c = tiny_config(k.layers, k.batch, k.act);
    const Reference ref = single_process(c, 3);
    for (int m : {1, 4, 7, 12}) {
      if (m > k.batch) continue;
      const PipelineRun run = run_pipeline(c, k.p, m, s, 3);
      expect_values(run, c, ref, 0, k.p,
                    std::string(pp::to_string(s)) + ": " + config_name(c) +
                        ", p=" + std::to_string(k.p) + ", m=" + std::to_string(m));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenValues, Naive) { values(Schedule::Naive); }
TEST(HiddenValues, GPipe) { values(Schedule::GPipe); }
TEST(HiddenValues, OneFOneB) { values(Schedule::OneFOneB); }

void traffic(Schedule s) {
  const mlp::Config c = tiny_config(7, 15);
  for (int p : {5, 6}) {
    for (int m : {4, 7}) {
      const PipelineRun run = run_pipeline(c, p, m, s, 2);
      ASSERT_TRUE(run.ok) << run.error;
      const std::uint64_t msgs = s == Schedule::Naive ? 1u : static_cast<std::uint64_t>(m);
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(std::string(pp::to_string(s)) + ": p=" + std::to_string(p) +
                     ", m=" + std::to_string(m) + ", stage " + std::to_string(r));
        const dist::Stats& st = run.ranks[static_cast<std::size_t>(r)].stats;
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        const std::uint64_t total =
            4ull * 15ull *
            static_cast<std::uint64_t>((r + 1 < p ? c.layer_out(end - 1) : 0) +
                                       (r > 0 ? c.layer_in(begin) : 0));
        const std::uint64_t want_msgs = msgs * static_cast<std::uint64_t>((r + 1 < p) + (r > 0));
        EXPECT_EQ(st.messages_sent, want_msgs);
        EXPECT_EQ(st.messages_received, want_msgs);
        EXPECT_EQ(st.bytes_sent, total);
        EXPECT_EQ(st.bytes_received, total);
        EXPECT_EQ(st.builtin_collectives, 0u);
        for (int q = 0; q < p; ++q) {
          if (q == r - 1 || q == r + 1) continue;
          EXPECT_EQ(st.messages_sent_to[static_cast<std::size_t>(q)], 0u)
              << "not a neighbour: rank " << q;
          EXPECT_EQ(st.messages_received_from[static_cast<std::size_t>(q)], 0u)
              << "not a neighbour: rank " << q;
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// pipeline.hpp: "Traffic: one message per F and per B or BW whose chunk has a neighbour in that
// direction", and README: "interleaved: m messages per chunk boundary, to the rank of the
// neighbouring chunk". On one rank with 2 and 3 chunks every neighbouring chunk is on rank 0
// itself: the rank still sends (to itself) m messages per boundary and direction.
TEST(HiddenTraffic, InterleavedOnOneRankSendsAcrossItsChunks) {
  const mlp::Config c = tiny_config(6, 24);
  for (int v : {2, 3}) {
    for (int m : {1, 3}) {
      const PipelineRun run =
          run_pipeline(c, 1, m, Schedule::Interleaved, 1, dist::NetworkModel{}, 1e9, false, v);
      ASSERT_TRUE(run.ok) << run.error;
      std::uint64_t msgs = 0, bytes = 0;
      for (int g = 0; g < v; ++g) {
        const auto [begin, end] = expected_layers(c.n_layers, v, g);
        if (g + 1 < v) {
          msgs += static_cast<std::uint64_t>(m);
          bytes += 4ull * 24 * static_cast<std::uint64_t>(c.layer_out(end - 1));
        }
        if (g > 0) {
          msgs += static_cast<std::uint64_t>(m);
          bytes += 4ull * 24 * static_cast<std::uint64_t>(c.layer_in(begin));
        }
      }
      const dist::Stats& st = run.ranks[0].stats;
      EXPECT_EQ(st.messages_sent_to[0], msgs)
          << "interleaved: p=1, v=" << v << ", m=" << m
          << ": one message per F and per B whose chunk has a neighbour, on rank 0 itself";
      EXPECT_EQ(st.bytes_sent_to[0], bytes) << "interleaved: p=1, v=" << v << ", m=" << m;
      EXPECT_EQ(st.builtin_collectives, 0u);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// pipeline.hpp: "m a multiple of p when v >= 2 (else std::invalid_argument, saying so)": fewer
// microbatches than ranks too (m = 1 and 2 on p = 3, m = 1 on p = 2), on every rank.
TEST(HiddenValues, InterleavedRefusesFewerMicrobatchesThanRanks) {
  for (auto [p, m] : {std::pair{2, 1}, std::pair{3, 1}, std::pair{3, 2}, std::pair{4, 6}}) {
    for (int rank = 0; rank < p; ++rank) {
      EXPECT_THROW((void)pp::interleaved_ops(p, rank, m, 2), std::invalid_argument)
          << "p=" << p << ", rank " << rank << ", m=" << m
          << ", 2 chunks: m is not a multiple of p";
    }
    EXPECT_NO_THROW((void)pp::interleaved_ops(p, 0, m, 1)) << "one chunk: any m";
  }
}

TEST(HiddenTraffic, Naive) { traffic(Schedule::Naive); }
TEST(HiddenTraffic, GPipe) { traffic(Schedule::GPipe); }
TEST(HiddenTraffic, OneFOneB) { traffic(Schedule::OneFOneB); }

void simulated_time(Schedule s) {
  const int width = 8, lps = 2;
  const double flops = 2e9;
  for (int p : {5, 6}) {
    for (int m : {5, 10, 12}) {
      const int batch = 120;
      const mlp::Config c = equal_config(p * lps, width, batch);
      const PipelineRun run = run_pipeline(c, p, m, s, 2, free_network(), flops);
      ASSERT_TRUE(run.ok) << run.error;
      const int mm = s == Schedule::Naive ? 1 : m;
      const double tf = lps * 2.0 * (static_cast<double>(batch) / mm) * width * width / flops;
      const double want_step = (mm + p - 1) * 3 * tf;
      const double want_bubble = static_cast<double>(p - 1) / (mm + p - 1);
      const double step = run.ranks[static_cast<std::size_t>(p - 1)].step_s;
      const double bubble = 1.0 - mm * 3 * tf / step;
      SCOPED_TRACE(std::string(pp::to_string(s)) + ": p=" + std::to_string(p) +
                   ", m=" + std::to_string(m));
      EXPECT_NEAR(step, want_step, 0.01 * want_step) << "simulated step time (s)";
      EXPECT_NEAR(bubble, want_bubble, 0.01 * want_bubble) << "bubble fraction";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// pipeline.hpp: the paired helpers send and receive "both in flight at once". Stage r calls
// send_forward_recv_backward and stage r+1 send_backward_recv_forward at the same time, on a
// network with latency and finite bandwidth: each message costs c = alpha + bytes / bandwidth and
// the two go in opposite directions (different links), so both stages end one message time after
// the later of them started, max(a, b) + c. A helper that first waits for its receive and only
// then sends makes one message wait for the other: 2c after equal starts.
void paired_exchange(int p, int r, int rows, double late_r, double late_next) {
  const mlp::Config c = tiny_config(p + 2, 16);
  dist::NetworkModel net;
  net.latency_s = 3e-6;
  net.bandwidth_Bps = 2e9;
  dist::LaunchOptions o = distlab::testing::test_options(p);
  o.network = net;
  std::mutex mu;
  std::vector<double> took(static_cast<std::size_t>(p), -1);
  std::vector<bool> got_right(static_cast<std::size_t>(p), false);
  int features = 0;
  dist::launch(o, [&] {
    const int rank = dist::rank();
    pp::Stage stage(c, c.seed + 2, rank, p);
    dist::barrier();
    const double t0 = dist::sim_time();
    if (rank == r) {
      if (late_r > 0) dist::sim_compute(late_r);
      pp::Matrix y(rows, stage.out_features()), dy;
      for (Eigen::Index k = 0; k < y.size(); ++k) y.data()[k] = 1.0f + static_cast<float>(k);
      pp::send_forward_recv_backward(stage, y, dy, rows);
      const double t = dist::sim_time() - t0;
      bool ok = dy.rows() == rows && dy.cols() == stage.out_features();
      for (Eigen::Index k = 0; ok && k < dy.size(); ++k)
        ok = dy.data()[k] == -2.0f * static_cast<float>(k);
      std::lock_guard<std::mutex> g(mu);
      took[static_cast<std::size_t>(rank)] = t;
      got_right[static_cast<std::size_t>(rank)] = ok;
      features = stage.out_features();
    } else if (rank == r + 1) {
      if (late_next > 0) dist::sim_compute(late_next);
      pp::Matrix dx(rows, stage.in_features()), x;
      for (Eigen::Index k = 0; k < dx.size(); ++k) dx.data()[k] = -2.0f * static_cast<float>(k);
      pp::send_backward_recv_forward(stage, dx, x, rows);
      const double t = dist::sim_time() - t0;
      bool ok = x.rows() == rows && x.cols() == stage.in_features();
      for (Eigen::Index k = 0; ok && k < x.size(); ++k)
        ok = x.data()[k] == 1.0f + static_cast<float>(k);
      std::lock_guard<std::mutex> g(mu);
      took[static_cast<std::size_t>(rank)] = t;
      got_right[static_cast<std::size_t>(rank)] = ok;
    }
    dist::barrier();
  });
  const double msg = net.latency_s + 4.0 * rows * features / net.bandwidth_Bps;
  const double want = std::max(late_r, late_next) + msg;
  std::ostringstream what;
  what << "p=" << p << ": stage " << r << " send_forward_recv_backward and stage " << r + 1
       << " send_backward_recv_forward, " << rows << " rows of " << features
       << " features (one message " << msg * 1e6 << " us: latency " << net.latency_s * 1e6
       << " us + bytes / bandwidth); stage " << r << " starts " << late_r * 1e6
       << " us late, stage " << r + 1 << " " << late_next * 1e6 << " us late";
  SCOPED_TRACE(what.str());
  for (int k : {r, r + 1}) {
    EXPECT_TRUE(got_right[static_cast<std::size_t>(k)]) << "stage " << k << " received wrong data";
    EXPECT_NEAR(took[static_cast<std::size_t>(k)], want, 1e-3 * want)
        << "stage " << k
        << "'s simulated time in the paired helper (us: " << took[static_cast<std::size_t>(k)] * 1e6
        << ", expected " << want * 1e6
        << "): both messages in flight at once take one message time after the later start; "
           "receive-then-send takes two";
  }
}

TEST(HiddenSimulatedTime, PairedHelpersHaveBothMessagesInFlight) {
  const double d = 7e-6;
  for (const auto& [p, r, rows] : {std::tuple{2, 0, 5}, std::tuple{3, 1, 8}, std::tuple{4, 2, 3}}) {
    for (const auto& [late_r, late_next] :
         {std::pair{0.0, 0.0}, std::pair{d, 0.0}, std::pair{0.0, d}}) {
      paired_exchange(p, r, rows, late_r, late_next);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenSimulatedTime, Naive) { simulated_time(Schedule::Naive); }
TEST(HiddenSimulatedTime, GPipe) { simulated_time(Schedule::GPipe); }
TEST(HiddenSimulatedTime, OneFOneB) { simulated_time(Schedule::OneFOneB); }

void memory(Schedule s) {
  const mlp::Config c = tiny_config(7, 20);
  for (int p : {5, 6, 7}) {
    for (int m : {2, 5, 10}) {
      const PipelineRun run = run_pipeline(c, p, m, s, 2);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(std::string(pp::to_string(s)) + ": p=" + std::to_string(p) +
                     ", m=" + std::to_string(m) + ", stage " + std::to_string(r));
        const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        const std::int64_t per_mb = (c.batch_size / m) * stash_bytes_per_row(c, begin, end);
        EXPECT_EQ(rec.stash_after, 0);
        if (s == Schedule::GPipe) {
          EXPECT_EQ(rec.peak_microbatches, m);
          EXPECT_EQ(rec.peak_bytes, m * per_mb);
        } else if (s == Schedule::OneFOneB) {
          EXPECT_LE(rec.peak_microbatches, std::min(p - r, m));
          EXPECT_LE(rec.peak_bytes, std::min(p - r, m) * per_mb);
        } else {
          EXPECT_EQ(rec.peak_microbatches, 1);
        }
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenMemory, GPipe) { memory(Schedule::GPipe); }
TEST(HiddenMemory, OneFOneB) { memory(Schedule::OneFOneB); }

// ---- ZB-H1 and recomputation at other sizes; microbatches of unequal sizes ------------------------

TEST(HiddenZB, ValuesUnevenMicrobatches) {
  for (const auto& [layers, batch, p] : {std::tuple{7, 15, 5}, std::tuple{6, 12, 6}}) {
    const mlp::Config c = tiny_config(layers, batch, mlp::Activation::ReLU);
    const Reference ref = single_process(c, 3);
    for (int m : {4, 7, 12}) {
      if (m > batch) continue;
      const PipelineRun run = run_pipeline(c, p, m, Schedule::ZeroBubble, 3);
      expect_values(
          run, c, ref, 0, p,
          "zb: " + config_name(c) + ", p=" + std::to_string(p) + ", m=" + std::to_string(m));
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenZB, TimeAndBusyNetwork) {
  const int width = 8, lps = 2, batch = 120;
  const double flops = 2e9;
  for (int p : {5, 6}) {
    for (int m : {3, 5, 10, 12}) {
      for (double frac : {0.0, 0.7}) {
        const mlp::Config c = equal_config(p * lps, width, batch);
        const double tf = lps * 2.0 * (static_cast<double>(batch) / m) * width * width / flops;
        dist::NetworkModel net = free_network();
        net.latency_s = frac * tf;
        const PipelineRun run = run_pipeline(c, p, m, Schedule::ZeroBubble, 2, net, flops);
        ASSERT_TRUE(run.ok) << run.error;
        const OpsReplay rep = replay_ops(zb_lists(p, m), tf, net.latency_s);
        ASSERT_TRUE(rep.ok) << rep.error;
        const double want = frac == 0 ? zb_formula_units(p, m) * tf : rep.step;
        EXPECT_NEAR(run.ranks[0].step_s, want, 0.002 * want)
            << "zb: p=" << p << ", m=" << m << ", latency " << net.latency_s * 1e6 << " us";
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

/// Rows of the first k microbatches of a batch of B rows cut into m.
int first_rows(int batch, int m, int k) {
  int rows = 0;
  for (int i = 0; i < k; ++i) rows += pp::shard_range(batch, m, i).size;
  return rows;
}

TEST(HiddenZB, MemoryUnequalMicrobatches) {
  const mlp::Config c = tiny_config(7, 15);
  for (int p : {5, 6, 7}) {
    for (int m : {2, 4, 7, 10}) {
      const PipelineRun run = run_pipeline(c, p, m, Schedule::ZeroBubble, 2);
      ASSERT_TRUE(run.ok) << run.error;
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("zb: p=" + std::to_string(p) + ", m=" + std::to_string(m) + ", stage " +
                     std::to_string(r));
        const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
        const auto [begin, end] = expected_layers(c.n_layers, p, r);
        EXPECT_EQ(rec.stash_after, 0);
        EXPECT_LE(rec.peak_microbatches, std::min(p, m));
        EXPECT_LE(rec.peak_bytes,
                  first_rows(15, m, std::min(p, m)) * stash_bytes_per_row(c, begin, end));
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenRecompute, ValuesUnevenMicrobatches) {
  const mlp::Config c = tiny_config(7, 15, mlp::Activation::Tanh);
  const Reference ref = single_process(c, 3);
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::ZeroBubble}) {
    for (int p : {3, 5}) {
      for (int m : {4, 7}) {
        const PipelineRun run = run_pipeline(c, p, m, s, 3, dist::NetworkModel{}, 1e9, true);
        expect_values(run, c, ref, 0, p,
                      std::string(pp::to_string(s)) + " with recomputation, p=" +
                          std::to_string(p) + ", m=" + std::to_string(m));
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(HiddenRecompute, MemoryUnequalMicrobatches) {
  // 15 rows in 4 microbatches: 4, 4, 4, 3. The peak holds the largest microbatches in flight.
  const mlp::Config c = tiny_config(7, 15);
  for (bool recompute : {false, true}) {
    for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB}) {
      for (int p : {3, 5}) {
        for (int m : {2, 4, 7}) {
          const PipelineRun run = run_pipeline(c, p, m, s, 2, dist::NetworkModel{}, 1e9, recompute);
          ASSERT_TRUE(run.ok) << run.error;
          for (int r = 0; r < p; ++r) {
            SCOPED_TRACE(std::string(pp::to_string(s)) + (recompute ? " recompute" : "") +
                         ": p=" + std::to_string(p) + ", m=" + std::to_string(m) + ", stage " +
                         std::to_string(r));
            const RankRecord& rec = run.ranks[static_cast<std::size_t>(r)];
            const auto [begin, end] = expected_layers(c.n_layers, p, r);
            const int k = s == Schedule::GPipe ? m : std::min(p - r, m);
            const std::int64_t per_row =
                recompute ? input_bytes_per_row(c, begin) : stash_bytes_per_row(c, begin, end);
            EXPECT_EQ(rec.peak_microbatches, k);
            EXPECT_EQ(rec.peak_bytes, first_rows(15, m, k) * per_row);
            EXPECT_EQ(rec.stash_after, 0);
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
    }
  }
}

// ---- run_ops with lists other than the kit's: the last stage forwards several microbatches before
// their B; W's own bookkeeping across steps -----------------------------------------------------------

/// The whole model's gradients on a batch (single process), layer by layer.
std::vector<mlp::Matrix> whole_batch_gradients(const mlp::Config& c, const mlp::Matrix& x,
                                               const mlp::Labels& y, double& loss) {
  mlp::MLP model(c, c.seed + 2);
  mlp::Matrix probs, dlogits;
  loss = mlp::softmax_cross_entropy_forward(model.forward(x), y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  std::vector<mlp::Matrix> g;
  for (const mlp::Parameter* prm : model.parameters()) g.push_back(prm->grad);
  return g;
}

std::vector<pp::Op> parse_ops(const std::string& text) {
  std::vector<pp::Op> ops;
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    pp::Op op;
    op.kind = w[0] == 'F' ? pp::OpKind::F : w[0] == 'B' ? pp::OpKind::B : pp::OpKind::W;
    op.microbatch = std::stoi(w.substr(1));
    ops.push_back(op);
  }
  return ops;
}

TEST(HiddenZB, RunOpsLastStageBTakesTheOldestQueuedLossGradient) {
  // "B: the input gradient of the last chunk's oldest queued dlogits": lists in which the last
  // stage forwards two or three microbatches before their B. Each B must use its own
  // microbatch's loss gradient, so the gradients summed over the step are the whole batch's.
  const mlp::Config c = tiny_config(5, 12, mlp::Activation::Tanh);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(12);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 12);
  double want_loss = 0;
  const auto want = whole_batch_gradients(c, x, y, want_loss);
  const std::string first = "F0 F1 F2 B0 W0 B1 W1 B2 W2";
  for (const std::string last : {"F0 F1 F2 B0 B1 B2 W0 W1 W2", "F0 F1 B0 F2 B1 W0 B2 W2 W1"}) {
    SCOPED_TRACE("stage 0: " + first + "; stage 1 (last): " + last + "; 12 rows in 3 microbatches");
    std::mutex mu;
    std::vector<std::vector<mlp::Matrix>> grads(2);
    std::vector<int> layer0(2);
    double loss = 0;
    distlab::testing::run_ranks(distlab::testing::test_options(2), [&] {
      const int rank = dist::rank();
      pp::Stage stage(c, c.seed + 2, rank, 2);
      stage.zero_grad();
      pp::StepState st;
      const pp::Batch batch{x, y, 3};
      pp::run_ops(stage, batch, parse_ops(rank == 0 ? first : last), st);
      std::lock_guard<std::mutex> g(mu);
      layer0[static_cast<std::size_t>(rank)] = stage.layers().begin;
      for (const mlp::Parameter* prm : stage.parameters())
        grads[static_cast<std::size_t>(rank)].push_back(prm->grad);
      if (rank == 1) loss = st.loss;
    });
    if (::testing::Test::HasFailure()) return;
    for (int r = 0; r < 2; ++r) {
      const auto& g = grads[static_cast<std::size_t>(r)];
      for (std::size_t k = 0; k < g.size(); ++k) {
        const auto layer = static_cast<std::size_t>(layer0[static_cast<std::size_t>(r)]) + k;
        ASSERT_LT(layer, want.size());
        EXPECT_TRUE(close(g[k], want[layer]))
            << "stage " << r << ", layer " << layer
            << ": the step's gradient must be the whole batch's (each B with the loss gradient of "
               "the oldest forwarded microbatch not yet backwarded)";
      }
    }
    EXPECT_NEAR(loss, want_loss, kAbsTol + kRelTol * std::abs(want_loss)) << "the batch's loss";
  }
}

// pipeline.hpp: "Stage 0 takes the microbatch's rows of batch.x into st.x" (StepState::x: "the
// input of the microbatch being forwarded (received or sliced)"). One stage, B = 10 in m = 3
// uneven microbatches: after each forward_step st.x holds exactly that microbatch's rows.
TEST(HiddenValues, FirstStageSlicesTheMicrobatchIntoStX) {
  const int batch = 10, m = 3;
  const mlp::Config c = tiny_config(3, batch, mlp::Activation::Tanh);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(batch);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + batch);
  pp::Stage stage(c, c.seed + 2, 0, 1);
  const pp::Batch b{x, y, m};
  pp::StepState st;
  for (int i = 0; i < m; ++i) {
    (void)pp::forward_step(stage, b, i, st);
    const pp::Range r = pp::shard_range(batch, m, i);
    ASSERT_EQ(st.x.rows(), r.size) << "microbatch " << i << ": st.x holds its rows";
    ASSERT_EQ(st.x.cols(), x.cols()) << "microbatch " << i;
    EXPECT_EQ(st.x, x.middleRows(r.begin, r.size))
        << "microbatch " << i << ": after forward_step on stage 0, st.x holds rows [" << r.begin
        << ", " << r.begin + r.size << ") of batch.x";
  }
}

TEST(HiddenZB, AFailedBDoesNotAllowAW) {
  // "W before the microbatch's B throws std::logic_error": a B that threw (no stash: the
  // microbatch was not forwarded yet) is no B, so after the forward a W still throws, and the B
  // that follows then W work as usual.
  const mlp::Config c = tiny_config(4, 8, mlp::Activation::Tanh);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recomputation on" : "recomputation off");
    pp::Stage stage(c, c.seed + 2, 0, 1);
    stage.set_recompute(recompute);
    mlp::Matrix probs, dlogits, dx;
    const mlp::Matrix dy = mlp::Matrix::Constant(8, c.n_classes, 0.125f);
    EXPECT_THROW(stage.backward_input(dy, 0, dx), std::logic_error)
        << "B of microbatch 0 before its forward (nothing stashed)";
    mlp::softmax_cross_entropy_forward(stage.forward(x, 0), y, probs);
    EXPECT_THROW(stage.backward_weight(0), std::logic_error)
        << "W of microbatch 0 after a B that threw and its forward: no B has run";
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    stage.backward_input(dlogits, 0, dx);
    EXPECT_NO_THROW(stage.backward_weight(0)) << "W of microbatch 0 after its B";
    EXPECT_EQ(stage.meter().microbatches(), 0) << "the W released the stash";
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(HiddenZB, WBeforeItsBThrowsInEveryStep) {
  // "W before the microbatch's B throws std::logic_error", also in a second step, where the
  // microbatch numbers start again at 0 (each microbatch's B allows exactly one W).
  const mlp::Config c = tiny_config(4, 8, mlp::Activation::Tanh);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(recompute ? "recomputation on" : "recomputation off");
    pp::Stage stage(c, c.seed + 2, 0, 1);
    stage.set_recompute(recompute);
    mlp::Matrix probs, dlogits, dx;
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      stage.zero_grad();
      for (int i = 0; i < 2; ++i) {
        mlp::softmax_cross_entropy_forward(stage.forward(x, i), y, probs);
      }
      mlp::softmax_cross_entropy_backward(probs, y, dlogits);
      EXPECT_THROW(stage.backward_weight(0), std::logic_error)
          << "W of microbatch 0 before its B in this step (its B of the previous step does not "
             "count)";
      stage.backward_input(dlogits, 1, dx);
      EXPECT_THROW(stage.backward_weight(0), std::logic_error)
          << "W of microbatch 0 after the B of microbatch 1 only";
      EXPECT_NO_THROW(stage.backward_weight(1)) << "W of microbatch 1 after its B";
      EXPECT_THROW(stage.backward_weight(1), std::logic_error) << "a second W of microbatch 1";
      stage.backward_input(dlogits, 0, dx);
      EXPECT_NO_THROW(stage.backward_weight(0)) << "W of microbatch 0 after its B";
      EXPECT_EQ(stage.meter().microbatches(), 0) << "every W released its stash";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// ---- Task 7's order: zero the gradients, run the schedule, one SGD step ---------------------------
// Every stage starts the step with gradients left over (as a backward outside a step leaves
// them): they must not reach the update, and after the step every stage holds this batch's
// gradient (the single-process model's gradient of the whole batch), not zeros.

void step_zeroes_gradients_first(Schedule s) {
  const mlp::Config c = tiny_config(7, 15, mlp::Activation::ReLU);
  const int p = 3, m = 4;
  const auto& data = data_for(c);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  mlp::Matrix x, probs, dlogits;
  mlp::Labels y;
  loader.load(0, x, y);
  // The oracle: one single-process step on the same batch.
  mlp::MLP model(c, c.seed + 2);
  mlp::SGD model_opt(model.parameters(), c.learning_rate);
  mlp::train_step(model, model_opt, x, y, probs, dlogits);
  std::vector<mlp::Matrix> want_w, want_g;
  for (const mlp::Parameter* prm : model.parameters()) {
    want_w.push_back(prm->value);
    want_g.push_back(prm->grad);
  }
  const auto ranks = static_cast<std::size_t>(p);
  std::vector<std::vector<mlp::Matrix>> got_w(ranks), got_g(ranks);
  std::vector<int> first_layer(ranks, 0);
  dist::launch(distlab::testing::test_options(p), [&] {
    const int rank = dist::rank();
    pp::Stage stage(c, c.seed + 2, rank, p);
    for (mlp::Parameter* prm : stage.parameters()) prm->grad.setConstant(0.25f);
    mlp::SGD opt(stage.parameters(), c.learning_rate);
    const pp::Batch batch{x, y, m};
    pp::train_step(stage, opt, batch, s);
    std::vector<mlp::Matrix> w, g;
    for (const mlp::Parameter* prm : stage.parameters()) {
      w.push_back(prm->value);
      g.push_back(prm->grad);
    }
    got_w[static_cast<std::size_t>(rank)] = std::move(w);
    got_g[static_cast<std::size_t>(rank)] = std::move(g);
    first_layer[static_cast<std::size_t>(rank)] = stage.layers().begin;
  });
  for (int r = 0; r < p; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    for (std::size_t k = 0; k < got_w[ur].size(); ++k) {
      const auto layer = static_cast<std::size_t>(first_layer[ur]) + k;
      EXPECT_TRUE(close(got_w[ur][k], want_w[layer]))
          << pp::to_string(s) << ": stage " << r << ", layer " << layer
          << ": the weights after a step that began with gradients left over differ from one "
             "single-process step (zero the gradients before the schedule runs)";
      EXPECT_TRUE(close(got_g[ur][k], want_g[layer]))
          << pp::to_string(s) << ": stage " << r << ", layer " << layer
          << ": after the step the stage must hold this batch's gradient (zero, run the "
             "schedule, step: nothing clears them after the step)";
    }
  }
}

TEST(HiddenValues, StepZeroesGradientsFirst) {
  for (Schedule s : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB, Schedule::ZeroBubble})
    step_zeroes_gradients_first(s);
}

}  // namespace

namespace {

/// The MLP's gradients on a batch (single process), every layer first to last.
std::vector<mlp::Matrix> whole_model_gradients(const mlp::Config& c, const mlp::Matrix& x,
                                               const mlp::Labels& y) {
  mlp::MLP model(c, c.seed + 2);
  mlp::Matrix probs, dlogits;
  const mlp::Matrix& logits = model.forward(x);
  mlp::softmax_cross_entropy_forward(logits, y, probs);
  mlp::softmax_cross_entropy_backward(probs, y, dlogits);
  model.backward(dlogits);
  std::vector<mlp::Matrix> g;
  for (const mlp::Parameter* p : model.parameters()) g.push_back(p->grad);
  return g;
}

}  // namespace

// pipeline.hpp: "On the last stage an empty st.dlogits (no forwarded microbatch left to backward)
// throws std::logic_error": before any forward, and after every forwarded microbatch has had its
// backward (two forwards, two backwards, then a third backward).
TEST(HiddenBackwardStep, EmptyQueueOnTheLastStageIsALogicError) {
  const mlp::Config c = tiny_config(3, 8, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  pp::Stage stage(c, c.seed + 2, 0, 1);  // one stage: the first and the last
  stage.zero_grad();
  const pp::Batch batch{x, y, 2};
  pp::StepState st;
  EXPECT_THROW(pp::backward_step(stage, batch, 0, st), std::logic_error)
      << "backward_step on the last stage before any forward_step";
  pp::StepState st2;
  pp::forward_step(stage, batch, 0, st2);
  pp::forward_step(stage, batch, 1, st2);
  pp::backward_step(stage, batch, 0, st2);
  pp::backward_step(stage, batch, 1, st2);
  EXPECT_TRUE(st2.dlogits.empty()) << "each backward_step on the last stage pops one dlogits";
  EXPECT_THROW(pp::backward_step(stage, batch, 1, st2), std::logic_error)
      << "a third backward_step after two forwards on the last stage";
}

// pipeline.hpp: "The weight gradients are ADDED to grad": also the backward of microbatch 0 adds
// to what grad already holds (zeroing is the caller's zero_grad(), not the backward's), so
// gradients put there before the batch are kept, and a second batch without zero_grad() adds
// its gradients to the first batch's.
TEST(HiddenStageCompute, BackwardOfMicrobatchZeroAddsToExistingGradients) {
  const mlp::Config c = tiny_config(3, 8, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(8);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 8);
  const auto want = whole_model_gradients(c, x, y);
  pp::Stage stage(c, c.seed + 2, 0, 1);
  ASSERT_EQ(stage.parameters().size(), want.size());
  stage.zero_grad();
  std::vector<mlp::Matrix> before;
  for (std::size_t k = 0; k < want.size(); ++k) {
    mlp::Matrix& g = stage.parameters()[k]->grad;
    ASSERT_EQ(g.rows(), want[k].rows());
    ASSERT_EQ(g.cols(), want[k].cols());
    g = mlp::Matrix::Constant(g.rows(), g.cols(), 0.25f + 0.125f * static_cast<float>(k));
    before.push_back(g);
  }
  mlp::Matrix probs, dlogits, dx;
  for (int batch = 1; batch <= 2; ++batch) {
    const mlp::Matrix logits = stage.forward(x, 0);
    mlp::softmax_cross_entropy_forward(logits, y, probs);
    mlp::softmax_cross_entropy_backward(probs, y, dlogits);
    stage.backward(dlogits, 0, dx);
    for (std::size_t k = 0; k < want.size(); ++k) {
      const mlp::Matrix expected = before[k] + static_cast<float>(batch) * want[k];
      EXPECT_TRUE(close(stage.parameters()[k]->grad, expected))
          << "layer " << k << " after " << batch << " backward(s) of microbatch 0 without "
          << "zero_grad(): grad must be what it held before plus the new gradients (ADDED, also "
          << "for microbatch 0; only zero_grad() clears it)";
    }
  }
}

// pipeline.hpp: "One training step: zero the gradients, run the schedule, one SGD step": whatever
// the stage's gradients held before the step (here a constant put there by hand) is not part of
// the update, so the weights after the step equal single-process training's.
TEST(HiddenTrainStep, GradientsHeldBeforeTheStepDoNotLeakIntoIt) {
  const mlp::Config c = tiny_config(3, 8, mlp::Activation::ReLU);
  const Reference ref = single_process(c, 1);
  const auto& data = data_for(c);
  const datasets::BatchLoader loader(data.train, c.batch_size, c.seed + 3);
  std::vector<mlp::Matrix> got;
  dist::launch(distlab::testing::test_options(1), [&] {
    pp::Stage stage(c, c.seed + 2, 0, 1);
    stage.zero_grad();
    for (mlp::Parameter* p : stage.parameters()) p->grad.setConstant(0.5f);
    mlp::SGD opt(stage.parameters(), c.learning_rate);
    mlp::Matrix x;
    mlp::Labels y;
    loader.load(0, x, y);
    const pp::Batch batch{x, y, 2};
    (void)pp::train_step(stage, opt, batch, Schedule::GPipe);
    for (const mlp::Parameter* p : stage.parameters()) got.push_back(p->value);
  });
  ASSERT_EQ(got.size(), ref.weights[0].size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(close(got[k], ref.weights[0][k]))
        << "layer " << k << ": the stage's gradients held 0.5 before train_step; the step must "
        << "zero them first, so that only the batch's gradients are applied";
  }
}

// ---- The helpers without a peer, run_ops's outbox, the stash with recomputation, spans over steps --

namespace {

/// A matrix of a shape no helper would give it (3 x 5), every entry a different known value.
mlp::Matrix sentinel() {
  mlp::Matrix m(3, 5);
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j)
      m(i, j) = 0.5f + static_cast<float>(i * m.cols() + j);
  return m;
}

/// Empty when `got` is exactly the sentinel (shape and every value), else what differs.
std::string differs_from_sentinel(const mlp::Matrix& got) {
  const mlp::Matrix want = sentinel();
  std::ostringstream os;
  if (got.rows() != want.rows() || got.cols() != want.cols()) {
    os << "resized from " << want.rows() << " x " << want.cols() << " to " << got.rows() << " x "
       << got.cols();
  } else if (got != want) {
    os << "its values were overwritten";
  }
  return os.str();
}

/// Runs body on p ranks. Each rank returns what it found wrong (nothing: an empty list); every
/// report becomes a test failure "<what>, stage <rank>: <report> (<why>)".
void expect_no_report_on_any_rank(int p, const std::string& what, const std::string& why,
                                  const std::function<std::vector<std::string>()>& body) {
  std::mutex mu;
  std::vector<std::string> failures;
  distlab::testing::run_ranks(distlab::testing::test_options(p), [&] {
    const std::vector<std::string> bad = body();
    const std::string rank = std::to_string(dist::rank());
    std::lock_guard<std::mutex> g(mu);
    for (const std::string& b : bad) failures.push_back(what + ", stage " + rank + ": " + b);
  });
  for (const std::string& f : failures) ADD_FAILURE() << f << " (" << why << ")";
}

}  // namespace

// pipeline.hpp: "a helper whose peer does not exist (sending forward from the last stage,
// receiving forward on the first, ...) does nothing": on the first stage recv_forward,
// send_backward and send_backward_recv_forward, on the last stage send_forward, recv_backward and
// send_forward_recv_backward leave the caller's matrix as it was (shape and values: "Receives
// resize the matrix" only where there is a peer to receive from) and send or receive nothing;
// p = 1 (a stage both first and last), 2 and 3.
// pipeline.hpp: "kForwardTag = 7; // activations, stage s -> s+1" and "kBackwardTag = 8; //
// gradients, stage s -> s-1": each helper talks to a peer that uses plain dist::send / recv with
// the documented tag of its direction (a helper with another tag never meets it).
TEST(HiddenHelpers, EachDirectionUsesItsTag) {
  const mlp::Config c = tiny_config(4, 8, mlp::Activation::Tanh);
  const int rows = 3;
  const std::string why = "activations travel with kForwardTag, gradients with kBackwardTag";
  expect_no_report_on_any_rank(2, "p=2", why, [&]() -> std::vector<std::string> {
    pp::Stage stage(c, c.seed + 2, dist::rank(), 2);
    std::vector<std::string> bad;
    if (dist::rank() == 0) {
      const mlp::Matrix y = mlp::Matrix::Constant(rows, stage.out_features(), 1.5f);
      pp::send_forward(stage, y);
      mlp::Matrix dy(rows, stage.out_features());
      dist::recv(std::span<float>(dy.data(), static_cast<std::size_t>(dy.size())), 1,
                 pp::kBackwardTag);
      if (dy != mlp::Matrix::Constant(rows, stage.out_features(), -2.5f))
        bad.push_back("send_backward's gradient, received with kBackwardTag, has other values");
      mlp::Matrix x2 = mlp::Matrix::Constant(rows, stage.out_features(), 4.0f);
      dist::send(std::span<const float>(x2.data(), static_cast<std::size_t>(x2.size())), 1,
                 pp::kForwardTag);
      mlp::Matrix dy2;
      pp::recv_backward(stage, dy2, rows);
      if (dy2 != mlp::Matrix::Constant(rows, stage.out_features(), 6.0f))
        bad.push_back("recv_backward of a gradient sent with kBackwardTag: other values");
    } else {
      mlp::Matrix x(rows, stage.in_features());
      dist::recv(std::span<float>(x.data(), static_cast<std::size_t>(x.size())), 0,
                 pp::kForwardTag);
      if (x != mlp::Matrix::Constant(rows, stage.in_features(), 1.5f))
        bad.push_back("send_forward's activations, received with kForwardTag, have other values");
      pp::send_backward(stage, mlp::Matrix::Constant(rows, stage.in_features(), -2.5f));
      mlp::Matrix x2;
      pp::recv_forward(stage, x2, rows);
      if (x2 != mlp::Matrix::Constant(rows, stage.in_features(), 4.0f))
        bad.push_back("recv_forward of activations sent with kForwardTag: other values");
      const mlp::Matrix g = mlp::Matrix::Constant(rows, stage.in_features(), 6.0f);
      dist::send(std::span<const float>(g.data(), static_cast<std::size_t>(g.size())), 0,
                 pp::kBackwardTag);
    }
    return bad;
  });
}

TEST(HiddenHelpers, WithoutAPeerLeaveTheMatrixAsItWasAndSendNothing) {
  const mlp::Config c = tiny_config(4, 8, mlp::Activation::Tanh);
  const int rows = 4;
  for (int p : {1, 2, 3}) {
    const std::string why =
        "a helper whose peer does not exist does nothing: it leaves the matrix, its shape "
        "included, as it was";
    expect_no_report_on_any_rank(p, "p=" + std::to_string(p), why, [&] {
      pp::Stage stage(c, c.seed + 2, dist::rank(), p);
      std::vector<std::string> bad;
      const auto note = [&](const std::string& call, const mlp::Matrix& m) {
        const std::string d = differs_from_sentinel(m);
        if (!d.empty()) bad.push_back(call + ": the caller's matrix " + d);
      };
      dist::reset_stats();
      if (stage.is_first()) {
        const mlp::Matrix dx = mlp::Matrix::Constant(rows, stage.in_features(), 2.0f);
        mlp::Matrix x = sentinel();
        pp::recv_forward(stage, x, rows);
        note("recv_forward on the first stage", x);
        pp::send_backward(stage, dx);
        x = sentinel();
        pp::send_backward_recv_forward(stage, dx, x, rows);
        note("send_backward_recv_forward on the first stage", x);
      }
      if (stage.is_last()) {
        const mlp::Matrix y = mlp::Matrix::Constant(rows, stage.out_features(), 3.0f);
        mlp::Matrix dy = sentinel();
        pp::recv_backward(stage, dy, rows);
        note("recv_backward on the last stage", dy);
        pp::send_forward(stage, y);
        dy = sentinel();
        pp::send_forward_recv_backward(stage, y, dy, rows);
        note("send_forward_recv_backward on the last stage", dy);
      }
      const dist::Stats s = dist::stats();
      if (s.messages_sent != 0 || s.messages_received != 0)
        bad.push_back("the helpers without a peer sent " + std::to_string(s.messages_sent) +
                      " and received " + std::to_string(s.messages_received) + " messages");
      return bad;
    });
  }
}

// pipeline.hpp: "With recomputation on, only the input (z and h are empty vectors)": the Stash
// that forward stores holds the input, and its z and h have no element at all (not one freed
// matrix per layer); without recomputation one z per layer of the stage. The first stage of 2
// (3 layers of 5) and the last stage of 2 (2 layers, the model's last among them).
TEST(HiddenRecompute, StashZAndHAreEmptyVectors) {
  const mlp::Config c = tiny_config(5, 8, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x0 = data.train.x.topRows(6);
  for (int stage_index : {0, 1}) {
    for (bool recompute : {false, true}) {
      SCOPED_TRACE("stage " + std::to_string(stage_index) + " of 2, recomputation " +
                   (recompute ? "on" : "off"));
      pp::Stage stage(c, c.seed + 2, stage_index, 2);
      stage.set_recompute(recompute);
      const mlp::Matrix x =
          stage_index == 0 ? x0 : mlp::Matrix(mlp::Matrix::Constant(6, stage.in_features(), 0.25f));
      (void)stage.forward(x, 3);
      const pp::Stash s = stage.stash_pop(3);
      EXPECT_TRUE(s.input == x) << "the stash holds the stage's input";
      if (recompute) {
        EXPECT_TRUE(s.z.empty()) << "with recomputation on z must be an empty vector; it has "
                                 << s.z.size() << " elements";
        EXPECT_TRUE(s.h.empty()) << "with recomputation on h must be an empty vector; it has "
                                 << s.h.size() << " elements";
        EXPECT_EQ(s.bytes(), static_cast<std::int64_t>(x.size()) * 4);
      } else {
        EXPECT_EQ(s.z.size(), static_cast<std::size_t>(stage.layers().size))
            << "without recomputation one z per layer of the stage";
      }
    }
  }
}

// pipeline.hpp: "std::deque<Matrix> outbox;   // run_ops: copies of the messages still in flight"
// and "Every send has completed when run_ops returns": after run_ops no message is in flight, so
// st.outbox and st.sends are empty on every rank (ZB-H1 at p = 3 with 4 microbatches; interleaved
// at p = 2, v = 2 with 4 microbatches), also after a second step with the same StepState.
TEST(HiddenZB, RunOpsLeavesNoMessageInTheOutbox) {
  const mlp::Config c = tiny_config(6, 12, mlp::Activation::Tanh);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(12);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 12);
  for (const bool interleaved : {false, true}) {
    const int p = interleaved ? 2 : 3, m = 4;
    const std::string what =
        std::string(interleaved ? "interleaved" : "ZB-H1") + ", p=" + std::to_string(p);
    const std::string why =
        "every send has completed when run_ops returns, so no message is left in flight in the "
        "StepState";
    expect_no_report_on_any_rank(p, what, why, [&] {
      const int rank = dist::rank();
      std::vector<pp::Stage> chunks;
      if (interleaved) {
        chunks = pp::make_rank_chunks(c, c.seed + 2, 2);
      } else {
        chunks.emplace_back(c, c.seed + 2, rank, p);
      }
      const std::vector<pp::Op> ops =
          interleaved ? pp::interleaved_ops(p, rank, m, 2) : pp::zb_h1_ops(p, rank, m);
      const pp::Batch batch{x, y, m};
      pp::StepState st;
      std::vector<std::string> bad;
      for (int step = 0; step < 2; ++step) {
        for (pp::Stage& s : chunks) s.zero_grad();
        pp::run_ops(chunks, batch, ops, st);
        if (!st.outbox.empty() || !st.sends.empty())
          bad.push_back("after step " + std::to_string(step) + " st.outbox holds " +
                        std::to_string(st.outbox.size()) + " copies and st.sends " +
                        std::to_string(st.sends.size()) + " sends");
      }
      return bad;
    });
  }
}

// pipeline.hpp: "Total compute charged so far (seconds)" and "Task 7. One training step: zero the
// gradients, run the schedule, one SGD step": train_step clears no span (only the caller's
// clear_spans() does), so after two steps on the same batch every stage holds the first step's
// spans unchanged followed by as many again, later on the clock, and twice the busy time.
TEST(HiddenTrainStep, SpansAndBusySecondsAccumulateOverSteps) {
  const mlp::Config c = tiny_config(5, 12, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(12);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + 12);
  const int p = 2, m = 3;
  for (Schedule s : {Schedule::Naive, Schedule::GPipe, Schedule::OneFOneB, Schedule::ZeroBubble}) {
    const std::string why =
        "spans() and busy_seconds() hold everything charged so far: train_step zeroes the "
        "gradients, it does not clear the spans";
    expect_no_report_on_any_rank(p, pp::to_string(s), why, [&]() -> std::vector<std::string> {
      pp::Stage stage(c, c.seed + 2, dist::rank(), p);
      mlp::SGD opt(stage.parameters(), c.learning_rate);
      const pp::Batch batch{x, y, m};
      (void)pp::train_step(stage, opt, batch, s);
      const std::vector<pp::Stage::Span> first = stage.spans();
      const double busy1 = stage.busy_seconds();
      (void)pp::train_step(stage, opt, batch, s);
      const std::vector<pp::Stage::Span>& all = stage.spans();
      const double busy2 = stage.busy_seconds();
      std::ostringstream bad;
      if (first.empty() || busy1 <= 0) {
        bad << "the first step charged no span (" << first.size() << " spans, " << busy1 << " s)";
      } else if (all.size() != 2 * first.size()) {
        bad << "after two steps " << all.size() << " spans, want " << 2 * first.size()
            << " (the first step's " << first.size() << " and the second's)";
      } else {
        for (std::size_t k = 0; k < first.size(); ++k) {
          if (all[k].name != first[k].name || all[k].t0 != first[k].t0 ||
              all[k].t1 != first[k].t1) {
            bad << "span " << k << " of the first step changed";
            break;
          }
          if (all[first.size() + k].name != first[k].name ||
              all[first.size() + k].t0 < first.back().t1) {
            bad << "span " << first.size() + k << " is not the second step's " << first[k].name
                << " after the first step";
            break;
          }
        }
      }
      if (std::abs(busy2 - 2 * busy1) > 1e-9 * busy1)
        bad << (bad.str().empty() ? "" : "; ") << "busy_seconds() " << busy2
            << " after two steps, want twice the first step's " << busy1;
      if (bad.str().empty()) return {};
      return {bad.str()};
    });
  }
}

// README Task 9: "W (`backward_weight`, span `W<i>`, tb/2)" and cost_meter.hpp: "backward of layer
// i = 2 x its forward", on microbatch i's own rows. In ZB-H1 a stage's W<i> can run after the
// forward of a later, smaller microbatch (B = 10 in 4: 3, 3, 2, 2 rows), so each F<i>, B<i> and
// W<i> span is checked against the cost model on microbatch i's rows, and the busy time against
// their sum.
void each_span_charged_for_its_microbatchs_rows(Schedule schedule, bool recompute = false) {
  const bool zb = schedule == Schedule::ZeroBubble;
  const int batch = 10;
  const mlp::Config c = tiny_config(6, batch, mlp::Activation::ReLU);
  const auto& data = data_for(c);
  const mlp::Matrix x = data.train.x.topRows(batch);
  const mlp::Labels y(data.train.y.begin(), data.train.y.begin() + batch);
  const pp::CostModel cost;
  for (int p : {2, 3}) {
    for (int m : {3, 4, 7}) {
      const std::string what = std::string(pp::to_string(schedule)) + ": p=" + std::to_string(p) +
                               ", m=" + std::to_string(m) + ", B=" + std::to_string(batch) +
                               (recompute ? ", recompute on" : "");
      const std::string why =
          zb ? "each of F<i>, B<i> and W<i> is charged for microbatch i's own rows: W has no dy, "
               "its rows are those of the microbatch's stash"
             : "each F<i> and B<i> is charged for microbatch i's own rows (B: those of its dy), "
               "not those of the microbatch this stage forwarded last";
      expect_no_report_on_any_rank(p, what, why, [&]() -> std::vector<std::string> {
        const int rank = dist::rank();
        pp::Stage stage(c, c.seed + 2, rank, p, cost);
        stage.set_recompute(recompute);
        mlp::SGD opt(stage.parameters(), c.learning_rate);
        const pp::Batch b{x, y, m};
        (void)pp::train_step(stage, opt, b, schedule);
        const auto [begin, end] = expected_layers(c.n_layers, p, rank);
        std::vector<double> tf(static_cast<std::size_t>(m), 0.0);
        for (int i = 0; i < m; ++i) {
          for (int l = begin; l < end; ++l)
            tf[static_cast<std::size_t>(i)] +=
                cost.forward_seconds(c, l, pp::shard_range(batch, m, i).size);
        }
        std::ostringstream bad;
        int w_spans = 0, r_spans = 0;
        double want_busy = 0;
        for (const pp::Stage::Span& s : stage.spans()) {
          if (s.name.size() < 2) continue;
          const char kind = s.name[0];
          if (kind != 'F' && kind != 'B' && kind != 'W' && kind != 'R') continue;
          const int i = std::stoi(s.name.substr(1));
          if (i < 0 || i >= m) {
            bad << "span " << s.name << " names no microbatch; ";
            continue;
          }
          // F: tf; B and W: tb/2 = tf each (ZB); B without W: tb = 2 tf; all on microbatch i's rows.
          const double want = tf[static_cast<std::size_t>(i)] * (!zb && kind == 'B' ? 2.0 : 1.0);
          want_busy += want;
          if (kind == 'W') ++w_spans;
          if (kind == 'R') ++r_spans;  // a recomputed forward: a forward's time
          if (std::abs((s.t1 - s.t0) - want) > 1e-9 * want) {
            bad << "span " << s.name << " lasts " << (s.t1 - s.t0) * 1e9 << " ns, want "
                << want * 1e9 << " ns (microbatch " << i << "'s "
                << pp::shard_range(batch, m, i).size << " rows); ";
          }
        }
        if (w_spans != (zb ? m : 0)) bad << w_spans << " W spans, want " << (zb ? m : 0) << "; ";
        if (r_spans != (recompute ? m : 0))
          bad << r_spans << " R spans, want " << (recompute ? m : 0) << "; ";
        if (std::abs(stage.busy_seconds() - want_busy) > 1e-9 * want_busy)
          bad << "busy_seconds() " << stage.busy_seconds() * 1e9 << " ns, want " << want_busy * 1e9
              << " ns (F, B and W of every microbatch on its own rows)";
        if (bad.str().empty()) return {};
        return {bad.str()};
      });
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(HiddenZB, EachSpanChargedForItsMicrobatchsRows) {
  each_span_charged_for_its_microbatchs_rows(Schedule::ZeroBubble);
}

// With recomputation the R<i> span of each backward is a forward of microbatch i's rows too
// (README Task 8: "span `R<i>`, a forward's time"), for every schedule with uneven microbatches.
TEST(HiddenRecompute, EachSpanChargedForItsMicrobatchsRowsUnevenMicrobatches) {
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB, Schedule::ZeroBubble}) {
    each_span_charged_for_its_microbatchs_rows(s, true);
    if (::testing::Test::HasFailure()) return;
  }
}

// The same for GPipe and 1F1B ("Charge this stage's forward / backward of `rows` rows"): with
// microbatches of different sizes, a stage's B<i> often runs after the forward of another
// microbatch (GPipe: after every forward; 1F1B: inner stages), and must still be charged for
// microbatch i's rows.
TEST(HiddenSimulatedTime, EachSpanChargedForItsMicrobatchsRowsUnevenMicrobatches) {
  for (Schedule s : {Schedule::GPipe, Schedule::OneFOneB}) {
    each_span_charged_for_its_microbatchs_rows(s);
    if (::testing::Test::HasFailure()) return;
  }
}
