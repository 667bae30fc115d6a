"""``benchmarks/_common.py``'s kernel timing and the environment the benchmarks start
their commands in, and :func:`assert_ratio`, which the report tests of pretraining_bench
and pipeline_bench use to recompute a printed ratio from the printed figures."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import _common  # noqa: E402


def assert_ratio(ratio: str, num: str, den: str, what: str = "") -> None:
    """``ratio`` (printed to 2 decimals, an ``x`` after it or not) is ``num / den`` as far
    as the printed figures (each rounded to its own decimals) tell: it lies in the interval
    that every pair of unrounded values behind them gives."""
    def bounds(text):
        text = text.replace(",", "").rstrip("x")
        half = 0.5 * 10 ** -(len(text.split(".")[1]) if "." in text else 0)
        return float(text) - half, float(text) + half
    r_lo, r_hi = bounds(ratio)
    n_lo, n_hi = bounds(num)
    d_lo, d_hi = bounds(den)
    assert d_lo > 0, (what, den)
    assert r_lo <= n_hi / d_lo and n_lo / d_hi <= r_hi, \
        f"{what}: {ratio} is not {num} / {den} = {(n_lo + n_hi) / (d_lo + d_hi):.4f}"


def test_assert_ratio_fails_on_a_wrong_ratio():
    assert_ratio("0.52x", "389.9", "756.0")
    assert_ratio("0.50", "5.0", "10.0")
    with pytest.raises(AssertionError, match="0.55x is not 389.9 / 756.0"):
        assert_ratio("0.55x", "389.9", "756.0", "megatron")
    with pytest.raises(AssertionError):
        assert_ratio("1.00", "5.0", "10.0")


def test_launch_env_is_the_environment_the_process_started_with(tmp_path):
    """What a LocalCluster's nannies write into os.environ (distributed's
    pre-spawn-environ: MALLOC_TRIM_THRESHOLD_ and the thread counts) stays out of
    launch_env(); a variable the process started with is there with its first value, even
    when changed or removed later."""
    script = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(REPO_ROOT / 'benchmarks')!r})
        import _common
        os.environ["MALLOC_TRIM_THRESHOLD_"] = "65536"
        os.environ["OMP_NUM_THREADS"] = "1"
        os.environ["DASKWP_BENCH_PROBE"] = "changed"
        del os.environ["DASKWP_BENCH_GONE"]
        print(json.dumps(_common.launch_env()))
    """)
    env = {"PATH": "/usr/bin:/bin", "DASKWP_BENCH_PROBE": "first", "DASKWP_BENCH_GONE": "x"}
    got = json.loads(subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                    capture_output=True, text=True).stdout)
    assert got["DASKWP_BENCH_PROBE"] == "first" and got["DASKWP_BENCH_GONE"] == "x"
    assert "MALLOC_TRIM_THRESHOLD_" not in got and "OMP_NUM_THREADS" not in got
    assert got["PATH"] == "/usr/bin:/bin"


@pytest.mark.slow
def test_a_command_started_after_a_local_cluster_gets_the_launch_environment(tmp_path):
    """The leak it guards against, for real: after a LocalCluster (processes, nannies) has
    run in this process, os.environ holds MALLOC_TRIM_THRESHOLD_=65536, and a child started
    with launch_env() does not."""
    script = textwrap.dedent(f"""
        import json, os, subprocess, sys
        sys.path.insert(0, {str(REPO_ROOT / 'benchmarks')!r})
        import _common

        def child(env):
            return json.loads(subprocess.run(
                [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
                env=env, capture_output=True, text=True, check=True).stdout)

        if __name__ == "__main__":
            from distributed import Client, LocalCluster
            with LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                              dashboard_address=None) as cluster, Client(cluster):
                pass
            print(json.dumps([child(None), child(_common.launch_env())]))
    """)
    (tmp_path / "probe.py").write_text(script)
    env = _common.launch_env()
    for k in ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, str(tmp_path / "probe.py")], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inherited, clean = json.loads(proc.stdout.strip().splitlines()[-1])
    assert inherited.get("MALLOC_TRIM_THRESHOLD_") == "65536"   # the leak is real
    assert "MALLOC_TRIM_THRESHOLD_" not in clean and "OMP_NUM_THREADS" not in clean
    assert {k: v for k, v in clean.items() if k != "PWD"} == \
        {k: v for k, v in env.items() if k != "PWD"}


def test_kernel_stream_times_the_calls_apart_from_the_reading(monkeypatch):
    """On a clock that moves 5 s for every batch read and 1 s (call a) or 2 s (call b) for
    every call: each call's seconds are its own, the reading's are apart, the calls run in
    turn on every batch, and MB/s is the batches' bytes over the call's seconds."""
    clock = [0.0]
    monkeypatch.setattr(_common.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(_common.time, "process_time", lambda: clock[0] / 2)
    order = []

    def batches():
        for i in range(3):
            clock[0] += 5.0
            yield f"batch{i}", 1_000_000 * (i + 1)

    def call(name, cost):
        def fn(batch):
            order.append((name, batch))
            clock[0] += cost
        return fn

    figs, read = _common.kernel_stream(batches(), {"a": call("a", 1.0), "b": call("b", 2.0)})
    assert order == [(n, f"batch{i}") for i in range(3) for n in ("a", "b")]
    assert read == 15.0
    assert figs["a"] == {"seconds": 3.0, "cpu": 1.5, "bytes": 6_000_000, "mbps": 2.0}
    assert figs["b"] == {"seconds": 6.0, "cpu": 3.0, "bytes": 6_000_000, "mbps": 1.0}
    with pytest.raises(ValueError, match="no text"):
        _common.kernel_stream(iter(()), {"a": call("a", 1.0)})
