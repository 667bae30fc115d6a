"""``daskwp.connect``: a ``distributed.Client`` on local CPUs, local GPUs or a remote scheduler."""

from __future__ import annotations

from ..core import config as _config
from ..core.options import normalize_device

__all__ = ["connect", "gpu_count", "resolve_device"]


def gpu_count() -> int:
    """Visible CUDA GPUs (honouring ``CUDA_VISIBLE_DEVICES``); 0 when none or no driver."""
    try:
        from dask_cuda.utils import get_n_gpus
        return int(get_n_gpus())
    except Exception:
        pass
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def _gpu_stack_missing() -> list[str]:
    """What the GPU path lacks here: the names of missing packages, or 'a CUDA GPU'."""
    missing = []
    for module in ("dask_cuda", "cudf"):
        try:
            __import__(module)
        except Exception:
            missing.append(module)
    if not missing and gpu_count() == 0:
        missing.append("a CUDA GPU")
    return missing


def resolve_device(device: str | None = None) -> str:
    """``"cpu"`` or ``"gpu"``: ``device`` (or ``daskwp.device``), with "auto" resolved to
    "gpu" when dask-cuda and cudf import and a GPU is visible."""
    device = normalize_device(_config.get("device", device))
    if device == "auto":
        return "cpu" if _gpu_stack_missing() else "gpu"
    if device == "gpu":
        missing = _gpu_stack_missing()
        if missing:
            raise RuntimeError(f"device='gpu' needs dask-cuda, cudf and a CUDA GPU; missing: "
                               f"{', '.join(missing)} (use device='cpu' or 'auto')")
    return device


def connect(device: str | None = None, scheduler_address: str | None = None,
            n_workers: int | None = None, threads_per_worker: int | None = None,
            **cluster_kwargs):
    """Start (or join) a Dask cluster for tokenization and return its ``distributed.Client``.

    Parameters
    ----------
    device : {"auto", "cpu", "gpu"}, optional
        "cpu": a ``LocalCluster`` of worker processes. The native kernel releases the GIL,
        so each process may run several threads (``threads_per_worker``).
        "gpu": a dask-cuda ``LocalCUDACluster``, one worker per GPU; partitions are cudf
        and the vocabulary stays resident on each worker's GPU.
        "auto" (the default, ``daskwp.device``): "gpu" when dask-cuda, cudf and a GPU are
        present, else "cpu".
    scheduler_address : str, optional
        Address of a running scheduler (``tcp://host:8786``) for multi-node runs; the
        cluster is then not started here and ``device`` and the sizes are not used.
    n_workers : int, optional
        Worker processes; default one per GPU, or ``LocalCluster``'s choice on CPUs.
    threads_per_worker : int, optional
        Default ``LocalCluster``'s choice on CPUs, 1 on GPUs.
    **cluster_kwargs
        Passed to ``LocalCluster`` / ``LocalCUDACluster`` (``memory_limit``,
        ``dashboard_address``, ``CUDA_VISIBLE_DEVICES``, ``rmm_pool_size``, ...).

    Returns
    -------
    distributed.Client
        Closing it (or leaving its ``with`` block) also closes a cluster started here.
        daskwp's worker plugin (per-worker tokenizers, device blobs) is registered on it.
    """
    from distributed import Client

    from .plugin import register_worker_plugin

    scheduler_address = _config.get("scheduler_address", scheduler_address)
    n_workers = _config.get("n_workers", n_workers)
    threads_per_worker = _config.get("threads_per_worker", threads_per_worker)
    if scheduler_address:
        if cluster_kwargs:
            raise ValueError(f"scheduler_address={scheduler_address!r} joins a running "
                             f"cluster; cluster options {sorted(cluster_kwargs)} do not apply")
        client = Client(scheduler_address)
        register_worker_plugin(client)
        return client

    if resolve_device(device) == "gpu":
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(n_workers=n_workers,
                                   threads_per_worker=threads_per_worker or 1,
                                   **cluster_kwargs)
        client = Client(cluster)
        # Own the cluster as a Client(n_workers=...) owns its LocalCluster: closing the
        # client closes it.
        client._start_arg = None
        register_worker_plugin(client)
        return client

    cluster_kwargs.setdefault("processes", True)
    client = Client(n_workers=n_workers, threads_per_worker=threads_per_worker,
                    **cluster_kwargs)
    register_worker_plugin(client)
    return client
