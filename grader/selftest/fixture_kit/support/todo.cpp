#include "todo.hpp"
#include <string>
namespace distlab {
void throw_not_implemented(const char* what) {
  throw NotImplemented(std::string("not implemented: ") + what);
}
}  // namespace distlab
