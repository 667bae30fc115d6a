"""Job inputs: listing files, planning partitions, reading a partition as Arrow arrays.

A partition is one of (docs/batch-jobs.md, "Inputs"):

* a byte range of a text or JSON Lines file, split at line ends;
* a byte range of a CSV/TSV file, split at record boundaries (the header is read again with
  every piece), or the whole file where no safe boundary is known;
* a whole compressed file (gzip, bz2, xz, zstd, lz4: a compressed stream has no byte offsets
  to split at) or a whole JSON array file;
* row groups of a Parquet file.

With ``column_pair`` (sentence pairs, docs/design.md §2.8) a partition of a Parquet, CSV/TSV
or JSON Lines file reads that column beside ``column``: its documents are then a two-column
Arrow table (the texts, then the second sequences), one row per pair; plain text has no
columns and refuses it by name.

Streams (standard input ``-``, named pipes, character devices, ``/proc`` files) are copied to
a spool file first, then read like any file. Every format decodes bytes the same way: invalid
UTF-8 is kept as bytes, and the tokenizer reads each ill-formed sequence as U+FFFD;
:func:`count_invalid_utf8` counts those bytes for the job summary.

The modules, one job each: :mod:`.specs` (the records passed on), :mod:`.listing` and
:mod:`.spool` (what files the input names), :mod:`.compression` (codecs, decompressed
streams), :mod:`.planning` (cutting files into partitions), :mod:`.byte_ranges`, one reader
per format (:mod:`.text`, :mod:`.csv_format`, :mod:`.json_format`, :mod:`.parquet_format`)
with :mod:`.columns` for what they share, :mod:`.utf8` (invalid-byte counts) and
:mod:`.reading` (a partition task: any format's documents). This package re-exports the
names the jobs use.
"""

from __future__ import annotations

from ...core.options import INPUT_FORMATS
from ...frames.partition import attach_kept_columns  # noqa: F401 (the jobs' name for it)
from .byte_ranges import keeping_counted_bytes
from .compression import COMPRESSIONS
from .listing import input_fingerprint, list_input_files
from .planning import plan_partitions
from .reading import (count_partition, read_partition, read_partition_with_columns,
                      read_partition_with_counts)
from .specs import STDIN, InputFile, InputWarning, PartitionSpec
from .spool import remove_spool_dir  # noqa: F401 (the console command's exit hook)
from .text import lines_to_arrow
from .utf8 import count_invalid_utf8

__all__ = ["COMPRESSIONS", "INPUT_FORMATS", "InputFile", "InputWarning", "PartitionSpec",
           "STDIN", "attach_kept_columns", "count_invalid_utf8", "count_partition",
           "input_fingerprint", "keeping_counted_bytes", "lines_to_arrow",
           "list_input_files", "plan_partitions",
           "read_partition", "read_partition_with_columns", "read_partition_with_counts"]
