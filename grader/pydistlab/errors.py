"""The one exception type the CLI turns into `distlab: error: ...` and exit status 2."""
from __future__ import annotations


class DistlabError(Exception):
    """A problem the user can fix; the message says what to do."""
