"""``daskwp.connect``: a ``distributed.Client`` on local CPUs, local GPUs or a remote scheduler
(plain ``tcp://`` or mutual TLS, ``tls://``: :func:`make_security`, docs/batch-jobs.md "TLS")."""

from __future__ import annotations

import contextlib
import os

from ..backends.memory import tune_numpy_huge_pages
from ..core import config as _config
from ..core.options import SECURITY_KEYS, check_security, env_value, normalize_device

__all__ = ["ClusterSecurityError", "connect", "gpu_count", "make_security", "nanny_config",
           "resolve_device", "security_record", "worker_arenas"]

#: distributed's ``Security`` field for each key of a ``security`` mapping (the client's).
_SECURITY_FIELDS = dict(zip(SECURITY_KEYS, ("tls_ca_file", "tls_client_cert",
                                            "tls_client_key", "require_encryption")))


class ClusterSecurityError(ConnectionError):
    """A running scheduler cannot be joined because of TLS: it needs TLS and this client has
    no certificate or used a ``tcp://`` address, a certificate is not trusted by the other
    side, or the certificate or key cannot be loaded. The message starts with the cause."""


def make_security(security):
    """The ``distributed.security.Security`` of a client joining a scheduler.

    ``security``: a ``Security`` (used as it is); a mapping of ``ca_file``, ``cert``,
    ``key`` and ``require_encryption`` (``Security(tls_ca_file=..., tls_client_cert=...,
    tls_client_key=..., require_encryption=...)``: a key not given comes from distributed's
    configuration, ``distributed.comm.tls.*``, and ``require_encryption`` defaults to true
    once any TLS key is given); None: None (the client takes distributed's configuration,
    ``DASK_DISTRIBUTED__COMM__TLS__...`` environment variables included).
    """
    from distributed.security import Security
    if security is None or isinstance(security, Security):
        return security
    values = check_security("security", security)
    return Security(**{_SECURITY_FIELDS[k]: v for k, v in (values or {}).items()})


def _where(value) -> str | None:
    """A TLS file setting as recorded: its absolute path, or "(in memory)" for PEM text."""
    if not value:
        return None
    return "(in memory)" if "\n" in str(value) else os.path.abspath(str(value))


