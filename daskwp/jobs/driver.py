"""Batch jobs: the driver that plans, runs and verifies a job (``run_job``).

A job reads documents from files (plain text, CSV/TSV, JSON Lines or Parquet), splits them
into partitions, tokenizes every partition on a Dask cluster (or in-process) and writes one
Parquet file per partition plus ``_job.json`` (what the job is) and ``_summary.json`` (what
it did). See ``docs/batch-jobs.md`` for the user-facing description and docs/design.md §4.

The package: configuration (:mod:`.config`, from the option table), inputs (:mod:`.inputs`),
partition tasks and output checks (:mod:`.parts`), progress (:mod:`.progress`) and this
driver.

One graph
---------
A job is one task graph (:func:`job_graph`) built on the distributed layer, as the
``.wordpiece`` accessor's is:

* the tokenizer is ONE graph key (:func:`daskwp.distributed.graph.tokenizer_layer`), which
  the write tasks resolve through the per-worker state (``cached_tokenizer``; ``run_job``
  registers daskwp's worker plugin on the client it uses);
* the logID offsets come from THE global-offset pass
  (:class:`daskwp.distributed.graph.PartitionCounts`): its leaves are the partitions'
  document counts, known (from the Parquet plan, ``_job.json`` or a complete part) or counted
  by a task (:func:`.parts.count_job_partition`); the write task of partition i takes the
  offset node i, and the driver asks for every offset and count to record them;
* one write task per missing part reads, tokenizes (``tokenize_partition``,
  ``add_logid_offset``) and writes it.

With a cluster the graph runs on it (``client.get``, one future per part for the progress);
with ``scheduler_address: synchronous`` the same graph runs on dask's synchronous scheduler.

Resume design
-------------
* ``_job.json`` is written before any part: job parameters, the input fingerprint (path, size
  and mtime of every file), the daskwp version, the partition plan and the document counts
  known so far; once the pass has run, every partition's count and global logID offset.
* Each part is written to a hidden temporary name in the output folder, fsync'ed and renamed
  to ``part-NNNNN.parquet`` (atomic on POSIX), so a part file either is complete or does not
  exist. Its Parquet key-value metadata records the job id, the partition index, its logID
  offset, its statistics and a checksum of its data pages.
* A rerun with the same parameters and inputs keeps every part whose footer is readable,
  whose metadata matches the plan and whose data pages match their checksum, and writes only
  the others. Different parameters or inputs are refused: "output directory holds another
  job's data".
* At the end every part is checked: the logIDs of part i must run from its offset to
  offset + documents - 1 (each document present, in order, exactly once), and the documents
  of all parts must add up to the input's. A Parquet part is checked from its footer
  (:func:`.parts.verify_parquet_output`: its metadata and logID statistics; the order within
  a row group is checked as it is written, :class:`.parts.LogidCheck`).
* On an object store the planning's one listing of the output says which parts, rejects
  files and ``_summary.json`` exist: nothing is opened or removed that it does not list.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import glob
import hashlib
import json
import os
import sys
import threading
import time
import uuid
from typing import Callable, Iterable, NamedTuple, Sequence


from ..backends.memory import release_freed_heap
from ..backends.tokenizer import resolve_tokenizer
from ..core.lengths import LengthCounts
from ..core.options import TOKENIZER, names
from ..core.version import __version__
from ..distributed.cluster import security_record
from ..distributed.lending import cluster_workers, give_idle_threads
from ..distributed.tasks import CALL_OPTIONS, call_options
from ..frames import storage
from ..frames.schema import empty_texts
from ..frames.storage import is_url
from .config import CONFIG_KEYS, JOB_KEYS, LOCAL_SCHEDULERS, JobConfig, default_value
from .errors import ConfigError, JobError, OutputConflictError
from .inputs import (PartitionSpec, input_fingerprint, keeping_counted_bytes,
                     list_input_files, plan_partitions)
from .inputs.fetch_spool import HeadStreams, StreamPrefetch, remove_run_spools, run_token, \
    start_prefetch
from .parts import (FOOTER_READ, JOB_FILE, JOB_FORMAT, PART_PREFIX, PART_SUFFIX, REJECTS_PREFIX,
                    REJECTS_SUFFIX, SUMMARY_FILE, TMP_PREFIX, check_part, count_job_partition,
                    empty_partition, part_name, rejects_path, remove_temporary_files,
                    verify_output, verify_parquet_output, write_partition)
from .megatron import PART_FILES as MEGATRON_PART_FILES
from .datasets import (finish_datasets, is_datasets_file, verify_datasets_output,
                       write_datasets_partition)
from .megatron import (InlineMerge, PartMerger, check_output_format_options,
                       finish_megatron, merged_resume_state,
                       is_megatron_file, megatron_options, verify_megatron_output,
                       write_local_rejects, write_megatron_partition)
from .records import RECORD_SUFFIX, check_part_record, part_stem
from .progress import Progress

def resolve_device(device: str) -> str:
    """'cpu' or 'gpu' ('auto': GPUs when dask-cuda, cudf and a GPU are present)."""
    from ..distributed.cluster import resolve_device as _resolve
    try:
        return _resolve(device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def choose_scheduler(cfg: JobConfig, input_file_bytes: int, device: str
                     ) -> tuple[str | None, str]:
    """Where a job with ``input_file_bytes`` of input runs, and why: ``'threads'`` or
    ``'synchronous'`` (this process), ``None`` (a local cluster) or the address of a running
    scheduler.

    ``scheduler_address`` decides when set. Without it, ``n_workers`` or
    ``threads_per_worker`` (the job's or ``dask.config``'s) ask for a local cluster, as does
    a GPU device (one worker per GPU); otherwise an input of at most
    ``in_process_max_bytes`` runs on threads in this process and a larger one on a local
    cluster."""
    if cfg.scheduler_address:
        return cfg.scheduler_address, "scheduler_address"
    asked = [k for k in ("n_workers", "threads_per_worker") if getattr(cfg, k) is not None]
    if asked:
        return None, f"{' and '.join(asked)} set"
    if device != "cpu":
        return None, f"device {device}: one worker per GPU"
    limit = cfg.in_process_max_bytes
    if limit and input_file_bytes <= limit:
        return "threads", f"input {_fmt_size(input_file_bytes)} <= in_process_max_bytes " \
                          f"{_fmt_size(limit)}"
    return None, (f"input {_fmt_size(input_file_bytes)} > in_process_max_bytes "
                  f"{_fmt_size(limit)}" if limit else "in_process_max_bytes 0")


def _fmt_size(n: int) -> str:
    """Bytes in decimal units, as sizes are written in job files (``1GB``, ``64MB``)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def open_scheduler(cfg: JobConfig, device: str, input_file_bytes: int, client=None,
                   work: bool = True, log: Callable[[str], None] = lambda msg: None,
                   tasks: int | None = None, started: "ClusterStart | None" = None,
                   urls: Sequence[str] = ()) -> tuple[object, bool, dict]:
    """What runs a job's graphs: ``(runner, own, record)``. ``runner`` is the ``client``
    given, an :class:`~daskwp.distributed.local.InProcess` scheduler, or a client of a
    cluster started or joined here (``own``: close it with :func:`close_scheduler`).
    ``record`` says which ran, for ``_job.json`` and the summary: ``mode`` (``threads``,
    ``synchronous``, ``local_cluster`` or ``cluster``), ``threads``, and for a cluster
    ``workers`` and ``address``; ``why`` the mode was chosen. Without ``work`` (every part
    complete) nothing is started: the graph's known counts are summed in this process.
    ``tasks``: the partitions to read, for the in-process threads' share of the cores.
    ``started``: the local cluster :func:`start_cluster_early` started, used (or closed
    when nothing runs on it) instead of starting one; ``urls``: the job's input and output
    URLs, whose filesystems the workers of a local cluster started here build ahead of
    their first task (:func:`start_cluster`)."""
    from ..distributed.local import InProcess
    if not work:
        if started is not None:
            started.close()
        runner = InProcess("synchronous")
        return runner, False, dict(runner.describe(), why="nothing to tokenize")
    if client is not None and cfg.scheduler_address not in LOCAL_SCHEDULERS:
        own, mode, why = False, "cluster", "client given"
    else:
        where, why = choose_scheduler(cfg, input_file_bytes, device)
        if where in LOCAL_SCHEDULERS:
            if started is not None:
                started.close()
            runner = InProcess(where, tasks=tasks)
            return runner, False, dict(runner.describe(), why=why)
        client = started.result() if started is not None else \
            start_cluster(cfg, device, () if where else urls)
        own, mode = True, "cluster" if where else "local_cluster"
        dash = getattr(client, "dashboard_link", None)
        log(f"daskwp: cluster {client.scheduler.address if client.scheduler else ''}"
            + (f", dashboard {dash}" if dash else ""))
    from ..distributed.plugin import register_worker_plugin
    register_worker_plugin(client)
    return client, own, dict(_cluster_record(client, mode), why=why)


def running_cluster_profiler_paused(cfg: JobConfig, runner, run_record: dict):
    """A context in which the workers of a cluster the job did not start (``run_record``'s
    ``mode`` ``cluster``: a running scheduler, or the client given) run without
    distributed's statistical profiler (``pause_worker_profiler``, default on;
    :func:`daskwp.distributed.profiler.worker_profiler_paused`: restored after, also on an
    error or an interrupt, and by its lease if this process dies). A local cluster the job
    started has none (:func:`connect_cluster`); in-process runners have no workers."""
    from ..distributed.profiler import worker_profiler_paused
    return worker_profiler_paused(
        runner, cfg.pause_worker_profiler and run_record.get("mode") == "cluster")


def _cluster_record(client, mode: str) -> dict:
    try:
        nthreads = client.nthreads()
    except Exception:   # noqa: BLE001  a record, never a reason to fail
        nthreads = {}
    return {"mode": mode, "workers": len(nthreads), "threads": sum(nthreads.values()),
            "address": getattr(client.scheduler, "address", None)}


