#!/usr/bin/env bash
# Gradescope image setup: runs once, as root, in /autograder/source (the unpacked autograder zip).
# Installs the kit's packages (bubblewrap, the grading sandbox, included) and pre-builds the grading
# tree so each submission only compiles its own files; then locks away what no submission may read.
# Needs Python 3.10+ (Ubuntu 22.04 or 24.04, or Debian 12 base image; on 3.10 ./distlab installs python3-tomli).
# AUTOGRADER_ROOT (default /autograder) lets the same script be tried outside Gradescope.
set -euo pipefail
AG="${AUTOGRADER_ROOT:-/autograder}"
export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" = 0 ] && ! command -v python3 >/dev/null 2>&1; then
  echo "setup: installing python3 (apt-get's output in /tmp/setup-apt.log)"
  { apt-get update && apt-get install -y --no-install-recommends python3 ca-certificates; } \
    >/tmp/setup-apt.log 2>&1 || { tail -n 25 /tmp/setup-apt.log; exit 1; }
fi
cd "$AG/source/distlab"
./distlab doctor --install --grading   # no plotting packages: grading never plots
# Warm the build trees with everything a submission can need: grade the reference's files as a
# submission (every item passes, so the ThreadSanitizer tree of 02 is built too), then an empty
# submission (every module's stub), so the trees hold the stubs' sources when setup ends. A
# submission then compiles only its own files. Parallel compiles follow this container's cgroup
# CPU quota and memory limit (grader/pydistlab/paths.py, build_jobs).
warm="$(mktemp -d)"
./distlab submit --reference -o "$warm/reference.zip" >/dev/null
./distlab grade --submission "$warm/reference.zip" --hidden --quiet --out "$warm/reference" || true
mkdir "$warm/empty"
./distlab grade --submission "$warm/empty" --hidden --quiet --out "$warm/stubs" || true
rm -rf "$warm"
# Lock away what submissions must not read: the references (needed only to build prerequisites,
# which the grader does as root) and the hidden tests become root-only. Under bubblewrap they are
# out of sight anyway; without namespaces the submission's files are compiled and its tests run as
# an unprivileged uid, for which this is what keeps them closed (docs/instructor-guide.md).
chmod -R go-rwx solutions grader/hidden
rm -rf grader/selftest
./distlab doctor | sed -n '/Grading sandbox/,/^$/p' || true
