// golden_03_collectives OUTDIR: runs the reference collectives on the simulated-time cases of
// collectives_time_cases.hpp and writes their times to OUTDIR/sim_times.txt, one line per case:
// "<function> p <world size> g <ranks per node, 0 = flat> root <root, -1 = none> us <time>".
// Built from solutions/ and run by `./distlab golden 03_collectives`
// (OUTDIR = grader/golden/03_collectives); the kit's self-test regenerates and compares.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <vector>

#include "collectives_time_cases.hpp"

namespace {

/// Max over ranks of the simulated time of one call, clocks aligned by a barrier (as the tests'
/// sim_time_of measures it).
double reference_time(const ctime03::TimeCase& c) {
  std::vector<double> elapsed(static_cast<std::size_t>(c.p), 0.0);
  dist::LaunchOptions o;
  o.world_size = c.p;
  o.network = ctime03::model_of(c);
  dist::launch(o, [&] {
    dist::barrier();
    const double t0 = dist::sim_time();
    ctime03::call(c);
    elapsed[static_cast<std::size_t>(dist::rank())] = dist::sim_time() - t0;
  });
  return *std::max_element(elapsed.begin(), elapsed.end());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR   (writes 03_collectives's reference times there)\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir(argv[1]);
    std::filesystem::create_directories(dir);
    std::ofstream out(dir / "sim_times.txt");
    const auto cases = ctime03::time_cases();
    for (const auto& c : cases) {
      char us[64];
      std::snprintf(us, sizeof us, "%.6f", reference_time(c) * 1e6);
      out << ctime03::key(c) << " us " << us << "\n";
    }
    if (!out) throw std::runtime_error("cannot write " + (dir / "sim_times.txt").string());
    std::printf("wrote %zu reference times of 03_collectives to %s\n", cases.size(),
                dir.string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "golden_03_collectives: %s\n", e.what());
    return 1;
  }
  return 0;
}
