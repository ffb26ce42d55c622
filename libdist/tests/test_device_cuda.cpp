// <dist/device.hpp> and <dist/device_kernels.hpp> on the NCCL backend: real CUDA streams, events,
// device memory, the nvcc kernels of libdist/nccl/kernels.cu and ncclAllReduce on a stream. Part
// of test_dist_nccl (one process, or one rank per GPU under mpirun). Where no GPU is visible every
// test skips ("skipped: no CUDA device"), never passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "dist/device.hpp"
#include "dist/device_kernels.hpp"
#include "dist/dist.hpp"
#include "distlab_testing.hpp"

namespace {

namespace dd = dist::device;

void run(const std::function<void()>& body) {
  try {
    dist::launch(distlab::testing::cuda_launch_options(), body);
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

std::vector<float> to_host(const dd::DeviceBuffer<float>& b, dd::Stream& s) {
  std::vector<float> out(b.size());
  dd::memcpy_async(std::span<float>(out), b, s);
  s.synchronize();
  return out;
}

TEST(CudaDevice, KernelsOnTwoStreamsOrderedByAnEvent) {
  DISTLAB_SKIP_WITHOUT_CUDA_DEVICE();
  run([] {
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 22}) {
      dd::Stream a("a"), b("b");
      dd::DeviceBuffer<float> x("x", n), y("y", n), z("z", n);
      dd::Event start("start"), written("written"), end("end");
      start.record(a);
      dd::fill(x, 2.0f, a);
      written.record(a);
      b.wait_event(written);
      dd::axpy(3.0f, x, y, b);           // y = 0 + 3 x = 6
      dd::difference(y, x, z, 0, n, b);  // z = 4
      end.record(b);
      end.synchronize();
      EXPECT_TRUE(end.query());
      EXPECT_GE(dd::elapsed_seconds(start, end), 0.0);
      const auto got = to_host(z, b);
      EXPECT_EQ(std::count(got.begin(), got.end(), 4.0f), static_cast<std::ptrdiff_t>(n))
          << "n=" << n;
    }
  });
}

TEST(CudaDevice, AnEventNeverRecordedIsComplete) {
  DISTLAB_SKIP_WITHOUT_CUDA_DEVICE();
  run([] {
    dd::Stream s("s");
    dd::Event e("never");
    EXPECT_TRUE(e.query());
    e.synchronize();
    s.wait_event(e);
    s.synchronize();
    EXPECT_TRUE(s.query());
  });
}

TEST(CudaDevice, AllReduceOnAStreamAndItsWork) {
  DISTLAB_SKIP_WITHOUT_CUDA_DEVICE();
  run([] {
    const int p = dist::world_size();
    dd::Stream comm("comm");
    dd::DeviceBuffer<float> buf("buf", 4096);
    dd::fill(buf, static_cast<float>(dist::rank() + 1), comm);
    dist::Work w = dd::all_reduce_async(buf, comm);
    w.wait();  // the current stream waits on the collective's event
    dd::Stream cur = dd::current_stream();
    const auto got = to_host(buf, cur);
    EXPECT_TRUE(w.is_completed());
    const float want = static_cast<float>(p * (p + 1) / 2);
    EXPECT_EQ(std::count(got.begin(), got.end(), want), 4096);
    dd::all_reduce(buf, comm, dist::ReduceOp::Max);
    comm.synchronize();
    const auto again = to_host(buf, comm);
    EXPECT_EQ(again.front(), want);
  });
}

TEST(CudaDevice, AHostBodyIsRefusedWithWhatToUseInstead) {
  DISTLAB_SKIP_WITHOUT_CUDA_DEVICE();
  std::string msg;
  try {
    dist::launch(distlab::testing::cuda_launch_options(), [] {
      dd::Stream s("s");
      dd::DeviceBuffer<float> x("x", 8);
      dd::launch(s, {"host body", 0, {dd::writes(x)}}, [&] { x.span()[0] = 1; });
    });
  } catch (const dist::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("device_kernels.hpp"), std::string::npos) << msg;
}

}  // namespace
