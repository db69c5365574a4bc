"""``acl-core bench``: benchmarks that compare backends side by side in one run and write JSON."""

from acl_tools.bench.cli import main

__all__ = ["main"]
