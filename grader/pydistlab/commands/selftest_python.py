"""The self-test's steps that check the grader's own Python: `py310` (the grader runs on Python 3.10,
Ubuntu 22.04's python3), and the helper both it and `lint` use to install a tool with pip into
build/tools/ (nothing outside the build folder is touched)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..paths import BUILD, ROOT
from .tally import Tally

TOMLI = "tomli==2.0.1"   # tomllib for Python 3.10 (3.11's tomllib is tomli 1.2.3 plus fixes)
#: The grader's unit tests run again under Python 3.10: the ones that need no build, and one grade
#: of the miniature kit (a whole grading run: build, sandbox, report) under that interpreter.
PY310_TESTS = ["test_hints", "test_platforms", "test_grading_plan", "test_audit", "test_names", "test_new_module",
               "test_mutant_order", "test_runtime.TestReportChecks", "test_runtime.TestEnvironment",
               "test_grader.TestGrading.test_stubs_score_zero",
               "test_grader.TestGrading.test_solutions_score_full_marks_with_hidden"]


def pip_install(spec: str, target: Path, probe: Path, python: str = sys.executable) -> str:
    """Installs spec with `python -m pip --target target` unless probe exists; "" or why not."""
    if probe.exists():
        return ""
    print(f"    installing {spec} into {target.relative_to(ROOT)} (pip)", flush=True)
    try:
        r = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                            "--target", str(target), spec], capture_output=True, text=True, timeout=600,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip could not run ({e})"
    if r.returncode != 0 or not probe.exists():
        return f"`pip install {spec}` failed: {(r.stderr or r.stdout).strip()[-300:]}"
    return ""


def python310() -> str:
    """A Python 3.10 interpreter on this machine ("" when there is none): python3.10 on PATH, or
    one that pyenv keeps."""
    candidates = [shutil.which("python3.10") or ""]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    for c in candidates:
        if c and subprocess.run([c, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 10))"],
                                capture_output=True, stdin=subprocess.DEVNULL).returncode == 0:
            return c
    return ""


def step_py310(t: Tally) -> None:
    t.step("py310: ./distlab --help and the grader's unit tests on Python 3.10 (tomli for tomllib)")
    py = python310()
    if not py:
        print("    skipped: no Python 3.10 on this machine (python3.10 on PATH or under ~/.pyenv)", flush=True)
        return
    lib = BUILD / "tools" / "py310"
    why = pip_install(TOMLI, lib, lib / "tomli", py)
    if not t.check(not why, f"tomli for {py}", why):
        return
    env = dict(os.environ, PYTHONPATH=str(lib))
    r = subprocess.run([py, str(ROOT / "distlab"), "--help"], capture_output=True, text=True, env=env,
                       stdin=subprocess.DEVNULL)
    t.check(r.returncode == 0 and "usage: ./distlab" in r.stdout, "py310: ./distlab --help", r.stderr[-1500:])
    r = subprocess.run([py, "-m", "unittest", "-v", *PY310_TESTS], cwd=ROOT / "grader" / "selftest",
                       capture_output=True, text=True, env=env, errors="replace", stdin=subprocess.DEVNULL)
    lines = r.stderr.splitlines()
    for line in lines:
        m = re.search(r"^(\S+) \((\S+)\) \.\.\. (ok|FAIL|ERROR|skipped.*)$", line)
        if m:
            t.check(m.group(3) == "ok" or m.group(3).startswith("skipped"), f"py310: {m.group(2)}", "")
    ran = next((line for line in lines if line.startswith("Ran ")), "")
    print(f"    {ran} with {py}", flush=True)
    t.check(r.returncode == 0, "py310: unittest run succeeded", "\n".join(lines[-60:]))
