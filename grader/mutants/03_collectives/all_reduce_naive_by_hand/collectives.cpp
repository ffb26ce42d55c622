// MUTANT all_reduce_naive_by_hand: allreduce_naive: rank 0 combines the received buffers in its own loop instead of dist::reduce_into: right values, but no reduction time charged.
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
    throw dist::Error("rank " + std::to_string(dist::rank()) + ": " + fn + ": " + buffer +
                      " has " + std::to_string(got) + " elements but must have " +
                      std::to_string(want) + " (" + rule + ")");
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
  // BEGIN SOLUTION: if this rank is src, send buf to every other rank (dist::send); otherwise receive it from src (dist::recv)
  const int p = dist::world_size();
  const int me = dist::rank();
  if (me == src) {
    for (int v = 1; v < p; ++v) dist::send(std::span<const float>(buf), real_rank(v, src, p));
  } else {
    dist::recv(buf, src);
  }
  // END SOLUTION
}

// =============================================================================================
// broadcast_tree (binomial tree)
//   With vr the rank relative to src, vr receives from its parent vr - lowbit(vr), where
//   lowbit(vr) is vr's lowest set bit; then it sends to its children vr + m for every power of
//   two m < lowbit(vr) (src: every m < p), largest first, while vr + m < p.
//   Rounds: ceil(log2 p); the number of ranks holding the data doubles each round.
//   Bytes: every rank except src receives n once; src sends ceil(log2 p) n.
//   Time: ceil(log2 p)(alpha + n beta).
void broadcast_tree(std::span<float> buf, int src) {
  check_root("broadcast_tree", "src", src);
  // BEGIN SOLUTION: binomial tree on ranks relative to src: receive once from your parent, then send to your children (relative rank + 2^k), largest 2^k first
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
    if (vr + mask < p) dist::send(std::span<const float>(buf), real_rank(vr + mask, src, p));
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
  // BEGIN SOLUTION: pass buf around the ring: receive it from the left neighbour (unless you are src), then send it to the right neighbour (unless that is src)
  const int p = dist::world_size();
  const int me = dist::rank();
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  if (me != src) dist::recv(buf, left);
  if (right != src) dist::send(std::span<const float>(buf), right);
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
  // BEGIN SOLUTION: non-dst ranks send buf to dst; dst receives each other rank's buffer into a scratch vector and reduces it into buf with dist::reduce_into (Avg: divide by p at the end)
  const int p = dist::world_size();
  const int me = dist::rank();
  if (me != dst) {
    dist::send(std::span<const float>(buf), dst);
    return;
  }
  std::vector<float> scratch(buf.size());
  for (int v = 1; v < p; ++v) {
    dist::recv(std::span<float>(scratch), real_rank(v, dst, p));
    dist::reduce_into(buf, std::span<const float>(scratch), op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);
  // END SOLUTION
}

// =============================================================================================
// reduce_tree (binomial tree, the broadcast tree backwards)
//   With vr the rank relative to dst: for m = 1, 2, 4, ...: if vr has bit m set, send the partial
//   result to vr - m and stop; otherwise receive from vr + m (if vr + m < p) and reduce it in.
//   Rounds: ceil(log2 p); half of the active ranks drop out each round.
//   Bytes: every rank except dst sends n once; dst receives ceil(log2 p) n.
//   Time: ceil(log2 p)(alpha + n beta + n gamma) when p is a power of two.
void reduce_tree(std::span<float> buf, int dst, dist::ReduceOp op) {
  check_root("reduce_tree", "dst", dst);
  // BEGIN SOLUTION: binomial tree on ranks relative to dst: for 2^k = 1, 2, 4...: if your relative rank has bit k set, send buf to relative rank - 2^k and stop; else receive from relative rank + 2^k (if it exists) and reduce_into buf
  const int p = dist::world_size();
  const int vr = (dist::rank() - dst + p) % p;
  std::vector<float> scratch(buf.size());
  for (int mask = 1; mask < p; mask <<= 1) {
    if (vr & mask) {
      dist::send(std::span<const float>(buf), real_rank(vr - mask, dst, p));
      return;
    }
    if (vr + mask < p) {
      dist::recv(std::span<float>(scratch), real_rank(vr + mask, dst, p));
      dist::reduce_into(buf, std::span<const float>(scratch), op);
    }
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);  // only dst gets here
  // END SOLUTION
}

// =============================================================================================
// allreduce_naive (everything through rank 0)
//   Every rank r > 0 sends its buffer to rank 0 and waits for the result; rank 0 receives from
//   1, 2, ..., p-1, reduces each into buf, (Avg: divides by p) and sends the result to 1, ..., p-1.
//   Rounds: 2(p-1) messages through rank 0's links, one after the other.
//   Bytes: rank 0 receives (p-1) n and sends (p-1) n; every other rank sends and receives n.
//   Time: 2(p-1)(alpha + n beta) + (p-1) n gamma (reductions overlap arrivals only if cheaper).
void allreduce_naive(std::span<float> buf, dist::ReduceOp op) {
  // BEGIN SOLUTION: ranks > 0 send buf to rank 0 and receive the result back; rank 0 receives and reduces every buffer (reduce_into; Avg: divide by p), then sends the result to every rank
  const int p = dist::world_size();
  if (dist::rank() != 0) {
    dist::send(std::span<const float>(buf), 0);
    dist::recv(buf, 0);
    return;
  }
  std::vector<float> scratch(buf.size());
  for (int r = 1; r < p; ++r) {
    dist::recv(std::span<float>(scratch), r);
    for (std::size_t i = 0; i < buf.size(); ++i) {  // reduced by hand: no reduction cost charged
      switch (op) {
        case dist::ReduceOp::Product: buf[i] *= scratch[i]; break;
        case dist::ReduceOp::Min: buf[i] = std::min(buf[i], scratch[i]); break;
        case dist::ReduceOp::Max: buf[i] = std::max(buf[i], scratch[i]); break;
        default: buf[i] += scratch[i]; break;
      }
    }
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);
  for (int r = 1; r < p; ++r) dist::send(std::span<const float>(buf), r);
  // END SOLUTION
}

// =============================================================================================
// allreduce_butterfly (recursive doubling)
//   Let q = floor_pow2(p) and rest = p - q.
//   1. Fold in: rank r >= q sends its buffer to r - q and waits for step 3; rank r < rest
//      receives it and reduces it in.
//   2. Butterfly among ranks 0..q-1: for m = 1, 2, ..., q/2: exchange the whole buffer with
//      partner r XOR m (isend + recv at the same time, then wait) and reduce the partner's copy in.
//      (Avg: divide by p after the last round.)
//   3. Fold out: rank r < rest sends the result to r + q.
//   Rounds: log2 q exchanges (+ 2 messages when p is not a power of two).
//   Bytes: each rank of the butterfly sends and receives n per round.
//   Time: log2(p)(alpha + n beta + n gamma) for p a power of two.
void allreduce_butterfly(std::span<float> buf, dist::ReduceOp op) {
  // BEGIN SOLUTION: fold ranks >= q = floor_pow2(p) into rank - q; among the first q ranks, for m = 1, 2, 4...: exchange buf with rank XOR m (isend + recv + wait) and reduce_into; Avg: divide by p; send the result back to the folded ranks
  const int p = dist::world_size();
  const int me = dist::rank();
  const int q = floor_pow2(p);
  const int rest = p - q;
  if (me >= q) {  // folded: contribute, then wait for the result
    dist::send(std::span<const float>(buf), me - q);
    dist::recv(buf, me - q);
    return;
  }
  std::vector<float> scratch(buf.size());
  if (me < rest) {
    dist::recv(std::span<float>(scratch), me + q);
    dist::reduce_into(buf, std::span<const float>(scratch), op);
  }
  for (int mask = 1; mask < q; mask <<= 1) {
    const int partner = me ^ mask;
    dist::Work sent = dist::isend(std::span<const float>(buf), partner);
    dist::recv(std::span<float>(scratch), partner);
    sent.wait();  // buf must not change before the partner has it
    dist::reduce_into(buf, std::span<const float>(scratch), op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(buf, p);
  if (me < rest) dist::send(std::span<const float>(buf), me + q);
  // END SOLUTION
}

// =============================================================================================
// allreduce_ring (reduce-scatter + all-gather, in place)
//   Cut buf into p chunks with shard_range. right = rank+1, left = rank-1 (mod p).
//   Reduce-scatter, steps s = 0..p-2: send chunk (rank - s) to the right, receive chunk
//   (rank - s - 1) from the left into a scratch buffer (both at once: isend, recv, wait) and
//   reduce it into that chunk of buf. After the last step rank r holds chunk r+1 fully reduced
//   (Avg: divide that chunk by p).
//   All-gather, steps s = 0..p-2: send chunk (rank + 1 - s) to the right, receive chunk (rank - s)
//   from the left straight into buf.
//   Rounds: 2(p-1) steps; in every step all links work at once.
//   Bytes: each rank sends 2(p-1) chunks of about n/p to its right neighbour only.
//   Time: 2(p-1)(alpha + (n/p) beta) + (p-1)(n/p) gamma.
void allreduce_ring(std::span<float> buf, dist::ReduceOp op) {
  // BEGIN SOLUTION: cut buf into p chunks (shard_range); reduce-scatter: p-1 steps of isend one chunk right, recv another from the left, reduce_into; then all-gather: p-1 steps passing the reduced chunks around the ring
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
    dist::Work sent = dist::isend(std::span<const float>(slice(buf, out)), right);
    dist::recv(incoming, left);
    sent.wait();
    dist::reduce_into(slice(buf, in), std::span<const float>(incoming), op);
  }
  if (op == dist::ReduceOp::Avg) divide_by(slice(buf, chunk(me + 1)), p);

  for (int s = 0; s < p - 1; ++s) {  // all-gather
    const Shard out = chunk(me + 1 - s);
    const Shard in = chunk(me - s);
    dist::Work sent = dist::isend(std::span<const float>(slice(buf, out)), right);
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
  // BEGIN SOLUTION: non-dst ranks send in to dst; dst copies its own in to out[dst*m..] and receives rank r's block into out[r*m..(r+1)*m)
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
//   With vr the rank relative to dst, vr's subtree is the relative ranks [vr, vr + lowbit(vr))
//   (cut at p). Each rank keeps its subtree's blocks in relative order in a scratch buffer: its own
//   block first; for m = 1, 2, 4, ...: if vr has bit m set, send the blocks gathered so far
//   (min(m, p - vr) blocks) to vr - m and stop; otherwise receive min(m, p - vr - m) blocks from
//   vr + m (if it exists) right after the ones it has. dst finally rotates the relative order
//   into out (relative block v belongs to rank (v + dst) % p).
//   Rounds: ceil(log2 p); dst receives ceil(log2 p) messages.
//   Bytes: dst receives (p-1) m floats in total; a rank sends its subtree's blocks once.
//   Time: ceil(log2 p) alpha + (p-1) m beta'.
void gather_tree(std::span<const float> in, std::span<float> out, int dst) {
  check_root("gather_tree", "dst", dst);
  if (dist::rank() == dst) {
    check_size("gather_tree", "out", out.size(), in.size() * dist::world_size(),
               "world_size x in.size() on dst");
  }
  // BEGIN SOLUTION: binomial tree on ranks relative to dst: collect your subtree's blocks (your own first, then each child's, in relative order) in a scratch buffer, send them to your parent in one message; dst rotates them into out
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
      dist::recv(std::span<float>(blocks.data() + static_cast<std::size_t>(mask) * m,
                                  child_blocks * m),
                 real_rank(vr + mask, dst, p));
    }
  }
  for (int v = 0; v < p; ++v) {  // only dst gets here: relative block v is rank (v + dst) % p
    const auto from = blocks.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(v) * m);
    std::copy(from, from + static_cast<std::ptrdiff_t>(m),
              out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(real_rank(v, dst, p)) * m));
  }
  // END SOLUTION
}

