// 04_matmul: partitioning the product C = A B across ranks.
//
// A is m x k, B is k x n, C is m x n, all Eigen::MatrixXf (float, COLUMN-MAJOR). A and B live on
// rank 0 only: the other ranks pass empty matrices, so the shapes must be communicated too.
// Every strategy returns C on rank 0 and an empty matrix on the other ranks.
//
// The four strategies split a different dimension of the product:
//
//   by rows         C_r  = A_r B          rank r owns rows r of A and of C   (data parallelism:
//                                                                            a batch split by rows)
//   by columns      C_:j = A B_:j         rank j owns columns j of B and C   (tensor parallelism:
//                                                                            a layer split by outputs)
//   by reduction    C    = sum_r A_:r B_r rank r owns columns r of A, rows r (the backward pass:
//                                         of B; the partial products are     gradients summed over
//                                         summed                             a split batch)
//   2-D blocks      C_ij = A_i B_j        rank (i, j) of a q x q grid owns block (i, j) of C
//
// THE COMMUNICATION PLAN IS PART OF THE SPECIFICATION: each strategy below lists the built-in
// collectives it calls, in order, with their element counts. The tests compare each rank's
// traffic counters (dist::stats()) and simulated clock (dist::sim_time()) with a run of exactly
// that plan, so computing everything on rank 0, or broadcasting everything everywhere, fails.
// Local products are NOT charged to the simulated clock (no sim_compute): simulated time is
// communication only; the program run_04_matmul measures the compute in wall time.
//
// Uneven splits: dimension d split over P parts gives shard_range(d, P, i) (the first d % P parts
// get one extra). The built-in scatter and gather move EQUAL chunks, so every chunk is padded to
// the largest shard, max_shard(d, P) = ceil(d / P), with zeros (MPI's scatterv/gatherv would avoid
// the padding; dist keeps to the NCCL-style equal-count collectives).
//
// Packing: Eigen stores a matrix column by column, so a block of COLUMNS is one contiguous run of
// memory, but a block of ROWS is not (its elements are spread over every column). A row block has
// to be copied (packed) into a buffer before it can be sent, and copied back (unpacked) after.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace matmul {

using Index = Eigen::Index;

/// A half-open range [begin, begin + size) of rows or columns.
struct Range {
  Index begin = 0;
  Index size = 0;
  Index end() const { return begin + size; }
};

