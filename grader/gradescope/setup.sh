#!/usr/bin/env bash
# Gradescope image setup: runs once, as root, in /autograder/source (the unpacked autograder zip).
# Installs the kit's packages and pre-builds the grading tree so each submission only compiles
# its own files. Needs Python 3.11+ (Ubuntu 24.04 or Debian 12 base image).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 ca-certificates
cd /autograder/source/distlab
./distlab doctor --install
# Warm the build trees: grade an empty submission (every module's stub) once.
mkdir -p /tmp/distlab-empty-submission
./distlab grade --submission /tmp/distlab-empty-submission --hidden --quiet --out /tmp/distlab-warmup || true
