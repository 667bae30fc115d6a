"""Part records: how output formats without a footer of their own (Megatron ``.bin`` /
``.idx`` pairs, ``datasets`` Arrow shards) make a part complete, atomically and checkably.

A part's files are written under hidden temporary names and fsync'ed; then
:func:`commit_part` writes the record ``part-NNNNN.json`` (the job id, the partition, its
statistics, and the size and checksum of every file: ``hash128``, the part checksum of
Parquet parts' ``daskwp.data_hash128``, a 128-bit native hash; records of earlier versions
hold ``sha256``, the first 128 bits of SHA-256), renames the files to their names, and
renames the record last: a part whose record exists is complete. :func:`check_part_record`
is what a rerun asks: the record names this job and partition, and every file has the
recorded size and checksum (either kind).
"""

from __future__ import annotations

import functools
import json
import os
import uuid

from ..core.cpu_clock import stage_cpu_seconds
from ..frames import storage
from ..frames.part_writer import CHECKSUM_KEY, SHA256_CHECKSUM_KEY
from .parts import (PART_SUFFIX, TMP_PREFIX, part_name, partition_failure,
                    read_counted_partition, rejects_path, checksum_of, write_rejects)

__all__ = ["RECORD_SUFFIX", "check_part_record", "commit_part", "file_digest", "part_stem",
           "naming_partition", "publish_part", "refuse_set_options", "temporary_path",
           "timed_read", "write_part_rejects"]

RECORD_SUFFIX = ".json"


def part_stem(index: int, n_partitions: int) -> str:
    """``part-NNNNN``: the name of partition ``index``'s record without its suffix."""
    return part_name(index, n_partitions)[:-len(PART_SUFFIX)]


def temporary_path(out_dir: str, index: int, what: str = "") -> str:
    """A hidden temporary path in ``out_dir`` for partition ``index`` (removed by
    :func:`.parts.remove_temporary_files` if a write never finishes)."""
    return os.path.join(out_dir, f"{TMP_PREFIX}{index}-{what}{uuid.uuid4().hex}")


#: A record's checksum field: the part checksum key it is computed with.
_RECORD_CHECKSUMS = {"hash128": CHECKSUM_KEY, "sha256": SHA256_CHECKSUM_KEY}


def file_digest(path: str, key: bytes = CHECKSUM_KEY) -> str:
    """The part checksum of a file's bytes (``key``: the 128-bit native hash, or
    ``daskwp.data_sha256``: the first 128 bits of SHA-256; hex), read in 4 MB pieces."""
    with storage.open_input(path) as fh:
        return checksum_of(fh, fh.seek(0, os.SEEK_END), key)


#: The keys of a part's statistics that time this run (not the part): never recorded, so
#: that a part's record is the same bytes whichever run, process or thread wrote it.
RUN_TIMINGS = frozenset({"cpu_seconds", "seconds"})


def commit_part(out_dir: str, index: int, n_partitions: int, job_id: str, stats: dict,
                files: dict, written: tuple = (), digests: dict | None = None, *,
                fsync: bool = True) -> None:
    """Make partition ``index`` complete: ``files`` maps each final file name (in
    ``out_dir``) to the fsync'ed temporary file that holds it; ``written`` names files of
    the part already in place (its rejects file). Records ``stats`` with the sizes and
    checksums of all of them (``digests``: final name to the :func:`file_digest` its
    writer computed as it wrote the file; the others are read back), renames the files,
    then the record (without the run's timings, :data:`RUN_TIMINGS`). ``fsync`` False: the
    record is not written back before its rename either (for a part whose files were not:
    :func:`check_part_record` checks every file against the record when a rerun keeps it,
    so a part that a crash of the system left short or stale is written again)."""
    paths = {**{n: os.path.join(out_dir, n) for n in written}, **files}
    digests = digests or {}
    stats["files"] = {name: {"bytes": os.path.getsize(tmp),
                             "hash128": digests.get(name) or file_digest(tmp)}
                      for name, tmp in paths.items()}
    record = temporary_path(out_dir, index, "record-")
    try:
        with open(record, "w", encoding="utf-8") as fh:
            json.dump({"job_id": job_id, "partition": index,
                       **{k: v for k, v in stats.items() if k not in RUN_TIMINGS}},
                      fh, indent=1)
            fh.write("\n")
            fh.flush()
            if fsync:
                os.fsync(fh.fileno())
        for name, tmp in files.items():
            os.replace(tmp, os.path.join(out_dir, name))
        os.replace(record, os.path.join(out_dir, part_stem(index, n_partitions)
                                        + RECORD_SUFFIX))
    finally:
        for tmp in (*files.values(), record):
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def publish_part(folder, staging: str, index: int, n_partitions: int) -> None:
    """Upload a part committed in the local ``staging`` folder to ``folder`` on an object
    store (nothing for a local folder, where the part was committed in place): every file
    its record lists, each one put, then the record last: a part whose record is in the
    store is complete there."""
    if not folder.remote:
        return
    record = part_stem(index, n_partitions) + RECORD_SUFFIX
    with open(os.path.join(staging, record), encoding="utf-8") as fh:
        names = list(json.load(fh)["files"])
    for name in (*names, record):
        folder.publish(os.path.join(staging, name), name)