def security_record(scheduler_address: str | None, security=None) -> dict:
    """What a batch job records about its connection (``_job.json``): whether it uses TLS,
    where the settings came from, ``require_encryption``, and the paths of the CA file and
    of the client certificate. Never the key: neither its contents nor its path."""
    tls = bool(scheduler_address) and str(scheduler_address).startswith("tls://")
    record = {"tls": tls}
    if not scheduler_address or "://" not in str(scheduler_address):
        return record  # a local cluster or dask's synchronous scheduler
    from distributed.security import Security
    sec = make_security(security) or Security()
    record.update(settings="dask.config" if security is None else "job",
                  require_encryption=bool(sec.require_encryption))
    if tls:
        record.update(ca_file=_where(sec.tls_ca_file), cert=_where(sec.tls_client_cert))
    return record


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
            security=None, **cluster_kwargs):
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
        Address of a running scheduler (``tcp://host:8786``, ``tls://host:8786``) for
        multi-node runs; the cluster is then not started here and ``device`` and the sizes
        are not used.
    n_workers : int, optional
        Worker processes; default one per GPU, or ``LocalCluster``'s choice on CPUs.
    threads_per_worker : int, optional
        Default ``LocalCluster``'s choice on CPUs, 1 on GPUs.
    security : distributed.security.Security or dict, optional
        The TLS settings to join ``scheduler_address`` with: a ``Security``, or a mapping of
        ``ca_file``, ``cert``, ``key`` (paths) and ``require_encryption`` (see
        :func:`make_security`). Default: distributed's own configuration
        (``distributed.comm.tls.*``, ``DASK_DISTRIBUTED__COMM__TLS__...``). A TLS failure
        raises :class:`ClusterSecurityError` naming the cause ("TLS required",
        "certificate not trusted"). It needs ``scheduler_address``: a cluster started
        here is not secured by daskwp.
    **cluster_kwargs
        Passed to ``LocalCluster`` / ``LocalCUDACluster`` (``memory_limit``,
        ``dashboard_address``, ``CUDA_VISIBLE_DEVICES``, ``rmm_pool_size``, ...).

    Returns
    -------
    distributed.Client
        Closing it (or leaving its ``with`` block) also closes a cluster started here.
        daskwp's worker plugin (per-worker tokenizers, device blobs) is registered on it.

    Examples
    --------
    >>> import daskwp
    >>> client = daskwp.connect(device="cpu", n_workers=1, threads_per_worker=1,
    ...                         processes=False, dashboard_address=":0")
    >>> len(client.scheduler_info()["workers"])
    1
    >>> client.close(); client.cluster.close()
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
        client = join_scheduler(scheduler_address, make_security(security))
        register_worker_plugin(client)
        return client
    if security is not None:
        raise ValueError("security= sets how to join a running scheduler; give "
                         "scheduler_address (tls://host:port) too")

    if resolve_device(device) == "gpu":
        from dask_cuda import LocalCUDACluster

        with worker_arenas(threads_per_worker or 1):
            cluster = LocalCUDACluster(n_workers=n_workers,
                                       threads_per_worker=threads_per_worker or 1,
                                       **cluster_kwargs)
        client = Client(cluster)
        # Own the cluster as a Client(n_workers=...) owns its LocalCluster: closing the
        # client closes it.
        client._start_arg = None
        register_worker_plugin(client)
        _register_process_tuning(client)
        return client

    cluster_kwargs.setdefault("processes", True)
    with worker_arenas(_local_worker_threads(n_workers, threads_per_worker)
                       if cluster_kwargs["processes"] else None):
        if cluster_kwargs["processes"]:
            cluster_kwargs.setdefault("config", nanny_config())
        client = Client(n_workers=n_workers, threads_per_worker=threads_per_worker,
                        **cluster_kwargs)
    register_worker_plugin(client)
    if cluster_kwargs["processes"]:
        _register_process_tuning(client)
    return client


def nanny_config() -> dict:
    """A copy of ``dask.config`` now, to the last level, for the nannies of a cluster
    started here (``Nanny(config=...)``): the workers they start, and those they start again
    after one died, run with the configuration the cluster was started in.

    A nanny keeps ``dask.config`` as it finds it, but only its top level is its own: the
    sections are the global ones, which a ``dask.config.set`` block restores when it ends.
    A batch job starts its cluster in such a block (no statistical profiler, slower ticks,
    short logs: ``daskwp.jobs.driver.connect_cluster``), so a worker its nanny restarted
    (issue 42's soak kills one half way) ran the profiler, the 20 ms tick and the
    1000-entry logs of distributed's defaults."""
    import copy

    import dask
    return copy.deepcopy(dask.config.config)


def _local_worker_threads(n_workers: int | None, threads_per_worker: int | None) -> int:
    """The task threads of each worker of the ``LocalCluster`` that ``Client(n_workers=,
    threads_per_worker=)`` starts (its own rule when they are not given)."""
    import math

    from dask.system import CPU_COUNT
    from distributed.deploy.utils import nprocesses_nthreads
    if threads_per_worker:
        return int(threads_per_worker)
    if not n_workers:
        return int(nprocesses_nthreads()[1])
    return max(1, math.ceil(CPU_COUNT / int(n_workers)))


def worker_arenas(task_threads: int | None):
    """A context whose nannies (those made in it) start their workers, restarted ones too,
    with glibc's ``MALLOC_ARENA_MAX`` set to ``task_threads``: one malloc arena per task
    thread (through distributed's ``distributed.nanny.pre-spawn-environ``).
    Nothing changes when ``task_threads`` is None, when ``MALLOC_ARENA_MAX`` is set in the
    environment or in that setting already (the user's), or with ``worker_malloc`` false
    (``DASKWP_WORKER_MALLOC=0``).

    Why: a worker's threads each took an arena of their own (glibc: up to 8 per core), the
    part writer's and the kernel's threads of a job's last partitions (given the idle
    workers' cores) among them; each arena kept what its threads freed, unused by the
    others, and a worker's peak RSS grew with the partitions it wrote. The variable must be
    set before the process starts: arenas made before a ``mallopt`` stay, and new threads
    take the idle ones (docs/design.md §3.5 "Worker malloc").
    """
    import dask
    key = "distributed.nanny.pre-spawn-environ"
    environ = dict(dask.config.get(key, default=None) or {})
    if task_threads is None or "MALLOC_ARENA_MAX" in os.environ or \
            "MALLOC_ARENA_MAX" in environ or env_value("worker_malloc") is False:
        return contextlib.nullcontext()
    environ["MALLOC_ARENA_MAX"] = str(max(1, int(task_threads)))
    return _arenas_set(dask.config.set({key: environ}))


@contextlib.contextmanager
def _arenas_set(config):
    """``config`` (a ``dask.config.set``) for the block; after it, this process's own
    environment without ``MALLOC_ARENA_MAX`` again: a nanny of a ``LocalCluster`` runs here
    and copies its workers' variables into ``os.environ`` as it spawns them, and a cluster
    started later would take ours for the user's."""
    try:
        with config:
            yield
    finally:
        os.environ.pop("MALLOC_ARENA_MAX", None)


def _register_process_tuning(client) -> None:
    """On the workers of a cluster started here (present and future, restarted ones too),
    :func:`~daskwp.backends.memory.tune_numpy_huge_pages`: their processes are daskwp's."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class DaskwpProcessTuning(WorkerPlugin):
        idempotent = True

        def setup(self, worker) -> None:
            tune_numpy_huge_pages()

    client.register_plugin(DaskwpProcessTuning(), name="daskwp-process")


def join_scheduler(address: str, security=None, timeout=None):
    """``distributed.Client(address, security=...)``; a failure caused by TLS raises
    :class:`ClusterSecurityError` with the cause, anything else propagates as it is."""
    from distributed import Client
    kwargs = {} if security is None else {"security": security}
    if timeout is not None:
        kwargs["timeout"] = timeout
    if security is not None and str(address).startswith("tls://"):
        import ssl
        try:  # the certificate and key load (distributed would report it as unreachable)
            security.get_connection_args("client")
        except (ssl.SSLError, OSError) as e:
            raise ClusterSecurityError(
                f"cannot load the TLS certificate or key (cert "
                f"{_where(security.tls_client_cert)}, CA file {_where(security.tls_ca_file)}): "
                f"{getattr(e, 'strerror', None) or e}") from None
    try:
        return Client(address, **kwargs)
    except (OSError, TypeError, RuntimeError) as e:
        cause = _tls_failure(str(address), security, e)
        if cause is None:
            raise
        raise ClusterSecurityError(cause) from None


def _chain(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def _tls_failure(address: str, security, exc: BaseException) -> str | None:
    """The TLS cause of a failed ``Client(address)``, as one line, or None."""
    import ssl
    from distributed.comm.core import CommClosedError
    from distributed.security import Security

    sec = security or Security()
    flags = "ca_file, cert and key (--tls-ca-file, --tls-cert, --tls-key)"
    text = " ".join(str(e) for e in _chain(exc))
    if isinstance(exc, TypeError) and "ssl_context" in text:
        missing = [k for k, v in (("ca_file", sec.tls_ca_file), ("cert", sec.tls_client_cert))
                   if not v]
        return (f"TLS required: {address} is a TLS address and this client has no "
                f"certificate ({' and '.join(missing) or 'ca_file and cert'} not set); give "
                f"the cluster's {flags}, or set distributed.comm.tls.*")
    if isinstance(exc, RuntimeError) and "encryption required" in text:
        return (f"TLS required: require_encryption is on and {address} is not a tls:// "
                f"address; use the scheduler's tls:// address")
    for e in _chain(exc):
        if isinstance(e, ssl.SSLCertVerificationError):
            return (f"certificate not trusted: the scheduler at {address} presents a "
                    f"certificate that the CA file {_where(sec.tls_ca_file)} does not "
                    f"verify ({e.verify_message or e.reason}); use the cluster's CA file")
    alerts = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "CERTIFICATE_REQUIRED",
              "HANDSHAKE_FAILURE", "ACCESS_DENIED", "DECRYPT_ERROR")
    hit = next((a for a in alerts if a in text.upper()), None)
    if hit is None and address.startswith("tls://") and isinstance(exc, CommClosedError):
        # The server's alert can be lost (a reset closes the connection before it is read):
        # a handshake of our own, with nothing sent after it, gets it.
        try:
            ctx = sec.get_connection_args("client")["ssl_context"]
        except Exception:  # noqa: BLE001 - no usable context: nothing to learn here
            ctx = None
        if ctx is not None:
            hit = next((a for a in alerts if a in (_handshake(address, ctx)[1] or "")), None)
    if hit is not None:
        return (f"certificate not trusted: the scheduler at {address} refused this client's "
                f"certificate {_where(sec.tls_client_cert)} (TLS alert {hit.lower()}); use a "
                f"certificate signed by the cluster's CA")
    if address.startswith("tcp://") and isinstance(exc, CommClosedError):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # only whether it speaks TLS
        if _handshake(address, ctx)[0]:
            return (f"TLS required: the scheduler at {address} accepts only TLS connections; "
                    f"use tls://{address[len('tcp://'):]} with the cluster's {flags}")
    return None


def _handshake(address: str, ctx, timeout: float = 3.0) -> tuple[bool, str | None]:
    """A TLS handshake with the server at ``address`` using ``ctx``, then a read of up to
    ``timeout`` seconds (nothing is sent). Returns (whether it speaks TLS, the TLS alert it
    sent, upper case, e.g. "TLSV1_ALERT_UNKNOWN_CA", or None): a TLS-only scheduler resets
    plain connections, and one that does not trust a client certificate says so by an
    alert."""
    import socket
    import ssl
    from distributed.comm.addressing import parse_address, parse_host_port
    try:
        host, port = parse_host_port(parse_address(address)[1])
    except ValueError:
        return False, None
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw) as conn:
            try:
                conn.recv(1)
            except (TimeoutError, socket.timeout):
                pass
            return True, None
    except ssl.SSLError as e:
        text = f"{e.reason or ''} {e}".upper()
        return ("ALERT" in text), (text if "ALERT" in text else None)
    except OSError:
        return False, None
