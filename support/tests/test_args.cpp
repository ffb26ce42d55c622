// The launch flags of <distlab/args.hpp>: every flag the header documents is parsed, unknown
// arguments are left alone, malformed ones are errors that say why.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distlab/args.hpp"
#include "distlab/todo.hpp"

namespace {

dist::LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "program");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return distlab::options_from_args(static_cast<int>(argv.size()), argv.data());
}

TEST(OptionsFromArgs, DefaultsAreTheLaunchOptionsDefaults) {
  const dist::LaunchOptions o = parse({});
  const dist::LaunchOptions d;
  EXPECT_EQ(o.world_size, d.world_size);
  EXPECT_EQ(o.timeout, d.timeout);
  EXPECT_EQ(o.trace_path, "");
  EXPECT_EQ(o.network.latency_s, d.network.latency_s);
  EXPECT_EQ(o.network.bandwidth_Bps, d.network.bandwidth_Bps);
  EXPECT_EQ(o.network.reduce_Bps, d.network.reduce_Bps);
}

TEST(OptionsFromArgs, ReadsEveryDocumentedFlag) {
  const dist::LaunchOptions o =
      parse({"-n", "3", "--trace", "t.json", "--timeout-ms", "1500", "--latency", "2e-6",
             "--bandwidth", "5e9", "--reduce-bandwidth", "1e10"});
  EXPECT_EQ(o.world_size, 3);
  EXPECT_EQ(o.trace_path, "t.json");
  EXPECT_EQ(o.timeout.count(), 1500);
  EXPECT_DOUBLE_EQ(o.network.latency_s, 2e-6);
  EXPECT_DOUBLE_EQ(o.network.bandwidth_Bps, 5e9);
  EXPECT_DOUBLE_EQ(o.network.reduce_Bps, 1e10);
  EXPECT_EQ(parse({"--world-size", "5"}).world_size, 5);
}

TEST(OptionsFromArgs, TwoLevelNetworkTakesRanksPerNodeAndOverrides) {
  const dist::LaunchOptions o =
      parse({"--network", "two-level", "--ranks-per-node", "2", "--latency", "3e-6"});
  const dist::NetworkModel m = dist::NetworkModel::two_level(2);
  EXPECT_EQ(o.network.ranks_per_node, 2);
  EXPECT_DOUBLE_EQ(o.network.latency_s, 3e-6);
  EXPECT_DOUBLE_EQ(o.network.bandwidth_Bps, m.bandwidth_Bps);
  EXPECT_DOUBLE_EQ(o.network.inter_node_latency_s, m.inter_node_latency_s);
}

TEST(OptionsFromArgs, LeavesUnknownArgumentsForTheProgram) {
  EXPECT_EQ(parse({"--sizes", "7", "-n", "2", "extra"}).world_size, 2);
}

TEST(OptionsFromArgs, MalformedFlagsAreErrorsThatSayWhy) {
  EXPECT_THROW(parse({"--world-size", "zero"}), dist::Error);
  EXPECT_THROW(parse({"--backend", "tcp"}), dist::Error);
  EXPECT_THROW(parse({"--bandwidth", "-1"}), dist::Error);
  EXPECT_THROW(parse({"--reduce-bandwidth", "-5"}), dist::Error);
  try {
    parse({"--network", "torus"});
    ADD_FAILURE() << "expected an error";
  } catch (const dist::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--network"), std::string::npos) << e.what();
  }
}

TEST(NotImplemented, KeepsItsTypeThroughLaunchWithTheRankInFront) {
  try {
    dist::launch(2, [] {
      if (dist::rank() == 1) DISTLAB_TODO("write me");
      dist::barrier();
    });
    ADD_FAILURE() << "launch returned normally";
  } catch (const distlab::NotImplemented& e) {
    EXPECT_EQ(std::string(e.what()).rfind("rank 1: not implemented: write me", 0), 0u) << e.what();
  }
}

}  // namespace
