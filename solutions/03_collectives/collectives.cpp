// 03_collectives: collectives from point-to-point messages. One algorithm per function, naive to
// optimal; each is explained before its code (steps, rounds, bytes per rank). Notation: p ranks,
// n bytes in the buffer, alpha = latency per message, beta = seconds per byte on a link,
// gamma = seconds per byte of local reduction (see README.md for the full cost model).
//
// Ranks relative to a root: vr = (rank - root + p) % p, so every tree algorithm is written as if
// the root were rank 0, and a relative rank v maps back to the real rank (v + root) % p.
#include "collectives.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "distlab/todo.hpp"

namespace collectives {
namespace {

// Argument checks shared by every function (given): a clear error instead of a hang.
void check_root(const char* fn, const char* what, int root) {
  const int p = dist::world_size();
  if (root < 0 || root >= p) {
    throw dist::Error("rank " + std::to_string(dist::rank()) + ": " + fn + "(" + what + "=" +
                      std::to_string(root) + "): " + what + " must be a rank in [0, " +
                      std::to_string(p) + ")");
  }
}

void check_size(const char* fn, const char* buffer, std::size_t got, std::size_t want,
                const char* rule) {
  if (got != want) {
    throw dist::Error("rank " + std::to_string(dist::rank()) + ": " + fn + ": " + buffer + " has " +
                      std::to_string(got) + " elements but must have " + std::to_string(want) +
                      " (" + rule + ")");
  }
}

// The real rank of relative rank v in a tree rooted at root.
[[maybe_unused]] int real_rank(int v, int root, int p) { return (v + root) % p; }

// Divides every element by p (the last step of Avg).
[[maybe_unused]] void divide_by(std::span<float> buf, int p) {
  for (float& x : buf) x /= static_cast<float>(p);
}

}  // namespace

// =============================================================================================
// broadcast_naive
//   src sends the whole buffer to rank src+1, src+2, ... (mod p) with blocking sends; every other
//   rank does one recv from src.
//   Rounds: p-1 (src's outgoing link carries one message after another).
//   Bytes: src sends (p-1) n; every other rank receives n.
//   Time: (p-1)(alpha + n beta).
void broadcast_naive(std::span<float> buf, int src) {
  check_root("broadcast_naive", "src", src);
  // BEGIN SOLUTION: every rank ends with src's buf, src sending to each other rank itself: the star
  //   (README: Tasks, 1; the cost model section says why blocking sends in a loop are right here)
  const int p = dist::world_size();
  const int me = dist::rank();
  if (me == src) {
    for (int v = 1; v < p; ++v) dist::send(buf, real_rank(v, src, p));
  } else {
    dist::recv(buf, src);
  }
  // END SOLUTION
}

// =============================================================================================
// broadcast_tree (binomial tree)
//   Picture: the informed ranks double every round. Relabel the ranks so that src is 0 (relative
//   ranks); then a relative rank hears once, from the rank that differs from it in its lowest set
//   bit, and afterwards tells the ranks below that bit, the farthest (largest subtree) first.
//   Rounds: ceil(log2 p); the number of ranks holding the data doubles each round.
//   Bytes: every rank except src receives n once; src sends ceil(log2 p) n.
//   Time: ceil(log2 p)(alpha + n beta).
void broadcast_tree(std::span<float> buf, int src) {
  check_root("broadcast_tree", "src", src);
  // BEGIN SOLUTION: every rank ends with src's buf, spread along a binomial tree rooted at src so
  //   that the number of informed ranks doubles every round (README: Hints, relative ranks and
  //   binomial tree; cost model: farthest child first)
  const int p = dist::world_size();
  const int vr = (dist::rank() - src + p) % p;
  int mask = 1;
  while (mask < p) {  // find the parent: the lowest set bit of vr
    if (vr & mask) {
      dist::recv(buf, real_rank(vr - mask, src, p));
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {  // children below that bit, farthest first
    if (vr + mask < p) dist::send(buf, real_rank(vr + mask, src, p));
  }
  // END SOLUTION
}

// =============================================================================================
// broadcast_ring
//   The ranks form a ring: right = rank+1 mod p, left = rank-1 mod p. src sends the whole buffer
//   to its right neighbour; every other rank receives it from the left and sends it on to the
//   right, except the rank just left of src, where the message stops.
//   Rounds: p-1 hops, one after the other (no pipelining: the buffer travels as one message).
//   Bytes: every rank except src-1 sends n once; every rank except src receives n once.
//   Time: (p-1)(alpha + n beta).
void broadcast_ring(std::span<float> buf, int src) {
  check_root("broadcast_ring", "src", src);
  // BEGIN SOLUTION: every rank ends with src's buf, each rank talking only to its ring neighbours,
  //   starting at src (README: Tasks, 5)
  const int p = dist::world_size();
  const int me = dist::rank();
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  if (me != src) dist::recv(buf, left);
  if (right != src) dist::send(buf, right);
  // END SOLUTION
}

// =============================================================================================
// reduce_naive
//   Every rank except dst sends its buffer to dst. dst receives them one by one (from dst+1,
//   dst+2, ... mod p) into a scratch buffer and reduces each into buf (dist::reduce_into).
//   Avg: dst divides the sum by p at the end.
//   Rounds: p-1 messages into dst's incoming link.
//   Bytes: dst receives (p-1) n; every other rank sends n.
//   Time: (p-1)(alpha + n beta) plus the reductions, (p-1) n gamma, that overlap with later
//   arrivals only when they are faster than the link.
void reduce_naive(std::span<float> buf, int dst, dist::ReduceOp op) {
  check_root("reduce_naive", "dst", dst);
  // BEGIN SOLUTION: dst ends with the element-wise reduction (op) of every rank's buf, every other
  //   rank sending straight to dst; reduce only with dist::reduce_into (README: Rules; Tasks, 2)
  const int p = dist::world_size();
  const int me = dist::rank();
  if (me != dst) {
    dist::send(buf, dst);
    return;
  }
  std::vector<float> scratch(buf.size());
  for (int v = 1; v < p; ++v) {
    dist::recv(scratch, real_rank(v, dst, p));
    dist::reduce_into(buf, scratch, op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);
  // END SOLUTION
}

// =============================================================================================
// reduce_tree (binomial tree, the broadcast tree backwards)
//   Picture: the broadcast tree (relative ranks, dst as 0) run backwards. A rank first collects
//   and reduces its children's partial results, nearest child first, then sends its own
//   partial result to its parent once and is done.
//   Rounds: ceil(log2 p); half of the active ranks drop out each round.
//   Bytes: every rank except dst sends n once; dst receives ceil(log2 p) n.
//   Time: ceil(log2 p)(alpha + n beta + n gamma) when p is a power of two.
void reduce_tree(std::span<float> buf, int dst, dist::ReduceOp op) {
  check_root("reduce_tree", "dst", dst);
  // BEGIN SOLUTION: dst ends with the reduction of every rank's buf, combined up a binomial tree
  //   rooted at dst, the broadcast tree run backwards (README: Hints, binomial tree; cost model:
  //   nearest child first)
  const int p = dist::world_size();
  const int vr = (dist::rank() - dst + p) % p;
  std::vector<float> scratch(buf.size());
  for (int mask = 1; mask < p; mask <<= 1) {
    if (vr & mask) {
      dist::send(buf, real_rank(vr - mask, dst, p));
      return;
    }
    if (vr + mask < p) {
      dist::recv(scratch, real_rank(vr + mask, dst, p));
      dist::reduce_into(buf, scratch, op);
    }
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);  // only dst gets here
  // END SOLUTION
}

// =============================================================================================
// all_reduce_naive (everything through rank 0)
//   Every rank r > 0 sends its buffer to rank 0 and waits for the result; rank 0 receives from
//   1, 2, ..., p-1, reduces each into buf, (Avg: divides by p) and sends the result to 1, ..., p-1.
//   Rounds: 2(p-1) messages through rank 0's links, one after the other.
//   Bytes: rank 0 receives (p-1) n and sends (p-1) n; every other rank sends and receives n.
//   Time: 2(p-1)(alpha + n beta) + (p-1) n gamma (reductions overlap arrivals only if cheaper).
void all_reduce_naive(std::span<float> buf, dist::ReduceOp op) {
  // BEGIN SOLUTION: every rank ends with the reduction of every rank's buf, all of it going through
  //   rank 0: the baseline to beat (README: Tasks, 3)
  const int p = dist::world_size();
  if (dist::rank() != 0) {
    dist::send(buf, 0);
    dist::recv(buf, 0);
    return;
  }
  std::vector<float> scratch(buf.size());
  for (int r = 1; r < p; ++r) {
    dist::recv(scratch, r);
    dist::reduce_into(buf, scratch, op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);
  for (int r = 1; r < p; ++r) dist::send(buf, r);
  // END SOLUTION
}

// =============================================================================================
// all_reduce_butterfly (recursive doubling)
//   Picture: a power-of-two group of ranks does the butterfly; the ranks beyond the largest power
//   of two below p each hand their buffer to a partner inside the group first and get the result
//   back at the end. Inside the group, every round pairs each rank with a partner at a new
//   distance (1, 2, 4, ...); both exchange whole buffers at the same time and reduce, so after
//   round k every rank holds the reduction over a block of 2^(k+1) ranks.
//   (Avg: divide by p once, after the last round.)
//   Rounds: log2 q exchanges (+ 2 messages when p is not a power of two).
//   Bytes: each rank of the butterfly sends and receives n per round.
//   Time: log2(p)(alpha + n beta + n gamma) for p a power of two.
void all_reduce_butterfly(std::span<float> buf, dist::ReduceOp op) {
  // BEGIN SOLUTION: every rank ends with the reduction of every rank's buf by recursive doubling
  //   among a power-of-two group, ranks beyond it folded in before and served after (README: Hints,
  //   butterfly for any p; cost model: exchange steps)
  const int p = dist::world_size();
  const int me = dist::rank();
  const int q = floor_pow2(p);
  const int rest = p - q;
  if (me >= q) {  // folded: contribute, then wait for the result
    dist::send(buf, me - q);
    dist::recv(buf, me - q);
    return;
  }
  std::vector<float> scratch(buf.size());
  if (me < rest) {
    dist::recv(scratch, me + q);
    dist::reduce_into(buf, scratch, op);
  }
  for (int mask = 1; mask < q; mask <<= 1) {
    const int partner = me ^ mask;
    dist::Work sent = dist::isend(buf, partner);
    dist::recv(scratch, partner);
    sent.wait();  // buf must not change before the partner has it
    dist::reduce_into(buf, scratch, op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);
  if (me < rest) dist::send(buf, me + q);
  // END SOLUTION
}

// =============================================================================================
// all_reduce_ring (reduce-scatter + all-gather, in place)
//   Picture: p chunks of buf (shard_range), each rank talking only to its ring neighbours, all
//   links busy in every step. Reduce-scatter half: a partial sum of each chunk travels round
//   the ring, every rank reducing its own copy of that chunk into it on the way; after p-1
//   steps each rank holds one chunk fully reduced, a different one on every rank (Avg: divide
//   that chunk by p). All-gather half: the reduced chunks travel round the ring the same way
//   until every rank has all of them. Which chunk goes where in which step is yours to work
//   out (README: Hints, ring indices).
//   Rounds: 2(p-1) steps; in every step all links work at once.
//   Bytes: each rank sends 2(p-1) chunks of about n/p to its right neighbour only.
//   Time: 2(p-1)(alpha + (n/p) beta) + (p-1)(n/p) gamma.
void all_reduce_ring(std::span<float> buf, dist::ReduceOp op) {
  // BEGIN SOLUTION: every rank ends with the reduction of every rank's buf, in place, as a ring
  //   reduce-scatter followed by a ring all-gather over p chunks of buf (README: Tasks, 11; Hints,
  //   ring all-reduce; cost model: exchange steps)
  const int p = dist::world_size();
  const int me = dist::rank();
  if (p == 1) return;  // the sum, min, ... of one buffer is itself (Avg: divided by 1)
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  auto chunk = [&](int c) { return shard_range(buf.size(), p, ((c % p) + p) % p); };
  std::vector<float> scratch(shard_range(buf.size(), p, 0).size);  // chunk 0 is the largest

  for (int s = 0; s < p - 1; ++s) {  // reduce-scatter
    const Shard out = chunk(me - s);
    const Shard in = chunk(me - s - 1);
    std::span<float> incoming(scratch.data(), in.size);
    dist::Work sent = dist::isend(slice(buf, out), right);
    dist::recv(incoming, left);
    sent.wait();
    dist::reduce_into(slice(buf, in), incoming, op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(slice(buf, chunk(me + 1)), p);

  for (int s = 0; s < p - 1; ++s) {  // all-gather
    const Shard out = chunk(me + 1 - s);
    const Shard in = chunk(me - s);
    dist::Work sent = dist::isend(slice(buf, out), right);
    dist::recv(slice(buf, in), left);
    sent.wait();
  }
  // END SOLUTION
}

// =============================================================================================
// gather_naive
//   Every rank except dst sends its m floats to dst; dst copies its own block to out[dst*m] and
//   receives rank r's block straight into out[r*m, (r+1)*m).
//   Rounds: p-1 messages into dst's incoming link.
//   Bytes: dst receives (p-1) m floats; every other rank sends m floats.
//   Time: (p-1)(alpha + m beta').
void gather_naive(std::span<const float> in, std::span<float> out, int dst) {
  check_root("gather_naive", "dst", dst);
  if (dist::rank() == dst) {
    check_size("gather_naive", "out", out.size(), in.size() * dist::world_size(),
               "world_size x in.size() on dst");
  }
  // BEGIN SOLUTION: dst's out ends with every rank's block in rank order, every other rank sending
  //   straight to dst (README: Tasks, 4: offsets into the output)
  const int p = dist::world_size();
  const int me = dist::rank();
  const std::size_t m = in.size();
  if (me != dst) {
    dist::send(in, dst);
    return;
  }
  std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(dst * m));
  for (int v = 1; v < p; ++v) {
    const int r = real_rank(v, dst, p);
    dist::recv(out.subspan(static_cast<std::size_t>(r) * m, m), r);
  }
  // END SOLUTION
}

// =============================================================================================
// gather_tree (binomial tree)
//   Picture: the broadcast tree (relative ranks, dst as 0) run backwards, with messages that grow:
//   a rank collects its subtree's blocks (its own and those of the ranks below it in the tree)
//   contiguously, in relative order, and sends them to its parent in one message. dst ends with
//   all blocks in relative order and rotates them into rank order in out.
//   Rounds: ceil(log2 p); dst receives ceil(log2 p) messages.
//   Bytes: dst receives (p-1) m floats in total; a rank sends its subtree's blocks once.
//   Time: ceil(log2 p) alpha + (p-1) m beta'.
void gather_tree(std::span<const float> in, std::span<float> out, int dst) {
  check_root("gather_tree", "dst", dst);
  if (dist::rank() == dst) {
    check_size("gather_tree", "out", out.size(), in.size() * dist::world_size(),
               "world_size x in.size() on dst");
  }
  // BEGIN SOLUTION: dst's out ends with every rank's block in rank order, collected up a binomial
  //   tree rooted at dst, each rank forwarding its whole subtree in one message (README: Tasks, 8;
  //   Hints, binomial tree)
  const int p = dist::world_size();
  const int vr = (dist::rank() - dst + p) % p;
  const std::size_t m = in.size();
  std::vector<float> blocks(m * static_cast<std::size_t>(vr == 0 ? p : std::min(vr & -vr, p - vr)));
  std::copy(in.begin(), in.end(), blocks.begin());
  for (int mask = 1; mask < p; mask <<= 1) {
    if (vr & mask) {
      const auto have = static_cast<std::size_t>(std::min(mask, p - vr));
      dist::send(std::span<const float>(blocks.data(), have * m), real_rank(vr - mask, dst, p));
      return;
    }
    if (vr + mask < p) {
      const auto child_blocks = static_cast<std::size_t>(std::min(mask, p - vr - mask));
      dist::recv(
          std::span<float>(blocks.data() + static_cast<std::size_t>(mask) * m, child_blocks * m),
          real_rank(vr + mask, dst, p));
    }
  }
  for (int v = 0; v < p; ++v) {  // only dst gets here: relative block v is rank (v + dst) % p
    const auto from = blocks.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(v) * m);
    std::copy(from, from + static_cast<std::ptrdiff_t>(m),
              out.begin() +
                  static_cast<std::ptrdiff_t>(static_cast<std::size_t>(real_rank(v, dst, p)) * m));
  }
  // END SOLUTION
}

// =============================================================================================
// all_gather_ring
//   Picture: every rank starts with its own block in place in out; in every step each rank sends
//   one block it already has to its right neighbour and receives, straight into out, the block
//   its left neighbour sends at the same time. After p-1 steps every block has reached every rank.
//   Rounds: p-1 steps; all links busy in every step.
//   Bytes: each rank sends and receives (p-1) m floats, only to/from its neighbours.
//   Time: (p-1)(alpha + m beta').
void all_gather_ring(std::span<const float> in, std::span<float> out) {
  check_size("all_gather_ring", "out", out.size(), in.size() * dist::world_size(),
             "world_size x in.size()");
  // BEGIN SOLUTION: every rank's out ends with every rank's block in rank order, blocks passed
  //   around the ring with one exchange step per round (README: Tasks, 9; Hints, ring indices; cost
  //   model: exchange steps)
  const int p = dist::world_size();
  const int me = dist::rank();
  const std::size_t m = in.size();
  auto block = [&](int b) {
    return out.subspan(static_cast<std::size_t>(((b % p) + p) % p) * m, m);
  };
  std::copy(in.begin(), in.end(), block(me).begin());
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  for (int s = 0; s < p - 1; ++s) {
    dist::Work sent = dist::isend(block(me - s), right);
    dist::recv(block(me - s - 1), left);
    sent.wait();
  }
  // END SOLUTION
}

// =============================================================================================
// reduce_scatter_ring
//   Picture: chunk c of in is this rank's contribution to rank c's result. A running partial
//   result of each chunk travels round the ring, each rank reducing its own contribution to it
//   on the way, so that the chunk arriving at its owner in the last step needs only the owner's
//   contribution (Avg: divide by p). At step 0 a rank sends its own input chunk.
//   Rounds: p-1 steps.
//   Bytes: each rank sends (p-1) m floats to its right neighbour only.
//   Time: (p-1)(alpha + m beta' + m gamma').
void reduce_scatter_ring(std::span<const float> in, std::span<float> out, dist::ReduceOp op) {
  check_size("reduce_scatter_ring", "in", in.size(), out.size() * dist::world_size(),
             "world_size x out.size()");
  // BEGIN SOLUTION: out ends with this rank's block of the reduction of every rank's in, partial
  //   sums passed around the ring and reduced on the way (README: Tasks, 10; cost model: exchange
  //   steps)
  const int p = dist::world_size();
  const int me = dist::rank();
  const std::size_t m = out.size();
  auto input = [&](int c) {
    return in.subspan(static_cast<std::size_t>(((c % p) + p) % p) * m, m);
  };
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  std::vector<float> outgoing(input(me - 1).begin(), input(me - 1).end());
  std::vector<float> incoming(m);
  for (int s = 0; s < p - 1; ++s) {
    dist::Work sent = dist::isend(outgoing, right);
    dist::recv(incoming, left);
    sent.wait();
    dist::reduce_into(incoming, input(me - s - 2), op);
    std::swap(outgoing, incoming);
  }
  if (op == dist::ReduceOp::Avg) divide_by(outgoing, p);
  std::copy(outgoing.begin(), outgoing.end(), out.begin());
  // END SOLUTION
}

}  // namespace collectives
