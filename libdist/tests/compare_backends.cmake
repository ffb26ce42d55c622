# cmake -DPROGRAM=exe -DNP=4 -DMPIEXEC=mpirun "-DMPIEXEC_FLAGS=--oversubscribe" -P compare_backends.cmake
# Runs PROGRAM with `--backend threads -n NP` and under `MPIEXEC -np NP`, and fails unless both
# exit 0 and print the same standard output.
foreach(var PROGRAM NP MPIEXEC)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "compare_backends.cmake: -D${var}=... is required")
  endif()
endforeach()
separate_arguments(flags UNIX_COMMAND "${MPIEXEC_FLAGS}")

execute_process(COMMAND ${PROGRAM} --backend threads -n ${NP} --timeout-ms 20000
  OUTPUT_VARIABLE threads_out ERROR_VARIABLE threads_err RESULT_VARIABLE threads_rc)
if(NOT threads_rc EQUAL 0)
  message(FATAL_ERROR "threads backend run failed (${threads_rc}):\n${threads_out}\n${threads_err}")
endif()
execute_process(COMMAND ${MPIEXEC} -np ${NP} ${flags} ${PROGRAM} --timeout-ms 20000
  OUTPUT_VARIABLE mpi_out ERROR_VARIABLE mpi_err RESULT_VARIABLE mpi_rc)
if(NOT mpi_rc EQUAL 0)
  message(FATAL_ERROR "mpi backend run failed (${mpi_rc}):\n${mpi_out}\n${mpi_err}")
endif()
if(NOT threads_out STREQUAL mpi_out)
  message(FATAL_ERROR "the backends disagree\n--- threads -n ${NP}:\n${threads_out}\n--- mpirun -np ${NP}:\n${mpi_out}")
endif()
message(STATUS "threads and mpi agree on ${NP} ranks:\n${mpi_out}")
