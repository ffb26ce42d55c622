// dist::SourceLocation: where a dist call was made (file and line), captured by a defaulted last
// argument of the point-to-point calls, the barrier and the built-in collectives, so a deadlock
// report names the caller's line. It is std::source_location where the standard library has it;
// libc++ before 16 (clang 14 and 15 on Linux, older Xcode) has no <source_location>, and there the
// same interface comes from the compiler's builtins.
#pragma once

#if __has_include(<source_location>)
#include <source_location>
#endif
#include <cstdint>

namespace dist {

#if defined(__cpp_lib_source_location)
using SourceLocation = std::source_location;
#else
class SourceLocation {
 public:
  static constexpr SourceLocation current(const char* file = __builtin_FILE(),
                                          const char* function = __builtin_FUNCTION(),
                                          std::uint_least32_t line = __builtin_LINE()) noexcept {
    SourceLocation where;
    where.file_ = file;
    where.function_ = function;
    where.line_ = line;
    return where;
  }
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr std::uint_least32_t line() const noexcept { return line_; }
  constexpr std::uint_least32_t column() const noexcept { return 0; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  std::uint_least32_t line_ = 0;
};
#endif

}  // namespace dist
