// Force-included (-include) into the C++ translation units of a GCC build whose instruction set
// has AVX-512; see cmake/DistlabOptions.cmake. GCC's own intrinsics header defines
// _mm512_undefined_ps() and friends as a variable initialised from itself, and GCC 12 then reports
// "'__Y' may be used uninitialized" inside avx512fintrin.h wherever Eigen's AVX-512 kernels are
// inlined into a caller. That warning belongs to the compiler's header, not to the kit's code or a
// student's: include the intrinsics first with that one warning off for the header's own lines.
// Everything after this point (the kit, Eigen, the student's files) keeps -Wmaybe-uninitialized.
#pragma once
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
