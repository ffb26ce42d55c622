// MUTANT col_blocks_unpadded: pack_col_blocks packs each shard's columns back to back with no padding to max_shard(cols, parts) (the chunks are not equal).
// 04_matmul: the four partitions of C = A B. Read matmul.hpp first: it fixes the communication
// plan of every strategy (which built-in collectives, in which order, with which counts).
#include "matmul.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "dist/dist.hpp"
#include "dist/eigen.hpp"
#include "distlab/todo.hpp"

namespace matmul {

// BEGIN SOLUTION DECL: helpers you want (e.g. a check of the buffer size for the unpack functions)
namespace {

std::string shape_str(Index rows, Index cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}

void check_buffer(const char* fn, std::size_t got, Index want) {
  if (got != static_cast<std::size_t>(want)) {
    throw std::invalid_argument(std::string(fn) + ": buffer has " + std::to_string(got) +
                                " floats but the layout needs " + std::to_string(want));
  }
}

// Views the chunk of a received buffer as a column-major rows x cols matrix.
Eigen::Map<const Eigen::MatrixXf> view(std::span<const float> buf, Index offset, Index rows,
                                       Index cols) {
  return Eigen::Map<const Eigen::MatrixXf>(buf.data() + offset, rows, cols);
}

}  // namespace
// END SOLUTION

Shape share_shape(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Shape shape;
  // BEGIN SOLUTION: rank 0 broadcasts {A.rows(), A.cols(), B.rows(), B.cols()} as 4 int64; check A.cols() == B.rows() on every rank
  std::vector<std::int64_t> dims(4, 0);
  if (dist::rank() == 0) {
    dims = {A.rows(), A.cols(), B.rows(), B.cols()};
  }
  dist::broadcast(std::span<std::int64_t>(dims), 0);
  if (dims[1] != dims[2]) {
    throw std::invalid_argument("matmul: A is " + shape_str(dims[0], dims[1]) + " but B is " +
                                shape_str(dims[2], dims[3]) +
                                ": A.cols() must equal B.rows() for C = A B");
  }
  shape = Shape{dims[0], dims[1], dims[3]};
  // END SOLUTION
  return shape;
}

std::vector<float> pack_row_blocks(const Eigen::MatrixXf& M, int parts) {
  std::vector<float> buf;
  // BEGIN SOLUTION: copy the rows of each shard into its own max_shard(rows) x cols chunk (zero padded)
  const Index rows_max = max_shard(M.rows(), parts);
  const Index chunk = rows_max * M.cols();
  buf.assign(static_cast<std::size_t>(parts * chunk), 0.0f);
  for (int b = 0; b < parts; ++b) {
    const Range r = shard_range(M.rows(), parts, b);
    Eigen::Map<Eigen::MatrixXf> dst(buf.data() + b * chunk, rows_max, M.cols());
    dst.topRows(r.size) = M.middleRows(r.begin, r.size);
  }
  // END SOLUTION
  return buf;
}

Eigen::MatrixXf unpack_row_blocks(std::span<const float> buf, Index rows, Index cols, int parts) {
  Eigen::MatrixXf M;
  // BEGIN SOLUTION: check buf's size, then copy each chunk's first shard_range(...).size rows back
  const Index rows_max = max_shard(rows, parts);
  const Index chunk = rows_max * cols;
  check_buffer("unpack_row_blocks", buf.size(), parts * chunk);
  M.resize(rows, cols);
  for (int b = 0; b < parts; ++b) {
    const Range r = shard_range(rows, parts, b);
    M.middleRows(r.begin, r.size) = view(buf, b * chunk, rows_max, cols).topRows(r.size);
  }
  // END SOLUTION
  return M;
}

std::vector<float> pack_col_blocks(const Eigen::MatrixXf& M, int parts) {
  std::vector<float> buf;
  // BEGIN SOLUTION: copy each shard's columns (contiguous in column-major) into a rows x max_shard(cols) chunk (zero padded)
  const Index cols_max = max_shard(M.cols(), parts);
  const Index chunk = M.rows() * cols_max;
  buf.assign(static_cast<std::size_t>(parts * chunk), 0.0f);
  std::copy(M.data(), M.data() + M.size(), buf.begin());
  // END SOLUTION
  return buf;
}

Eigen::MatrixXf unpack_col_blocks(std::span<const float> buf, Index rows, Index cols, int parts) {
  Eigen::MatrixXf M;
  // BEGIN SOLUTION: check buf's size, then copy each chunk's first shard_range(...).size columns back
  const Index cols_max = max_shard(cols, parts);
  const Index chunk = rows * cols_max;
  check_buffer("unpack_col_blocks", buf.size(), parts * chunk);
  M.resize(rows, cols);
  for (int b = 0; b < parts; ++b) {
    const Range c = shard_range(cols, parts, b);
    M.middleCols(c.begin, c.size) = view(buf, b * chunk, rows, cols_max).leftCols(c.size);
  }
  // END SOLUTION
  return M;
}

Eigen::MatrixXf matmul_by_rows(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  // BEGIN SOLUTION: share_shape; scatter A's packed row blocks; broadcast B; multiply your rows; gather C's row blocks and unpack on rank 0
  const int p = dist::world_size();
  const int me = dist::rank();
  const Shape s = share_shape(A, B);
  const Index rows_max = max_shard(s.m, p);
  const Range mine = shard_range(s.m, p, me);

  std::vector<float> a_blocks;  // only rank 0 packs
  if (me == 0) a_blocks = pack_row_blocks(A, p);
  Eigen::MatrixXf a_local(rows_max, s.k);
  dist::scatter(std::span<const float>(a_blocks), dist::as_span(a_local), 0);

  Eigen::MatrixXf b_full(s.k, s.n);
  if (me == 0) b_full = B;
  dist::broadcast(dist::as_span(b_full), 0);

  Eigen::MatrixXf c_local = Eigen::MatrixXf::Zero(rows_max, s.n);
  c_local.topRows(mine.size).noalias() = a_local.topRows(mine.size) * b_full;

  std::vector<float> c_blocks(me == 0 ? static_cast<std::size_t>(p * rows_max * s.n) : 0);
  dist::gather(dist::as_span(std::as_const(c_local)), std::span<float>(c_blocks), 0);
  if (me == 0) C = unpack_row_blocks(c_blocks, s.m, s.n, p);
  // END SOLUTION
  return C;
}

Eigen::MatrixXf matmul_by_cols(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  // BEGIN SOLUTION: share_shape; broadcast A; scatter B's column blocks; multiply; gather C's column blocks and unpack on rank 0
  const int p = dist::world_size();
  const int me = dist::rank();
  const Shape s = share_shape(A, B);
  const Index cols_max = max_shard(s.n, p);
  const Range mine = shard_range(s.n, p, me);

  Eigen::MatrixXf a_full(s.m, s.k);
  if (me == 0) a_full = A;
  dist::broadcast(dist::as_span(a_full), 0);

  std::vector<float> b_blocks;
  if (me == 0) b_blocks = pack_col_blocks(B, p);
  Eigen::MatrixXf b_local(s.k, cols_max);
  dist::scatter(std::span<const float>(b_blocks), dist::as_span(b_local), 0);

  Eigen::MatrixXf c_local = Eigen::MatrixXf::Zero(s.m, cols_max);
  c_local.leftCols(mine.size).noalias() = a_full * b_local.leftCols(mine.size);

  std::vector<float> c_blocks(me == 0 ? static_cast<std::size_t>(p * s.m * cols_max) : 0);
  dist::gather(dist::as_span(std::as_const(c_local)), std::span<float>(c_blocks), 0);
  if (me == 0) C = unpack_col_blocks(c_blocks, s.m, s.n, p);
  // END SOLUTION
  return C;
}

Eigen::MatrixXf matmul_by_reduction(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  // BEGIN SOLUTION: share_shape; scatter A's column blocks and B's row blocks; multiply into a full m x n partial product; reduce (Sum) it to rank 0
  const int p = dist::world_size();
  const int me = dist::rank();
  const Shape s = share_shape(A, B);
  const Index k_max = max_shard(s.k, p);
  const Range mine = shard_range(s.k, p, me);

  std::vector<float> a_blocks, b_blocks;
  if (me == 0) {
    a_blocks = pack_col_blocks(A, p);
    b_blocks = pack_row_blocks(B, p);
  }
  Eigen::MatrixXf a_local(s.m, k_max);
  dist::scatter(std::span<const float>(a_blocks), dist::as_span(a_local), 0);
  Eigen::MatrixXf b_local(k_max, s.n);
  dist::scatter(std::span<const float>(b_blocks), dist::as_span(b_local), 0);

  Eigen::MatrixXf partial(s.m, s.n);
  partial.noalias() = a_local.leftCols(mine.size) * b_local.topRows(mine.size);
  dist::reduce(dist::as_span(partial), 0, dist::ReduceOp::Sum);
  if (me == 0) C = std::move(partial);
  // END SOLUTION
  return C;
}

Eigen::MatrixXf matmul_2d_blocks(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  // BEGIN SOLUTION: check p = q*q (else std::invalid_argument naming p); share_shape; scatter [A_i | B_j] to each grid cell; multiply; gather the C_ij blocks and place them on rank 0
  const int p = dist::world_size();
  const int me = dist::rank();
  const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(p))));
  if (q * q != p) {
    throw std::invalid_argument("matmul_2d_blocks needs a square number of ranks (1, 4, 9, 16 ...) "
                                "for its q x q grid, but p = " + std::to_string(p) +
                                "; run it with --world-size 4 or 9, or use another strategy");
  }
  const Shape s = share_shape(A, B);
  const Index rows_max = max_shard(s.m, q);
  const Index cols_max = max_shard(s.n, q);
  const Index a_chunk = rows_max * s.k;
  const Index chunk = a_chunk + s.k * cols_max;

  std::vector<float> blocks;
  if (me == 0) {
    const std::vector<float> a_rows = pack_row_blocks(A, q);  // q chunks of rows_max x k
    const std::vector<float> b_cols = pack_col_blocks(B, q);  // q chunks of k x cols_max
    blocks.resize(static_cast<std::size_t>(p * chunk));
    for (int r = 0; r < p; ++r) {
      const int i = r / q, j = r % q;
      auto out = blocks.begin() + r * chunk;
      out = std::copy_n(a_rows.begin() + i * a_chunk, a_chunk, out);
      std::copy_n(b_cols.begin() + j * (chunk - a_chunk), chunk - a_chunk, out);
    }
  }
  std::vector<float> local(static_cast<std::size_t>(chunk));
  dist::scatter(std::span<const float>(blocks), std::span<float>(local), 0);

  const Range ri = shard_range(s.m, q, me / q);
  const Range cj = shard_range(s.n, q, me % q);
  const auto a_i = view(local, 0, rows_max, s.k).topRows(ri.size);
  const auto b_j = view(local, a_chunk, s.k, cols_max).leftCols(cj.size);
  Eigen::MatrixXf c_local = Eigen::MatrixXf::Zero(rows_max, cols_max);
  c_local.topLeftCorner(ri.size, cj.size).noalias() = a_i * b_j;

  const Index c_chunk = rows_max * cols_max;
  std::vector<float> c_blocks(me == 0 ? static_cast<std::size_t>(p * c_chunk) : 0);
  dist::gather(dist::as_span(std::as_const(c_local)), std::span<float>(c_blocks), 0);
  if (me == 0) {
    C.resize(s.m, s.n);
    for (int r = 0; r < p; ++r) {
      const Range bi = shard_range(s.m, q, r / q);
      const Range bj = shard_range(s.n, q, r % q);
      C.block(bi.begin, bj.begin, bi.size, bj.size) =
          view(c_blocks, r * c_chunk, rows_max, cols_max).topLeftCorner(bi.size, bj.size);
    }
  }
  // END SOLUTION
  return C;
}

}  // namespace matmul
