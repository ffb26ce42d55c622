#include "fsdp.hpp"

#include "distlab/todo.hpp"

namespace fsdp {

int add(int a, int b) {
  DISTLAB_TODO("return the sum of the two arguments (README: Tasks, 1)");
}

}  // namespace fsdp
