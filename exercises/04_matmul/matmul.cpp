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
  DISTLAB_TODO("make rank 0's shapes known to every rank with the single broadcast matmul.hpp "
               "describes, and reject shapes that cannot be multiplied on every rank alike "
               "(README: Tasks, 1)");
  return shape;
}

std::vector<float> pack_row_blocks(const Eigen::MatrixXf& M, int parts) {
  std::vector<float> buf;
  DISTLAB_TODO("lay out M's row blocks in the padded buffer layout described in matmul.hpp, ready "
               "for an equal-chunk scatter (README: Tasks, 2: column-major storage)");
  return buf;
}

Eigen::MatrixXf unpack_row_blocks(std::span<const float> buf, Index rows, Index cols, int parts) {
  Eigen::MatrixXf M;
  DISTLAB_TODO("rebuild the rows x cols matrix from a buffer in the row-block layout of "
               "matmul.hpp, ignoring the padding; reject a buffer of the wrong size (README: "
               "Tasks, 2)");
  return M;
}

std::vector<float> pack_col_blocks(const Eigen::MatrixXf& M, int parts) {
  std::vector<float> buf;
  DISTLAB_TODO("lay out M's column blocks in the padded buffer layout described in matmul.hpp "
               "(README: Tasks, 2)");
  return buf;
}

Eigen::MatrixXf unpack_col_blocks(std::span<const float> buf, Index rows, Index cols, int parts) {
  Eigen::MatrixXf M;
  DISTLAB_TODO("rebuild the rows x cols matrix from a buffer in the column-block layout of "
               "matmul.hpp, ignoring the padding; reject a buffer of the wrong size (README: "
               "Tasks, 2)");
  return M;
}

Eigen::MatrixXf matmul_by_rows(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("the product A B with the rows of A and C partitioned over the ranks, following "
               "the row plan in matmul.hpp step by step (README: Tasks, 3a; the tests compare "
               "traffic and time with the plan)");
  return C;
}

Eigen::MatrixXf matmul_by_cols(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("the product A B with the columns of B and C partitioned over the ranks, following "
               "the column plan in matmul.hpp (README: Tasks, 3b)");
  return C;
}

Eigen::MatrixXf matmul_by_reduction(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("the product A B with the shared dimension k partitioned over the ranks: every "
               "rank computes a full-size partial product and the partials are summed on rank 0, "
               "following the plan in matmul.hpp (README: Tasks, 3c)");
  return C;
}

Eigen::MatrixXf matmul_2d_blocks(const Eigen::MatrixXf& A, const Eigen::MatrixXf& B) {
  Eigen::MatrixXf C;
  DISTLAB_TODO("the product A B on a q x q grid of ranks, each computing one block of C, "
               "following the 2-D plan in matmul.hpp, including its check of the world size "
               "before any communication (README: Tasks, 3d)");
  return C;
}

}  // namespace matmul
