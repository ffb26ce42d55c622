#include "fsdp.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "distlab/todo.hpp"

namespace fsdp {

void shard_unit(std::span<const float> full, int dp, int rank, std::span<float> shard) {
  DISTLAB_TODO("copy this rank's equal part of the zero-padded unit into shard, padding 0 "
               "(header: shard_unit; model.hpp: the picture of a unit and its shards)");
}

void adam_update(std::span<float> w, std::span<const float> g, std::span<float> m,
                 std::span<float> v, std::int64_t t, const AdamConfig& config) {
  DISTLAB_TODO("one Adam step with bias correction on every element (model.hpp: AdamConfig)");
}

struct Fsdp::State {
  // TODO: whatever forward, backward and step share, e.g. per unit
};

Fsdp::Fsdp(Model& model, Shards& shards, UnitBuffers& buffers, Stream& compute, Stream& comm,
           const FsdpConfig& config)
    : model_(model),
      shards_(shards),
      buffers_(buffers),
      compute_(compute),
      comm_(comm),
      config_(config),
      state_(std::make_unique<State>()) {
  if (config_.prefetch < 0) throw std::invalid_argument("FsdpConfig::prefetch must be >= 0");
  DISTLAB_TODO("whatever the passes need to order the two streams, one per unit");
}

Fsdp::~Fsdp() = default;

// TODO: helpers of your own, if you want them

void Fsdp::forward() {
  DISTLAB_TODO("every unit's forward on compute, its weights gathered on comm before (within the "
               "prefetch window; bf16 with bf16_comm) and released after (header: the contract of "
               "Fsdp)");
}

void Fsdp::backward() {
  DISTLAB_TODO("every unit's backward on compute, last unit first, each full gradient (bf16 with "
               "bf16_comm) reduce-scattered on comm into the unit's fp32 gradient shard (header: "
               "Fsdp)");
}

void Fsdp::step() {
  ++t_;
  DISTLAB_TODO("Adam on every unit's shards on compute, unit L-1 first, each after its own "
               "reduce-scatter (header: the contract of Fsdp)");
}

}  // namespace fsdp
