"""Batch jobs: the driver that plans, runs and verifies a job (``run_job``).

A job reads documents from files (plain text, CSV/TSV, JSON Lines or Parquet), splits them
into partitions, tokenizes every partition on a Dask cluster (or in-process) and writes one
Parquet file per partition plus ``_job.json`` (what the job is) and ``_summary.json`` (what
it did). See ``docs/batch-jobs.md`` for the user-facing description and docs/design.md §4.

The package: configuration (:mod:`.config`, from the option table), inputs (:mod:`.inputs`),
partition tasks and output checks (:mod:`.parts`), progress (:mod:`.progress`) and this
driver.
Resume design
-------------
* ``_job.json`` is written before any part: job parameters, the input fingerprint (path, size
  and mtime of every file), the daskwp version, the partition plan and, once counted, the
  number of documents of every partition (hence every partition's global logID offset).
* Each part is written to a hidden temporary name in the output folder, flushed, fsync'ed and
  renamed to ``part-NNNNN.parquet`` (atomic on POSIX), so a part file either is complete or
  does not exist. Its Parquet key-value metadata (key ``daskwp``) records the job id, the
  partition index, its logID offset and its statistics.
* A rerun with the same parameters and inputs keeps every part whose footer is readable and
  whose metadata matches the plan, and writes only the others. Different parameters or inputs
  are refused: "output directory holds another job's data".
* At the end the logID column of every part is read back: the logIDs of part i must run from
  its offset to offset + documents - 1 (each document present, in order, exactly once), and the
  documents of all parts must add up to the input's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
import uuid
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa

from ..backends.tokenizer import resolve_tokenizer
from ..core.options import TOKENIZER, names
from ..core.version import __version__
from ..core.windows import WINDOW_OPTIONS
from .config import JOB_KEYS, LOCAL_SCHEDULERS, JobConfig
from .errors import ConfigError, JobError, OutputConflictError
from .inputs import PartitionSpec, count_partition, input_fingerprint, list_input_files, \
    plan_partitions
from .parts import (JOB_FILE, JOB_FORMAT, PART_PREFIX, PART_SUFFIX, SUMMARY_FILE, TMP_PREFIX,
                    check_part, part_name, share, tokenize_job_partition, verify_output,
                    write_partition)
from .progress import Progress

def _run_tasks(client, fn, arg_lists: list[tuple], keys: list[str], on_result,
               describe: Callable[[int], str]) -> None:
    """Run ``fn(*args)`` for every args tuple; call ``on_result(i, result)`` as each ends."""
    if client is None:
        for i, args in enumerate(arg_lists):
            try:
                res = fn(*args)
            except JobError as e:
                raise type(e)(f"{describe(i)} failed: {e}") from e
            except Exception as e:
                raise JobError(f"{describe(i)} failed: {type(e).__name__}: {e}") from e
            on_result(i, res)
        return
    from distributed import as_completed
    futures = [client.submit(fn, *args, key=key, pure=False)
               for args, key in zip(arg_lists, keys)]
    index = {f.key: i for i, f in enumerate(futures)}
    try:
        for fut in as_completed(futures):
            i = index[fut.key]
            if fut.status == "error":
                exc = fut.exception()
                if isinstance(exc, JobError):
                    raise type(exc)(f"{describe(i)} failed: {exc}") from exc
                raise JobError(f"{describe(i)} failed: {type(exc).__name__}: {exc}")
            if fut.status == "cancelled":
                raise JobError(f"{describe(i)} was cancelled (the cluster lost it)")
            on_result(i, fut.result())
            fut.release()
    finally:
        client.cancel([f for f in futures if not f.done()])


def resolve_device(device: str) -> str:
    """'cpu' or 'gpu' ('auto': GPUs when dask-cuda, cudf and a GPU are present)."""
    from ..distributed.cluster import resolve_device as _resolve
    try:
        return _resolve(device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def connect_cluster(cfg: JobConfig, device: str):
    """``daskwp.connect`` for the job: a running scheduler, or a local (CUDA) cluster."""
    from ..distributed.cluster import connect
    if cfg.scheduler_address:
        try:
            return connect(scheduler_address=cfg.scheduler_address)
        except OSError as e:
            raise JobError(f"cannot reach the scheduler at {cfg.scheduler_address!r}: "
                           f"{e}") from None
    return connect(device=device, n_workers=cfg.n_workers,
                   threads_per_worker=cfg.threads_per_worker, dashboard_address=":0")


# ---------------------------------------------------------------------------------------
# The job
# ---------------------------------------------------------------------------------------
_PARTITION_OPTIONS = (*WINDOW_OPTIONS, "compression")


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
    before any cluster starts. The tokenizer's own validation gives the message."""
    options = {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}
    try:
        tokenize_job_partition(tokenizer, pa.array([""], type=pa.large_string()), options, 0)
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
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, sort_keys=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _our_files(names: Iterable[str]) -> tuple[list[str], list[str]]:
    ours, other = [], []
    for n in names:
        is_ours = (n in (JOB_FILE, SUMMARY_FILE) or n.startswith(TMP_PREFIX)
                   or (n.startswith(PART_PREFIX) and n.endswith(PART_SUFFIX))
                   or (n.startswith((JOB_FILE + ".", SUMMARY_FILE + ".")) and n.endswith(".tmp")))
        (ours if is_ours else other).append(n)
    return ours, other


