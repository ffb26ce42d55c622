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

// TODO: helpers you want (e.g. a check of the buffer size for the unpack functions)

Shape share_shape(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Shape shape;
  DISTLAB_TODO("rank 0 broadcasts {A.rows(), A.cols(), B.rows(), B.cols()} as 4 int64; check "
               "A.cols() == B.rows() on every rank");
  return shape;
}

std::vector<float> pack_row_blocks(const Eigen::MatrixXf& M, int parts) {
  std::vector<float> buf;
  DISTLAB_TODO("copy the rows of each shard into its own max_shard(rows) x cols chunk (zero "
               "padded)");
  return buf;
}

Eigen::MatrixXf unpack_row_blocks(std::span<const float> buf, Index rows, Index cols, int parts) {
  Eigen::MatrixXf M;
  DISTLAB_TODO("check buf's size, then copy each chunk's first shard_range(...).size rows back");
  return M;
}

std::vector<float> pack_col_blocks(const Eigen::MatrixXf& M, int parts) {
  std::vector<float> buf;
  DISTLAB_TODO("copy each shard's columns (contiguous in column-major) into a rows x "
               "max_shard(cols) chunk (zero padded)");
  return buf;
}

Eigen::MatrixXf unpack_col_blocks(std::span<const float> buf, Index rows, Index cols, int parts) {
  Eigen::MatrixXf M;
  DISTLAB_TODO("check buf's size, then copy each chunk's first shard_range(...).size columns back");
  return M;
}

Eigen::MatrixXf matmul_by_rows(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("share_shape; scatter A's packed row blocks; broadcast B; multiply your rows; "
               "gather C's row blocks and unpack on rank 0");
  return C;
}

Eigen::MatrixXf matmul_by_cols(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("share_shape; broadcast A; scatter B's column blocks; multiply; gather C's column "
               "blocks and unpack on rank 0");
  return C;
}

Eigen::MatrixXf matmul_by_reduction(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("share_shape; scatter A's column blocks and B's row blocks; multiply into a full m "
               "x n partial product; reduce (Sum) it to rank 0");
  return C;
}

Eigen::MatrixXf matmul_2d_blocks(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("check p = q*q (else std::invalid_argument naming p); share_shape; scatter [A_i | "
               "B_j] to each grid cell; multiply; gather the C_ij blocks and place them on rank 0");
  return C;
}

}  // namespace matmul