// =============================================================================================
// all_gather_ring
//   Copy in to out[rank*m]. Steps s = 0..p-2: send block (rank - s) to the right and receive
//   block (rank - s - 1) from the left straight into out (isend, recv, wait).
//   Rounds: p-1 steps; all links busy in every step.
//   Bytes: each rank sends and receives (p-1) m floats, only to/from its neighbours.
//   Time: (p-1)(alpha + m beta').
void all_gather_ring(std::span<const float> in, std::span<float> out) {
  check_size("all_gather_ring", "out", out.size(), in.size() * dist::world_size(),
             "world_size x in.size()");
  // BEGIN SOLUTION: copy in to out[rank*m..]; then p-1 steps: isend block (rank - s) to the right, recv block (rank - s - 1) from the left into out, wait
  const int p = dist::world_size();
  const int me = dist::rank();
  const std::size_t m = in.size();
  auto block = [&](int b) { return out.subspan(static_cast<std::size_t>(((b % p) + p) % p) * m, m); };
  std::copy(in.begin(), in.end(), block(me).begin());
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  for (int s = 0; s < p - 1; ++s) {
    dist::Work sent = dist::isend(std::span<const float>(block(me - s)), right);
    dist::recv(block(me - s - 1), left);
    sent.wait();
  }
  // END SOLUTION
}