def close_scheduler(runner, own: bool) -> None:
    """Close the cluster that :func:`open_scheduler` started (``own``), and give the memory
    its scheduler (run in this process) held back to the system
    (:func:`~daskwp.backends.memory.release_freed_heap`)."""
    if own and runner is not None:
        _close_own_client(runner)
        release_freed_heap()


def format_run_record(r: dict) -> str:
    """``in-process threads (2): input 1 MiB <= in_process_max_bytes 1 GiB``, ``local
    cluster, 2 workers (2 threads) at tcp://...: n_workers set``, ..."""
    if r.get("mode") in LOCAL_SCHEDULERS:
        what = ("in-process threads" if r["mode"] == "threads" else
                "in-process, synchronous") + f" ({r.get('threads')})"
    else:
        what = ("local cluster" if r.get("mode") == "local_cluster" else "cluster") + \
            f", {r.get('workers')} workers ({r.get('threads')} threads) at {r.get('address')}"
    return what + (f": {r['why']}" if r.get("why") else "")


#: The periodic callbacks of a cluster a job starts itself, less often than distributed's
#: defaults (20 ms, 500 ms, 100 ms): the event loops' tick (a diagnostic: a warning when a
#: loop was blocked), the system monitor (CPU, memory and network counters for the
#: dashboard and the heartbeats) and the memory monitor (a worker's spill and pause, its
#: nanny's restart at the memory limit). At the defaults an idle two-worker cluster took 8%
#: of a core (the scheduler and nannies in this process 4.3%, each worker 1.8%), 4% of a
#: 2-core machine through every job; at these 1.8% (docs/batch-jobs.md "Clusters").
#: A running cluster keeps its own settings.
OWN_CLUSTER_INTERVALS = {"distributed.admin.tick.interval": "1s",
                         "distributed.admin.system-monitor.interval": "2s",
                         "distributed.worker.memory.monitor-interval": "500ms"}

#: ``distributed.admin.low-level-log-length`` of the clusters a job starts itself: the
#: scheduler's transition log and event topics and the workers' logs keep this many entries
#: (a stall is diagnosed by :class:`StallWatch`, not from them). A running cluster keeps its
#: own setting.
OWN_CLUSTER_LOG_LENGTH = 100


def connect_cluster(cfg: JobConfig, device: str):
    """``daskwp.connect`` for the job: a running scheduler, or a local (CUDA) cluster."""
    from ..distributed.cluster import ClusterSecurityError, connect
    if cfg.scheduler_address:
        try:
            return connect(scheduler_address=cfg.scheduler_address, security=cfg.security)
        except ClusterSecurityError as e:  # TLS required, certificate not trusted, ...
            raise JobError(str(e)) from None
        except OSError as e:
            raise JobError(f"cannot reach the scheduler at {cfg.scheduler_address!r}: "
                           f"{e}") from None
    import dask
    import distributed  # noqa: F401  its config defaults first: the set below restores them
    # The job's own workers run without distributed's statistical profiler: it samples
    # every task thread's stack each 10 ms, CPU a batch job has no use for (a perf profile of
    # the workers showed it; docs/batch-jobs.md "Clusters"). Its scheduler, nannies and
    # workers wake less often (OWN_CLUSTER_INTERVALS). Its scheduler, which runs in this
    # process, and its workers keep their developer logs (the transition log, the event
    # topics, the recent messages) to OWN_CLUSTER_LOG_LENGTH entries: at distributed's 1000
    # they filled as the job's partitions went on, the driver's RSS growing with them.
    with dask.config.set({"distributed.worker.profile.enabled": False,
                          **OWN_CLUSTER_INTERVALS,
                          "distributed.admin.low-level-log-length": OWN_CLUSTER_LOG_LENGTH}):
        return connect(device=device, n_workers=cfg.n_workers,
                       threads_per_worker=cfg.threads_per_worker, dashboard_address=":0")


def start_cluster(cfg: JobConfig, device: str, urls: Sequence[str] = ()):
    """:func:`connect_cluster` with daskwp's worker plugin registered; on a local cluster of
    a job with ``urls`` (its input and output URLs) the workers also start building those
    filesystems (:class:`~daskwp.distributed.plugin.StorageWarmup`) as they come up."""
    from ..distributed.plugin import StorageWarmup, register_worker_plugin
    client = connect_cluster(cfg, device)
    try:
        urls = [u for u in urls if is_url(u)]
        if urls and not cfg.scheduler_address:
            client.register_plugin(StorageWarmup(urls, cfg.storage_options))
        register_worker_plugin(client)
    except BaseException:
        _close_own_client(client)
        raise
    return client


class ClusterStart:
    """A local cluster being started in a thread (:func:`start_cluster`) while the driver
    lists and plans: :meth:`result` waits for its client (or raises its error), and
    :meth:`close` waits for it and closes a cluster nobody took."""

    def __init__(self, cfg: JobConfig, device: str, urls: Sequence[str]):
        self._client = None
        self._error: BaseException | None = None
        #: set once the thread has imported distributed (or failed): the driver's own
        #: imports wait for it (:meth:`wait_imported`)
        self.imported = threading.Event()
        self._thread = threading.Thread(target=self._start, args=(cfg, device, list(urls)),
                                        name="daskwp-cluster-start", daemon=True)
        self._thread.start()

    def _start(self, cfg, device, urls) -> None:
        try:
            import distributed  # noqa: F401  (the GIL's share of the start: first)
        except BaseException:  # noqa: BLE001  (start_cluster raises it again)
            pass
        finally:
            self.imported.set()
        try:
            self._client = start_cluster(cfg, device, urls)
        except BaseException as e:  # noqa: BLE001  raised by result(), in the driver
            self._error = e

    def wait_imported(self, timeout: float = 30.0) -> None:
        """Wait until the thread has imported distributed: an import in the driver's
        thread meanwhile (an object store's filesystem, for the listing) holds the GIL
        half the time, and the workers' processes start that much later (0.3-0.4 s of
        a 2 s cluster start on a 2-core VM); they are what the job waits for."""
        self.imported.wait(timeout)

    def result(self):
        """The cluster's client, now owned by the caller."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        client, self._client = self._client, None
        return client

    def close(self) -> None:
        self._thread.join()
        client, self._client = self._client, None
        if client is not None:
            _close_own_client(client)


def start_cluster_early(cfg: JobConfig, client, urls: Sequence[str],
                        warm: bool = True) -> ClusterStart | None:
    """A :class:`ClusterStart` when the job will run on a local cluster whatever its input's
    size (``n_workers`` or ``threads_per_worker`` set, a GPU device, ``in_process_max_bytes``
    0) and reads or writes an object store (``urls``): the cluster's start then overlaps
    the listing and planning (importing the filesystem's module, building its client, the
    requests). None otherwise: no client of the caller's, a running scheduler, in-process
    runs and local jobs start nothing before they are planned. ``warm`` False: the
    workers do not build the URLs' filesystems as they start (the job says which they
    need once planned: :func:`warm_workers`)."""
    if client is not None or cfg.scheduler_address or not any(is_url(u) for u in urls):
        return None
    device = resolve_device(cfg.device)
    if choose_scheduler(cfg, 0, device)[0] is not None:
        return None   # (whether it runs in this process depends on the input's size)
    return ClusterStart(cfg, device, urls if warm else ())


def warm_workers(client, urls: Sequence[str], storage_options: dict | None) -> None:
    """The workers of ``client`` start building the filesystems of ``urls`` (those that
    are URLs) now (:class:`~daskwp.distributed.plugin.StorageWarmup`)."""
    urls = [u for u in urls if is_url(u)]
    if urls:
        from ..distributed.plugin import StorageWarmup
        client.register_plugin(StorageWarmup(urls, storage_options))


def _part_end_bytes(name: str) -> int:
    """What :class:`~daskwp.frames.storage.Uploads` keeps of the end of the file it sends as
    ``name``: a Parquet part's last :data:`~.parts.FOOTER_READ` bytes (its footer, which
    :func:`~.parts.verify_parquet_output` then reads without a GET), nothing of another
    file."""
    return FOOTER_READ if name.startswith(PART_PREFIX) and name.endswith(PART_SUFFIX) else 0


def hand_over_uploads(runner, run_record: dict, folder) -> "storage.Uploads | None":
    """Where the job's processes share this host (its own local cluster, or in-process
    threads) and its output is an object store's folder: the
    :class:`~daskwp.frames.storage.Uploads` that uploads, in this process, the files that
    the write tasks publish (:func:`~daskwp.frames.storage.hand_over_uploads`): the
    workers build no client of the store for their parts, and a task goes on with its
    next partition while its part is sent. None elsewhere (a running cluster's workers
    may be on other hosts: each uploads its own parts)."""
    mode = run_record.get("mode")
    if not folder.remote or mode not in ("local_cluster", "threads"):
        return None
    try:
        # (the end of each Parquet part it sends: its footer, for the job's check)
        uploads = storage.Uploads(folder, keep_end=_part_end_bytes)
    except OSError:    # (a staging root that is not this user's own: no handover)
        return None
    try:
        if mode == "local_cluster":
            runner.run(storage.hand_over_uploads, folder.location, uploads.path)
        else:
            storage.hand_over_uploads(folder.location, uploads.path)
    except BaseException:
        uploads.close()
        raise
    return uploads


# ---------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------
#: What the write tasks get: every option of ``tok(...)`` that is a job key (the window
#: options, ``return_overflowing_tokens``, the per-position outputs, ...: CALL_OPTIONS of
#: the partition tasks), the compression and the layout (``parquet_compat``).
_PARTITION_OPTIONS = (*(k for k in CALL_OPTIONS if k in CONFIG_KEYS), "compression",
                      "parquet_compat", "on_bad_row")


def build_tokenizer(cfg: JobConfig):
    """The single-machine tokenizer a job config asks for, resolved as the ``.wordpiece``
    accessor resolves it (``accessor.resolve_tokenizer``: a model folder's own settings,
    ``dask.config`` defaults)."""
    options = {k: getattr(cfg, k) for k in names(TOKENIZER)
               if k in JobConfig.__dataclass_fields__ and k not in ("vocab", "lowercase",
                                                                     "device")}
    try:
        return resolve_tokenizer(cfg.vocab, cfg.lowercase, **options)
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"vocab {cfg.vocab or '(default)'}: {e}") from None


def check_window_parameters(cfg: JobConfig, tokenizer, source: str = "config") -> None:
    """Raise ConfigError for window parameters the tokenizer refuses (stride >= L, ...),
    before any cluster starts. The tokenizer's own validation gives the message. Options
    that another output format cannot honour are refused by name."""
    # every output format's parts are uploaded complete (docs/batch-jobs.md "Object
    # storage"); packing's blocks are not yet
    if cfg.packing is not None and is_url(cfg.output):
        raise ConfigError(f"output {cfg.output!r}: output_format {cfg.output_format!r}"
                          + (" with packing" if cfg.packing is not None else "")
                          + " writes to a local or shared filesystem path only, not a URL")
    if cfg.packing is not None:
        from .packing import check_packing_config   # packing's jobs only (the start's CPU)
        check_packing_config(cfg, default_value)
    else:
        check_output_format_options(cfg, tokenizer, default_value)
    options = {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}
    # one empty document through the tokenizer's call (its validation; without pandas,
    # which an in-process job does not import otherwise)
    sample, pair = empty_texts(), {}
    if cfg.column_pair is not None:   # sentence pairs: the pair options are checked too
        pair = {"text_pair": sample}
    try:
        tokenizer(sample, **call_options(options), **pair, return_tensors="np")
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{source}: {e}") from None


def validate_job(cfg: JobConfig, source: str = "config"):
    """Everything about a job that can be checked without reading the input or starting a
    cluster: the vocabulary loads and the window parameters are allowed. Returns the
    tokenizer."""
    tok = build_tokenizer(cfg)
    check_window_parameters(cfg, tok, source)
    return tok


def job_parameters(cfg: JobConfig, tokenizer) -> dict:
    """The output-affecting parameters, as recorded in _job.json and _summary.json. The
    vocabulary enters by its hash (its path may move)."""
    params = {k: getattr(cfg, k) for k in JOB_KEYS}
    params.update(tokenizer.settings)
    params["vocab_hash"] = tokenizer.vocab.hash
    return params


def _write_json(path: str, obj: dict) -> None:
    if is_url(path):   # an object store: one put of the finished bytes
        folder, name = path.rsplit("/", 1)
        storage.Folder(folder, storage.current_options()).write_bytes(
            name, (json.dumps(obj, indent=1, sort_keys=False) + "\n").encode())
        return
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, sort_keys=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class _JobFilePut(threading.Thread):
    """``save(offsets)`` in a thread of its own, within the caller's context (its storage
    options); ``error``: what it raised, once joined."""

    def __init__(self, save: Callable, offsets: list):
        super().__init__(name="daskwp-job-file", daemon=True)
        self._run = functools.partial(contextvars.copy_context().run, save, offsets)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:   # noqa: BLE001  (raised by the caller after join)
            self.error = e


def _job_file_put(save: Callable, offsets: list) -> _JobFilePut:
    """A started :class:`_JobFilePut` of ``save(offsets)``."""
    put = _JobFilePut(save, offsets)
    put.start()
    return put


def _our_files(names: Iterable[str], cfg=None) -> tuple[list[str], list[str]]:
    ours, other = [], []
    for n in names:
        is_ours = (n in (JOB_FILE, SUMMARY_FILE) or n.startswith(TMP_PREFIX)
                   or is_megatron_file(n, cfg) or is_datasets_file(n)
                   or (n.startswith(PART_PREFIX) and n.endswith(PART_SUFFIX))
                   or (n.startswith(REJECTS_PREFIX) and n.endswith(REJECTS_SUFFIX))
                   or (n.startswith((JOB_FILE + ".", SUMMARY_FILE + ".")) and n.endswith(".tmp")))
        (ours if is_ours else other).append(n)
    return ours, other


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now")
    return out


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (both real, absolute paths)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _glob_base(pattern: str) -> str:
    """The folder a glob pattern's matches all lie in: its part before the first wildcard."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return os.sep.join(fixed) or os.sep


