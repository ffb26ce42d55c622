// 03_collectives: the collective operations of a communication library, built from
// point-to-point messages (dist::send / recv / isend / irecv) only.
//
// Every function is called by every rank, in the same order, with the same count, root and op
// (like the built-ins of <dist/dist.hpp>). Buffers hold floats; counts are elements. Every
// function must work for any world size p >= 1 (not only powers of two), for counts that do not
// divide by p, and for count 0.
//
// Rules of the exercise:
//   * move data only with dist::send / recv / isend / irecv; calling a built-in collective
//     (dist::broadcast, dist::all_reduce, ...) from inside these functions fails the tests;
//   * reduce locally only with dist::reduce_into(inout, in, op): it applies the op and charges the
//     reduction (gamma) to the simulated clock; Avg accumulates like Sum, so divide by p once at
//     the end yourself (a division: an Avg is checked bit for bit against the sum / p, and a
//     product with 1/p can differ in the last bit for p = 3, 5, 6, 7);
//   * compute chunk boundaries with shard_range() below, the same on every rank.
//
// The tests check the values, the traffic of every rank (dist::stats(): messages and bytes per
// peer) and the simulated time (dist::sim_time()) against the cost formula documented above each
// function (Hockney model: one message of b bytes costs alpha + b*beta; a local reduction of b
// bytes costs b*gamma). The formulas assume the message order described in README.md: in a ring
// or pairwise exchange step a rank sends and receives at the same time (isend + recv + wait).
#pragma once

#include <cstddef>
#include <span>

#include "dist/dist.hpp"

