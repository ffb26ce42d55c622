// Helpers for the module programs (run_<module>).
#pragma once

#include <cstdio>
#include <exception>
#include <functional>

#include "distlab/todo.hpp"

namespace distlab {

/// Prints "== title ==" and runs one section of a program. A stub that is not implemented yet,
/// or any other error, is printed and the program goes on with the next section.
inline void section(const char* title, const std::function<void()>& body) {
  std::printf("\n== %s ==\n", title);
  std::fflush(stdout);
  try {
    body();
  } catch (const NotImplemented& e) {
    std::printf("  (not implemented yet) %s\n", e.what());
  } catch (const std::exception& e) {
    std::printf("  error: %s\n", e.what());
  }
  std::fflush(stdout);
}

}  // namespace distlab
