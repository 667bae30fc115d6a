"""What the benchmark scripts share: where the data is, reading and growing corpora, timing,
and the machine a run was on.

Each script runs as ``python benchmarks/<name>.py`` (its folder is then first on
``sys.path``), so ``from _common import ...`` finds this file.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def default_data_dir() -> Path:
    """The shared data: ``DASKWP_SHARED_DATA``, else ``<repo>/../shared/data``."""
    env = os.environ.get("DASKWP_SHARED_DATA")
    return Path(env) if env else ROOT.parent / "shared" / "data"


def find_data(arg=None, needs=("corpus", "vocab"), extra=()) -> Path:
    """The data folder: the first of ``arg``, ``DASKWP_SHARED_DATA``, ``extra``,
    ``<repo>/../shared/data``, ``<repo>/shared/data`` and the bundled ``<repo>/tests/data``
    that holds every path of ``needs``; exits naming the folders tried."""
    cands = [arg, os.environ.get("DASKWP_SHARED_DATA"), *extra, ROOT.parent / "shared" / "data",
             ROOT / "shared" / "data", ROOT / "tests" / "data"]
    tried = [Path(c) for c in cands if c]
    for c in tried:
        if all((c / n).exists() for n in needs):
            return c
    sys.exit(f"no data folder with {', '.join(needs)} found (tried {[str(c) for c in tried]}); "
             f"pass --data DIR")


def read_lines(data: Path, patterns, missing_ok: bool = False) -> list[str]:
    """Non-empty lines (no newline, no trailing CR) of the corpus files matching
    ``patterns`` (globs under ``data/corpus``), in order; a pattern matching nothing is an
    error, or with ``missing_ok`` passed over."""
    lines: list[str] = []
    for pat in patterns:
        files = sorted((data / "corpus").glob(pat))
        if not files and not missing_ok:
            raise FileNotFoundError(f"no file matches {data / 'corpus' / pat}")
        for f in files:
            for line in f.read_text(encoding="utf-8").split("\n"):
                line = line.rstrip("\r")
                if line:
                    lines.append(line)
    return lines


def repeat_to(base: list[str], target_bytes: int) -> tuple[list[str], int]:
    """``base`` repeated (then a prefix of it) until it holds at least ``target_bytes``
    UTF-8 bytes; returns the lines and their byte count."""
    sizes = [len(s.encode("utf-8")) for s in base]
    total = sum(sizes)
    k = target_bytes // total
    out, got = base * k, k * total
    for s, n in zip(base, sizes):
        if got >= target_bytes:
            break
        out.append(s)
        got += n
    return out, got


def best(fn, repeat: int = 3, *, warmup: bool = False, sync=None) -> float:
    """The best wall time of ``repeat`` calls of ``fn`` (at least one), after one untimed
    call when ``warmup``; ``sync`` (a device synchronize) runs after each call, inside the
    timing."""
    if warmup:
        fn()
        if sync:
            sync()
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def cpu_pressure() -> str | None:
    """``some avg60`` of /proc/pressure/cpu: % of time some runnable task waited for a CPU."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return dict(kv.split("=") for kv in line.split()[1:])["avg60"]
    except (OSError, KeyError, ValueError):
        pass
    return None


def machine_info() -> dict:
    """The CPU model, cores, versions (Python, tokenizers, daskwp, NumPy, pyarrow), the
    commit, the date, and the load and CPU pressure at the start."""
    import numpy as np
    import pyarrow as pa

    import daskwp

    model = "?"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        import tokenizers
        tk = tokenizers.__version__
    except ImportError:
        tk = "not installed"
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    return {"model": model, "cores": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "python": platform.python_version(), "tokenizers": tk, "daskwp": daskwp.__version__,
            "numpy": np.__version__, "pyarrow": pa.__version__, "commit": commit,
            "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "load_start": os.getloadavg()[0], "psi_start": cpu_pressure()}


def vm_hwm(pid="self") -> int | None:
    """The peak RSS (``VmHWM`` of /proc/PID/status, bytes) of process ``pid``, or None when
    it has gone. Not getrusage's ru_maxrss: Linux keeps that across fork + exec, so a
    spawned worker would report the peak of the process that started it."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


#: This process's environment when ``_common`` was first imported: what
#: :func:`launch_env` falls back to where /proc/self/environ cannot be read.
_IMPORT_ENV = dict(os.environ)


def launch_env() -> dict[str, str]:
    """The environment this process was started with (its shell's), for the commands a
    benchmark times as a user types them: /proc/self/environ, which later changes to
    ``os.environ`` leave alone, else ``os.environ`` as it was when this module was first
    imported. Not ``os.environ`` now: a LocalCluster started in this process has its
    nannies write ``distributed.nanny.pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_=65536``,
    ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``, ``OPENBLAS_NUM_THREADS=1``) and more
    (``PYTHONHASHSEED``, ``__DASK_PARENT_PID``) into ``os.environ`` for good, and every
    child started after it would inherit them: a driver whose glibc malloc trims at 64 KB,
    an in-process job with daskwp's malloc tuning off."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return dict(_IMPORT_ENV)
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


def kernel_stream(batches, calls: dict) -> tuple[dict, float]:
    """Every call of ``calls`` (name -> ``fn(batch)``, its result dropped) on every batch
    that ``batches`` yields (``(batch, text bytes)`` pairs), in turn, so the machine's
    noise hits them alike. Returns ``{name: {"seconds", "cpu", "bytes", "mbps"}}`` of the
    calls alone (wall and CPU seconds of this process, all its threads) and the wall
    seconds spent getting the batches (reading: in none of the calls' figures)."""
    wall = dict.fromkeys(calls, 0.0)
    cpu = dict.fromkeys(calls, 0.0)
    done, read = 0, 0.0
    it = iter(batches)
    while True:
        t = time.perf_counter()
        try:
            batch, nbytes = next(it)
        except StopIteration:
            read += time.perf_counter() - t
            break
        read += time.perf_counter() - t
        done += nbytes
        for name, fn in calls.items():
            t, c = time.perf_counter(), time.process_time()
            fn(batch)
            wall[name] += time.perf_counter() - t
            cpu[name] += time.process_time() - c
        del batch
    if not done:
        raise ValueError("kernel_stream: the batches hold no text")
    out = {name: {"seconds": wall[name], "cpu": cpu[name], "bytes": done,
                  "mbps": done / 1e6 / wall[name]} for name in calls}
    return out, read
