"""The device side: real CuPy or the emulated backend of the test suite, host copies, best
times, and the per-stage breakdown of a launch, timed through the launcher's own hook
(``daskwp.backends.cuda.stage_timing``): no copy of the launcher's steps to drift.
"""

from __future__ import annotations

import contextlib
import shutil
import time

import numpy as np

from _common import best as best_time
from daskwp.backends import cuda


class Backend:
    """Where the "GPU" steps run: ``gpu`` (CuPy on a device) or ``emulated`` (the kernel
    file compiled for the host, NumPy arrays; daskwp/testing/emulated_cuda.py)."""

    def __init__(self, name: str, cp):
        self.name, self.cp = name, cp
        self.real = name == "gpu"

    def sync(self):
        if self.real:
            self.cp.cuda.Device().synchronize()

    def free(self):
        if self.real:
            self.cp.get_default_memory_pool().free_all_blocks()

    def event(self):
        if not self.real:
            return None
        e = self.cp.cuda.Event()
        e.record()
        return e

    def elapsed_ms(self, e0, e1) -> float | None:
        if e0 is None:
            return None
        e1.synchronize()
        return float(self.cp.cuda.get_elapsed_time(e0, e1))


def make_backend(cpu_only: bool) -> tuple[Backend | None, str]:
    if not cpu_only:
        import cupy

        return Backend("gpu", cupy), "CuPy on the device"
    from daskwp.testing.emulated_cuda import cxx, fake_cupy, use_fake_cupy

    if cxx() is None:
        return None, "no C++ compiler for the emulated backend"
    fake = fake_cupy()
    use_fake_cupy(fake)   # the launcher's one way to CuPy, for the rest of the process
    return Backend("emulated", fake), ("emulated (daskwp/testing/emulated_cuda.py), timings "
                                       "meaningless")


def to_host(a):
    if a is None:
        return None
    if hasattr(a, "get") and not isinstance(a, np.ndarray):
        return a.get()
    if type(a).__module__.split(".")[0] == "torch":
        return a.cpu().numpy()
    if hasattr(a, "get"):   # the emulated DevArray
        return np.asarray(a.get())
    return np.asarray(a)


def best(fn, repeat: int, sync=None) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (after one untimed warm-up call)."""
    return best_time(fn, repeat, warmup=True, sync=sync)


class StageTimer:
    """Per stage: wall ms (synchronize, perf_counter, stage, synchronize) and, on a real
    device, the ms between CUDA events recorded on the stream around it."""

    def __init__(self, be: Backend):
        self.be = be
        self.wall: dict[str, float] = {}
        self.gpu: dict[str, float | None] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        self.be.sync()
        e0 = self.be.event()
        t0 = time.perf_counter()
        yield
        e1 = self.be.event()
        self.be.sync()
        self.wall[name] = self.wall.get(name, 0.0) + (time.perf_counter() - t0) * 1e3
        ms = self.be.elapsed_ms(e0, e1)
        self.gpu[name] = None if ms is None else self.gpu.get(name, 0.0) + ms


def timed_encode(tok, arr, be: Backend, chunk_bytes=None, windows_kw=None,
                 download_windows=True):
    """encode_cuda with each of its stages timed (``cuda.stage_timing``), then, with
    windows_kw, the window fill on its result, and the downloads.

    Returns (host ids, host offsets, StageTimer, info dict)."""
    from daskwp.backends.protocol import kernel_model
    from daskwp.core.windows import fill_plan, window_params

    st = StageTimer(be)
    with cuda.stage_timing(st) as plan:
        ids, offsets = cuda.encode_cuda(tok, arr, chunk_bytes=chunk_bytes)
    out = None
    if windows_kw:
        with st("windows"):
            p = window_params(**windows_kw, return_tensors="cp")
            padded, cls_id, sep_id, pad_id, width = fill_plan(kernel_model(tok).vocab, p,
                                                              offsets)
            out = cuda.build_windows_cuda(ids, offsets, p.max_length, p.stride, p.truncation,
                                          p.add_special_tokens, cls_id, sep_id, pad_id,
                                          p.logid_offset, padded, p.mask_int8, width)
    with st("download"):
        h_ids, h_off = to_host(ids), to_host(offsets)
    out_bytes = 0
    if out is not None:
        out_bytes = sum(int(a.nbytes) for a in out[:3])
        if download_windows:
            with st("download_windows"):
                for a in out[:3]:
                    to_host(a)
    info = dict(plan, windows_bytes=out_bytes)
    del ids, offsets, out
    return h_ids, h_off, st, info


def nvidia_smi() -> str | None:
    """SM clock, its maximum, power and temperature now (None without nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        import subprocess

        return subprocess.run([exe, "--query-gpu=clocks.sm,clocks.max.sm,power.draw,"
                               "temperature.gpu", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception as e:
        return f"? ({type(e).__name__})"