namespace collectives {

// ---------------------------------------------------------------------------------------------
// Helpers (given; use them, do not change them).

/// A contiguous piece of a buffer: elements [offset, offset + size).
struct Shard {
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// The piece `index` (0 <= index < parts) of a buffer of `count` elements cut into `parts` nearly
/// equal pieces: the first count % parts pieces get one element more. Every rank computes the
/// same boundaries, so a chunk sent by one rank always matches the chunk its peer receives.
///   shard_range(10, 4, 0) = {0, 3}, (10, 4, 1) = {3, 3}, (10, 4, 2) = {6, 2}, (10, 4, 3) = {8, 2}
inline Shard shard_range(std::size_t count, int parts, int index) {
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = count / p;
  const std::size_t extra = count % p;
  return Shard{i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

/// The elements of `buf` that shard `s` names.
template <typename T>
std::span<T> slice(std::span<T> buf, Shard s) {
  return buf.subspan(s.offset, s.size);
}

/// ceil(log2(p)) for p >= 1: the number of rounds of a binomial tree over p ranks.
inline int ceil_log2(int p) {
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  return rounds;
}

/// The largest power of two <= p, for p >= 1.
inline int floor_pow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// ---------------------------------------------------------------------------------------------
// Broadcast: after the call every rank's buf holds src's buf. (p ranks, n = bytes of buf)

/// Naive: src sends the whole buffer to every other rank, one after the other.
/// p-1 messages from src; time (p-1)(alpha + n beta).
void broadcast_naive(std::span<float> buf, int src);

/// Binomial tree: in round k the ranks that already hold the data send it to a rank 2^k away
/// (ranks counted relative to src), so the number of holders doubles every round.
/// p-1 messages, each rank receives once; time ceil(log2 p)(alpha + n beta).
void broadcast_tree(std::span<float> buf, int src);

/// Ring: src sends to its right neighbour (rank+1 mod p); every other rank receives the whole
/// buffer from its left neighbour and forwards it to the right, except the last one (src-1).
/// p-1 messages; time (p-1)(alpha + n beta).
void broadcast_ring(std::span<float> buf, int src);

// ---------------------------------------------------------------------------------------------
// Reduce: after the call dst's buf holds op over every rank's buf (element by element).
// op: Sum, Product, Min, Max (and Avg: the sum divided by p). On ranks other than dst, buf may be
// overwritten with partial results.

/// Naive: every other rank sends its buffer to dst, which receives and reduces them one by one.
/// dst receives p-1 messages; time (p-1)(alpha + n beta + n gamma) when the messages arrive
/// faster than dst reduces them, (p-1)(alpha + n beta) + n gamma when gamma is small.
void reduce_naive(std::span<float> buf, int dst, dist::ReduceOp op);

/// Binomial tree (the broadcast tree run backwards): in round k, the ranks whose relative rank
/// has bit k set send their partial result to the rank 2^k below and stop; the others receive
/// from 2^k above (if it exists) and reduce. dst receives ceil(log2 p) messages.
/// Time ceil(log2 p)(alpha + n beta + n gamma) for p a power of two.
void reduce_tree(std::span<float> buf, int dst, dist::ReduceOp op);

// ---------------------------------------------------------------------------------------------
// All-reduce: after the call every rank's buf holds op over every rank's buf.
// op: Sum, Product, Min, Max, Avg (Sum divided by p).

/// Naive, through rank 0: every rank sends its buffer to rank 0, which reduces them and sends
/// the result back to every rank. Rank 0 receives p-1 and sends p-1 messages.
/// Time 2(p-1)(alpha + n beta) + (p-1) n gamma (when gamma is the bottleneck, see reduce_naive).
void all_reduce_naive(std::span<float> buf, dist::ReduceOp op);

/// Butterfly (recursive doubling): for p a power of two, in round k every rank exchanges its
/// whole buffer with rank XOR 2^k and reduces; after log2 p rounds every rank holds the result.
/// Other p: with q = floor_pow2(p), ranks r >= q first send their buffer to r - q (which reduces
/// it in), the first q ranks run the butterfly, and r - q sends the result back to r.
/// Time log2(p)(alpha + n beta + n gamma) for p a power of two; otherwise
/// (floor(log2 p) + 2)(alpha + n beta) + (floor(log2 p) + 1) n gamma.
void all_reduce_butterfly(std::span<float> buf, dist::ReduceOp op);

/// Ring: reduce-scatter then all-gather, in place, on p chunks of buf (shard_range).
/// Reduce-scatter: in p-1 steps every rank sends one chunk to its right neighbour, receives
/// another from its left and reduces it in; afterwards each rank holds one fully reduced chunk.
/// All-gather: in p-1 more steps the reduced chunks travel around the ring.
/// Every rank sends 2(p-1) messages of about n/p bytes, only to its right neighbour.
/// Time 2(p-1)(alpha + (n/p) beta) + (p-1)(n/p) gamma: bandwidth-optimal.
void all_reduce_ring(std::span<float> buf, dist::ReduceOp op);

// ---------------------------------------------------------------------------------------------
// Gather and all-gather: rank r's `in` lands at out[r*m, (r+1)*m), m = in.size() (the same on
// every rank). out must hold p*m elements (on dst only, for gather; it may be empty elsewhere).

/// Naive: every other rank sends its `in` to dst. dst receives p-1 messages of m floats.
/// Time (p-1)(alpha + m beta') where m beta' is the time of m floats.
void gather_naive(std::span<const float> in, std::span<float> out, int dst);

/// Binomial tree: like reduce_tree, but instead of reducing, a rank appends what its children
/// send; each rank sends once, to its parent, all the blocks of its subtree in one message.
/// dst receives ceil(log2 p) messages. Time ceil(log2 p) alpha + (p-1) m beta'.
void gather_tree(std::span<const float> in, std::span<float> out, int dst);

/// Ring: in p-1 steps every rank sends the block it got last (its own first) to the right and
/// receives a new block from the left. Each rank sends p-1 messages of m floats.
/// Time (p-1)(alpha + m beta').
void all_gather_ring(std::span<const float> in, std::span<float> out);

// ---------------------------------------------------------------------------------------------
// Reduce-scatter: in holds p chunks of m = out.size() floats (in.size() == p*m on every rank);
// rank r's out becomes op over every rank's chunk r. op: Sum, Product, Min, Max, Avg.

/// Ring: in p-1 steps every rank sends a partially reduced chunk to the right, receives another
/// from the left and reduces its own input chunk into it; after the last step the chunk it holds
/// is its own, fully reduced. Each rank sends p-1 messages of m floats.
/// Time (p-1)(alpha + m beta' + m gamma').
void reduce_scatter_ring(std::span<const float> in, std::span<float> out, dist::ReduceOp op);

}  // namespace collectives