/// Part `index` of `parts` near-equal parts of [0, n): sizes differ by at most one, the first
/// n % parts parts are the larger ones. The one place all shard arithmetic of this module lives.
inline Range shard_range(Index n, int parts, int index) {
  if (n < 0 || parts < 1 || index < 0 || index >= parts) {
    throw std::invalid_argument(
        "shard_range(n=" + std::to_string(n) + ", parts=" + std::to_string(parts) +
        ", index=" + std::to_string(index) + "): need n >= 0, parts >= 1 and 0 <= index < parts");
  }
  const Index base = n / parts;
  const Index extra = n % parts;
  const Index i = index;
  return Range{i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

/// The largest part of shard_range(n, parts, .): ceil(n / parts). Every chunk of a padded
/// scatter or gather has this many rows (or columns).
inline Index max_shard(Index n, int parts) {
  if (parts < 1) throw std::invalid_argument("max_shard: parts must be >= 1");
  return (n + parts - 1) / parts;
}

/// The shapes of a product C = A B: A is m x k, B is k x n.
struct Shape {
  Index m = 0;
  Index k = 0;
  Index n = 0;
};

// ---------------------------------------------------------------------------------------------
// Task 1 (easy): the shapes.

/// Called by every rank; A and B are meaningful on rank 0 only. Rank 0 broadcasts the four
/// numbers {A.rows(), A.cols(), B.rows(), B.cols()} as ONE dist::broadcast of 4 std::int64_t;
/// every rank then checks A.cols() == B.rows() (else throws std::invalid_argument on every rank,
/// so no rank is left waiting, naming both shapes as ROWSxCOLS, e.g. "A is 4x3 but B is 5x2")
/// and returns {m, k, n}.
/// Every strategy below starts with this call.
Shape share_shape(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B);

// ---------------------------------------------------------------------------------------------
// Task 2 (easy, important): packing blocks for an equal-chunk scatter / gather.
//
// Buffer layout, for a matrix M of `rows` x `cols` split into `parts`:
//   row blocks:    parts chunks of max_shard(rows, parts) x cols floats; chunk b holds rows
//                  shard_range(rows, parts, b) of M as a column-major matrix with
//                  max_shard(rows, parts) rows, the rows past the shard's size zero.
//   column blocks: parts chunks of rows x max_shard(cols, parts) floats; chunk b holds columns
//                  shard_range(cols, parts, b), column-major, the columns past the shard zero.

/// M's row blocks in the layout above (parts * max_shard(rows, parts) * cols floats).
std::vector<float> pack_row_blocks(const Eigen::MatrixXf& M, int parts);
/// Inverse of pack_row_blocks: a rows x cols matrix from a buffer in that layout (padding ignored).
/// Throws std::invalid_argument when buf has the wrong size.
Eigen::MatrixXf unpack_row_blocks(std::span<const float> buf, Index rows, Index cols, int parts);
/// M's column blocks in the layout above (parts * rows * max_shard(cols, parts) floats).
std::vector<float> pack_col_blocks(const Eigen::MatrixXf& M, int parts);
/// Inverse of pack_col_blocks. Throws std::invalid_argument when buf has the wrong size.
Eigen::MatrixXf unpack_col_blocks(std::span<const float> buf, Index rows, Index cols, int parts);

// ---------------------------------------------------------------------------------------------
// Task 3: the four strategies. p = world_size, r = rank. All collectives are rooted at rank 0.
// Element counts below are per rank (the `out` of scatter, the `in` of gather).

/// Row partition. Plan:
///   1. share_shape                                   (broadcast, 4 int64)
///   2. scatter the row blocks of A                   (max_shard(m, p) * k floats)
///   3. broadcast B                                   (k * n floats)
///   4. C_r = A_r B on this rank's rows; gather the row blocks of C (max_shard(m, p) * n floats)
///      and unpack them on rank 0.
Eigen::MatrixXf matmul_by_rows(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B);

/// Column partition. Plan:
///   1. share_shape                                   (broadcast, 4 int64)
///   2. broadcast A                                   (m * k floats)
///   3. scatter the column blocks of B                (k * max_shard(n, p) floats)
///   4. C_:j = A B_:j; gather the column blocks of C  (m * max_shard(n, p) floats), unpack on 0.
Eigen::MatrixXf matmul_by_cols(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B);

/// Reduction-dimension partition. Plan:
///   1. share_shape                                   (broadcast, 4 int64)
///   2. scatter the column blocks of A                (m * max_shard(k, p) floats)
///   3. scatter the row blocks of B                   (max_shard(k, p) * n floats)
///   4. P_r = A_:r B_r (m x n) on every rank; dist::reduce(P, 0, Sum)  (m * n floats); rank 0's P is C.
Eigen::MatrixXf matmul_by_reduction(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B);

/// 2-D blocks on a q x q grid, p = q * q (p = 1, 4, 9, 16 ...). Rank r is grid cell (i, j) =
/// (r / q, r % q) and computes C_ij = A_i B_j, with A_i = rows shard_range(m, q, i) of A and
/// B_j = columns shard_range(n, q, j) of B. Plan:
///   0. if p is not a perfect square: throw std::invalid_argument naming p, on every rank, before
///      any communication;
///   1. share_shape                                   (broadcast, 4 int64)
///   2. scatter one chunk per rank: A_i padded to max_shard(m, q) x k, followed by B_j padded to
///      k x max_shard(n, q)                           (max_shard(m, q) * k + k * max_shard(n, q) floats)
///   3. gather the blocks C_ij, each padded to max_shard(m, q) x max_shard(n, q) (column-major),
///      and place them on rank 0.
Eigen::MatrixXf matmul_2d_blocks(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B);

}  // namespace matmul