def _differences(old: dict, new: dict) -> list[str]:
    out = []
    for k in sorted(set(old) | set(new)):
        if old.get(k) != new.get(k):
            out.append(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now")
    return out


def prepare_output(cfg: JobConfig, header: dict) -> dict | None:
    """Create or reopen the output directory. Returns the previous _job.json of this very job
    (to resume) or None (a fresh start). Refuses a directory holding another job's data."""
    out = cfg.output
    if os.path.exists(out) and not os.path.isdir(out):
        raise OutputConflictError(f"output {out!r} exists and is not a directory")
    os.makedirs(out, exist_ok=True)
    names = os.listdir(out)
    ours, other = _our_files(names)
    if other:
        raise OutputConflictError(
            f"output directory {out!r} holds another job's data: files daskwp did not write "
            f"({', '.join(sorted(other)[:5])}{', ...' if len(other) > 5 else ''}); choose a "
            f"new or empty directory")
    previous = None
    job_path = os.path.join(out, JOB_FILE)
    if os.path.exists(job_path):
        try:
            with open(job_path, encoding="utf-8") as fh:
                previous = json.load(fh)
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
        if diffs:
            raise OutputConflictError(
                f"output directory {out!r} holds another job's data ({'; '.join(diffs)}); "
                f"use a new output directory, or pass --overwrite to replace it")
    if cfg.overwrite:
        for n in ours:
            os.unlink(os.path.join(out, n))
        return None
    for n in ours:  # leftovers of a killed run
        if n.startswith(TMP_PREFIX) or n.endswith(".tmp"):
            try:
                os.unlink(os.path.join(out, n))
            except FileNotFoundError:
                pass
    return previous


def _fmt_int(n: int) -> str:
    return f"{n:,}"


def format_summary(s: dict) -> str:
    mbps = s["mb_per_s"]
    lines = [
        f"daskwp: {_fmt_int(s['documents'])} documents -> {_fmt_int(s['rows'])} rows, "
        f"{_fmt_int(s['tokens'])} tokens",
        f"  input        {_fmt_int(s['input_bytes'])} text bytes in {s['input_files']} "
        f"file(s), {s['partitions']} partition(s): {s['partitions_written']} written, "
        f"{s['partitions_skipped']} already complete",
        f"  time         {s['seconds']:.2f} s" + (f", {mbps:.2f} MB/s" if mbps else ""),
        f"  unknown      {_fmt_int(s['unknown_tokens'])} tokens "
        f"({100 * s['unknown_token_rate']:.3f}%)",
        f"  vocabulary   {s['vocab']} (hash {s['vocabulary_hash'][:12]})",
        f"  output       {s['output']}",
    ]
    return "\n".join(lines)


def run_job(cfg: JobConfig, *, client=None, tokenizer=None,
            log: Callable[[str], None] | None = None) -> dict:
    """Run a batch job to completion (resuming a previous run of it) and return the summary.

    ``client``: an existing ``distributed.Client`` to use (else one is made from the config,
    or none at all when ``scheduler_address`` is 'synchronous'). ``tokenizer`` replaces the
    one the config describes (its settings are what the job records).
    """
    t_start = time.perf_counter()
    if log is None:
        log = (lambda msg: None) if cfg.quiet else (
            lambda msg: print(msg, file=sys.stderr, flush=True))
    tok = tokenizer if tokenizer is not None else build_tokenizer(cfg)
    check_window_parameters(cfg, tok)
    params = job_parameters(cfg, tok)
    files = list_input_files(cfg.input, cfg.input_format)
    header = {
        "daskwp_job": JOB_FORMAT, "version": __version__, "parameters": params,
        "input": {"fingerprint": input_fingerprint(files),
                  "files": [dataclasses.asdict(f) for f in files]},
    }
    job_id = hashlib.blake2b(json.dumps(
        [header["version"], params, header["input"]["fingerprint"]], sort_keys=True).encode(),
        digest_size=16).hexdigest()
    header["job_id"] = job_id
    previous = prepare_output(cfg, header)
    out = os.path.abspath(cfg.output)
    job_path = os.path.join(out, JOB_FILE)

    if previous is not None and previous.get("partitions") is not None:
        specs = [PartitionSpec.from_json(p["spec"]) for p in previous["partitions"]]
        counts = [p.get("documents") for p in previous["partitions"]]
    else:
        specs = plan_partitions(files, cfg.column, cfg.partition_size)
        counts = [s.documents for s in specs]
    n = len(specs)
    run_id = uuid.uuid4().hex[:8]
    options = {k: getattr(cfg, k) for k in _PARTITION_OPTIONS}

    def save_job(counts_):
        parts = [{"spec": s.to_json(), "documents": c} for s, c in zip(specs, counts_)]
        if all(c is not None for c in counts_):
            offs = np.concatenate([[0], np.cumsum(counts_, dtype=np.int64)])
            for p, o in zip(parts, offs[:-1]):
                p["logid_offset"] = int(o)
        _write_json(job_path, {**header, "output": out, "n_partitions": n, "partitions": parts,
                               "documents": int(sum(counts_)) if all(
                                   c is not None for c in counts_) else None})

    local = cfg.scheduler_address in LOCAL_SCHEDULERS
    # A running cluster's workers resolve "auto" themselves (this machine may have no GPU).
    device = cfg.device if cfg.scheduler_address and not local else resolve_device(cfg.device)
    own_client = False
    if client is None and not local and n:
        client = connect_cluster(cfg, device)
        own_client = True
        dash = getattr(client, "dashboard_link", None)
        log(f"daskwp: cluster {client.scheduler.address if client.scheduler else ''}"
            + (f", dashboard {dash}" if dash else ""))
    try:
        if local:
            client = None
        # The tokenizer travels once, as the result of a task that every write depends on
        # (workers fetch it from each other; the scheduler can recompute it if lost).
        tok_ref = tok if client is None else client.submit(
            share, tok, key=f"daskwp-tokenizer-{job_id[:8]}-{run_id}", pure=False)
        save_job(counts)
        # 1. count the documents of every partition (the global logID offset pass)
        todo = [i for i, c in enumerate(counts) if c is None]
        if todo:
            prog = Progress("counting", len(todo), cfg.quiet)

            def got_count(j, c):
                counts[todo[j]] = int(c)
                prog.update()
            _run_tasks(client, count_partition, [(specs[i],) for i in todo],
                       [f"daskwp-count-{job_id[:8]}-{run_id}-{i:05d}" for i in todo],
                       got_count,
                       lambda j: f"counting partition {todo[j]} ({specs[todo[j]].describe()})")
            save_job(counts)
        offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        specs = [dataclasses.replace(s, documents=int(c)) for s, c in zip(specs, counts)]

        # 2. keep the complete parts of an earlier run, write the others
        stats: list[dict | None] = [
            check_part(os.path.join(out, part_name(i, n)), i, job_id, counts[i],
                       int(offsets[i])) for i in range(n)]
        missing = [i for i in range(n) if stats[i] is None]
        skipped = n - len(missing)
        if skipped:
            log(f"daskwp: resuming: {skipped} of {n} partitions already complete, "
                f"{len(missing)} to write")
        t_work = time.perf_counter()
        written_bytes = 0
        if missing:
            # _summary.json exists only while the dataset is complete.
            try:
                os.unlink(os.path.join(out, SUMMARY_FILE))
            except FileNotFoundError:
                pass
            prog = Progress("tokenizing", len(missing), cfg.quiet)

            def got_part(j, st):
                nonlocal written_bytes
                stats[missing[j]] = st
                written_bytes += st["text_bytes"]
                prog.update(1, st["text_bytes"])
            _run_tasks(client, write_partition,
                       [(specs[i], int(offsets[i]), out, tok_ref, options, job_id, n, device)
                        for i in missing],
                       [f"daskwp-write-{job_id[:8]}-{run_id}-{i:05d}" for i in missing],
                       got_part, lambda j: f"partition {missing[j]} "
                                           f"({specs[missing[j]].describe()})")
        work_seconds = time.perf_counter() - t_work
    finally:
        if own_client and client is not None:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()

    # Temporary files of writes that died with their worker (the task was rerun).
    for name in os.listdir(out):
        if name.startswith(TMP_PREFIX):
            try:
                os.unlink(os.path.join(out, name))
            except FileNotFoundError:
                pass

    # 3. accounting: every logID 0..N-1 present exactly once, in order
    plan = [{"index": i, "documents": counts[i], "logid_offset": int(offsets[i])}
            for i in range(n)]
    verify_output(out, plan)
    total_docs = int(offsets[-1]) if n else 0
    if sum(s["documents"] for s in stats) != total_docs:
        raise JobError(f"output {out!r}: documents written differ from the input's "
                       f"({sum(s['documents'] for s in stats)} vs {total_docs})")
    tokens = sum(s["tokens"] for s in stats)
    unk = sum(s["unknown_tokens"] for s in stats)
    seconds = time.perf_counter() - t_start
    summary = {
        "documents": total_docs,
        "rows": sum(s["rows"] for s in stats),
        "tokens": tokens,
        "unknown_tokens": unk,
        "unknown_token_rate": unk / tokens if tokens else 0.0,
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
        "vocabulary_hash": tok.vocab.hash,
        "vocab": cfg.vocab or getattr(tok.vocab, "source", None) or "(bundled)",
        "parameters": params,
        "device": device,
        "scheduler_address": cfg.scheduler_address,
        "output": out,
        "input": cfg.input,
        "job_id": job_id,
        "version": __version__,
    }
    _write_json(os.path.join(out, SUMMARY_FILE), summary)
    return summary
