#pragma once
#include <stdexcept>
namespace distlab {
struct NotImplemented : std::logic_error {
  using std::logic_error::logic_error;
};
[[noreturn]] void throw_not_implemented(const char* what);
}  // namespace distlab
#define DISTLAB_TODO(what) ::distlab::throw_not_implemented(what)