// =============================================================================================
// reduce_scatter_ring
//   Chunk c of in is in[c*m, (c+1)*m). Step s = 0..p-2: send the running partial result of chunk
//   (rank - s - 1) to the right (at s = 0 that is just this rank's own input chunk), receive the
//   partial result of chunk (rank - s - 2) from the left and reduce this rank's input chunk into
//   it. After p-1 steps the partial result in hand is chunk rank, reduced over all ranks
//   (Avg: divide by p).
//   Rounds: p-1 steps.
//   Bytes: each rank sends (p-1) m floats to its right neighbour only.
//   Time: (p-1)(alpha + m beta' + m gamma').
void reduce_scatter_ring(std::span<const float> in, std::span<float> out, dist::ReduceOp op) {
  check_size("reduce_scatter_ring", "in", in.size(), out.size() * dist::world_size(),
             "world_size x out.size()");
  // BEGIN SOLUTION: p-1 ring steps: isend your partial chunk right, recv the next partial chunk from the left, reduce_into it your own input chunk; the last one is yours (Avg: divide by p)
  const int p = dist::world_size();
  const int me = dist::rank();
  const std::size_t m = out.size();
  auto input = [&](int c) { return in.subspan(static_cast<std::size_t>(((c % p) + p) % p) * m, m); };
  const int right = (me + 1) % p;
  const int left = (me - 1 + p) % p;
  std::vector<float> outgoing(input(me - 1).begin(), input(me - 1).end());
  std::vector<float> incoming(m);
  for (int s = 0; s < p - 1; ++s) {
    dist::Work sent = dist::isend(std::span<const float>(outgoing), right);
    dist::recv(std::span<float>(incoming), left);
    sent.wait();
    dist::reduce_into(std::span<float>(incoming), input(me - s - 2), op);
    std::swap(outgoing, incoming);
  }
  if (op == dist::ReduceOp::Avg) divide_by(std::span<float>(outgoing), p);
  std::copy(outgoing.begin(), outgoing.end(), out.begin());
  // END SOLUTION
}

}  // namespace collectives
