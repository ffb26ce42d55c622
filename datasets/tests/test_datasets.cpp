// Tests of distlab::datasets: the generator, the split, the loader, .npy and IDX I/O.
#include <gtest/gtest.h>

#include <Eigen/LU>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "datasets/classification.hpp"
#include "datasets/idx.hpp"
#include "datasets/loader.hpp"
#include "datasets/npy.hpp"

namespace fs = std::filesystem;
using namespace datasets;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("distlab_datasets_" + name + "_" +
                std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(p);
  return p;
}

ClassificationConfig small_config() {
  ClassificationConfig c;
  c.n_samples = 503;
  c.n_features = 12;
  c.n_informative = 4;
  c.n_redundant = 3;
  c.n_classes = 5;
  c.n_clusters_per_class = 2;
  c.flip_y = 0.0f;
  c.seed = 11;
  return c;
}

}  // namespace

TEST(MakeClassification, ShapesLabelsAndBalancedClasses) {
  const ClassificationConfig c = small_config();
  const Dataset d = make_classification(c);
  ASSERT_EQ(d.size(), c.n_samples);
  ASSERT_EQ(d.dim(), c.n_features);
  ASSERT_EQ(d.n_classes, c.n_classes);
  std::vector<int> counts(static_cast<std::size_t>(c.n_classes), 0);
  for (auto y : d.y) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, c.n_classes);
    ++counts[static_cast<std::size_t>(y)];
  }
  const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
  EXPECT_LE(*hi - *lo, 1) << "classes must be balanced when flip_y == 0";
  EXPECT_TRUE(d.x.allFinite());
}

TEST(MakeClassification, SameSeedSameBitsOtherSeedOtherData) {
  ClassificationConfig c = small_config();
  const Dataset a = make_classification(c);
  const Dataset b = make_classification(c);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.y, b.y);
  c.seed = 12;
  const Dataset other = make_classification(c);
  EXPECT_NE(a.x, other.x);
}

TEST(MakeClassification, RedundantFeaturesAreLinearCombinations) {
  // rank(X) = informative + noise columns: the redundant ones add no rank.
  const ClassificationConfig c = small_config();
  const Dataset d = make_classification(c);
  const Eigen::MatrixXd x = d.x.cast<double>();
  Eigen::FullPivLU<Eigen::MatrixXd> lu(x);
  lu.setThreshold(1e-5);
  EXPECT_EQ(lu.rank(), c.n_features - c.n_redundant);
}

TEST(MakeClassification, ClassesAreSeparableWhenClassSepIsLarge) {
  // With far-apart clusters, assigning each point to its nearest cluster mean (computed per
  // class and cluster is unknown, so use 1-nearest-neighbour) must beat chance by far.
  ClassificationConfig c = small_config();
  c.class_sep = 6.0f;
  c.n_redundant = 0;
  c.n_features = 4;
  const Dataset d = make_classification(c);
  int correct = 0;
  for (Eigen::Index i = 0; i < d.x.rows(); ++i) {
    float best = 1e30f;
    int label = -1;
    for (Eigen::Index j = 0; j < d.x.rows(); ++j) {
      if (j == i) continue;
      const float dist = (d.x.row(i) - d.x.row(j)).squaredNorm();
      if (dist < best) {
        best = dist;
        label = d.y[static_cast<std::size_t>(j)];
      }
    }
    correct += label == d.y[static_cast<std::size_t>(i)];
  }
  EXPECT_GT(correct, 0.9 * static_cast<double>(d.size()));
}

TEST(MakeClassification, ImpossibleConfigSaysWhatToChange) {
  ClassificationConfig c = small_config();
  c.n_informative = 2;  // 4 vertices < 10 clusters
  try {
    make_classification(c);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("n_informative"), std::string::npos) << e.what();
  }
}