def _url_overlap(item: str, output: str) -> str | None:
    """check_input_output_overlap for URLs (compared as written, by their protocol and
    path): 'conflict', 'exclude' (the output lies inside the input folder) or None."""
    if not (is_url(item) and is_url(output)):
        return None  # a local path and a URL never overlap
    magic = glob.has_magic(item)
    base = item
    if magic:
        fixed = []
        for part in item.split("/"):
            if glob.has_magic(part):
                break
            fixed.append(part)
        base = "/".join(fixed)
    base, out = base.rstrip("/"), output.rstrip("/")
    if base == out or base.startswith(out + "/"):
        return "conflict"
    if out.startswith(base + "/"):
        return "exclude"
    return None


def check_input_output_overlap(inputs, output: str) -> list[str]:
    """The folders to leave out of the input walk (the output directory when it lies inside
    an input directory), or an OutputConflictError when the overlap cannot be left out: the
    output directory is an input, or an input lies inside the output directory. URLs are
    compared with URLs (a URL output inside a URL input folder is left out of it).

    Checked before the output directory is created or anything in it is deleted."""
    items = [inputs] if isinstance(inputs, str) else list(inputs)
    if is_url(output) or any(is_url(i) for i in items):
        exclude = []
        for item in items:
            overlap = _url_overlap(item, output)
            if overlap == "conflict":
                raise OutputConflictError(
                    f"input {item!r} is the output directory or inside it: a job would "
                    f"read its own output; choose an output directory outside the input")
            if overlap == "exclude":
                exclude.append(output.rstrip("/"))
        items = [i for i in items if not is_url(i)]
        if is_url(output) or not items:
            return sorted(set(exclude))
        return sorted(set(exclude + check_input_output_overlap(items, output)))
    out = os.path.realpath(output)
    exclude = []
    for item in items:
        magic = glob.has_magic(item)
        path = os.path.realpath(_glob_base(item) if magic else item)
        if _inside(path, out):
            what = "the output directory" if path == out and not magic else \
                f"inside the output directory {output!r}"
            raise OutputConflictError(
                f"input {item!r} is {what}: a job would read its own output; choose an "
                f"output directory outside the input")
        if os.path.isdir(path) and _inside(out, path):
            exclude.append(out)  # OUTPUT inside an input directory: not an input
    return sorted(set(exclude))


