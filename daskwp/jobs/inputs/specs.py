"""What the input layer hands on: an :class:`InputFile` per listed file (its format, size,
codec, and the stream it was spooled from), a :class:`PartitionSpec` per planned partition
(a byte range, a whole file or row groups, with the columns to read), and
:class:`InputWarning` for what a job handles less well than it could. The specs travel to
workers with the partition tasks and into the job's state file (``to_json``).
"""

from __future__ import annotations

import dataclasses

from ...frames.schema import POSITION_OUTPUTS


#: Output columns of the per-position outputs (a kept input column may not take their names).
POSITION_OUTPUT_NAMES = tuple(o.name for o in POSITION_OUTPUTS)
#: What ``input: -`` names (standard input).
STDIN = "-"


class InputWarning(UserWarning):
    """Something about the input that the job handles, but less well than it could (a big
    file that cannot be split)."""


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file. ``compression`` is the codec of a compressed file (``format`` is then
    the format of its content); ``source`` is what the user named when ``path`` is a spool
    copy of a stream (standard input, a pipe, a /proc file)."""

    path: str
    format: str
    size: int
    mtime_ns: int
    compression: str | None = None
    source: str | None = None
    #: An object's version as listed (:func:`~daskwp.frames.storage.object_version`: size
    #: and ETag): what its partitions read (never in ``to_json``: not part of the plan).
    version: tuple | None = dataclasses.field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        del d["version"]
        return d


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """One partition: a byte range of a text/JSON Lines/CSV file, a whole compressed or JSON
    array file, or row groups of a Parquet file. ``documents`` is known at planning time for
    Parquet only. A CSV piece with ``header_end > 0`` is read as the file's bytes
    ``[0, header_end)`` (the header) followed by ``[byte_start, byte_end)``. A text or
    JSON Lines range with ``cut_at_lines`` holds where planning cut the file, which planning
    did not read: the partition is the lines from the first line start at or after
    ``byte_start`` to the first at or after ``byte_end``, found when it is read
    (:func:`~daskwp.jobs.inputs.byte_ranges.exact_range`)."""

    index: int
    path: str
    format: str
    column: str
    byte_start: int = 0
    byte_end: int = 0
    row_groups: tuple = ()
    documents: int | None = None
    compression: str | None = None
    quoting: str = "csv"
    header_end: int = 0
    keep_columns: tuple = ()
    keep_types: tuple = ()
    column_pair: str | None = None
    cut_at_lines: bool = False
    #: The fsspec options of a URL ``path`` (travel with the task; never in ``to_json``).
    storage_options: dict | None = dataclasses.field(default=None, repr=False, compare=False)
    #: A URL partition's fetch spool in this run, ``(run token, spool_max_bytes)``
    #: (:mod:`.fetch_spool`; travels with the task, never in ``to_json``), or None.
    spool: tuple | None = dataclasses.field(default=None, repr=False, compare=False)
    #: The version of a URL ``path`` that planning listed (:attr:`InputFile.version`): the
    #: partition's reads are pinned to it (:func:`~daskwp.frames.storage.pinned`: no HEAD,
    #: an object replaced since is an error). Travels with the task, never in ``to_json``.
    object_version: tuple | None = dataclasses.field(default=None, repr=False, compare=False)

    def describe(self) -> str:
        if self.format == "parquet":
            rg = (f"row group {self.row_groups[0]}" if len(self.row_groups) == 1 else
                  f"row groups {self.row_groups[0]}-{self.row_groups[-1]}")
            return f"{self.path} ({rg})"
        if self.compression:
            return f"{self.path} (the whole {self.compression} file)"
        if self.format == "json" or (self.format in ("csv", "tsv") and not self.header_end):
            return self.path
        return f"{self.path} (bytes {self.byte_start}-{self.byte_end})"

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        del d["storage_options"]   # may hold secrets: never recorded
        del d["spool"]             # this run's only
        del d["object_version"]    # this run's listing's
        for k in ("row_groups", "keep_columns", "keep_types"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_json(cls, d: dict) -> "PartitionSpec":
        d = dict(d)
        for k in ("row_groups", "keep_columns", "keep_types"):
            d[k] = tuple(d.get(k) or ())
        return cls(**d)
