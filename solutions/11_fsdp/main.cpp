// run_11_fsdp: calls the module's function once.
//
//   ./distlab run 11_fsdp -- -a 2 -b 3
#include <CLI/CLI.hpp>

#include <cstdio>

#include "distlab/program.hpp"
#include "fsdp.hpp"

int main(int argc, char** argv) {
  CLI::App app{"11_fsdp: fully sharded data parallelism (ZeRO-3): per-unit gather and release, reduce-scatter, prefetch on the comm stream, sharded Adam, bf16 communication"};
  int a = 2;
  int b = 3;
  app.add_option("-a", a, "the first term");
  app.add_option("-b", b, "the second term");
  CLI11_PARSE(app, argc, argv);
  return distlab::run_main([&] {
    std::printf("add(%d, %d) = %d\n", a, b, fsdp::add(a, b));
    return 0;
  });
}
