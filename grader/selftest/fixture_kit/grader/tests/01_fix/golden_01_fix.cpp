// Reference-output generator of the fixture: `golden_01_fix OUTDIR` writes twice.txt and twice.npy.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include "fix.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: golden_01_fix OUTDIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::ofstream txt(dir + "/twice.txt");
  for (int i = 0; i < 4; ++i) txt << "twice(" << i << ") = " << twice(i) * 0.5 << "\n";
  std::ofstream npy(dir + "/twice.npy", std::ios::binary);
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }";
  header.resize(117, ' ');
  header += '\n';
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  npy.write("\x93NUMPY\x01\x00", 8);
  npy.write(reinterpret_cast<const char*>(&len), 2);
  npy << header;
  for (int i = 0; i < 4; ++i) {
    const double v = twice(i) / 3.0;
    npy.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return 0;
}
