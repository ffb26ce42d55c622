"""The environment of a test process: an allowlist, never the grader's own (a CI token or a
cloud key set for the grader must not reach submitted code)."""
from __future__ import annotations

import os

#: Taken from the grader's environment: the search path and the locale.
FROM_GRADER = ("PATH", "LANG", "LANGUAGE", "TZ")
FROM_GRADER_PREFIXES = ("LC_",)
#: What the grader itself may set for a test: the kit's variables, the sanitizers' options and
#: Open MPI's (only where a test runs under mpirun).
SET_BY_GRADER = ("DISTLAB_ROOT", "DISTLAB_REPORT_CHANNEL", "TSAN_OPTIONS", "ASAN_OPTIONS", "UBSAN_OPTIONS")
SET_BY_GRADER_PREFIXES = ("OMPI_",)
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def test_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one test process: the allowlisted part of the grader's, HOME and TMPDIR
    set to /tmp (the test's private one under bubblewrap), and extra (which must be allowlisted:
    a ValueError names a variable that is not)."""
    env = {k: v for k, v in os.environ.items() if k in FROM_GRADER or k.startswith(FROM_GRADER_PREFIXES)}
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOME"] = "/tmp"
    env["TMPDIR"] = "/tmp"
    for k, v in (extra or {}).items():
        if k not in SET_BY_GRADER and not k.startswith(SET_BY_GRADER_PREFIXES):
            raise ValueError(f"{k} is not an allowed variable of a test process "
                             f"(grader/pydistlab/sandbox/environ.py)")
        env[k] = v
    return env
