"""The devcontainer (.devcontainer/) installs exactly the kit's own package list.

.devcontainer/Dockerfile keeps its Debian packages in one `apt-get install` line; they must be the
`package` fields of grader/pydistlab/deps.py REQUIREMENTS (optional ones included) plus CONTAINER_ONLY,
so that a package added to deps.py is not forgotten in the image. devcontainer.json must build that
Dockerfile, run `./distlab doctor` after creation and recommend the C++ and CMake extensions.
Cheap: reads two files, no build, no docker.

Run: cd grader/selftest && python3 -m unittest test_devcontainer -v   (or ./distlab test)
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

from pydistlab import deps  # noqa: E402

DEVCONTAINER = ROOT / ".devcontainer"
DOCKERFILE = DEVCONTAINER / "Dockerfile"

#: Packages the image installs that deps.py does not name, each with the reason.
CONTAINER_ONLY: dict[str, str] = {
    "git": "students clone, commit and push from inside the container",
    "ca-certificates": "git over https",
    "clang-format": "./distlab format (grader/pydistlab/commands/cxxformat.py)",
}


def dockerfile_packages(text: str) -> list[str]:
    """The packages of the Dockerfile's `apt-get install ... --no-install-recommends` instruction
    (continuation lines joined, comments dropped), up to the next `&&`."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines()
                                             if not line.lstrip().startswith("#")))
    found = re.findall(r"apt-get install\s+(?:-\S+\s+)*--no-install-recommends((?:\s+[a-z0-9][a-z0-9.+-]*)+)",
                       joined)
    if len(found) != 1:
        raise AssertionError(f"{DOCKERFILE.relative_to(ROOT)}: expected one `apt-get install -y "
                             f"--no-install-recommends PACKAGES` instruction, found {len(found)}")
    return found[0].split()


def difference(packages: list[str]) -> str:
    """"" when packages are deps.py's list plus CONTAINER_ONLY; otherwise what is missing or extra."""
    want = {r.package for r in deps.REQUIREMENTS} | set(CONTAINER_ONLY)
    have = set(packages)
    problems = []
    if want - have:
        problems.append("missing from .devcontainer/Dockerfile (named in grader/pydistlab/deps.py "
                        "REQUIREMENTS or CONTAINER_ONLY): " + " ".join(sorted(want - have)))
    if have - want:
        problems.append("in .devcontainer/Dockerfile but not in grader/pydistlab/deps.py REQUIREMENTS: "
                        + " ".join(sorted(have - want)) + " (add it there, or to CONTAINER_ONLY in "
                        "grader/selftest/test_devcontainer.py with the reason)")
    duplicates = sorted({p for p in packages if packages.count(p) > 1})
    if duplicates:
        problems.append("named twice in .devcontainer/Dockerfile: " + " ".join(duplicates))
    return "; ".join(problems)


class TestDevcontainer(unittest.TestCase):
    def test_dockerfile_installs_the_kits_packages(self) -> None:
        packages = dockerfile_packages(DOCKERFILE.read_text(encoding="utf-8"))
        self.assertEqual(difference(packages), "")

    def test_a_planted_difference_is_named(self) -> None:
        packages = dockerfile_packages(DOCKERFILE.read_text(encoding="utf-8"))
        planted = [p for p in packages if p != "libeigen3-dev"] + ["libboost-dev"]
        why = difference(planted)
        self.assertIn("missing from .devcontainer/Dockerfile", why)
        self.assertIn("libeigen3-dev", why)
        self.assertIn("not in grader/pydistlab/deps.py REQUIREMENTS: libboost-dev", why)
        self.assertNotIn("cmake", why)
        # the parser reads a planted Dockerfile's list as written
        text = ("FROM debian:bookworm\nRUN apt-get update \\\n && apt-get install -y "
                "--no-install-recommends \\\n      g++ \\\n      cmake \\\n && rm -rf /var/lib/apt/lists/*\n")
        self.assertEqual(dockerfile_packages(text), ["g++", "cmake"])

    def test_base_image_is_debian_12(self) -> None:
        text = DOCKERFILE.read_text(encoding="utf-8")
        self.assertRegex(text, r"(?m)^FROM (debian:bookworm|mcr\.microsoft\.com/devcontainers/base:bookworm)\b")

    def test_devcontainer_json(self) -> None:
        config = json.loads((DEVCONTAINER / "devcontainer.json").read_text(encoding="utf-8"))
        self.assertTrue(config.get("name"))
        self.assertEqual(config["build"]["dockerfile"], "Dockerfile")
        self.assertIn("./distlab doctor", config["postCreateCommand"])
        extensions = config["customizations"]["vscode"]["extensions"]
        self.assertIn("ms-vscode.cpptools", extensions)
        self.assertIn("ms-vscode.cmake-tools", extensions)
        self.assertIn(config.get("remoteUser"), ("root", None))   # bubblewrap as root (see README.md)


if __name__ == "__main__":
    unittest.main()
