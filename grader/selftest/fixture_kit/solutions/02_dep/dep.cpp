#include "dep.hpp"
#include "fix.hpp"
#include "todo.hpp"

int quadruple(int a) {
  // BEGIN SOLUTION: return 4 * a, using twice() from 01_fix
  return twice(twice(a));
  // END SOLUTION
}
