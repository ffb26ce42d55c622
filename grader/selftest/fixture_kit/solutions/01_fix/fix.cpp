#include "fix.hpp"
#include "todo.hpp"

int add(int a, int b) {
  // BEGIN SOLUTION: return the sum of a and b
  return a + b;
  // END SOLUTION
}

int twice(int a) {
  // BEGIN SOLUTION: return 2 * a, using add()
  return add(a, a);
  // END SOLUTION
}