TEST(TrainTestSplit, DisjointAndComplete) {
  Dataset d;
  d.n_classes = 3;
  d.x.resize(100, 2);
  d.y.resize(100);
  for (int i = 0; i < 100; ++i) {
    d.x(i, 0) = static_cast<float>(i);
    d.x(i, 1) = static_cast<float>(-i);
    d.y[static_cast<std::size_t>(i)] = i % 3;
  }
  const Split s = train_test_split(d, 30, 5);
  ASSERT_EQ(s.test.size(), 30);
  ASSERT_EQ(s.train.size(), 70);
  std::set<int> seen;
  for (const Dataset* part : {&s.train, &s.test}) {
    for (Eigen::Index i = 0; i < part->x.rows(); ++i) {
      const int id = static_cast<int>(part->x(i, 0));
      EXPECT_TRUE(seen.insert(id).second) << "row " << id << " is in both parts";
      EXPECT_EQ(part->x(i, 1), -part->x(i, 0));
      EXPECT_EQ(part->y[static_cast<std::size_t>(i)], id % 3);
    }
  }
  EXPECT_EQ(seen.size(), 100u);
  const Split again = train_test_split(d, 30, 5);
  EXPECT_EQ(again.test.x, s.test.x);
  const Split other = train_test_split(d, 30, 6);
  EXPECT_NE(other.test.x, s.test.x);
}

TEST(TrainTestSplit, StandardizeUsesTrainStatistics) {
  Split s = train_test_split(make_classification(small_config()), 100, 1);
  const Matrix test_before = s.test.x;
  const Matrix train_before = s.train.x;
  standardize(s);
  const Eigen::RowVectorXf mean = s.train.x.colwise().mean();
  EXPECT_LT(mean.cwiseAbs().maxCoeff(), 1e-4f);
  const Eigen::RowVectorXf var = s.train.x.array().square().colwise().mean();
  EXPECT_LT((var.array() - 1.0f).abs().maxCoeff(), 1e-3f);
  // The test rows went through the same affine map: check one column by its two end points.
  const float scale =
      (s.train.x(1, 0) - s.train.x(0, 0)) / (train_before(1, 0) - train_before(0, 0));
  EXPECT_NEAR(s.test.x(0, 0), (test_before(0, 0) - train_before(0, 0)) * scale + s.train.x(0, 0),
              1e-3);
}

TEST(BatchLoader, EachEpochVisitsEveryRowOnce) {
  const Dataset d = make_classification(small_config());
  const BatchLoader loader(d, 10, 3);
  ASSERT_EQ(loader.batches_per_epoch(), 50);
  std::vector<std::int64_t> rows;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<std::int64_t> seen;
    for (std::int64_t b = 0; b < loader.batches_per_epoch(); ++b) {
      loader.indices(epoch * loader.batches_per_epoch() + b, rows);
      ASSERT_EQ(rows.size(), 10u);
      for (auto r : rows)
        EXPECT_TRUE(seen.insert(r).second) << "row " << r << " twice in epoch " << epoch;
    }
    EXPECT_EQ(seen.size(), 500u);
  }
}

TEST(BatchLoader, BatchIIsAPureFunctionOfSeedAndI) {
  const Dataset d = make_classification(small_config());
  const BatchLoader a(d, 16, 9), b(d, 16, 9), c(d, 16, 10);
  std::vector<std::int64_t> ra, rb, rc;
  b.indices(77, rb);  // b visits a later epoch first
  a.indices(3, ra);
  a.indices(77, ra);
  EXPECT_EQ(ra, rb);
  c.indices(77, rc);
  EXPECT_NE(ra, rc);
  a.indices(0, ra);
  a.indices(a.batches_per_epoch(), rb);
  EXPECT_NE(ra, rb) << "each epoch must be shuffled anew";
  Matrix x;
  Labels y;
  a.load(5, x, y);
  a.indices(5, ra);
  ASSERT_EQ(x.rows(), 16);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(x.row(i), d.x.row(ra[static_cast<std::size_t>(i)]));
    EXPECT_EQ(y[static_cast<std::size_t>(i)],
              d.y[static_cast<std::size_t>(ra[static_cast<std::size_t>(i)])]);
  }
}

