"""The platforms the kit promises (docs/student-guide.md, README.md): Ubuntu 22.04's CMake 3.22
configures the kit, so CMakeLists.txt's cmake_minimum_required, CMakePresets.json's
cmakeMinimumRequired and schema version, and deps.py's CMAKE_MINIMUM (what doctor checks) agree;
doctor names Ubuntu 22.04's and Homebrew's packages. Cheap: reads files, no build.

Run: cd grader/selftest && python3 -m unittest test_platforms -v   (or ./distlab test)
"""
from __future__ import annotations

import json
import re
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from unittest import mock  # noqa: E402

from pydistlab import deps, paths  # noqa: E402

#: The newest CMakePresets.json schema each CMake reads (cmake-presets(7)).
PRESETS_SCHEMA = {(3, 19): 1, (3, 20): 2, (3, 21): 3, (3, 22): 3, (3, 23): 4, (3, 24): 5, (3, 25): 6}


def cmake_lists_minimums() -> dict[str, tuple[int, ...]]:
    """cmake_minimum_required(VERSION x.y) of every CMakeLists.txt the kit configures."""
    found = {}
    for f in [ROOT / "CMakeLists.txt", *sorted((ROOT / "grader" / "selftest").glob("*/CMakeLists.txt"))]:
        m = re.search(r"cmake_minimum_required\(\s*VERSION\s+(\d+)\.(\d+)", f.read_text(encoding="utf-8"))
        if m:
            found[str(f.relative_to(ROOT))] = (int(m.group(1)), int(m.group(2)))
    return found


class TestCMakeMinimum(unittest.TestCase):
    def test_cmake_lists_state_the_minimum_doctor_checks(self) -> None:
        found = cmake_lists_minimums()
        self.assertIn("CMakeLists.txt", found)
        for name, version in found.items():
            self.assertEqual(version, deps.CMAKE_MINIMUM, f"{name}: cmake_minimum_required is {version}, "
                             f"deps.CMAKE_MINIMUM (what doctor checks) is {deps.CMAKE_MINIMUM}")

    def test_presets_readable_by_the_minimum(self) -> None:
        presets = json.loads((ROOT / "CMakePresets.json").read_text(encoding="utf-8"))
        need = presets["cmakeMinimumRequired"]
        self.assertEqual((need["major"], need["minor"]), deps.CMAKE_MINIMUM,
                         "CMakePresets.json cmakeMinimumRequired differs from deps.CMAKE_MINIMUM")
        newest = PRESETS_SCHEMA[deps.CMAKE_MINIMUM]
        self.assertLessEqual(presets["version"], newest, f"CMakePresets.json schema version "
                             f"{presets['version']} needs a CMake newer than {deps.CMAKE_MINIMUM}")
        # Fields of later schemas that CMake 3.22 refuses.
        for later in ("include", "workflowPresets", "packagePresets"):
            self.assertNotIn(later, presets, f"CMakePresets.json uses {later!r} (a newer schema)")

    def test_minimum_is_ubuntu_2204s(self) -> None:
        # Ubuntu 22.04 ships CMake 3.22.1; a higher minimum locks its students out.
        self.assertLessEqual(deps.CMAKE_MINIMUM, (3, 22))


class TestPackageNames(unittest.TestCase):
    def test_ubuntu_2204_names(self) -> None:
        compiler = deps.REQUIREMENTS[0]
        self.assertEqual(deps.package_name(compiler, "ubuntu-22.04"), f"g++-{deps.GCC_MINIMUM}")
        self.assertEqual(deps.package_name(compiler, "debian-12"), "g++")
        names = deps.packages(deps.REQUIREMENTS, "ubuntu-22.04")
        self.assertIn("cmake", names)
        self.assertNotIn("g++", names)

    def test_homebrew_names(self) -> None:
        names = deps.packages(deps.REQUIREMENTS, "macos")
        for formula in ("cmake", "ninja", "googletest", "eigen", "cli11", "nlohmann-json", "open-mpi"):
            self.assertIn(formula, names)
        self.assertNotIn("bubblewrap", names)   # Linux only
        self.assertTrue(deps.install_line(["cmake"], "macos").startswith("brew install"))
        self.assertIn("apt-get install", deps.install_line(["cmake"], "debian-12"))

    def test_every_requirement_has_a_debian_package(self) -> None:
        for r in deps.REQUIREMENTS:
            self.assertTrue(r.package, r.what)



class TestContainerLimits(unittest.TestCase):
    """Parallel compiles and test workers follow the cgroup's limits (Gradescope: 0.5 CPU, 768 MB),
    not the host's cores."""

    def jobs(self, cores: int, cpu: float | None, mem_mb: int | None) -> tuple[int, int]:
        with mock.patch.object(paths, "nproc", return_value=cores), \
                mock.patch.object(paths, "cpu_limit", return_value=cpu), \
                mock.patch.object(paths, "memory_limit", return_value=mem_mb and mem_mb * 2 ** 20):
            return paths.cpus(), paths.build_jobs()

    def test_gradescope_default(self) -> None:
        self.assertEqual(self.jobs(64, 0.5, 768), (1, 1))   # two compiles side by side exceed 768 MB

    def test_no_limits_is_the_host(self) -> None:
        self.assertEqual(self.jobs(8, None, None), (8, 8))

    def test_quota_rounds_up_and_memory_bounds_compiles(self) -> None:
        self.assertEqual(self.jobs(8, 2.5, None), (3, 3))
        cores, jobs = self.jobs(8, None, 2048)
        self.assertEqual(cores, 8)
        self.assertEqual(jobs, (2048 - paths.RESERVE_MB) // paths.COMPILE_MB)
        self.assertEqual(self.jobs(8, None, 100), (8, 1))   # never fewer than one

    def test_reads_this_process_cgroup(self) -> None:
        # Whatever this machine has: a positive quota or None, a positive limit or None.
        cpu, mem = paths.cpu_limit(), paths.memory_limit()
        self.assertTrue(cpu is None or cpu > 0)
        self.assertTrue(mem is None or mem > 0)
        self.assertGreaterEqual(paths.build_jobs(), 1)


if __name__ == "__main__":
    unittest.main()
