"""One module per `./distlab` command (cli.py dispatches), and the helpers only they use.

  grade.py            ./distlab grade: mode from the arguments, grade or batch, write the reports
  build.py            ./distlab build: configure and build with a CMake preset (also used by run, bench)
  run.py              ./distlab run: build and run a module's program (threads or mpirun)
  bench.py            ./distlab bench collectives: the benchmarks, and --plot
  plot_collectives.py the plot program bench --plot runs with an interpreter that has matplotlib
                      (plot_pipeline.py, plot_ps.py, plot_fsdp.py: the other modules' plots;
                      plot_csv.py: what the last two share)
  doctor.py           ./distlab doctor: what is installed, what is missing
  submit.py           ./distlab submit: the student's owned files in a zip
  release.py          ./distlab release: the student repository
  gradescope_zip.py   ./distlab gradescope-zip: the Gradescope autograder
  golden.py           ./distlab golden: regenerate or --check the reference outputs
  stubs.py            ./distlab sync and ./distlab check --stubs
  mutants.py          ./distlab mutants: grade the instructor mutants (mutant_records.py: which
                      need grading again, by fingerprint)
  selftest.py         ./distlab test: the kit's self-test (selftest_build.py: its build, tsan and
                      nccl steps; tally.py: the count of checks)
"""
