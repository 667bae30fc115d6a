"""Moved to :mod:`daskwp.testing.netns_hosts` (importable by the benchmarks too); this name
stays for test modules that import ``netns_hosts`` (its fixtures ``hosts`` and ``cluster``
included)."""

from daskwp.testing.netns_hosts import *  # noqa: F401,F403
