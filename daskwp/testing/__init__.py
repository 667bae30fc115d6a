"""Helpers the test suite and the benchmarks share; nothing else in daskwp imports them.

* :mod:`daskwp.testing.emulated_cuda`: the CUDA kernel file compiled by the host C++
  compiler and a NumPy stand-in for CuPy, so the real launcher runs on any machine with a
  C++ compiler (``tests/conftest.py``'s backend harness, ``benchmarks/gpu_check.py``);
* :mod:`daskwp.testing.netns_hosts`: a cluster of hosts on one machine, each a Linux network
  namespace on a private bridge (``tests/test_hosts.py``, ``tests/test_tls.py``,
  ``benchmarks/hosts_bench.py``).

Importing this package imports neither module; each needs only NumPy (and, for its pytest
fixtures, pytest).
"""
