"""The grading sandbox (DESIGN.md section 6; the threat model is in docs/instructor-guide.md).

A submission's code runs at two moments: when its owned files are compiled (the preprocessor and
the assembler read any file an `#include` or `.incbin` names) and in the test processes. Both
happen under this module's rules:

  check_owned_headers()
                   a submitted owned header is compiled into the tests (hidden ones too): it is
                   judged on the compiler's own view (header_view: `c++ -E -dD` in the untrusted
                   view; header_rule: its directives and tokens): no macro, pragma, asm, C
                   linkage, placing attribute, other include, or declaration outside the kit's
                   namespaces.
  check_module_objects()
                   the objects compiled from a submission may not define symbols of the tests,
                   GoogleTest, the kit's libraries, the standard library or the C runtime, nor
                   run code before the kit's initialisers (symbols.py, with nm and readelf).
  probe()          whether bubblewrap can make namespaces here, and why not (once per process).
  build_view()     the bwrap command line of one build step: system folders and the clean copy
                   read-only, its build folder writable, no network, no kit checkout. For the
                   submission's own translation units (untrusted=True) the hidden test sources,
                   the objects and programs built from them and the reference sources of
                   prerequisite modules are hidden as well.
  TestJail         one test process: resource limits (prlimit), an unprivileged uid when the
                   grader runs as root (setpriv), and a bwrap view holding only the test program,
                   the public tests' folder, the module's reference outputs and an empty /tmp.
  limit_reason()   which limit a failed test broke, from its exit status and output.
  lock_away(), LentTo
                   without namespaces, as root: what the submission must not read is made
                   root-only, and its files are compiled as an unprivileged uid.
  admit()          fail closed: without bubblewrap, submitted code never runs with the grader's
                   rights (reach.py finds the test uids a tree they can reach, or the grade stops).
  compile_guard.py each compile of a submitted file and each link with its objects, limited on
                   its own (seconds, memory, file size; no device or /proc file read).

The package, by concern: status (probe, describe), cpp_tokens, header_rule, header_view, symbols,
bwrap (views), jail (a test process), agent (one sandbox per worker), limits, uid (without
namespaces), environ (a test's environment: an allowlist), sweep (nothing of a test outlives it:
processes, keyrings, IPC), reach (where the test uids can reach), compile_guard (one compile or
link under limits).
"""
from __future__ import annotations

from .agent import AGENT_PYTHON, Agent, close_agents
from .bwrap import BuildPlan, build_view, redact_hidden
from .environ import test_env
from .header_rule import HEADER_SUFFIXES, STD_HEADERS, check_header, kit_versions
from .header_view import check_owned_headers
from .jail import TestJail, jail_for
from .limits import BUILD_FILE_SIZE_MB, BUILD_MEMORY_MB, TEST_UID_BASE, TMP_SIZE_MB, XML_CAP, Limits, limit_reason
from .probe import admit, probe
from .status import Status, describe
from .sweep import processes_of, sweep_uid
from .symbols import check_module_objects, check_objects
from .uid import LentTo, build_uid, link_prefix, lock_away, uid_prefix

__all__ = ["AGENT_PYTHON", "Agent", "close_agents", "BuildPlan", "build_view", "redact_hidden",
           "HEADER_SUFFIXES", "STD_HEADERS", "check_header", "kit_versions", "check_owned_headers",
           "check_objects", "check_module_objects", "TestJail", "jail_for",
           "BUILD_FILE_SIZE_MB", "BUILD_MEMORY_MB", "TEST_UID_BASE", "TMP_SIZE_MB", "XML_CAP", "Limits",
           "limit_reason", "Status", "describe", "admit", "probe", "LentTo", "build_uid", "link_prefix",
           "lock_away", "uid_prefix", "test_env", "processes_of", "sweep_uid"]
