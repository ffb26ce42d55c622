"""pydistlab: the machinery behind the `./distlab` command (standard library only)."""
