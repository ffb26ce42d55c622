// run_10_streams: waiting for an asynchronous all-reduce three ways, overlapping bucketed
// all-reduces with backward on two streams, and the race detector on a missing event.
//
//   ./distlab run 10_streams [--world-size 4] [-- --trace streams.json]
//
// Prints, on the simulated device of rank 0: the host time each waiting strategy loses and the
// step time it gives (measured / formula) with a text timeline per strategy; the data-parallel
// step with and without overlap (measured / formula, time saved) with its timelines; and the
// race detector's report on the optimizer step that skips the event. --trace FILE writes the
// Chrome trace of the overlapped step: one track per stream per rank.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <mutex>
#include <string>

#include "distlab/cli.hpp"
#include "distlab/program.hpp"
#include "program.hpp"
#include "replica.hpp"
#include "streams.hpp"

namespace {

using namespace streams;

struct StepRun {
  double step_s = 0;
  std::vector<Span> spans;
};

StepRun run_step(dist::LaunchOptions launch, const StepConfig& c, bool overlap, bool unordered) {
  StepRun out;
  std::mutex mu;
  dist::launch(launch, [&] {
    Stream compute("compute"), comm("comm");
    Replica replica(c, compute);
    const double t0 = dist::sim_time();
    std::vector<AllReduceWork> works = backward_with_overlap(replica, compute, comm, overlap);
    if (unordered) {
      optimizer_step_unordered(replica, compute);
    } else {
      optimizer_step(replica, compute, works);
    }
    dist::device::device_synchronize();
    if (dist::rank() == 0) {
      std::lock_guard<std::mutex> g(mu);
      out.step_s = dist::sim_time() - t0;
      out.spans = replica.spans();
    }
  });
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "10_streams: streams and events on the simulated device: waiting for an all-reduce, "
      "overlapping it with backward, and the race detector"};
  auto launch_flags = distlab::add_launch_options(app);
  WaitingSetup w;
  StepConfig c;
  double poll_us = w.poll_interval_s * 1e6;
  int columns = 96;
  app.add_option("--poll-us", poll_us, "polling interval of the busy wait, microseconds")
      ->check(CLI::PositiveNumber);
  app.add_option("--bucket-cap", c.bucket_cap_bytes, "bucket cap in bytes (06's rule)");
  app.add_option("--columns", columns, "width of the text timelines")->check(CLI::Range(20, 400));
  CLI11_PARSE(app, argc, argv);

