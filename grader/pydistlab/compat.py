"""What Python 3.10 lacks that the grader uses: tomllib (3.11) comes from the tomli package there
(Debian/Ubuntu: python3-tomli; the distlab script installs or asks for it)."""
from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:   # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["tomllib"]
