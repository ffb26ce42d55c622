"""`./distlab submit`: pack the files you own (the manifest's whitelist) into a zip for upload.
`--reference` (instructors, a kit with solutions/): the reference's version of those files, a
submission that earns full marks (Gradescope's setup.sh warms the build trees with it; `./distlab
bench gradescope` grades it)."""
from __future__ import annotations

import zipfile
from pathlib import Path

from .. import manifest as mf, workspace
from ..errors import DistlabError
from ..paths import ROOT, is_release, rel


def main(output: str, modules: list[str], reference: bool = False) -> int:
    man = mf.load()
    if reference and is_release():
        raise DistlabError("--reference needs the kit's solutions/ (an instructor's checkout)")
    selected = man.select(modules) if modules else [man.modules[n] for n in man.order if n in man.modules]
    out = Path(output)
    if not out.is_absolute():
        out = ROOT / out
    packed: list[str] = []
    missing: list[str] = []
    files = workspace.solution_overlay([m.name for m in selected], man) if reference else {}
    for m in selected:
        for owned in m.owned:
            (packed if (owned in files if reference else (ROOT / owned).is_file()) else missing).append(owned)
    if not packed:
        raise DistlabError("none of the files you own exist in this checkout; nothing to submit")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for owned in packed:
            if reference:
                zf.writestr(owned, files[owned])
            else:
                zf.write(ROOT / owned, owned)
    for owned in packed:
        print(f"  packed   {owned}")
    for owned in missing:
        print(f"  missing  {owned} (the grader will use the stub)")
    print(f"{rel(out)}: {len(packed)} files. Upload it (e.g. to Gradescope); the grader takes only "
          f"these files, tests and CMake files always come from the kit.")
    return 0
