"""pydistlab: the machinery behind the `./distlab` command (standard library only).

  cli.py           parses `./distlab COMMAND ...` and hands over to the command's module
  errors.py        DistlabError: a problem the user can fix, shown as `distlab CMD: error: ...`
  paths.py         where things live (kit root, manifest, build/), CPU count, student-repo test
  cmake.py         configuring and building with CMake + Ninja
  deps.py          the system packages the kit needs: detect, install (Debian/Ubuntu)
  mpi.py           mpirun command lines
  tree.py          the kit's files, and mirroring them into a folder touching only what changed
  stubs.py         exercises/ generated from solutions/ (solution regions become TODOs)
Grading
  manifest.py      grader/manifest.toml and the hidden items in grader/hidden/<module>/items.toml
  results.py       Mode (student, solutions, submission) and the results per item, module, run
  workspace.py     the clean copies under build/grade/<id>/: lock, mirror, configure, build errors
  sandbox/         what a submission's code may see and use: bubblewrap views for its compile and
                   its test processes, resource limits, the owned-header rule
  runner.py        one graded item: a test process with a time limit, and what happened to it
  submission.py    reading a submission (folder or zip), taking only the owned files
  grade.py         one grading run: plan -> build -> run items -> results (GradeOptions)
  grading/         its steps: passes.py (plain, ASan, ThreadSanitizer; the mutants' Order),
                   plan.py (trees, overlays, refused headers), strategy.py (how a build keeps the
                   submission apart: bubblewrap, unprivileged uid, none), builds.py (one pass's
                   build, which module failed), items.py (the test processes, the item results)
  batch.py         a folder of submissions graded one after the other into a CSV gradebook
  report.py        results.json (Gradescope), JUnit XML, Markdown, and the terminal table
  golden.py        reference outputs: reading them, comparing within tolerances
commands/          one module per command (see its __init__.py)
"""
