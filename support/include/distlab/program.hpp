// Helpers for the module programs (run_<module>).
#pragma once

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

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

/// A module program's main: runs body and returns its exit status. What escapes it is printed
/// and gives status 1: "(not implemented yet) ..." for a stub not written yet (also when the error
/// came back from another rank as text), "error: ..." on stderr for anything else.
inline int run_main(const std::function<int()>& body) {
  try {
    return body();
  } catch (const NotImplemented& e) {
    std::printf("(not implemented yet) %s\n", e.what());
  } catch (const std::exception& e) {
    if (std::string(e.what()).find("not implemented") != std::string::npos) {
      std::printf("(not implemented yet) %s\n", e.what());
    } else {
      std::fprintf(stderr, "error: %s\n", e.what());
    }
  }
  return 1;
}

}  // namespace distlab
