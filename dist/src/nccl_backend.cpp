// The NCCL backend (in progress): reports that it cannot run yet.
#include "dist/backend.hpp"

namespace dist::detail {
void launch_nccl(const LaunchOptions&, const std::function<void()>&) {
  throw Error("the NCCL backend is not available in this build yet");
}
}  // namespace dist::detail
