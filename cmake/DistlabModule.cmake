# Precompiled headers (DISTLAB_PCH; GCC and clang): Eigen, <dist/dist.hpp>, GoogleTest and the
# standard headers take about 85% of a module file's compile. They are compiled once per tree into
# two headers (one with the module libraries' flags, one with the tests'), and every module library
# and test program reuses the one with its flags, so a file that changes recompiles in a quarter of
# the time (a grade, a mutant). Only kit headers are precompiled, never a module's own: a
# submission's files are compiled as before, with those headers included first. The grader builds
# the libraries' header before it compiles any submitted file (grading/strategy.py).
#   distlab_pch_target(lib|test): the tree's precompiled header of that kind (the top-level
#   CMakeLists.txt makes each once, before the targets that reuse it).
function(distlab_pch_target kind)
  set(target distlab_pch_${kind})
  if(NOT DISTLAB_PCH OR NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang" OR TARGET ${target})
    return()
  endif()
  set(source ${CMAKE_BINARY_DIR}/distlab_pch_${kind}.cpp)
  if(NOT EXISTS ${source})
    file(WRITE ${source} "// the translation unit that builds ${target}'s precompiled header\n")
  endif()
  add_library(${target} OBJECT ${source})
  set(headers <algorithm> <cmath> <cstdint> <functional> <memory> <stdexcept> <string> <vector>
      <Eigen/Dense> <dist/dist.hpp>)
  if(kind STREQUAL "test")
    target_link_libraries(${target} PRIVATE distlab::dist distlab::support CLI11::CLI11
                          distlab_testing distlab_options)
    target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O1>)
    list(APPEND headers <gtest/gtest.h>)
  else()
    target_link_libraries(${target} PRIVATE distlab::dist distlab::support CLI11::CLI11
                          distlab_options)
  endif()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

function(distlab_use_pch target kind)
  if(TARGET distlab_pch_${kind})
    target_precompile_headers(${target} REUSE_FROM distlab_pch_${kind})
  endif()
endfunction()

