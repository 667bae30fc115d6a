"""The ``cluster`` section: Parquet through the lazy accessor on a (CUDA) Dask cluster to
Parquet and back with ``daskwp.read_tokenized``, against the same job on the CPU backend.
The worker functions travel by value, so workers need not find this folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle
import numpy as np
import pyarrow as pa

import daskwp

from .compare import compare_frames
from .data import DEFAULT_VOCAB, GB, MB, arrow_nbytes, log, tiled

# The workers cannot import this folder (it is not a package on their path): Dask sends the
# worker functions of this module by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _warm_worker(gpu: bool):
    """Imports, and on a GPU worker the compiled module (from CuPy's cache), outside the
    timed job. No tokenizer is cached and no vocabulary uploaded, so the job's own device
    models are what _worker_report counts."""
    import daskwp  # noqa: F401
    from daskwp.backends import cuda as c

    if gpu:
        c._module()
    return True


def _worker_report(dask_worker=None):
    """What a worker ran: the devices of its cached tokenizers and how many device models
    (vocabulary blobs on a GPU) its process holds."""
    from daskwp.backends import cuda as c

    plugin = getattr(dask_worker, "plugins", {}).get("daskwp") if dask_worker else None
    state = getattr(plugin, "state", None)
    devices = []
    if state is not None:
        devices = [state.tokenizers.get(k).device for k in state.tokenizers.keys()]
    return {"tokenizer_devices": devices, "device_models": len(c._models),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


class ClusterSection:
    """Mixin of :class:`gpu_check.Check`: cluster."""

    def cluster(self):
        args, be = self.args, self.be
        import dask.dataframe as dd
        import pyarrow.parquet as pq
        from distributed import Client, LocalCluster

        from daskwp.distributed.plugin import register_worker_plugin

        C: dict = {}
        self.R["cluster"] = C
        vname = DEFAULT_VOCAB[0] if DEFAULT_VOCAB in self.vocabs else self.vocabs[0][0]
        real = be is not None and be.real
        tmp = Path(tempfile.mkdtemp(prefix="daskwp-gpucheck-"))
        try:
            # input: English with empty and null documents, as Parquet files
            arr = tiled(self.english(), args.cluster_mb)
            n = len(arr)
            mask = np.zeros(n, dtype=bool)
            mask[::997] = True                       # nulls
            texts = pa.array(np.where(mask, None, np.asarray(arr.to_pylist(), dtype=object)),
                             type=pa.large_string())
            in_dir = tmp / "input"
            in_dir.mkdir()
            per = int(np.ceil(n / args.cluster_files))
            for i in range(args.cluster_files):
                pq.write_table(pa.table({"text": texts.slice(i * per, per)}),
                               in_dir / f"part-{i:03d}.parquet")
            C.update(input_mb=round(arrow_nbytes(arr) / MB, 2), documents=n,
                     files=args.cluster_files, nulls=int(mask.sum()))
            opts = dict(max_length=128, stride=32, padding="do_not_pad")
            C["options"] = opts
            n_gpus = be.cp.cuda.runtime.getDeviceCount() if real else 0
            tok_dev = self.tok(vname, device="gpu") if real else self.tok(vname)
            tok_cpu = self.tok(vname)
            C["device_tokenizer"] = tok_dev.device

            # The CPU job reads its own copy of the input: dask tokens ignore the tokenizer's
            # device (see findings), so with one input both jobs would be the same graph.
            in_cpu = tmp / "input_cpu"
            shutil.copytree(in_dir, in_cpu)

            def job(client, tok, out, src):
                ddf = dd.read_parquet(str(src), dtype_backend="pyarrow")
                C.setdefault("partitions", ddf.npartitions)
                C.setdefault("partition_type", str(ddf._meta["text"].dtype))
                res = ddf["text"].wordpiece.tokenize(vocab=tok, **opts)
                t0 = time.perf_counter()
                res.to_parquet(str(out))
                return time.perf_counter() - t0

            # the device job
            stack = contextlib.ExitStack()
            client = None
            if real:
                try:
                    from dask_cuda import LocalCUDACluster

                    cluster = stack.enter_context(
                        LocalCUDACluster(threads_per_worker=1, dashboard_address=None))
                    client = stack.enter_context(Client(cluster))
                    kind = "dask_cuda.LocalCUDACluster"
                except Exception as e:
                    stack.close()
                    stack = contextlib.ExitStack()
                    why = f"{type(e).__name__}: {e}"
                    log(f"  dask_cuda.LocalCUDACluster unavailable ({why}); plain LocalCluster")
                    kind = f"LocalCluster ({n_gpus} workers; dask_cuda unavailable: {why})"
            else:
                kind = "LocalCluster (dry run: CPU backend on both sides)"
            if client is None:
                cluster = stack.enter_context(LocalCluster(
                    n_workers=max(1, n_gpus) if real else 2, threads_per_worker=1,
                    processes=True, dashboard_address=None))
                client = stack.enter_context(Client(cluster))
            C["device_cluster"] = kind
            log(f"  device job: {kind}, tokenizer device={tok_dev.device}")
            with stack:
                register_worker_plugin(client)
                C["device_cluster_workers"] = len(client.scheduler_info()["workers"])
                client.run(_warm_worker, real)
                t = job(client, tok_dev, tmp / "out_device", in_dir)
                C["device_job_s"] = round(t, 3)
                C["device_job_gbs"] = C["input_mb"] * MB / t / GB
                C["device_workers"] = client.run(_worker_report)
            log(f"  device job {C['device_job_s']} s ({C['device_job_gbs']:.3f} GB/s incl. "
                f"Parquet); workers: {C['device_workers']}")
            # the CPU job
            cpu_workers = max(1, min(8, (os.cpu_count() or 2) // 2))
            threads = max(1, (os.cpu_count() or 2) // cpu_workers)
            t0 = time.perf_counter()
            with LocalCluster(n_workers=cpu_workers, threads_per_worker=threads,
                              processes=True, dashboard_address=None) as lc, \
                    Client(lc) as client:
                register_worker_plugin(client)
                C["cpu_cluster"] = f"LocalCluster({cpu_workers} workers x {threads} threads)"
                C["cpu_cluster_start_s"] = round(time.perf_counter() - t0, 2)
                client.run(_warm_worker, False)
                t = job(client, tok_cpu, tmp / "out_cpu", in_cpu)
                C["cpu_job_s"] = round(t, 3)
                C["cpu_workers"] = client.run(_worker_report)
                C["cpu_job_gbs"] = C["input_mb"] * MB / t / GB
            log(f"  CPU job {C['cpu_job_s']} s ({C['cpu_job_gbs']:.3f} GB/s incl. Parquet) on "
                f"{C['cpu_cluster']}")
            # read both back and compare
            a = daskwp.read_tokenized(tmp / "out_device", tokenizer=tok_cpu)
            b = daskwp.read_tokenized(tmp / "out_cpu", tokenizer=tok_cpu)
            fa, fb = (x.to_dask().compute() for x in (a, b))
            C["rows"] = [len(fa), len(fb)]
            msg = compare_frames(fa, fb)
            logids = np.unique(fb["logID"].to_numpy())
            global_ok = bool(len(logids) == n and logids[0] == 0 and logids[-1] == n - 1)
            C["logids_global"] = global_ok
            ba = next(iter(a.batches(4096, max_length=128)))
            bb = next(iter(b.batches(4096, max_length=128)))
            batch_ok = all(np.array_equal(ba[k], bb[k]) for k in
                           ("input_ids", "attention_mask", "metadata"))
            C["first_batch_equal"] = batch_ok
            C["files_written"] = [len(a.files), len(b.files)]
            C["ok"] = msg is None and global_ok and batch_ok
            if msg:
                C["mismatch"] = msg
            if real and not any(w.get("device_models") for w in C["device_workers"].values()):
                C["ok"] = False
                C["mismatch"] = "no device model on any worker: the job did not run on the GPU"
            if any("gpu" in w.get("tokenizer_devices", []) or w.get("device_models")
                   for w in C["cpu_workers"].values()):
                C["ok"] = False
                C["mismatch"] = "the CPU job ran on the GPU on some worker"
            if real:
                C["device_over_cpu_job"] = C["device_job_gbs"] / C["cpu_job_gbs"]
            log(f"  read back: rows {C['rows']}, logIDs global {global_ok}, first batch equal "
                f"{batch_ok}, device == cpu {msg is None}" + (f" ({msg})" if msg else ""))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
