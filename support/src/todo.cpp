#include "distlab/todo.hpp"

namespace distlab {

void throw_not_implemented(const char* what, const char* file, int line) {
  throw NotImplemented(std::string("not implemented: ") + what + " (" + file + ":" +
                       std::to_string(line) + ")");
}

}  // namespace distlab
