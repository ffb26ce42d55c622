// Placeholder until the threads engine lands.
#include "dist/backend.hpp"

namespace dist::detail {
void launch_threads(const LaunchOptions&, const std::function<void()>&) {
  throw Error("the threads backend is not implemented yet");
}
}  // namespace dist::detail