def check_part_record(out_dir: str, index: int, n_partitions: int, job_id: str,
                      documents: int | None) -> dict | None:
    """The statistics of a complete part of this job, or None: the record is missing or
    unreadable, names another job or partition or another number of documents, or a file's
    size or checksum differs from it."""
    folder = storage.Folder(out_dir, storage.current_options())
    path = folder.join(part_stem(index, n_partitions) + RECORD_SUFFIX)
    try:
        with storage.open_input(path) as fh:
            rec = json.loads(fh.read().decode("utf-8"))
        if not (rec.get("job_id") == job_id and rec.get("partition") == index
                and (documents is None or rec.get("documents") == documents)
                and rec.get("files")):
            return None
        for name, f in rec["files"].items():
            p = folder.join(name)
            field = "hash128" if "hash128" in f else "sha256"
            if storage.size(p) != f["bytes"] or \
                    file_digest(p, _RECORD_CHECKSUMS[field]) != f[field]:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    rec.pop("job_id")
    return rec


def timed_read(spec, documents: int | None, options: dict) -> tuple:
    """``(texts, kept, (invalid_bytes, invalid_documents), bad, read CPU seconds)`` of a
    partition to write (:func:`.parts.read_counted_partition`); ``bad``: with the row policy
    (``options["on_bad_row"] == "reject"``) the ``[(row, reason)]`` of the rows that could
    not be read (read as empty documents), else None (such a row fails the partition)."""
    c0 = stage_cpu_seconds()
    bad = [] if options.get("on_bad_row") == "reject" else None
    texts, kept, invalid = read_counted_partition(spec, documents, bad)
    return texts, kept, invalid, bad, stage_cpu_seconds() - c0


def write_part_rejects(out_dir: str, spec, n_partitions: int, bad, logid_offset: int,
                       file_offset: int | None) -> tuple:
    """The rejects file of partition ``spec.index`` (:func:`.parts.write_rejects`, named as
    a Parquet part's); returns its name when there is one (for :func:`commit_part`'s
    ``written``), else ``()``."""
    path = rejects_path(os.path.join(out_dir, part_name(spec.index, n_partitions)))
    write_rejects(path, bad or (), spec, logid_offset, file_offset)
    return (os.path.basename(path),) if bad else ()


def naming_partition(write):
    """A partition writer ``write(spec, ...)`` whose errors name the partition and its file
    (:func:`.parts.partition_failure`)."""
    @functools.wraps(write)
    def write_naming_partition(spec, *args, **kwargs):
        try:
            return write(spec, *args, **kwargs)
        except Exception as e:
            raise partition_failure(e, spec) from e
    return write_naming_partition


def refuse_set_options(cfg, keys, default_value, what: str, instead: str) -> None:
    """ConfigError naming the first of ``keys`` that ``cfg`` sets to anything but its
    default (``default_value(key)``: the configured default): it "does not apply to
    ``what``"; ``instead`` says what to do."""
    from .errors import ConfigError
    for key in keys:
        value = getattr(cfg, key)
        if value != default_value(key) and not (key == "bucket_widths" and value == "auto"):
            raise ConfigError(f"{key}={value!r} does not apply to {what}; {instead}")
