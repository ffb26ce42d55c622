// run_07_pipeline: 05's MLP trained with a pipeline schedule, one stage per simulated rank.
//
//   ./distlab run 07_pipeline -- --stages 4 --microbatches 8 --schedule 1f1b
//   ./distlab run 07_pipeline -- --schedule zb --recompute --trace pipe.json
//   ./distlab run 07_pipeline -- --sweep [--csv FILE]   bubble and peak stash vs m
//
// Prints rank 0's training log (05's lines: train_loss from the last stage, test_loss of the
// gathered model on held-out rows, step time = median wall time of a step on rank 0), then one
// step on the simulated clock (compute modelled at --gflops per stage): its time, the measured
// bubble fraction next to the equal-stage formula, each stage's peak stash, and a text timeline.
// --trace FILE writes that step's Chrome trace: one track per stage with spans F<i>/B<i>, the
// sends and receives, and a counter track of stashed bytes per stage. Under mpirun
// (--backend mpi) rank 0's process prints the log and the measured step's wall time, with each
// stage's stash and traffic.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <exception>
#include <mutex>
#include <stdexcept>

#include "datasets/loader.hpp"
#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "distlab/timing.hpp"
#include "distlab/todo.hpp"
#include "train.hpp"

namespace {

struct Simulated {
  std::vector<pp::StepMeasure> ranks;
  double wall_s = 0;  // the step's wall time, barrier to barrier
};

/// One measured step (the first batch) on every rank. The per-stage numbers (peak stash,
/// traffic, busy time) reach rank 0 by a gather, so under mpirun rank 0's process holds them all;
/// the spans and stash samples (timeline, trace) are the threads backend's, every rank here.
Simulated simulate(const dist::LaunchOptions& launch, const pp::PipelineConfig& c,
                   const datasets::Split& data) {
  Simulated out;
  out.ranks.resize(static_cast<std::size_t>(launch.world_size));
  std::mutex mu;
  dist::launch(launch, [&] {
    const int rank = dist::rank();
    pp::ActivationMeter rank_meter;
    std::vector<pp::Stage> stages = pp::make_stages(c, &rank_meter);
    mlp::SGD opt(pp::all_parameters(stages), c.model.learning_rate);
    const datasets::BatchLoader loader(data.train, c.model.batch_size, c.model.seed + 3);
    pp::Matrix x;
    pp::Labels y;
    loader.load(0, x, y);
    const distlab::Stopwatch sw;
    const pp::Batch batch{x, y, c.microbatches};
    const pp::StepMeasure m = c.schedule == pp::Schedule::Interleaved
                                  ? pp::measured_step_interleaved(stages, rank_meter, opt, batch)
                                  : pp::measured_step(stages[0], opt, batch, c.schedule);
    const double wall = sw.elapsed_s();
    const double mine[] = {
        m.busy_s, static_cast<double>(m.peak_microbatches), static_cast<double>(m.peak_bytes),
        static_cast<double>(m.stats.messages_sent), static_cast<double>(m.stats.bytes_sent)};
    constexpr std::size_t kFields = std::size(mine);
    const auto p = static_cast<std::size_t>(dist::world_size());
    std::vector<double> all(rank == 0 ? kFields * p : 0);
    dist::gather(std::span<const double>(mine), std::span<double>(all), 0);
    std::lock_guard<std::mutex> g(mu);
    out.ranks[static_cast<std::size_t>(rank)] = m;
    if (rank != 0) return;
    out.wall_s = wall;
    for (std::size_t r = 0; r < p; ++r) {
      pp::StepMeasure& to = out.ranks[r];
      to.busy_s = all[r * kFields];
      to.peak_microbatches = static_cast<int>(all[r * kFields + 1]);
      to.peak_bytes = static_cast<std::int64_t>(all[r * kFields + 2]);
      to.stats.messages_sent = static_cast<std::uint64_t>(all[r * kFields + 3]);
      to.stats.bytes_sent = static_cast<std::uint64_t>(all[r * kFields + 4]);
    }
  });
  return out;
}

/// "layers [a, b)" of rank r, or its chunks' layers with interleaving.
std::string rank_layers(const pp::PipelineConfig& c, int p, int r) {
  if (c.schedule != pp::Schedule::Interleaved) {
    const pp::Range l = pp::stage_layers(c.model.n_layers, p, r);
    return "layers [" + std::to_string(l.begin) + ", " + std::to_string(l.end()) + ")";
  }
  std::string out = "chunks";
  for (int g = 0; g < c.chunks * p; ++g) {
    if (pp::chunk_rank(g, p) != r) continue;
    const pp::Range l = pp::stage_layers(c.model.n_layers, c.chunks * p, g);
    out += " " + std::to_string(g) + ": [" + std::to_string(l.begin) + ", " +
           std::to_string(l.end()) + ")";
  }
  return out;
}

/// Equal stages (every layer width x width) and free communication: the formulas' setting.
/// With csv_path set, also writes one row per (schedule, m) there.
void sweep(int stages, int width, int layers_per_stage, double gflops, bool recompute,
           const std::string& csv_path) {
  pp::PipelineConfig c;
  c.recompute = recompute;
  c.model.n_layers = stages * layers_per_stage;
  c.model.dim_in = c.model.dim_hidden = c.model.n_classes = width;
  c.model.train_size = 512;
  c.model.test_size = 16;
  c.model.batch_size = 64;
  c.cost.flops_per_s = gflops * 1e9;
  const datasets::Split data = mlp::make_data(c.model);
  dist::LaunchOptions launch;
  launch.world_size = stages;
  launch.network.latency_s = 0;
  launch.network.bandwidth_Bps = 1e30;
  const pp::Schedule schedules[] = {pp::Schedule::Naive, pp::Schedule::GPipe,
                                    pp::Schedule::OneFOneB, pp::Schedule::ZeroBubble,
                                    pp::Schedule::Interleaved};
  c.chunks = 1;
  std::printf(
      "bubble fraction (formula) and peak stash in microbatches (stage 0 / the largest stage) vs "
      "m:\n%d equal stages of %d layers %dx%d, batch %d, free communication%s; interleaved: %d "
      "chunks of %d layer(s) per rank, peak in (chunk, microbatch) stashes, only m a multiple of "
      "p\n",
      stages, layers_per_stage, width, width, c.model.batch_size,
      c.recompute ? ", recomputation on" : "", layers_per_stage, 1);
  std::printf("%4s", "");
  for (pp::Schedule s : schedules) std::printf(" | %-25s", pp::to_string(s));
  std::printf("\n%4s", "m");
  for (std::size_t k = 0; k < std::size(schedules); ++k)
    std::printf(" | %-25s", "bubble (formula) peak");
  std::printf("\n");
  std::FILE* csv = csv_path.empty() ? nullptr : std::fopen(csv_path.c_str(), "w");
  if (!csv_path.empty() && csv == nullptr) throw std::runtime_error("cannot write " + csv_path);
  if (csv)
    std::fprintf(csv,
                 "schedule,recompute,stages,microbatches,step_s,bubble,bubble_formula,peak_"
                 "microbatches_stage0,peak_bytes_stage0,peak_microbatches_max\n");
  for (int m : {1, 2, 4, 8, 16, 32, 64}) {
    c.microbatches = m;
    std::printf("%4d", m);
    for (pp::Schedule s : schedules) {
      c.schedule = s;
      c.chunks = s == pp::Schedule::Interleaved ? layers_per_stage : 1;
      if (s == pp::Schedule::Interleaved && m % stages != 0) {
        std::printf(" | %-25s", "     -");
        continue;
      }
      const Simulated r = simulate(launch, c, data);
      int peak_max = 0;
      for (const auto& k : r.ranks) peak_max = std::max(peak_max, k.peak_microbatches);
      const double formula = pp::formula_bubble(s, stages, m, c.recompute, c.chunks);
      char f[16] = "   n/a";
      if (!std::isnan(formula)) std::snprintf(f, sizeof f, "%6.4f", formula);
      std::printf(" | %6.4f (%s) %3d / %-3d", r.ranks[0].bubble, f, r.ranks[0].peak_microbatches,
                  peak_max);
      if (csv) {
        std::fprintf(csv, "%s,%d,%d,%d,%.9g,%.6f,%.6f,%d,%lld,%d\n", pp::to_string(s),
                     c.recompute ? 1 : 0, stages, m, r.ranks[0].step_s, r.ranks[0].bubble, formula,
                     r.ranks[0].peak_microbatches, static_cast<long long>(r.ranks[0].peak_bytes),
                     peak_max);
      }
    }
    std::printf("\n");
  }
  if (csv) {
    std::fclose(csv);
    std::printf("data: %s\n", csv_path.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  pp::PipelineConfig c;
  c.model.niters = 300;
  std::string schedule = "1f1b";
  int stages = 0;
  double gflops = 50.0;
  bool do_sweep = false;
  std::string csv_path;
  int timeline_columns = 96;
  CLI::App app{
      "07_pipeline: the MLP cut into stages, trained with naive, GPipe, 1F1B or ZB-H1 schedules"};
  auto launch_flags = distlab::add_launch_options(app);
  app.add_option("--stages", stages, "pipeline stages (= ranks; overrides --world-size)")
      ->check(CLI::PositiveNumber);
  app.add_option("--microbatches,-m", c.microbatches, "microbatches per batch")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedule", schedule, "naive, gpipe, 1f1b, zb (ZB-H1) or interleaved")
      ->check(CLI::IsMember({"naive", "gpipe", "1f1b", "zb", "interleaved"}));
  app.add_option("--chunks,-v", c.chunks,
                 "with --schedule interleaved: model chunks per rank (virtual stages)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--recompute", c.recompute,
               "activation recomputation: stash only each stage's input, run the forward again "
               "in the backward");
  app.add_option("--gflops", gflops, "modelled compute speed per stage (GFLOP/s)")
      ->check(CLI::PositiveNumber);
  app.add_option("--niters", c.model.niters, "training steps")->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", c.model.batch_size, "rows per step")->check(CLI::PositiveNumber);
  app.add_option("--lr,--learning-rate", c.model.learning_rate, "SGD step size")
      ->check(CLI::PositiveNumber);
  app.add_option("--n-layers", c.model.n_layers, "linear layers")->check(CLI::PositiveNumber);
  app.add_option("--dim-in", c.model.dim_in, "input features")->check(CLI::PositiveNumber);
  app.add_option("--dim-hidden", c.model.dim_hidden, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--seed", c.model.seed, "seed");
  app.add_option("--log-every", c.model.log_every, "steps between log lines")
      ->check(CLI::PositiveNumber);
  app.add_option("--columns", timeline_columns, "width of the text timeline")
      ->check(CLI::Range(20, 1000));
  app.add_flag("--sweep", do_sweep, "print bubble and peak stash vs m for every schedule instead");
  app.add_option("--csv", csv_path, "with --sweep: also write the table to this CSV file");
  CLI11_PARSE(app, argc, argv);

  return distlab::run_main([&]() -> int {
    dist::LaunchOptions launch = launch_flags->resolve();
    if (stages > 0) launch.world_size = stages;
    // Under mpirun every process runs main(): the job's size wins, rank 0's process prints the
    // config and the tables, and there is no simulated clock.
    launch.world_size = distlab::job_size_or(launch.world_size);
    const bool lead = distlab::lead_process();
    const bool simulated = launch.backend == dist::Backend::Threads;
    c.schedule = pp::schedule_from_string(schedule);
    c.cost.flops_per_s = gflops * 1e9;
    if (do_sweep) {
      if (!simulated) {
        // The sweep is a simulation: it runs on the threads backend, in one process.
        if (!lead) return 0;
        std::printf(
            "(--sweep runs on the simulated network of the threads backend, in rank 0's "
            "process)\n");
      }
      sweep(launch.world_size, 64, 2, gflops, c.recompute, csv_path);
      return 0;
    }
    c.validate(launch.world_size);
    const int p = launch.world_size;
    const std::string trace = launch.trace_path;
    launch.trace_path.clear();  // the trace covers the simulated step only
    const datasets::Split data = mlp::make_data(c.model);
    if (lead) {
      std::printf(
          "%sstages = %d\nmicrobatches = %d\nschedule = %s\nchunks = %d\nrecompute = %s\n\n",
          mlp::describe(c.model).c_str(), p, c.microbatches, pp::to_string(c.schedule), c.chunks,
          c.recompute ? "on" : "off");
    }
    std::fflush(stdout);
    dist::launch(launch, [&] {
      pp::train_pipeline(c, data, [](const mlp::LogLine& l) {
        // Step 0's line times that one step alone (cold caches, first allocations); later lines give
        // the median of the steps since the previous line.
        std::printf("step %d | train_loss %.4f | test_loss %.4f | step time %.3f ms%s\n", l.step,
                    l.train_loss, l.test_loss, l.step_ms,
                    l.step == 0 ? " (step 0 alone: a cold step)" : "");
        std::fflush(stdout);
      });
    });
    if (!simulated) {
      // One step measured on the job's processes: its wall time, and each stage's stash and
      // traffic (the busy spans, bubble and timeline need the simulated clock).
      const Simulated run = simulate(launch, c, data);
      if (!lead) return 0;
      std::printf(
          "\nmeasured step (%s, p = %d, m = %d): wall time %.3f ms on this machine (the bubble "
          "and the\ntimeline need the simulated clock: run with --backend threads)\n",
          pp::to_string(c.schedule), p, c.schedule == pp::Schedule::Naive ? 1 : c.microbatches,
          run.wall_s * 1e3);
      for (int r = 0; r < p; ++r) {
        const pp::StepMeasure& m = run.ranks[static_cast<std::size_t>(r)];
        std::printf(
            "  stage %d: %s | peak stash %d microbatches, %.1f KiB | sent %llu "
            "messages, %.1f KiB\n",
            r, rank_layers(c, p, r).c_str(), m.peak_microbatches,
            static_cast<double>(m.peak_bytes) / 1024.0,
            static_cast<unsigned long long>(m.stats.messages_sent),
            static_cast<double>(m.stats.bytes_sent) / 1024.0);
      }
      if (!trace.empty()) {
        std::printf(
            "\n--trace %s: not written (a trace records the simulated clock: use "
            "--backend threads)\n",
            trace.c_str());
      }
      return 0;
    }

    launch.trace_path = trace;
    const Simulated sim = simulate(launch, c, data);
    const pp::StepMeasure& r0 = sim.ranks[0];
    std::printf("\nsimulated step (%s, p = %d, m = %d, compute at %.0f GFLOP/s per stage):\n",
                pp::to_string(c.schedule), p,
                c.schedule == pp::Schedule::Naive ? 1 : c.microbatches, gflops);
    const double formula = pp::formula_bubble(c.schedule, p, c.microbatches, c.recompute, c.chunks);
    if (std::isnan(formula)) {
      std::printf(
          "  step time %.3f ms | bubble fraction %.4f measured (no formula for %s with "
          "recomputation)\n",
          r0.step_s * 1e3, r0.bubble, pp::to_string(c.schedule));
    } else {
      std::printf(
          "  step time %.3f ms | bubble fraction %.4f measured, %.4f for equal stages with free "
          "communication (%s)\n",
          r0.step_s * 1e3, r0.bubble, formula,
          pp::formula_bubble_text(c.schedule, p, c.microbatches));
    }
    std::vector<std::vector<pp::Stage::Span>> spans;
    std::vector<std::vector<pp::ActivationMeter::Sample>> memory;
    for (int r = 0; r < p; ++r) {
      const pp::StepMeasure& m = sim.ranks[static_cast<std::size_t>(r)];
      std::printf(
          "  stage %d: %s | busy %.3f ms (%.1f%%) | peak stash %d %s, "
          "%.1f KiB | sent %llu messages, %.1f KiB\n",
          r, rank_layers(c, p, r).c_str(), m.busy_s * 1e3, 100.0 * m.busy_s / r0.step_s,
          m.peak_microbatches, c.chunks > 1 ? "(chunk, microbatch) stashes" : "microbatches",
          static_cast<double>(m.peak_bytes) / 1024.0,
          static_cast<unsigned long long>(m.stats.messages_sent),
          static_cast<double>(m.stats.bytes_sent) / 1024.0);
      spans.push_back(m.spans);
      std::vector<pp::ActivationMeter::Sample> abs;
      for (const auto& s : m.memory) abs.push_back({s.t + m.t0, s.bytes});
      memory.push_back(std::move(abs));
    }
    double busy_min = r0.busy_s, busy_max = r0.busy_s;
    for (const auto& m : sim.ranks) {
      busy_min = std::min(busy_min, m.busy_s);
      busy_max = std::max(busy_max, m.busy_s);
    }
    if (busy_max > 1.05 * busy_min) {
      std::printf(
          "  the stages are unequal (the busiest computes %.1fx the least busy): it sets the pace "
          "and the "
          "others wait, which (with the messages' cost) makes the bubble larger than the "
          "formula's\n",
          busy_max / busy_min);
    }
    std::printf(
        "\ntimeline (F<i>: forward of microbatch i, B<i>: backward (zb: its input gradient), "
        "W<i>: weight gradient, R<i>: recomputed forward, '.': idle):\n%s",
        pp::render_timeline(spans, timeline_columns).c_str());
    if (!trace.empty()) {
      pp::add_memory_counters(trace, memory);
      std::printf("\ntrace of the simulated step written to %s\n", trace.c_str());
    }
    return 0;
  });
}