# distlab_module(NAME SOURCES file... [MAIN file] [LIBS target...])
#   In <tree>/<NAME>/CMakeLists.txt (tree = exercises or solutions, picked by DISTLAB_IMPL).
#   Creates: distlab_<NAME> (a static library of SOURCES, include dir = the module folder),
#            run_<NAME> (the module's program, from MAIN), module_<NAME>, a target that builds
#            everything the module has (library, program, public and hidden tests), and
#            grade_<NAME>, what grading needs (library, public and hidden tests; not the program,
#            which `./distlab run` builds in the same tree when asked). The grader builds the
#            modules' grade_<NAME> targets, so one module's compile error spares the others.
function(distlab_module name)
  cmake_parse_arguments(M "" "MAIN" "SOURCES;LIBS" ${ARGN})
  add_library(distlab_${name} STATIC ${M_SOURCES})
  target_include_directories(distlab_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(distlab_${name} PUBLIC distlab::dist distlab::support CLI11::CLI11 ${M_LIBS}
                        PRIVATE distlab_options)
  distlab_use_pch(distlab_${name} lib)
  add_custom_target(module_${name})
  add_dependencies(module_${name} distlab_${name})
  add_custom_target(grade_${name})
  add_dependencies(grade_${name} distlab_${name})
  if(M_MAIN)
    add_executable(run_${name} ${M_MAIN})
    target_link_libraries(run_${name} PRIVATE distlab_${name} distlab_options)
    # The program's driver (flags, the config, printing: the work is in the module's library,
    # which stays at -O3) at -O1 in Release: CLI11 makes it the costliest file of the module to
    # compile, and -O1 takes a third off, so `./distlab run` after a grade waits less. Results do
    # not change: without -ffast-math and with contraction off, every -O level rounds the same.
    target_compile_options(run_${name} PRIVATE $<$<CONFIG:Release>:-O1>)
    add_dependencies(module_${name} run_${name})
  endif()
endfunction()

# distlab_link_trusted_first(TARGET [LIBS target...])
#   Links the trusted parts of a test program (GoogleTest, distlab::dist, distlab::support and the
#   kit libraries in LIBS) whole, before the module's library: the linker keeps the first copy of a
#   weak or COMDAT symbol it loads, so their copy of every inline or template instance they define
#   wins over one a submission's object defines (a submitted `std::vector<testing::TestPartResult>`
#   instance that drops GoogleTest's failures, say). The test's own objects and distlab_test_main's
#   come first on the line anyway. Raw flags, not $<LINK_LIBRARY:WHOLE_ARCHIVE,...>: CMake refuses
#   a library linked with that feature and also plainly (the module's library links them plainly);
#   the later plain copies load nothing more.
function(distlab_link_trusted_first target)
  set(files "")
  foreach(lib IN ITEMS GTest::gtest distlab::dist distlab::support ${ARGN})
    if(TARGET ${lib})
      get_target_property(type ${lib} TYPE)
      if(type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "UNKNOWN_LIBRARY")
        list(APPEND files "$<TARGET_FILE:${lib}>")
        if(NOT type STREQUAL "UNKNOWN_LIBRARY")
          add_dependencies(${target} ${lib})
        endif()
      endif()
    endif()
  endforeach()
  target_link_libraries(${target} PRIVATE -Wl,--whole-archive ${files} -Wl,--no-whole-archive)
endfunction()

# distlab_module_tests(NAME TARGET exe SOURCES file... [LIBS target...] [INCLUDES dir...]
#                      [LABELS label...])
#   In grader/tests/<NAME>/ or grader/hidden/<NAME>/: a GoogleTest executable linked to the
#   module's library (and LIBS), added to module_<NAME> and grade_<NAME> and registered with
#   CTest (label: module). Its main() is the kit's (distlab_test_main: GoogleTest's, plus the
#   grader's report channel). INCLUDES: folders of shared test headers (a hidden test names its public
#   tests' folder).
#   Does nothing when the module is not part of this tree.
function(distlab_module_tests name)
  cmake_parse_arguments(T "" "TARGET" "SOURCES;LIBS;INCLUDES;LABELS" ${ARGN})
  if(NOT TARGET distlab_${name})
    return()
  endif()
  add_executable(${T_TARGET} ${T_SOURCES})
  distlab_link_trusted_first(${T_TARGET} ${T_LIBS})
  target_include_directories(${T_TARGET} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR} ${T_INCLUDES})
  target_link_libraries(${T_TARGET} PRIVATE distlab_${name} distlab_testing ${T_LIBS}
                        distlab_test_main distlab_options)
  # The test file itself at -O1 in Release (like the programs' drivers): GoogleTest and Eigen make
  # it costly to compile and -O1 takes about 30% off; the code under test (the module's library,
  # the kit) stays at -O3, and every -O level rounds the same (no -ffast-math, no contraction).
  target_compile_options(${T_TARGET} PRIVATE $<$<CONFIG:Release>:-O1>)
  distlab_use_pch(${T_TARGET} test)
  add_dependencies(module_${name} ${T_TARGET})
  add_dependencies(grade_${name} ${T_TARGET})
  gtest_discover_tests(${T_TARGET} DISCOVERY_MODE PRE_TEST
                       PROPERTIES LABELS "module;${T_LABELS}" TIMEOUT 120)
endfunction()

# distlab_module_mpi_tests(NAME TARGET exe SOURCES file... [LIBS target...] NP n...)
#   The value checks of a module on real processes: a GoogleTest executable run under
#   `mpirun -np <n>` for each n (CTest label mpi; ./distlab test runs them on the reference).
#   Not part of module_<NAME>: the grader grades on the threads backend. Does nothing without
#   the Open MPI backend or when the module is not part of this tree. Like distlab_module_tests,
#   the trusted parts are linked first (distlab_link_trusted_first).
function(distlab_module_mpi_tests name)
  cmake_parse_arguments(T "" "TARGET" "SOURCES;LIBS;NP" ${ARGN})
  if(NOT TARGET distlab_${name} OR NOT DISTLAB_HAVE_MPI)
    return()
  endif()
  find_package(MPI COMPONENTS CXX REQUIRED)  # MPIEXEC_EXECUTABLE, MPIEXEC_NUMPROC_FLAG
  add_executable(${T_TARGET} ${T_SOURCES})
  distlab_link_trusted_first(${T_TARGET} ${T_LIBS})
  target_include_directories(${T_TARGET} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_link_libraries(${T_TARGET} PRIVATE distlab_${name} distlab_testing ${T_LIBS}
                        distlab_test_main distlab_options)
  foreach(np IN LISTS T_NP)
    add_test(NAME ${name}_mpi_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
              $<TARGET_FILE:${T_TARGET}>)
    set_tests_properties(${name}_mpi_np${np} PROPERTIES LABELS mpi TIMEOUT 300
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_btl_vader_single_copy_mechanism=none")
  endforeach()
endfunction()
