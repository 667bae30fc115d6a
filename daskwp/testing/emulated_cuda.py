"""An emulated CUDA backend: ``daskwp/kernels/wordpiece.cu`` compiled by the host C++ compiler.

Shared by the tests (``tests/conftest.py``'s backend harness) and the benchmarks
(``benchmarks/gpu_check.py``). The kernel file is compiled
with a small shim (grids and blocks; the threads of a block are OS threads and
``__syncthreads`` is a real barrier between them), and :func:`fake_cupy` is a NumPy stand-in
for the part of CuPy that ``daskwp.backends.cuda`` uses. Monkeypatching ``cuda._cupy`` to
return it runs the real launcher and the real kernel code paths (chunking, count / scan /
write, windows) on any machine with ``c++``::

    use_fake_cupy(fake_cupy(), monkeypatch)    # or the fixtures of tests/conftest.py

The compiled library is cached twice: in this process (:class:`RawModule`, keyed by the
source and options, so a test session compiles it once whichever module asks first) and on
disk under the temporary directory (keyed the same way, so a later session reuses it).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
import types
from pathlib import Path

import numpy as np

__all__ = ["DevArray", "Launcher", "RawModule", "compile_emulated", "cxx", "dev_array",
           "fake_cupy", "use_fake_cupy"]

SHIM = r"""
// Test shim: compile a CUDA kernel file as host C++. Blocks run one after another; the
// threads of a block are OS threads, __syncthreads is a real barrier.
#include <pthread.h>
struct DwpDim3 { unsigned x, y, z; };
static thread_local DwpDim3 threadIdx = {0u, 0u, 0u};
static DwpDim3 blockIdx = {0u, 0u, 0u}, blockDim = {1u, 1u, 1u}, gridDim = {1u, 1u, 1u};
static pthread_barrier_t dwp_emu_barrier;
static bool dwp_emu_barrier_live = false;
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
static inline void __syncthreads() { pthread_barrier_wait(&dwp_emu_barrier); }
extern "C" void dwp_emu_block(unsigned bx, unsigned bdim, unsigned gdim) {
  blockIdx.x = bx; blockDim.x = bdim; gridDim.x = gdim;
  if (dwp_emu_barrier_live) pthread_barrier_destroy(&dwp_emu_barrier);
  pthread_barrier_init(&dwp_emu_barrier, nullptr, bdim);
  dwp_emu_barrier_live = true;
}
extern "C" void dwp_emu_thread(unsigned tx) { threadIdx.x = tx; }
"""


def use_fake_cupy(fake, monkeypatch=None) -> None:
    """Route ``daskwp.backends.cuda``'s one way to CuPy (``cuda._cupy``) to ``fake`` and
    clear the launcher's caches. With pytest's ``monkeypatch`` the route is undone after the
    test; without it (a benchmark), it stays for the process."""
    from daskwp.backends import cuda

    cuda.clear_caches()
    if monkeypatch is not None:
        monkeypatch.setattr(cuda, "_cupy", lambda: fake)
    else:
        cuda._cupy = lambda: fake


def cxx() -> str | None:
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or \
        shutil.which("clang++")


class DevArray(np.ndarray):
    """A NumPy array posing as a CuPy array (``.get()`` copies to the "host")."""

    def get(self):
        return np.array(self)


def dev_array(a) -> DevArray:
    return np.asarray(a).view(DevArray)


class Launcher:
    """kernel(grid, block, args) on the host: blocks in turn, EMU_THREADS threads each."""

    EMU_BLOCKS = 3
    EMU_THREADS = 4

    def __init__(self, lib, name):
        self.lib, self.name, self.fn = lib, name, getattr(lib, name)

    def __call__(self, grid, block, args):
        assert isinstance(grid, tuple) and isinstance(block, tuple), (grid, block)
        assert all(isinstance(g, int) and g >= 1 for g in grid + block), (grid, block)
        cargs = []
        for i, a in enumerate(args):
            if isinstance(a, np.ndarray):
                assert isinstance(a, DevArray), f"{self.name} arg {i}: host array passed"
                assert a.flags.c_contiguous, f"{self.name} arg {i}: not contiguous"
                cargs.append(ctypes.c_void_p(a.ctypes.data))
            elif type(a) is np.int32:
                cargs.append(ctypes.c_int32(int(a)))
            elif type(a) is np.int64:
                cargs.append(ctypes.c_int64(int(a)))
            else:  # CuPy would guess the C type of a Python scalar: never rely on it
                raise TypeError(f"{self.name} arg {i}: {type(a).__name__} is not a typed "
                                f"scalar or device array")
        blocks = min(grid[0], self.EMU_BLOCKS)
        threads = min(block[0], self.EMU_THREADS)
        errors = []
        for b in range(blocks):
            self.lib.dwp_emu_block(b, threads, blocks)

            def run(t):
                try:
                    self.lib.dwp_emu_thread(t)
                    self.fn(*cargs)
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)

            ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        assert not errors, errors


class RawModule:
    _libs: dict = {}

    def __init__(self, code, options=(), backend="nvrtc"):
        assert backend == "nvrtc"
        key = hashlib.sha256((code + repr(options)).encode()).hexdigest()[:16]
        lib = self._libs.get(key)
        if lib is None:
            lib = self._libs[key] = compile_emulated(code, options, key)
        self.lib = lib

    def get_function(self, name):
        return Launcher(self.lib, name)


def compile_emulated(code: str, options, key: str):
    out = Path(tempfile.gettempdir()) / f"daskwp-emu-{os.getuid()}-{key}"
    out.mkdir(exist_ok=True)
    so = out / "kernels.so"
    if not so.exists():
        (out / "shim.hpp").write_text(SHIM)
        (out / "kernels.cpp").write_text(code)
        incs = [o for o in options if o.startswith("-I")]
        defs = [o for o in options if o.startswith("-D")]
        cmd = [cxx(), "-std=c++17", "-O2", "-shared", "-fPIC", "-pthread",
               "-include", str(out / "shim.hpp"), *incs, *defs, str(out / "kernels.cpp"),
               "-o", str(out / "kernels.tmp.so")]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
        os.replace(out / "kernels.tmp.so", so)
    return ctypes.CDLL(str(so))


def fake_cupy() -> types.ModuleType:
    """A NumPy stand-in for the part of CuPy that ``daskwp.backends.cuda`` uses (the single
    and the sentence-pair passes): every array it makes is a :class:`DevArray`, so a host
    array handed to a kernel is still caught."""
    m = types.ModuleType("fake_cupy")
    m.int8, m.int32, m.int64, m.uint8 = np.int8, np.int32, np.int64, np.uint8
    m.ndarray = DevArray
    m.asarray = lambda a, dtype=None: dev_array(np.array(a, dtype=dtype, copy=True))
    m.ascontiguousarray = lambda a, dtype=None: dev_array(np.ascontiguousarray(a, dtype=dtype))
    m.empty = lambda shape, dtype=np.float64: dev_array(np.empty(shape, dtype=dtype))
    m.zeros = lambda shape, dtype=np.float64: dev_array(np.zeros(shape, dtype=dtype))
    m.cumsum = lambda a: dev_array(np.cumsum(a))
    m.full_like = lambda a, v, dtype=None: dev_array(np.full_like(np.asarray(a), v, dtype=dtype))
    m.bincount = lambda a, minlength=0: dev_array(np.bincount(np.asarray(a), minlength=minlength))
    m.any = lambda a: bool(np.any(a))

    def wrap(fn):   # NumPy's own signature; an array result comes back as a DevArray
        def call(*a, **kw):
            out = fn(*a, **kw)
            return dev_array(out) if isinstance(out, np.ndarray) else out
        return call

    # Array functions with NumPy's full signatures (the single and the pair passes use them).
    for name in ("arange", "where", "minimum", "maximum", "ones_like", "zeros_like",
                 "argmax", "searchsorted", "full", "stack", "concatenate"):
        setattr(m, name, wrap(getattr(np, name)))

    class Device:
        id = 0
        attributes = {"MultiProcessorCount": 2}

    m.cuda = types.SimpleNamespace(Device=Device)
    m.RawModule = RawModule
    return m
