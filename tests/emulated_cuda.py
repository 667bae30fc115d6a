"""Moved to :mod:`daskwp.testing.emulated_cuda` (importable by the benchmarks too); this
name stays for test modules that import ``emulated_cuda``."""

from daskwp.testing.emulated_cuda import *  # noqa: F401,F403
from daskwp.testing.emulated_cuda import __all__  # noqa: F401
