"""`./distlab gradescope-zip [OUT.zip]`: the Gradescope autograder.

The zip holds setup.sh and run_autograder at its root (from grader/gradescope/) and the whole kit,
solutions and hidden tests included, under distlab/. Gradescope unpacks it to /autograder/source
and runs setup.sh once when building the image; run_autograder grades each submission with
`./distlab grade --submission /autograder/submission --hidden --out /autograder/results`."""
from __future__ import annotations

import zipfile
from pathlib import Path

from .. import tree
from ..errors import DistlabError
from ..paths import ROOT, is_release, rel


def main(out: str) -> int:
    if is_release():
        raise DistlabError("the autograder needs solutions/ and the hidden tests: build it from the kit")
    dest = Path(out)
    if not dest.is_absolute():
        dest = ROOT / dest
    here = ROOT / "grader" / "gradescope"
    dest.parent.mkdir(parents=True, exist_ok=True)
    files = [n for n in tree.kit_files(ROOT) if not n.startswith("grader/selftest/")]
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o100755 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, (here / name).read_bytes())
        for name in files:
            zf.write(ROOT / name, f"distlab/{name}")
    print(f"{rel(dest)}: {len(files)} kit files + setup.sh + run_autograder. Upload it on Gradescope "
          f"(Configure Autograder, base image Ubuntu 24.04 or Debian 12: Python 3.11+ is required).")
    return 0
