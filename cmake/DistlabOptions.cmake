# distlab_options: an INTERFACE target every distlab target links, carrying warnings, host tuning
# and sanitizer flags. Kept off targets of projects that pull distlab in with add_subdirectory().
add_library(distlab_options INTERFACE)
target_compile_options(distlab_options INTERFACE
  $<$<CXX_COMPILER_ID:GNU,Clang>:-Wall -Wextra -Wpedantic -Wshadow -Wno-unused-parameter>)
if(DISTLAB_NATIVE AND NOT DISTLAB_SANITIZE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native DISTLAB_HAS_MARCH_NATIVE)
  if(DISTLAB_HAS_MARCH_NATIVE)
    target_compile_options(distlab_options INTERFACE -march=native)
  endif()
endif()
if(DISTLAB_SANITIZE)
  target_compile_options(distlab_options INTERFACE -fsanitize=${DISTLAB_SANITIZE} -fno-omit-frame-pointer -g)
  target_link_options(distlab_options INTERFACE -fsanitize=${DISTLAB_SANITIZE})
endif()