  return distlab::run_main([&]() -> int {
    dist::LaunchOptions launch = launch_flags->resolve();
    if (launch.backend != dist::Backend::Threads) {
      std::fprintf(stderr,
                   "error: run_10_streams measures the simulated device of the threads backend "
                   "(its times are the simulated clock's); on a GPU, test_dist_nccl's CudaDevice "
                   "tests run the same device calls (docs/backends.md)\n");
      return 1;
    }
    const std::string trace = launch.trace_path;
    launch.trace_path.clear();  // only the overlapped step is traced
    w.poll_interval_s = poll_us * 1e-6;
    const int p = launch.world_size;

    distlab::section("task 1: waiting for an all-reduce (rank 0's simulated device)", [&] {
      std::printf(
          "backward %.3f ms writes %zu floats; all-reduce on 'comm' %.3f ms (%d ranks); then "
          "%.3f ms of host work and a %.3f ms optimizer kernel\n\n",
          w.backward_s * 1e3, w.floats,
          all_reduce_seconds(w.floats * sizeof(float), p, launch.network) * 1e3, p,
          w.host_work_s * 1e3, w.optimizer_s * 1e3);
      std::printf("%-14s | %-27s | %-27s\n", "strategy", "host time lost ms (formula)",
                  "step time ms (formula)");
      std::vector<std::pair<Strategy, WaitingResult>> results;
      for (Strategy s : {Strategy::Synchronize, Strategy::Poll, Strategy::StreamOrder}) {
        WaitingResult r;
        std::mutex mu;
        dist::launch(launch, [&] {
          WaitingResult mine = measure_waiting(s, w);
          if (dist::rank() == 0) {
            std::lock_guard<std::mutex> g(mu);
            r = std::move(mine);
          }
        });
        const WaitingFormula f = waiting_formula(s, w, p, launch.network);
        std::printf("%-14s | %12.4f (%10.4f)   | %12.4f (%10.4f)\n", to_string(s),
                    r.host_lost_s * 1e3, f.host_lost_s * 1e3, r.step_s * 1e3, f.step_s * 1e3);
        results.emplace_back(s, std::move(r));
      }
      for (const auto& [s, r] : results) {
        std::printf("\n%s (poll every %.0f us):\n%s", to_string(s), w.poll_interval_s * 1e6,
                    render_timeline(r.spans, {"compute", "comm", "host"}, columns).c_str());
      }
    });

    distlab::section("task 2: all-reduces overlapped with backward (rank 0)", [&] {
      const StepRun plain = run_step(launch, c, false, false);
      dist::LaunchOptions traced = launch;
      traced.trace_path = trace;
      const StepRun over = run_step(traced, c, true, false);
      double plain_f = 0, over_f = 0;
      int buckets = 0;
      dist::launch(1, [&] {
        Stream compute("compute");
        const Replica shape(c, compute);
        plain_f = step_formula(shape, p, launch.network, false);
        over_f = step_formula(shape, p, launch.network, true);
        buckets = shape.num_buckets();
      });
      std::printf("%zu layers in %d buckets (cap %zu bytes), %d ranks\n", c.layer_floats.size(),
                  buckets, c.bucket_cap_bytes, p);
      std::printf("step without overlap: %.4f ms (formula %.4f)\n", plain.step_s * 1e3,
                  plain_f * 1e3);
      std::printf("step with overlap:    %.4f ms (formula %.4f)\n", over.step_s * 1e3,
                  over_f * 1e3);
      std::printf("saved by overlap:     %.4f ms (formula %.4f)\n\n",
                  (plain.step_s - over.step_s) * 1e3, (plain_f - over_f) * 1e3);
      std::printf(
          "without overlap (B<l> backward of layer l, R<b> all-reduce of bucket b, "
          "S<b> its update):\n%s\nwith overlap:\n%s",
          render_timeline(plain.spans, {"compute", "comm"}, columns).c_str(),
          render_timeline(over.spans, {"compute", "comm"}, columns).c_str());
      if (!trace.empty()) std::printf("trace of the overlapped step: %s\n", trace.c_str());
    });

    distlab::section("task 3: the update without the event (optimizer_step_unordered)", [&] {
      try {
        run_step(launch, c, true, true);
        std::printf("no report: the updates were ordered after the all-reduces\n");
      } catch (const dist::device::StreamRaceError& e) {
        std::printf("%s\n", e.what());
      }
      run_step(launch, c, true, false);
      std::printf("\noptimizer_step (each update after its own bucket's all-reduce): no report\n");
    });
    distlab::section("task 4: the device's order worked out without a device (analyze)", [&] {
      for (bool with_wait : {false, true}) {
        Program prog;
        prog.streams = 2;
        prog.events = 1;
        prog.buffers = 1;
        prog.stream_names = {"compute", "comm"};
        prog.buffer_names = {"grad"};
        Op produce;
        produce.name = "produce";
        produce.stream = 1;
        produce.seconds = 2e-3;
        produce.writes = {0};
        Op rec;
        rec.kind = OpKind::Record;
        rec.stream = 1;
        rec.event = 0;
        Op wait = rec;
        wait.kind = OpKind::Wait;
        wait.stream = 0;
        Op consume;
        consume.name = "consume";
        consume.stream = 0;
        consume.seconds = 1e-3;
        consume.reads = {0};
        Op sync;
        sync.kind = OpKind::SyncStream;
        sync.stream = 0;
        prog.ops = {produce, rec};
        if (with_wait) prog.ops.push_back(wait);
        prog.ops.push_back(consume);
        prog.ops.push_back(sync);
        const ProgramAnalysis mine = analyze(prog);
        Replayed device;
        dist::launch(1, [&] { device = replay(prog); });
        std::printf("%s\n%s",
                    with_wait ? "with the wait:" : "without the wait:", listing(prog).c_str());
        for (std::size_t i = 0; i < mine.time.size(); ++i) {
          std::printf("  op %zu: %.3f ms (device %.3f ms)\n", i, mine.time[i] * 1e3,
                      i < device.time.size() ? device.time[i] * 1e3 : -1.0);
        }
        if (mine.race.op >= 0) {
          std::printf("  race: op %d with op %d on '%s' (device: op %d)\n", mine.race.op,
                      mine.race.earlier, prog.buffer_name(mine.race.buffer).c_str(),
                      device.race_op);
        } else {
          std::printf("  no race (device: %s)\n", device.race_op < 0 ? "none" : "a race");
        }
        std::printf("\n");
      }
    });
    return 0;
  });
}