TEST(Npy, RoundTripsFloatMatrixAndIntegers) {
  const fs::path dir = temp_dir("npy");
  Matrix m(3, 5);
  for (int i = 0; i < 15; ++i) m.data()[i] = 0.25f * static_cast<float>(i) - 1.0f;
  save_npy((dir / "m.npy").string(), m);
  EXPECT_EQ(load_npy_matrix((dir / "m.npy").string()), m);
  const Labels y = {3, -1, 7, 2147483647};
  save_npy((dir / "y.npy").string(), y);
  const auto ly = load_npy_int32((dir / "y.npy").string());
  EXPECT_EQ(ly.shape, std::vector<std::int64_t>{4});
  EXPECT_EQ(ly.data, y);
  const std::vector<std::int64_t> big = {1, 2, 3, 4, 5, 6};
  save_npy((dir / "i8.npy").string(), std::span<const std::int64_t>(big), {2, 3});
  const auto lb = load_npy_float((dir / "i8.npy").string());
  EXPECT_EQ(lb.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(lb.data[5], 6.0f);
  // The header is padded so that the data starts at a multiple of 64 bytes.
  EXPECT_EQ((fs::file_size(dir / "m.npy") - 15 * 4) % 64, 0u);
  fs::remove_all(dir);
}

TEST(Npy, ErrorsNameTheFile) {
  try {
    load_npy_matrix("/nonexistent/thing.npy");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("thing.npy"), std::string::npos);
  }
  const fs::path dir = temp_dir("npybad");
  std::ofstream((dir / "bad.npy").string()) << "hello";
  EXPECT_THROW(load_npy_matrix((dir / "bad.npy").string()), std::runtime_error);
  fs::remove_all(dir);
}

namespace {
void write_be32(std::ofstream& out, std::uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>((v >> 16) & 0xff),
                     static_cast<char>((v >> 8) & 0xff), static_cast<char>(v & 0xff)};
  out.write(b, 4);
}
}  // namespace

TEST(Idx, LoadsSmallImagesAndLabels) {
  const fs::path dir = temp_dir("idx");
  const std::string images = (dir / "img").string(), labels = (dir / "lbl").string();
  {
    std::ofstream out(images, std::ios::binary);
    out.write("\0\0\x08\x03", 4);
    write_be32(out, 3);  // 3 images of 2 x 4
    write_be32(out, 2);
    write_be32(out, 4);
    for (int i = 0; i < 24; ++i) out.put(static_cast<char>(i * 10));
  }
  {
    std::ofstream out(labels, std::ios::binary);
    out.write("\0\0\x08\x01", 4);
    write_be32(out, 3);
    out.put(4);
    out.put(0);
    out.put(9);
  }
  const Dataset d = load_idx(images, labels);
  ASSERT_EQ(d.x.rows(), 3);
  ASSERT_EQ(d.x.cols(), 8);
  for (int i = 0; i < 24; ++i) EXPECT_FLOAT_EQ(d.x.data()[i], static_cast<float>(i * 10) / 255.0f);
  EXPECT_EQ(d.y, (Labels{4, 0, 9}));
  EXPECT_EQ(d.n_classes, 10);
  // Truncated data and a gzip file are reported, not read as garbage.
  {
    std::ofstream out(images, std::ios::binary);
    out.write("\0\0\x08\x03", 4);
    write_be32(out, 3);
    write_be32(out, 2);
    write_be32(out, 4);
    out.put(1);
  }
  EXPECT_THROW(load_idx_images(images), std::runtime_error);
  {
    std::ofstream out(labels, std::ios::binary);
    out.write("\x1f\x8b\x08\x00", 4);
  }
  try {
    load_idx_labels(labels);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gunzip"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
