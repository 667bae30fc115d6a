"""The CPU clock of the batch jobs' stage timers (``cpu_seconds`` in ``_summary.json``).

``time.thread_time()`` counts the calling thread only; a kernel call with
``num_threads > 1`` runs on threads the kernel spawns, which charge their CPU time to the
calling thread's counter in the extension (``_ext.helper_thread_cpu_seconds()``). The
stage clock is the sum of both, so a stage's delta is its CPU on every thread it used.
"""

from __future__ import annotations

import time

from .. import _ext


def stage_cpu_seconds() -> float:
    """CPU seconds of the calling thread and of the kernel threads its calls spawned (a
    running total: take deltas)."""
    return time.thread_time() + _ext.helper_thread_cpu_seconds()