def _make_output_directory(out: str) -> list[str] | None:
    """Create ``out`` (and its parents) and check that files can be created in it, as
    OutputConflictError naming the path and the reason. A URL's bucket is not created:
    a missing one (or no credentials, an endpoint that does not answer) is refused.
    Returns the names in ``out`` where the check learnt them (a URL's folder found empty:
    []), else None."""
    if is_url(out):
        try:
            return storage.Folder(out, storage.current_options()).check_writable(
                f"{TMP_PREFIX}probe-")
        except OSError as e:
            raise OutputConflictError(f"cannot use output directory {e}" if isinstance(
                e, storage.StorageError) else f"cannot use output directory {out!r}: "
                f"{e}") from None
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputConflictError(f"output {out!r} exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
        probe = os.path.join(out, f"{TMP_PREFIX}probe-{uuid.uuid4().hex}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as e:
        raise OutputConflictError(f"cannot use output directory {out!r}: "
                                  f"{e.strerror or e}") from None
    return None


def prepare_output(cfg: JobConfig, header: dict, plan: list | None = None,
                   listed: set | None = None) -> dict | None:
    """Create or reopen the output directory. Returns the previous _job.json of this very job
    (to resume) or None (a fresh start). Refuses a directory holding another job's data
    (other parameters, input, version or partition ``plan``), and one that cannot be created
    or written (OutputConflictError). ``listed``: a set that receives the names the folder
    holds when it returns (its one listing, less what it removed)."""
    out = cfg.output
    known = _make_output_directory(out)
    folder = storage.Folder(out, storage.current_options())
    names = known if known is not None else folder.listdir()
    listed = set() if listed is None else listed
    listed.update(names)

    def remove(name):
        folder.remove(name)
        listed.discard(name)
    ours, other = _our_files(names, cfg)
    if other:
        raise OutputConflictError(
            f"output directory {out!r} holds another job's data: files daskwp did not write "
            f"({', '.join(sorted(other)[:5])}{', ...' if len(other) > 5 else ''}); choose a "
            f"new or empty directory")
    previous = None
    if not any(n.startswith(PART_PREFIX) and n.endswith((PART_SUFFIX, *MEGATRON_PART_FILES))
               for n in ours):
        # No part of any job: a job that failed before writing one (bad input while
        # counting) left only its _job.json. That is no data to protect: start afresh.
        for n in ours:
            remove(n)
        return None
    if JOB_FILE in names:
        try:
            previous = json.loads(folder.read_bytes(JOB_FILE).decode("utf-8"))
        except (OSError, ValueError) as e:
            if not cfg.overwrite:
                raise OutputConflictError(f"output directory {out!r} holds an unreadable "
                                          f"{JOB_FILE} ({e}); pass --overwrite to replace "
                                          f"it") from None
    elif ours and not cfg.overwrite and any(n != SUMMARY_FILE and not n.startswith(TMP_PREFIX)
                                            for n in ours):
        raise OutputConflictError(f"output directory {out!r} holds another job's data "
                                  f"(part files without {JOB_FILE}); pass --overwrite to "
                                  f"replace them")
    if previous is not None and not cfg.overwrite:
        diffs = []
        if previous.get("version") != header["version"]:
            diffs.append(f"written by daskwp {previous.get('version')}, this is "
                         f"{header['version']}")
        diffs += _differences(previous.get("parameters", {}), header["parameters"])
        if previous.get("input", {}).get("fingerprint") != header["input"]["fingerprint"]:
            old = {f["path"]: (f["size"], f["mtime_ns"])
                   for f in previous.get("input", {}).get("files", [])}
            new = {f["path"]: (f["size"], f["mtime_ns"]) for f in header["input"]["files"]}
            changed = sorted(set(old) ^ set(new)) or \
                sorted(p for p in new if old.get(p) != new[p])
            diffs.append(f"the input differs ({', '.join(changed[:3]) or 'file list'})")
        elif not diffs and plan is not None and \
                [p.get("spec") for p in previous.get("partitions") or []] != plan:
            diffs.append("the partition plan differs")
        if diffs:
            raise OutputConflictError(
                f"output directory {out!r} holds another job's data ({'; '.join(diffs)}); "
                f"use a new output directory, or pass --overwrite to replace it")
    if cfg.overwrite:
        for n in ours:
            remove(n)
        return None
    for n in ours:  # leftovers of a killed run
        if n.startswith(TMP_PREFIX) or n.endswith(".tmp"):
            remove(n)
    return previous


# ---------------------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class JobGraph:
    """A job's task graph and the keys the driver asks for."""

    dsk: dict
    offset_keys: list      # offset of partition p for p = 0..n (the last: all documents)
    count_keys: list       # documents of partition q
    write_keys: dict       # partition -> key of its write task
    tokenizer_key: str
    # write key -> the count key whose value its statistics' documents give (the writes
    # of job_graph's ``local`` whose count is not known): on a cluster that count is not
    # a task; in this process the graph counts it (the task stays in dsk)
    count_from_write: dict = dataclasses.field(default_factory=dict)


def _job_count(specs: Sequence[PartitionSpec], counts: Sequence, on_bad_row: str,
               ahead: int, q: int):
    """A leaf of the pass: the known count of partition q, or the task that counts it
    (from partition ``ahead`` on, keeping none of its bytes for its write)."""
    if counts[q] is not None:
        return counts[q]
    return (count_job_partition, specs[q], on_bad_row) if q < ahead else \
        (count_job_partition, specs[q], on_bad_row, False)


def _pass_tail(total: int, *values) -> dict:
    """The pass values the last writes take (:func:`job_graph`'s ``total_before``): the
    total and ``key -> value`` of the offsets and counts, given as pairs."""
    return dict(zip(values[::2], values[1::2]), total=total)


class _Claimed(NamedTuple):
    """The result of a write of :func:`job_graph`'s ``total_before``: the partition it
    wrote and its statistics."""
    partition: int
    stats: dict


class _TailClaims:
    """The partitions of :func:`job_graph`'s last writes, handed out in order: each of
    those tasks writes the next one when it starts (all are ready at once after the
    pass, and dask.order ranks them out of partition order, e.g. 22, 23, ..., 28, 21:
    the merge then held them)."""

    def __init__(self, partitions):
        self._left = list(partitions)
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            return self._left.pop(0)


def _write_claimed(tail: dict, claims: _TailClaims, args: dict, write: Callable, out_dir,
                   tok, options, job_id, n, device) -> _Claimed:
    """A write of :func:`job_graph`'s ``total_before``: ``write`` of the next partition
    of ``claims``, with its offset, count and file offset taken from the pass values
    ``tail`` (``args``: partition -> its spec and the keys of those)."""
    i = claims.next()
    spec, offset, count, file_offset = args[i]
    return _Claimed(i, write(spec, tail[offset], out_dir, tok, options, job_id, n, device,
                             tail[count], tail[file_offset]))


def job_graph(specs: Sequence[PartitionSpec], counts: Sequence, missing: Sequence[int],
              out_dir: str, tokenizer, options: dict, job_id: str, device: str,
              run_id: str = "", write: Callable = write_partition,
              total_before: int | None = None, local: Sequence[int] = (),
              counted: Sequence[int] = ()) -> JobGraph:
    """The graph of a job: the tokenizer as one key, the global-offset pass over the
    partitions' document counts (``counts[q]``, or None: counted from the input), and one
    write task per partition in ``missing``, taking its offset and count from the pass,
    and the offset of the first partition of its file (the rows of its rejects file)
    (``write``: the output format's partition writer, :func:`.parts.write_partition`'s
    signature).

    ``total_before`` (a partition in ``missing``, in this process only): its write task
    and those after it take their pass values from one task that takes the total (the
    last offset) too, so the whole pass is done before the first of them starts; each
    writes the next of those partitions when it starts (so they start in partition
    order; its result says which: ``_Claimed``), and the counts of the partitions after
    it keep none of their bytes for their writes (they run early: kept, they would be
    partitions in memory too). For an in-process Megatron merge, which writes the
    ``.idx``'s end ahead once it has the total (:meth:`.megatron.InlineMerge.total_before`).

    ``local`` (partitions of ``missing``, on a cluster): their writes take no pass value
    (offset, count and file offset None: a Megatron part's bytes do not depend on them);
    the count of each whose count is not known, but for those in ``counted`` (counted from
    the input by the pass, ahead of the writes), is the documents of its write's
    statistics (``JobGraph.count_from_write``: :func:`run_graph` feeds it to the pass,
    whose count task for it is never run there).

    Keys carry the job id and ``run_id``, so two runs on one cluster never share a task.
    """
    from ..distributed.dask_compat import Task, TaskRef
    from ..distributed.offset_pass import PartitionCounts, tokenizer_layer

    n = len(specs)
    tag = f"{job_id[:8]}-{run_id}" if run_id else job_id[:8]
    tok_key, dsk = tokenizer_layer(tokenizer)
    counts_ = PartitionCounts(f"daskwp-count-{tag}",
                              functools.partial(_job_count, tuple(specs), tuple(counts),
                                                options.get("on_bad_row", "error"),
                                                n if total_before is None
                                                else total_before + 1))
    offset_name = f"daskwp-offset-{tag}"
    offset_keys = []
    for p in range(n + 1):
        key = (offset_name, p)
        dsk[key] = counts_.offset_task(dsk, key, p)
        offset_keys.append(key)
    count_keys = [counts_.count_ref(dsk, q).key for q in range(n)]
    write_keys = {}
    file_start = []    # the first partition of each partition's file
    for i, s in enumerate(specs):
        file_start.append(file_start[i - 1] if i and specs[i - 1].path == s.path else i)
    tail = [i for i in missing if total_before is not None and i >= total_before]
    if tail:
        tail_key = f"daskwp-pass-tail-{tag}"
        refs = {k for i in tail for k in (offset_keys[i], count_keys[i],
                                          offset_keys[file_start[i]])}
        dsk[tail_key] = Task(tail_key, _pass_tail, TaskRef(offset_keys[n]),
                             *[x for k in sorted(refs, key=str) for x in (k, TaskRef(k))])
        claims = _TailClaims(tail)
        tail_args = {i: (specs[i], offset_keys[i], count_keys[i], offset_keys[file_start[i]])
                     for i in tail}
    local, counted = set(local), set(counted)
    if local and tail:
        raise ValueError("job_graph: total_before and local writes do not go together")
    count_from_write = {}
    for i in missing:
        key = (f"daskwp-write-{tag}", i)
        if i in local:
            dsk[key] = Task(key, write, specs[i], None, out_dir, TaskRef(tok_key), options,
                            job_id, n, device, None, None)
            if counts[i] is None and i not in counted:
                count_from_write[key] = count_keys[i]
        elif tail and i >= total_before:
            dsk[key] = Task(key, _write_claimed, TaskRef(tail_key), claims, tail_args, write,
                            out_dir, TaskRef(tok_key), options, job_id, n, device)
        else:
            dsk[key] = Task(key, write, specs[i], TaskRef(offset_keys[i]), out_dir,
                            TaskRef(tok_key), options, job_id, n, device,
                            TaskRef(count_keys[i]), TaskRef(offset_keys[file_start[i]]))
        write_keys[i] = key
    return JobGraph(dsk, offset_keys, count_keys, write_keys, tok_key, count_from_write)


def _with_spool(specs: Sequence[PartitionSpec], counts: Sequence, cfg: JobConfig,
                job_id: str, run_id: str):
    """``(token, specs)``: the partitions, those of URLs to count with this run's fetch
    spool (:mod:`.inputs.fetch_spool`); ``(None, specs)`` when no partition has one."""
    if not cfg.spool_max_bytes or cfg.packing is not None:
        return None, specs
    token = run_token(job_id, run_id)
    spool = (token, int(cfg.spool_max_bytes))
    out = [dataclasses.replace(s, spool=spool) if counts[i] is None and is_url(s.path) else s
           for i, s in enumerate(specs)]
    return (token, out) if any(s.spool for s in out) else (None, specs)


def remove_spools(runner, token: str) -> None:
    """Remove a run's spool folders on this host and on every worker's host."""
    remove_run_spools(token)
    run = getattr(runner, "run", None)
    if run is not None and getattr(runner, "scheduler_info", None) is not None:
        try:
            run(remove_run_spools, token)
        except Exception:   # a lost cluster: its hosts remove them at their next run
            pass


#: Each output format's partition writer and output check.
_WRITERS = {"parquet": write_partition, "megatron": write_megatron_partition,
            "datasets": write_datasets_partition}
_VERIFIERS = {"parquet": verify_parquet_output, "megatron": verify_megatron_output,
              "datasets": verify_datasets_output}


def _task_failure(exc: BaseException, what: str) -> JobError:
    if isinstance(exc, JobError):
        return exc  # the partition tasks name their partition
    return JobError(f"{what} failed: {type(exc).__name__}: {exc}")


#: Seconds without a task of the job finishing after which the driver logs what it waits
#: for (:class:`StallWatch`), and again after as many more.
STALL_REPORT_SECONDS = 600.0


class StallWatch:
    """A diagnostic of a job that stops moving on a cluster (the driver waits for results,
    the workers look idle): after ``seconds`` without a future of ``futures`` finishing,
    ``log`` gets which tasks are not done, where each one runs or which of its inputs it
    waits on (from ``dsk``), and what each worker is processing; again after as many more
    seconds. It changes nothing else. :meth:`finished` with each result's key;
    :meth:`stop` at the end."""

    def __init__(self, client, futures, dsk: dict, log: Callable[[str], None],
                 seconds: float = STALL_REPORT_SECONDS):
        import threading
        self.client, self.futures, self.dsk, self.log = client, futures, dsk, log
        self.seconds = float(seconds)
        self.last = time.monotonic()
        self.done: set = set()
        self.reports = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="daskwp-stall-watch",
                                        daemon=True)
        self._thread.start()

    def finished(self, key) -> None:
        self.done.add(key)
        self.last = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        reported = self.last
        while not self._stop.wait(min(self.seconds / 4, 15.0)):
            now = time.monotonic()
            if now - max(self.last, reported) >= self.seconds:
                reported = now
                try:
                    text = self.describe(now - self.last)
                except Exception as e:   # the diagnostic must never fail the job
                    text = (f"no task finished for {now - self.last:.0f} s (no details: "
                            f"{type(e).__name__}: {e})")
                self.reports += 1
                self.log(f"daskwp: stall: {text}")

    def describe(self, idle: float) -> str:
        """What the job waits for, in a few lines."""
        done = self.done | {f.key for f in self.futures if f.done()}
        pending = [f for f in self.futures if f.key not in done]
        processing = self.client.processing()   # worker -> keys it runs or has queued
        where = {k: w for w, keys in processing.items() for k in keys}
        lines = [f"no task finished for {idle:.0f} s; {len(pending)} of {len(self.futures)}"
                 f" results not in:"]
        for f in pending[:20]:
            task = self.dsk.get(f.key)
            deps = sorted(getattr(task, "dependencies", ()) or (), key=str)
            waiting = [d for d in deps if d not in done]
            on = (f"processing on {where[f.key]}" if f.key in where else
                  "on no worker" + (f", waiting on {', '.join(map(str, waiting[:5]))}"
                                    if waiting else " (its inputs are done)"))
            lines.append(f"  {f.key}: {on}")
        if len(pending) > 20:
            lines.append(f"  ... and {len(pending) - 20} more")
        for w, keys in sorted(processing.items()):
            lines.append(f"  worker {w}: {len(keys)} tasks processing")
        if not processing:
            lines.append("  no worker")
        return "\n".join(lines)


def literal_writes(dsk: dict, writes: set, pass_keys: set):
    """A generator of the write tasks of ``dsk`` (keys ``writes``) that can be submitted:
    sent a dict of pass values (key -> value of ``pass_keys``), it yields ``{key: task}``
    of the writes whose pass inputs are now all known, each with those inputs as literal
    values (``DataNode``) in place of their ``TaskRef``; first sent None, the writes that
    take no pass value. A write's other inputs (the tokenizer key) stay references."""
    from ..distributed.dask_compat import DataNode
    waiting: dict = {}    # pass key -> writes that take it
    needs: dict = {}      # write -> its pass keys not known yet
    for w in writes:
        needs[w] = set(dsk[w].dependencies) & pass_keys
        for k in needs[w]:
            waiting.setdefault(k, []).append(w)
    known: dict = {}
    got = yield {w: dsk[w] for w in sorted(writes, key=str) if not needs[w]}
    while True:
        known.update(got or {})
        ready = {}
        for k in got or ():
            for w in waiting.pop(k, ()):
                needs[w].discard(k)
                if not needs[w]:
                    deps = set(dsk[w].dependencies) & pass_keys
                    ready[w] = dsk[w].substitute({d: DataNode(None, known[d]) for d in deps})
        got = yield ready


class PassSums:
    """The global-offset pass of a job graph split in two: ``remote``, the tasks that take
    no other pass value (the partitions' count tasks, and the keys in ``keep``), which run
    on the cluster; and the nodes above them (the prefix-count tree's sums and the offsets)
    and the known counts (``DataNode``), evaluated in the driver by :meth:`add` as their
    inputs come in. Every task's inputs must lie in ``dsk``. The keys in ``external`` are
    neither: their values come to :meth:`add` from elsewhere (a partition's count from
    its write's statistics, ``JobGraph.count_from_write``)."""

    def __init__(self, dsk: dict, keep=(), external=()):
        from ..distributed.dask_compat import DataNode
        keep, external = set(keep), set(external)
        self.remote = {k: t for k, t in dsk.items() if k in keep or (
            k not in external and not isinstance(t, DataNode)
            and not set(t.dependencies) & dsk.keys())}
        self.remote_keys = [k for k in dsk if k in self.remote and k not in keep]
        self.local = {k: t for k, t in dsk.items()
                      if k not in self.remote and k not in external}
        outside = {d for t in self.local.values() for d in t.dependencies} - dsk.keys()
        if outside:
            raise ValueError(f"the pass takes keys it does not hold: "
                             f"{sorted(outside, key=str)[:3]}")
        self.values: dict = {}
        self._needs = {k: set(t.dependencies) for k, t in self.local.items()}
        self._waiting: dict = {}
        for k, deps in self._needs.items():
            for d in deps:
                self._waiting.setdefault(d, []).append(k)
        self._first = [k for k, d in self._needs.items() if not d]

    def add(self, new: dict) -> dict:
        """Record the values ``new`` (of remote keys); returns them with every local node
        they complete (at the first call also the known counts and what they complete)."""
        out = dict(new)
        self.values.update(new)
        todo, self._first = self._first, []
        for k in new:
            for w in self._waiting.pop(k, ()):
                self._needs[w].discard(k)
                if not self._needs[w]:
                    todo.append(w)
        while todo:
            k = todo.pop()
            task = self.local[k]
            v = task({d: self.values[d] for d in task.dependencies})
            self.values[k] = out[k] = v
            for w in self._waiting.pop(k, ()):
                self._needs[w].discard(k)
                if not self._needs[w]:
                    todo.append(w)
        return out


def _pass_priority(n: int, key) -> int:
    """The scheduling priority of a task of the global-offset pass on a cluster, of a job
    of ``n`` partitions: above the writes' (0), partition q's count (``(name, 0, q)``)
    before partition q + 1's, the other tasks (the tokenizer, the first offset) first."""
    if isinstance(key, tuple) and len(key) == 3 and isinstance(key[2], int):
        return 1 + n - key[2]
    return 2 + n


def prefetch_on_workers(client, future, priority: int, name: str, workers=None) -> list:
    """One :func:`~daskwp.distributed.tasks.hold` task per worker of ``client`` (or of
    ``workers``, addresses) that takes ``future`` (at ``priority``, keys ``(name, i)``):
    every worker fetches its value while it runs other tasks (the pass's counts) instead
    of when its first task that needs it comes. A worker gone meanwhile leaves its hold
    to another (``allow_other_workers``); a lost value is recomputed as before (it stays a
    task of the graph, not scattered data). Returns the futures."""
    from ..distributed.tasks import hold
    if workers is None:
        workers = cluster_workers(client)
    return [client.submit(hold, future, key=(name, i), workers=[w], priority=priority,
                          allow_other_workers=True, pure=False)
            for i, w in enumerate(sorted(workers))]


def _write_priority(part_of: dict, key) -> int:
    """The scheduling priority of a write task on a cluster (``part_of``: key ->
    partition): ``-i`` for partition i, so partitions are written in order, all below the
    global-offset pass (:func:`_pass_priority`, >= 1)."""
    return -part_of[key]


def run_graph(graph: JobGraph, client, on_write: Callable[[int, dict], None],
              log: Callable[[str], None] | None = None,
              stall_seconds: float = STALL_REPORT_SECONDS,
              on_total: Callable[[int], None] | None = None) -> dict:
    """Run a job graph on ``client`` (a ``distributed.Client``, an
    :class:`~daskwp.distributed.local.InProcess` scheduler, or None: dask's synchronous
    scheduler), calling
    ``on_write(i, stats)`` as each part is written, and ``on_total(documents)`` once the
    pass has the total (on a cluster, where the pass runs ahead of the writes, as soon as
    the driver has summed the counts: a Megatron merge then writes its ``.idx``'s end
    ahead, :meth:`.megatron.PartMerger.expect_documents`). Returns the values of
    the offset and count keys. A failing task raises its JobError (naming the partition).
    On a ``distributed.Client``, ``log`` (when given) gets a :class:`StallWatch` report after
    ``stall_seconds`` without a result."""
    from ..distributed.local import InProcess
    keys = graph.offset_keys + graph.count_keys + list(graph.write_keys.values())
    part_of = {k: i for i, k in graph.write_keys.items()}
    values: dict = {}
    if client is None or isinstance(client, InProcess):
        total_key = graph.offset_keys[-1]

        def posttask(key, result):
            if isinstance(result, _Claimed):   # (job_graph's total_before)
                on_write(*result)
            elif key in part_of:
                on_write(part_of[key], result)
            elif key == total_key and on_total is not None:
                on_total(int(result))

        try:
            results = (client or InProcess("synchronous")).get(graph.dsk, keys,
                                                               on_result=posttask)
        except Exception as e:
            raise _task_failure(e, "the job") from e
        values.update(zip(keys, results))
        return values

    from distributed import as_completed
    # The global-offset pass goes first, at a higher priority than the writes: in one graph
    # of equal priorities, dask.order puts a partition's count behind other partitions'
    # writes, and a worker that has finished a write waits for a count queued behind a write
    # on the other worker (docs/design.md §8.5).
    # Only the pass's leaves go to the cluster (the count tasks, which read the input, and
    # the tokenizer): the tree's nodes above them are sums of a few ints, evaluated here as
    # their inputs come in (PassSums). On the scheduler, which a local cluster runs in this
    # process, they were ~2 tasks per partition of transitions and messages, and dask.order
    # of the tree kept a set of the leaves below every node (n**2 / 2 entries: ~110 MB
    # at 1,570 partitions, returned to the allocator but not to the system).
    # A write is submitted once the driver holds the pass values it takes, with those
    # values in the task (literal_writes): no write depends on a pass key, the driver
    # releases each pass result as it comes, and a worker lost late in the job loses only
    # its running writes, never the pass (all of it recounted from the input otherwise,
    # as the driver held every count and offset on the cluster to the end).
    writes = set(graph.write_keys.values())
    pass_keys = graph.offset_keys + graph.count_keys
    pass_set = set(pass_keys)
    sums = PassSums({k: v for k, v in graph.dsk.items() if k not in writes},
                    keep={graph.tokenizer_key}, external=graph.count_from_write.values())
    # Within the pass, partition q's count goes before q + 1's (each write waits for the
    # counts before its partition): a count that fetches its partition from an object
    # store leaves its worker's thread pool while it waits on the network
    # (daskwp.distributed.plugin.NetworkWait), and the writes run meanwhile in the order
    # the counts come in.
    import dask
    with dask.annotate(priority=functools.partial(_pass_priority, len(graph.count_keys))):
        *futures, tok_future = client.get(sums.remote, [*sums.remote_keys,
                                                        graph.tokenizer_key], sync=False)
    # Every worker holds the tokenizer before the counts end: a worker that did not compute
    # it fetched it only when its first write came, after its last count (0.4-0.6 s of one
    # idle core per worker on a loaded 2-core VM, in the scheduler's task stream). The
    # holds go once the first pass results are in, not with the pass: sent with it, the
    # workers' first tasks started later in three runs (0.4-1.2 s vs 0.2-0.4 s; a loaded VM).
    holds: list | None = None if writes else []
    hold_name = graph.offset_keys[0][0].replace("daskwp-offset-", "daskwp-hold-", 1)
    workers: dict = {}
    # The last writes, fewer than the cluster's threads, take the threads of the workers
    # left idle on their host (give_idle_threads), asked again as each write finishes.
    submitted = 0
    done_writes = 0
    tail_at = None   # writes left when the threads were last given
    ready = literal_writes(graph.dsk, writes, pass_set)
    watch = StallWatch(client, [*futures, tok_future], graph.dsk, log,
                       stall_seconds) if log else None
    results = as_completed(futures, with_results=True, raise_errors=False)

    def submit(tasks: dict) -> None:
        nonlocal submitted
        submitted += len(tasks)
        if tasks:
            # writes in partition order (priority -i, below the pass's and the holds'):
            # parts complete in order (a cluster's Megatron merge goes on while they are
            # written), and the last partition, the input's remainder, runs last
            with dask.annotate(priority=functools.partial(_write_priority, part_of)):
                new = client.get(tasks, list(tasks), sync=False)
            futures.extend(new)
            results.update(new)
            if watch is not None:
                watch.futures.extend(new)

    def known(new: dict) -> dict:
        """The pass values ``new`` brings (its own and the sums it completes): recorded in
        ``values``; returns those the writes may take."""
        got = {k: v for k, v in sums.add(new).items() if k in pass_set}
        values.update(got)
        if on_total is not None and graph.offset_keys[-1] in got:
            on_total(int(got[graph.offset_keys[-1]]))
        return got

    try:
        submit(ready.send(None))
        got = known({})   # known counts (DataNodes) and the sums they complete
        if got:
            submit(ready.send(got))
        # as_completed fetches each result as its future completes (one gather through the
        # scheduler per result: a part's record is ~1 KB, a count's an int) and yields what
        # came in since the last batch; on a 2-worker cluster every batch held one result
        # (1 GB job, 64 MB partitions), so a gather per batch would save no round trip.
        for batch in results.batches():
            if holds is None:
                workers = cluster_workers(client)
                holds = prefetch_on_workers(client, tok_future, 3 + len(graph.count_keys),
                                            hold_name, workers)
            got = {}
            for fut, result in batch:
                if watch is not None:
                    watch.finished(fut.key)
                key = fut.key
                what = f"partition {part_of[key]}" if key in part_of else f"task {key}"
                if fut.status == "error":
                    raise _task_failure(result if isinstance(result, BaseException)
                                        else fut.exception(), what)
                if fut.status == "cancelled":
                    raise JobError(f"{what} was cancelled (the cluster lost it)")
                if key in part_of:
                    on_write(part_of[key], result)
                    done_writes += 1
                    if key in graph.count_from_write:   # (a partition-local write)
                        got[graph.count_from_write[key]] = int(result["documents"])
                else:
                    got[key] = result
                fut.release()
            if got:
                got = known(got)
                if got:
                    submit(ready.send(got))
            left = len(writes) - done_writes
            if submitted == len(writes) and workers and left != tail_at and \
                    0 < left < sum(t for _, t in workers.values()):
                tail_at = left
                # the workers now, not those of the first batch: a worker killed since
                # (its nanny started another at a new address) lent nothing, and the
                # writes of the one that replaced it were left out
                workers = cluster_workers(client) or workers
                if left < sum(t for _, t in workers.values()):
                    give_idle_threads(client, {f.key for f in futures if not f.done()}
                                      & writes, workers)
    except OSError as e:   # distributed's CommClosedError: the scheduler is gone
        raise JobError(f"lost the cluster's scheduler ({type(e).__name__}: {e}); complete "
                       f"parts are kept: run the same command again (against a running "
                       f"scheduler) to resume") from e
    finally:
        if watch is not None:
            watch.stop()
        try:
            client.cancel([f for f in (*futures, tok_future, *(holds or ()))
                           if not f.done()])
        except OSError:
            pass
    return values


# ---------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------
def _fmt_int(n: int) -> str:
    return f"{n:,}"


def format_length_percentiles(p: dict) -> str:
    """``tokens per document: min 0, p50 12, ..., max 900, mean 14.2``."""
    return "tokens per document: " + ", ".join(
        f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in p.items())


def format_summary(s: dict) -> str:
    mbps = s["mb_per_s"]
    if s["partitions_written"]:
        timing = (f"wall {s['seconds']:.2f} s; tokenize+write {s['tokenize_seconds']:.2f} s"
                  + (f" at {mbps:.2f} MB/s" if mbps else ""))
    else:
        timing = f"wall {s['seconds']:.2f} s; nothing to write (every part was complete)"
    lines = [
        f"daskwp: {_fmt_int(s['documents'])} documents -> {_fmt_int(s['rows'])} rows, "
        f"{_fmt_int(s['tokens'])} tokens",
        f"  input        {_fmt_int(s['input_bytes'])} text bytes in {s['input_files']} "
        f"file(s), {s['partitions']} partition(s): {s['partitions_written']} written, "
        f"{s['partitions_skipped']} already complete",
        f"  time         {timing}",
        f"  unknown      {_fmt_int(s['unknown_tokens'])} tokens "
        f"({100 * s['unknown_token_rate']:.3f}%)",
        *([f"  lengths      {format_length_percentiles(s['length_percentiles'])}"]
          if s.get("length_percentiles", {}).get("max") is not None else []),
        *([f"  rejected     {_fmt_int(s['rejected_rows'])} rows (empty documents; why: "
           f"{s['output']}/{REJECTS_PREFIX}*{REJECTS_SUFFIX})"] if s.get("rejected_rows")
          else []),
        *([f"  ran on       {format_run_record(s['run'])}"] if s.get("run") else []),
        f"  vocabulary   {s['vocab']} (hash {s['vocabulary_hash'][:12]})",
        f"  output       {s['output']}",
    ]
    if s.get("packing"):
        pk = s["packing"]
        lines.append(f"  packing      {pk['blocks']:,} blocks of {pk['block_size']:,} tokens"
                     + (" (the last one padded)" if pk["pad_last"] else
                        " (the remainder dropped)"))
    if s.get("datasets"):
        lines.append(f"  datasets     {s['datasets']['shards']} Arrow shard(s): "
                     f"datasets.load_from_disk({s['output']!r})")
    if s.get("megatron"):
        m = s["megatron"]
        lines.append(f"  megatron     {m['sequences']:,} sequences, {m['tokens_written']:,} "
                     f"{m['dtype']} tokens: " + (m["prefix"] if m["merged"] else
                                                 f"{len(m['prefixes'])} prefixes")
                     + f" (--data-args-path {m['data_args_path']})")
    return "\n".join(lines)


def _stage_seconds(stats) -> dict:
    """CPU seconds of the parts written by this run, per stage (``read``, ``tokenize``,
    ``arrow``, ``write``, ``finish``), summed over the workers' threads."""
    out: dict = {}
    for st in stats:
        for k, v in (st.get("cpu_seconds") or {}).items():
            out[k] = out.get(k, 0.0) + float(v)
    return {k: round(v, 4) for k, v in out.items()}


def _close_own_client(client) -> None:
    cluster = getattr(client, "cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def run_job(cfg: JobConfig, *, client=None, tokenizer=None,
            log: Callable[[str], None] | None = None) -> dict:
    """Run a batch job to completion (resuming a previous run of it) and return the summary.

    ``client``: an existing ``distributed.Client`` to use (else one is made from the config
    when there is work to do, or none at all when ``scheduler_address`` is 'synchronous').
    ``tokenizer`` replaces the one the config describes (its settings are what the job
    records).

    Everything that can be refused (parameters, inputs, the output directory and its overlap
    with the input) is checked before the output directory is created or anything in it is
    deleted. Inputs and the output may be fsspec URLs (``cfg.storage_options``: the options
    of their filesystems, never recorded).
    """
    with storage.using(cfg.storage_options), contextlib.ExitStack() as cleanup:
        try:
            return _run_job(cfg, client=client, tokenizer=tokenizer, log=log,
                            cleanup=cleanup)
        except storage.StorageError as e:
            raise JobError(str(e)) from None


def _run_job(cfg: JobConfig, *, client=None, tokenizer=None,
             log: Callable[[str], None] | None = None,
             cleanup: contextlib.ExitStack | None = None) -> dict:
    """run_job within the storage options of its URLs (``cleanup``: what to close when it
    returns or fails)."""
    cleanup = contextlib.ExitStack() if cleanup is None else cleanup
    t_start = time.perf_counter()
    if log is None:
        log = (lambda msg: None) if cfg.quiet else (
            lambda msg: print(msg, file=sys.stderr, flush=True))
    tok = tokenizer if tokenizer is not None else build_tokenizer(cfg)
    check_window_parameters(cfg, tok)
    params = job_parameters(cfg, tok)
    out = cfg.output if is_url(cfg.output) else os.path.abspath(cfg.output)
    exclude = check_input_output_overlap(cfg.input, out)
    urls = [out, *([cfg.input] if isinstance(cfg.input, str) else cfg.input)]
    # A local cluster that will run the job whatever the input's size starts now, while
    # the input is listed and planned; closed on any error before it is used. With a
    # spool, its workers build the filesystems they need once the job is planned (the
    # driver fetches the first partitions and uploads the parts: maybe none).
    spooling = bool(cfg.spool_max_bytes) and cfg.packing is None
    started = start_cluster_early(cfg, client, urls, warm=not spooling)
    if started is not None:
        cleanup.callback(started.close)
        started.wait_imported()
    heads = None
    here = client is None and (not cfg.scheduler_address or
                               cfg.scheduler_address in LOCAL_SCHEDULERS)
    if spooling and (started is not None or here):
        # the job runs on this host (a local cluster of its own, or in this process): the
        # first partitions are fetched for their counts (while the cluster starts), by
        # the GET that brings the object's head for the listing (inputs/fetch_spool.py,
        # HeadStreams, StreamPrefetch)
        heads = HeadStreams(int(cfg.spool_max_bytes))
        cleanup.callback(heads.close)
    with storage.head_source(heads):
        files = list_input_files(cfg.input, cfg.input_format,
                                 [*exclude, *(cfg.exclude or [])], include=cfg.include)
        plan_warnings: list[str] = []
        specs = plan_partitions(files, cfg.column, cfg.partition_size, quoting=cfg.quoting,
                                keep_columns=cfg.keep_columns, warn=plan_warnings.append,
                                column_pair=cfg.column_pair,
                                lenient=cfg.on_bad_row == "reject")
    for w in plan_warnings:
        log(f"daskwp: warning: {w}")
    prefetch = None
    if heads is not None:
        prefetch = start_prefetch(specs, int(cfg.spool_max_bytes), heads)
        heads.close()
        if prefetch is not None:
            cleanup.callback(prefetch.discard)
    if not specs:  # no document at all: one empty part, so that the dataset has a schema
        specs = [empty_partition(files[0].path, cfg.column, cfg.column_pair)]
    n = len(specs)
    header = {
        "daskwp_job": JOB_FORMAT, "version": __version__, "parameters": params,
        "input": {"fingerprint": input_fingerprint(files),
                  "files": [f.to_json() for f in files]},
    }
    # Whether the cluster is joined over TLS and with which CA and certificate (never the
    # key); not a parameter: a job may resume on another cluster.
    security = security_record(cfg.scheduler_address, cfg.security)
    job_id = hashlib.blake2b(json.dumps(
        [header["version"], params, header["input"]["fingerprint"]], sort_keys=True).encode(),
        digest_size=16).hexdigest()
    header["job_id"] = job_id
    listed: set = set()   # what the output folder holds (prepare_output's one listing)
    previous = prepare_output(cfg, header, [s.to_json() for s in specs], listed)
    folder = storage.Folder(out, cfg.storage_options)
    job_path = folder.join(JOB_FILE)

    # Counts known without reading the input: the Parquet plan, the last run's _job.json,
    # and the complete parts of an earlier run (their checksums verified).
    counts: list = [s.documents for s in specs]
    if previous is not None:
        for q, p in enumerate((previous.get("partitions") or [])[:n]):
            if counts[q] is None and p.get("documents") is not None:
                counts[q] = int(p["documents"])
    megatron = cfg.output_format == "megatron"
    packing = cfg.packing is not None
    parquet = cfg.output_format == "parquet" and not packing
    ran = False
    # (a part, or its record, that the listing does not hold is missing: no request)
    if cfg.output_format != "parquet" or packing:   # parts with a record (jobs/records.py)
        stats: list = [check_part_record(out, i, n, job_id, counts[i])
                       if part_stem(i, n) + RECORD_SUFFIX in listed else None
                       for i in range(n)]
    else:
        stats = [check_part(folder.join(part_name(i, n)), i, job_id, counts[i], None)
                 if part_name(i, n) in listed else None for i in range(n)]
    merged_state = None   # the partitions an in-process run appended to the merged pair
    if megatron and not packing and not folder.remote:
        merged_state = merged_resume_state(out, cfg, n, job_id, counts, stats)
    for i, st in enumerate(stats):
        if st is not None:
            counts[i] = st["documents"]
    missing = [i for i in range(n) if stats[i] is None]
    skipped = n - len(missing)
    if isinstance(prefetch, StreamPrefetch):   # (resumed: the counts known are not fetched)
        prefetch.keep([i for i in range(n) if counts[i] is None])

    def save_job(offsets=None):
        parts = [{"spec": s.to_json(), "documents": c} for s, c in zip(specs, counts)]
        if offsets is not None:
            for p, o in zip(parts, offsets):
                p["logid_offset"] = int(o)
        _write_json(job_path, {**header, "output": out, "n_partitions": n, "partitions": parts,
                               "documents": int(offsets[n]) if offsets is not None else None,
                               "security": security})

    if not folder.remote:   # (an object store's: once, when the scheduler is up, below;
        save_job()          # still before any part is written: one PUT, not two)
    if skipped:
        log(f"daskwp: resuming: {skipped} of {n} partitions already complete, "
            f"{len(missing)} to write")
    options = {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}
    if is_url(out):   # the workers' filesystem of the output (never recorded)
        options["storage_options"] = cfg.storage_options
        # the rejects files an earlier run left: a part written without rejects removes
        # its own only if listed (no DELETE for each part)
        options["listed_rejects"] = sorted(n for n in listed if n.startswith(REJECTS_PREFIX))
    local = cfg.scheduler_address in LOCAL_SCHEDULERS
    # A running cluster's workers resolve "auto" themselves (this machine may have no GPU).
    device = cfg.device if cfg.scheduler_address and not local else resolve_device(cfg.device)
    merger = None
    if megatron:
        options.update(megatron_options(cfg))
        unfinished = merged_state is not None and not merged_state["finished"]
        if cfg.merge_parts and (missing or unfinished) and not packing and not folder.remote:
            in_process = client is None and choose_scheduler(
                cfg, sum(f.size for f in files), device)[0] in LOCAL_SCHEDULERS
            # in this process: the partitions appended to the merged pair from memory;
            # on a cluster: the parts merged in order as they complete, while the job runs
            merger = cleanup.enter_context(
                InlineMerge(out, cfg, n, job_id, merged_state) if in_process
                else PartMerger(out, n, merged_state,
                                plannable=cfg.document_separator is None))
            if in_process:
                options["inline_merge"] = merger.key
            for i in range(n):
                if stats[i] is not None:
                    merger.part_done(i)
    work = bool(missing) or any(c is None for c in counts)
    own_client = False
    written_bytes = 0
    runner = None
    spool_token = None
    uploads = None   # the driver's uploads of the parts (hand_over_uploads)
    paused = contextlib.ExitStack()
    try:
        # in-process threads, a local cluster or a running one (choose_scheduler)
        runner, own_client, run_record = open_scheduler(
            cfg, device, sum(f.size for f in files), client, work, log,
            tasks=n if packing else len(missing), started=started, urls=urls)
        paused.enter_context(running_cluster_profiler_paused(cfg, runner, run_record))
        if not packing:
            uploads = hand_over_uploads(runner, run_record, folder)
            if uploads is not None:
                cleanup.callback(uploads.close)   # (an error or interrupt before its finish)
        if started is not None and spooling and run_record["mode"] == "local_cluster":
            # what the workers fetch or upload themselves: the input, unless the driver's
            # prefetch holds every partition to count or write; the output, unless the
            # driver uploads its parts
            to_write = set(missing)
            to_read = [i for i in range(n) if counts[i] is None or i in to_write]
            warm_workers(runner, [*([] if uploads is not None else [out]),
                                  *([] if prefetch is not None and prefetch.covers(to_read)
                                    else urls[1:])], cfg.storage_options)
        header["run"] = run_record
        save_job()   # with the run record, before any part is written
        if missing and SUMMARY_FILE in listed:
            # _summary.json exists only while the dataset is complete.
            folder.remove(SUMMARY_FILE)
        t_work = time.perf_counter()  # the cluster is up: counting, tokenizing, writing
        if packing:   # two passes of their own (jobs/packing.py)
            from .packing import run_packed_job
            stats, packed_offsets, _ = run_packed_job(cfg, tok, specs, out, job_id, runner,
                                                      log, device)
            written_bytes = sum(stats[i]["text_bytes"] for i in missing)
            # pass 1 counted every partition's documents: the offset pass reads nothing
            counts = [s["documents"] for s in stats]
        run_id = uuid.uuid4().hex[:8]
        spool_token, run_specs = _with_spool(specs, counts, cfg, job_id, run_id)
        if prefetch is not None:
            prefetch.adopt(run_specs)
        graph = None   # (packing's passes ran above: no graph is left to run)
        if not packing:
            # an in-process Megatron merge writes the .idx's end ahead from the total: the
            # pass is done a few partitions before the last (InlineMerge.total_before)
            total_before = merger.total_before(missing, counts) \
                if merger is not None else None
            # a Megatron job on a cluster: partition-local writes (job_graph's local),
            # their counts from their statistics but for the last few
            # (PartMerger.counted_ahead)
            local_writes: list = []
            if megatron and run_record["mode"] not in LOCAL_SCHEDULERS and \
                    not folder.remote and spool_token is None and prefetch is None:
                local_writes = missing
            counted = merger.counted_ahead(local_writes, counts) \
                if merger is not None else []
            graph = job_graph(run_specs, counts, missing,
                              out, tok, options, job_id, device, run_id=run_id,
                              write=_WRITERS[cfg.output_format], total_before=total_before,
                              local=local_writes, counted=counted)
        prog = Progress("tokenizing", len(missing), cfg.quiet)

        def got_part(i, st):
            nonlocal written_bytes
            if uploads is not None:   # (the part's files handed over: sent now)
                uploads.poke()
                try:
                    uploads.check()
                except storage.StorageError as e:   # (not the cluster's OSError)
                    raise JobError(str(e)) from None
            stats[i] = st
            written_bytes += st["text_bytes"]
            prog.update(1, st["text_bytes"])
            if merger is not None:
                merger.part_done(i)

        try:
            # in this process, a partition's count and write read its bytes once
            if graph is None:
                # packing: the offsets are pass 1's counts (a graph of the offset pass
                # alone was a scheduler round trip, 0.1-0.4 s idle on a cluster at load 20)
                values = {}
            else:
                with keeping_counted_bytes() if run_record["mode"] in LOCAL_SCHEDULERS \
                        else contextlib.nullcontext():
                    values = run_graph(graph, runner, got_part, log,
                                       on_total=merger.expect_documents
                                       if merger is not None else None)
            if merger is not None:
                merger.drain()   # (the records of an in-process merge: checked next)
            ran = True
        finally:
            prog.close()
        work_seconds = time.perf_counter() - t_work
    finally:
        if uploads is not None and not ran:
            uploads.close()   # (after an error: the parts not sent are dropped)
        paused.close()   # the workers' profiler as it was
        if prefetch is not None:
            # its thread still moves partitions into the run's folder (after an error:
            # into the folder being removed, where they would be left)
            prefetch.discard()
        if spool_token:
            remove_spools(runner, spool_token)
        close_scheduler(runner, own_client)
        # Temporary files of writes that did not finish (a worker died and the task was
        # rerun elsewhere, an error, an interrupt); of Parquet parts from the listing the
        # check takes the parts' sizes from (below), when the job ran.
        if not (ran and parquet):
            remove_temporary_files(folder)
    if uploads is not None:
        # the last parts' uploads went on while the cluster closed: every part in the
        # store now, the work's time up to the last upload's end
        uploads.finish()
        work_seconds = max(work_seconds, uploads.finished_at - t_work)
    if packing:
        offsets = packed_offsets
    else:
        offsets = [int(values[k]) for k in graph.offset_keys]
        counts = [int(values[k]) for k in graph.count_keys]
    wrong = None   # a part whose record differs from the pass (after the listing: an error)
    for i, st in enumerate(stats):
        if megatron and st.get("logid_offset", 0) is None:
            st["logid_offset"] = offsets[i]   # a partition-local write's (job_graph)
        if wrong is None and (st["logid_offset"] != offsets[i] or
                              st["documents"] != counts[i]):
            wrong = (f"output part {part_name(i, n)!r} in {out!r} records logID offset "
                     f"{st['logid_offset']} and {st['documents']} documents, the job's "
                     f"pass gives {offsets[i]} and {counts[i]}; delete it and rerun the job")
    sizes = None
    ends: dict = {}
    # an object store's _job.json (with the offsets) is put while the folder is listed:
    # two requests at once, not one after the other
    saving = _job_file_put(save_job, offsets) if parquet and folder.remote and \
        wrong is None else None
    try:
        if parquet:   # one listing: temporary files, the parts' sizes, the rejects files
            entries = folder.entries()
            sizes = {name: size for name, (size, _) in entries.items()}
            remove_temporary_files(folder, names=list(sizes))
            if uploads is not None:   # the footers of the parts this process sent, as stored
                ends = uploads.stored_ends(entries)
    finally:
        if saving is not None:
            saving.join()
    if wrong is not None:
        raise JobError(wrong)
    if saving is None:
        save_job(offsets)
    elif saving.error is not None:
        raise saving.error
    if megatron and not folder.remote:
        # the rejects files of partition-local writes (this run's, or kept parts' of a
        # run stopped before it wrote them)
        write_local_rejects(out, specs, stats, offsets)

    # Accounting: every logID 0..N-1 present exactly once, in order.
    plan = [{"index": i, "documents": counts[i], "logid_offset": offsets[i]}
            for i in range(n)]
    if packing:
        from .packing import packing_summary
        packed = packing_summary(stats, cfg)
    elif parquet:
        verify_parquet_output(out, plan, sizes, ends)
    else:
        _VERIFIERS[cfg.output_format](out, plan)
    total_docs = offsets[n]
    if sum(s["documents"] for s in stats) != total_docs:
        raise JobError(f"output {out!r}: documents written differ from the input's "
                       f"({sum(s['documents'] for s in stats)} vs {total_docs})")
    tokens = sum(s["tokens"] for s in stats)
    unk = sum(s["unknown_tokens"] for s in stats)
    rejects = [os.path.basename(rejects_path(folder.join(part_name(i, n))))
               for i, s in enumerate(stats) if s.get("rejected")]
    for name in folder.listdir() if sizes is None else sizes:
        # a rejects file no part of this job has (an earlier try)
        if name.startswith(REJECTS_PREFIX) and name.endswith(REJECTS_SUFFIX) \
                and name not in rejects:
            folder.remove(name)
    seconds = time.perf_counter() - t_start
    summary = {
        "documents": total_docs,
        "rows": sum(s["rows"] for s in stats),
        "tokens": tokens,
        "unknown_tokens": unk,
        "unknown_token_rate": unk / tokens if tokens else 0.0,
        # tokens per document (of the text; with truncation, those kept), over every part
        "length_percentiles": LengthCounts.merge(
            LengthCounts.from_json(s.get("length_counts")) for s in stats).summary(),
        "invalid_utf8_bytes": sum(s.get("invalid_utf8_bytes", 0) for s in stats),
        "invalid_utf8_documents": sum(s.get("invalid_utf8_documents", 0) for s in stats),
        "rejected_rows": sum(s.get("rejected", 0) for s in stats),
        "rejects_files": rejects,
        "input_bytes": sum(s["text_bytes"] for s in stats),
        "input_files": len(files),
        "input_file_bytes": sum(f.size for f in files),
        "partitions": n,
        "partitions_written": n - skipped,
        "partitions_skipped": skipped,
        "seconds": seconds,
        "tokenize_seconds": work_seconds,
        "mb_per_s": (written_bytes / 1e6 / work_seconds) if written_bytes and work_seconds
        else 0.0,
        "cpu_seconds": _stage_seconds(stats),
        "vocabulary_hash": tok.vocab.hash,
        "vocab": cfg.vocab or getattr(tok.vocab, "source", None) or "(bundled)",
        "parameters": params,
        "device": device,
        "scheduler_address": cfg.scheduler_address,
        "run": run_record,
        "security": security,
        "output": out,
        "input": cfg.input,
        "job_id": job_id,
        "version": __version__,
    }
    if packing:
        summary["packing"] = packed
    if megatron:   # packed: each block is a document of one sequence
        summary["megatron"] = finish_megatron(
            out, cfg, [dict(s, documents=s["rows"]) for s in stats] if packing else stats,
            bool(missing), merger)
    elif cfg.output_format == "datasets":
        summary["datasets"] = finish_datasets(out, stats, job_id)
    # the whole job's wall time: the merge of a Megatron job's parts included
    summary["seconds"] = time.perf_counter() - t_start
    unknown = unknown_rate_warnings(summary, tok)
    for w in unknown:
        log(f"daskwp: warning: {w}")
    summary["warnings"] = plan_warnings + unknown
    _write_json(folder.join(SUMMARY_FILE), summary)
    return summary


#: An unknown-token rate above this is reported (text in the vocabulary's language with the
#: right case setting stays well below it).
UNKNOWN_RATE_WARNING = 0.01


def unknown_rate_warnings(summary: dict, tok) -> list[str]:
    """Warnings about a high [UNK] rate, with the likely cause when it can be told."""
    rate = summary.get("unknown_token_rate", 0.0)
    if rate <= UNKNOWN_RATE_WARNING:
        return []
    msg = (f"{100 * rate:.1f}% of the tokens are {tok.vocab.unk_token} (more than "
           f"{100 * UNKNOWN_RATE_WARNING:.0f}%)")
    uncased = not any(t.isascii() and t.isalpha() and t != t.lower()
                      for t in tok.vocab.tokens[:5000])
    if uncased and not tok.lowercase:
        msg += ("; the vocabulary has no uppercase tokens but lowercase is off: pass "
                "--lowercase (or lowercase: true)")
    elif not uncased and tok.lowercase:
        msg += "; the vocabulary is cased but lowercase is on: try --no-lowercase"
    else:
        msg += "; check that the vocabulary fits the text's language and script"
    return [msg]
