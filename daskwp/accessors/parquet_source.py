"""The lazy accessor's Parquet reads: a plain ``dd.read_parquet(...)["text"]`` read by
daskwp itself, straight into Arrow, in batches.

``to_parquet`` of ``dd.read_parquet(files)["text"].wordpiece.tokenize(...)``: dask's
partition read gives Arrow's reader a whole row group, whose string buffer grows by
doubling (96 MB reallocated for 63 MB of text), and that read, not the tokenizer, set the
workers' peak memory. Here a file's text goes to one block of daskwp's host pool
(:class:`_TextBlock`), as a batch job's text partition does, in Arrow chunks of at most
:data:`CHUNK_BYTES` over it (one tokenizer piece each): the read's peak is about the text,
the next partition reuses the block instead of faulting fresh pages in, and Arrow's reads
go through small batches of the glibc heap (:func:`read_pool`) that do not fragment it.
Files under :data:`HOST_BLOCK_MIN_BYTES` are read in batches of about :data:`CHUNK_BYTES`
of text, one chunk each.

A file's text column of the usual codecs and encodings is decoded page by page by
:mod:`~daskwp.accessors.parquet_pages` (its PLAIN values copied once, from the
decompressed page into the block: pyarrow's reader copied them into its string builder,
then the block took a second copy); anything else by pyarrow's reader. A 64 MB partition of
zstd text: 62-70 ms of CPU against 76-90 (the decompression ~45 of them).

When the Series is such a read and nothing in it can change what a partition holds (no
filters, no index, no partitioning columns, no read options, a local text column of
Arrow strings), :func:`direct_text_source` swaps dask's read for :class:`DirectTextRead`:
the same expression (same files, same partitions, the same row groups in each, the same
row counts for the global logIDs) whose tasks read the partition's row groups with
pyarrow's Parquet reader on the task's own thread and wrap the column as the
pandas string array dask would have built (zero-copy; a ``RangeIndex`` from 0, as dask's
read without an index). Anything else keeps dask's read, silently.

The partition read imports no dask (nor does unpickling its task: dask's own partition
read, which a task falls back to, travels pickled as :class:`DaskRead`): a fresh worker
that unpickled it imported ``dask.dataframe`` for it, ~0.25 s of CPU at its first task.
:class:`DirectTextRead` is dask glue, made (importing dask's expressions) when first used.
"""

from __future__ import annotations

import functools

import pandas as pd

from .parquet_pages import PagesUnsupported, pages_readable, read_column_pages

__all__ = ["CHUNK_BYTES", "DirectTextRead", "HOST_BLOCK_MIN_BYTES", "READ_BATCH_BYTES",
           "READ_BUFFER_BYTES", "batch_rows", "direct_text_source", "read_pool",
           "read_text_partition"]


#: Text bytes of each Arrow chunk a partition is read into: at most this many over a
#: host-pool block, or a batch of rows of about this many bytes (from the row groups'
#: sizes) where there is none. The tokenizer's pieces
#: (:data:`~daskwp.distributed.tasks.PIECE_BYTES`) hold about one chunk each.
CHUNK_BYTES = 8 << 20

#: Bytes of a column chunk read from the file at a time. Arrow's default (pre-buffered
#: reads) holds a row group's whole compressed column chunk (20 MB of a 64 MB partition
#: of zstd text), in Arrow's default pool, faulted in afresh on a nanny's worker (its
#: jemalloc hands it back): 5k page faults per partition, ~1k through this buffer.
READ_BUFFER_BYTES = 1 << 20

#: The smallest text of a file copied into one host-pool block (:class:`_TextBlock`): the
#: pool's smallest pooled block.
HOST_BLOCK_MIN_BYTES = 4 << 20

#: Text bytes of each batch Arrow reads when the text goes to a host-pool block: its
#: builders' doublings stay small in the heap (batches of 8 MB, held there for the whole
#: task, fragmented a worker's heap).
READ_BATCH_BYTES = 1 << 20


def batch_rows(pf, column: str, chunk_bytes: int | None = None) -> int:
    """Rows per batch of ``column`` of ``pf`` (a ``ParquetFile``, or the reader of
    :func:`read_text_partition`) for chunks of about ``chunk_bytes`` (default
    :data:`CHUNK_BYTES`) of text, from the uncompressed size of its column chunks (at
    least 64)."""
    chunk_bytes = CHUNK_BYTES if chunk_bytes is None else chunk_bytes
    meta = pf.metadata
    j = _leaf_index(meta, column)
    rows = nbytes = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        rows += rg.num_rows
        nbytes += rg.column(j).total_uncompressed_size if j >= 0 else 0
    if rows == 0 or nbytes == 0:
        return 1 << 16
    return max(64, int(chunk_bytes * rows / nbytes))


def read_text_partition(pieces: tuple, column: str, dtype, dask_read=None,
                        part=None, pages: bool = True) -> pd.DataFrame:
    """One partition of a :class:`DirectTextRead`: ``column`` of each ``(path,
    row_groups)`` piece (``row_groups`` None: the whole file), in order, as a one-column
    pandas frame of ``dtype`` with a ``RangeIndex`` from 0.

    Each file's text is copied into one host-pool block (:class:`_TextBlock`) from
    batches of :data:`READ_BATCH_BYTES`, in Arrow chunks of at most :data:`CHUNK_BYTES`. Memory: a whole row
    group read at once grows its string buffer by doubling (reallocations up to 1.5x the
    text, 96 MB for 63 MB of text, faulted in again for every partition); here the read's
    peak is the partition's text and a batch.

    A file whose footer could make dask's read differ (an index in its pandas metadata
    other than a ``RangeIndex`` from 0 by 1, which dask restores; a column that is not
    string or large_string) is read by ``dask_read(part)``, dask's own partition read.

    ``pages``: a file's pages are decoded by :mod:`daskwp.accessors.parquet_pages`
    straight into the block where they can be (a plain text column of the usual codecs
    and encodings; the values copied once), else by pyarrow's reader (False: always)."""
    import pyarrow as pa

    try:
        chunks = _read_pieces(pieces, column, pages, dask_read is not None)
    except PagesUnsupported:   # a page the page reader does not decode: pyarrow's reader
        chunks = _read_pieces(pieces, column, False, dask_read is not None)
    if chunks is None:
        return dask_read(part)
    col = pa.chunked_array(chunks, type=chunks[0].type) if chunks else \
        pa.chunked_array([], type=pa.large_string())
    return pd.DataFrame({column: pd.array(col, dtype=dtype)})


def _read_pieces(pieces: tuple, column: str, pages: bool, own_read: bool) -> list | None:
    """The Arrow chunks of ``column`` of ``pieces`` (see :func:`read_text_partition`);
    None where a file's footer asks for dask's read (``own_read``: there is one). ``pages``: a file whose column
    :func:`~daskwp.accessors.parquet_pages.pages_readable` calls readable is read by
    :func:`~daskwp.accessors.parquet_pages.read_column_pages`."""
    chunks = []
    pool = read_pool()
    for path, row_groups in pieces:
        pf = _open(path, pool)
        schema = pf.schema_arrow
        if not _plain_footer(schema, column) and own_read:
            return None
        groups = list(range(pf.metadata.num_row_groups)) if row_groups is None else \
            list(row_groups)
        j = _leaf_index(pf.metadata, column)
        meta = pf.metadata
        block = _TextBlock(sum(meta.row_group(g).column(j).total_uncompressed_size
                               for g in groups) if j >= 0 else 0,
                           sum(meta.row_group(g).num_rows for g in groups),
                           schema.field(column).type)
        if pages and block.active and pages_readable(meta, j):
            with open(path, "rb", buffering=0) as f:
                chunks.extend(read_column_pages(f, meta, groups, j, block,
                                                 READ_BUFFER_BYTES,
                                                 min(READ_BATCH_BYTES, CHUNK_BYTES // 4),
                                                 pool))
        else:
            rows = batch_rows(pf, column, READ_BATCH_BYTES if block.active else None)
            for batch in pf.iter_batches(rows, groups, [j], use_threads=False):
                chunk = batch.column(0)
                del batch   # (its buffers go back to the heap once copied)
                chunks.extend(block.add(chunk))
                del chunk
        chunks.extend(block.flush())
    return chunks


class _TextBlock:
    """One host-pool block (:mod:`daskwp.backends.memory`) that a file's text is copied
    into, batch after batch, and handed out as Arrow arrays of at most :data:`CHUNK_BYTES`
    over its slices (one tokenizer piece each; a batch larger alone): the partition's text
    in one block that the next partition reuses (as a batch job's text partition is).
    Arrow reads batches of :data:`READ_BATCH_BYTES` into the
    glibc heap, freed once copied: batches of 8 MB (and their builders' doublings) read
    into the heap and held there fragmented it (a worker's heap grew by ~150 MB over 23
    partitions of 64 MB).

    ``nbytes``: the block's size, the column chunks' uncompressed size (at least the text
    of PLAIN pages); text past its end (dictionary pages decode to more) moves to a larger
    block, sized from the ``rows`` still to come. Below :data:`HOST_BLOCK_MIN_BYTES` no
    block is taken (:attr:`active` False): the batches are the chunks."""

    def __init__(self, nbytes: int, rows: int, kind=None):
        self.buf = None
        self.used = 0        # bytes of the block taken
        self.start = 0       # where the chunk being gathered starts
        self.parts: list = []   # (rows, validity or None, offsets) of each chunk copied in
        self.kind = kind     # the Arrow type of the arrays (else: the first chunk's)
        self.rows, self.rows_read = rows, 0
        if nbytes >= HOST_BLOCK_MIN_BYTES:
            from .. import _ext
            self.buf = _ext.host_bytes(int(nbytes))

    @property
    def active(self) -> bool:
        return self.buf is not None

    def add(self, chunk) -> list:
        """Copy ``chunk`` (a string or large_string array) in; returns the arrays it
        completes (the one gathered so far where ``chunk`` would take it past
        CHUNK_BYTES; without a block, ``chunk`` itself)."""
        import numpy as np

        if self.buf is None:
            return [chunk]
        if len(chunk) == 0:
            return []
        validity, offsets, data = chunk.buffers()
        kind = _offset_dtype(chunk.type)
        off = np.frombuffer(offsets, dtype=kind, count=len(chunk) + 1,
                            offset=chunk.offset * kind.itemsize)
        lo, hi = int(off[0]), int(off[-1])
        # chunks of at most CHUNK_BYTES: one tokenizer piece each (a byte more made a
        # second piece of a few rows); one chunk over the whole block held more memory
        # (peak RSS growth at 3 GB 358-408 MiB against 285-310)
        out = self.flush() if self.used - self.start + hi - lo > CHUNK_BYTES else []
        self.rows_read += len(chunk)
        if self.used + hi - lo > len(self.buf):
            self._grow(hi - lo)
        self.buf[self.used:self.used + hi - lo] = np.frombuffer(
            data, dtype=np.uint8, count=hi - lo, offset=lo)
        base = self.used - self.start
        # the chunk's validity only (its text is copied): the batch itself is freed now
        valid = chunk.is_valid().to_numpy(zero_copy_only=False) if chunk.null_count else None
        self.kind = chunk.type
        self.parts.append((len(chunk), valid, off - (lo - base)))
        self.used += hi - lo
        return out

    def add_plain(self, values, count: int, valid=None) -> list:
        """Decode the ``count`` values of a PLAIN-encoded Parquet BYTE_ARRAY page
        (``values``: its decompressed values) into the block
        (:func:`daskwp._ext.plain_byte_array_values`: copied once, without their lengths);
        ``valid``: the page's rows (bool; None: all valid, ``count`` rows), the nulls
        among them holding no value. Returns the arrays completed, as :meth:`add`."""
        import numpy as np

        from .. import _ext

        nbytes = max(0, len(values) - 4 * count)   # at least the values' bytes
        if self.used + nbytes > len(self.buf):
            self._grow(nbytes)
        offsets = _ext.plain_byte_array_values(values, count, self.buf, self.used)
        rows = count
        if valid is not None:   # a null repeats the offset before it
            rows = len(valid)
            offsets = offsets[np.concatenate(([0], np.cumsum(valid)))]
        self.rows_read += rows
        self.parts.append((rows, valid, offsets - self.start))
        self.used = int(offsets[-1])
        # chunks of at most CHUNK_BYTES (a page may hold more): cut at a row, the rest
        # gathered on with the next page's rows
        out = []
        while self.used - self.start > CHUNK_BYTES:
            rows, valid, off = self.parts.pop()
            k = max(0, int(np.searchsorted(off, CHUNK_BYTES, side="right")) - 1)
            if k == 0 and not self.parts:
                k = 1   # one row larger alone
            if k > 0:
                self.parts.append((k, None if valid is None else valid[:k], off[:k + 1]))
            cut = int(off[k])
            out.extend(self.flush(self.start + cut))
            if k < rows:
                self.parts.append((rows - k, None if valid is None else valid[k:],
                                   off[k:] - cut))
        return out

    def _grow(self, nbytes: int) -> None:
        """A larger block for the text gathered so far and ``nbytes`` more: room for the
        rows still to come at the bytes per row so far, a quarter more."""
        from .. import _ext
        held = self.used - self.start + nbytes
        per_row = held / max(1, self.rows_read)
        size = int(max(held + per_row * max(0, self.rows - self.rows_read) * 1.25,
                       2 * len(self.buf), held))
        new = _ext.host_bytes(size)
        new[:self.used - self.start] = self.buf[self.start:self.used]
        self.buf, self.used, self.start = new, self.used - self.start, 0

    def flush(self, end: int | None = None) -> list:
        """The text gathered so far (up to ``end``, where the parts gathered end) as one
        Arrow array (none when empty)."""
        import numpy as np
        import pyarrow as pa

        if not self.parts:
            return []
        parts, self.parts = self.parts, []
        offsets = np.concatenate([parts[0][2]] + [o[1:] for _, _, o in parts[1:]]).astype(
            _offset_dtype(self.kind), copy=False)
        n = len(offsets) - 1
        nulls, validity = 0, None
        if any(v is not None for _, v, _ in parts):
            valid = np.concatenate([np.ones(k, dtype=bool) if v is None else v
                                    for k, v, _ in parts])
            nulls = n - int(valid.sum())
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        end = self.used if end is None else end
        text = self.buf[self.start:end]
        self.start = end
        return [pa.Array.from_buffers(self.kind, n, [validity, pa.py_buffer(offsets),
                                                pa.py_buffer(text)], null_count=nulls)]


def _offset_dtype(kind):
    import numpy as np
    import pyarrow as pa
    return np.dtype(np.int64) if pa.types.is_large_string(kind) or \
        pa.types.is_large_binary(kind) else np.dtype(np.int32)


def read_pool():
    """The memory pool Arrow reads the text's batches into: the system allocator (glibc's
    malloc) where it keeps freed blocks
    (:func:`daskwp.backends.memory.malloc_keeps_freed_blocks`: a tuned worker, a process
    without ``MALLOC_*_`` settings), else None (Arrow's default pool).

    A nanny's worker gives Arrow's default pool to jemalloc, which hands freed memory back
    to the system within a second: every partition's read then faulted its ~70 MB in
    afresh (a third of the read's CPU, in the kernel). From the glibc heap, the next
    batch reuses the last one's pages."""
    import pyarrow as pa

    from ..backends.memory import malloc_keeps_freed_blocks
    return pa.system_memory_pool() if malloc_keeps_freed_blocks() else None


def _leaf_index(meta, column: str) -> int:
    """The Parquet column (leaf) index of the top-level column ``column`` in the file
    ``meta`` describes, -1 when it has none (a nested column before it shifts the leaves)."""
    schema = meta.schema
    for i in range(len(schema)):
        if schema.column(i).path == column:
            return i
    return -1


def _open(path, pool):
    """pyarrow's reader of the Parquet file ``path``, its arrays allocated from ``pool``
    (``ParquetFile`` takes no pool: its reader class does), reading the column chunks
    through a buffer of :data:`READ_BUFFER_BYTES`."""
    from pyarrow._parquet import ParquetReader

    reader = ParquetReader(memory_pool=pool)
    reader.open(path, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
    return reader


def _plain_footer(schema, column: str) -> bool:
    """Whether a file's schema reads as :func:`read_text_partition` builds it: ``column``
    string or large_string, and no pandas index but a ``RangeIndex`` from 0 by 1."""
    import pyarrow as pa

    if column not in schema.names or \
            schema.field(column).type not in (pa.string(), pa.large_string()):
        return False
    index = (schema.pandas_metadata or {}).get("index_columns") or []
    return all(isinstance(i, dict) and i.get("kind") == "range" and i.get("start") == 0
               and i.get("step") == 1 and i.get("name") is None for i in index)


class DaskRead:
    """dask's partition read (``ReadParquetFSSpec._io_func``) as a task argument that
    unpickles without dask: its pickle is loaded, importing ``dask.dataframe``, only
    when called (by :func:`read_text_partition`, for a file whose footer asks for it)."""

    def __init__(self, io_func):
        import cloudpickle
        self.blob = cloudpickle.dumps(io_func)
        self._token = None

    def __dask_tokenize__(self):
        # (dask would otherwise pickle it again for every task whose token it takes)
        if self._token is None:
            import hashlib
            self._token = hashlib.sha1(self.blob).hexdigest()
        return ("daskwp.DaskRead", self._token)

    def __call__(self, part):
        import pickle
        return pickle.loads(self.blob)(part)


def _direct_read_class():
    """:class:`DirectTextRead`, defined on first use (it subclasses dask's
    ``ReadParquetFSSpec``: importing this module imports no dask)."""
    global _DirectTextRead
    if _DirectTextRead is None:
        _DirectTextRead = _define_direct_read()
    return _DirectTextRead


_DirectTextRead = None


def __getattr__(name: str):
    if name == "DirectTextRead":
        return _direct_read_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _define_direct_read():
    from ..distributed.dask_compat import ReadParquetFSSpec, Task

    class DirectTextRead(ReadParquetFSSpec):
        """dask's ``ReadParquetFSSpec`` of one text column, its partition tasks replaced
        by :func:`read_text_partition` (built by :func:`direct_text_source` only where
        that gives the frames dask's read gives). Planning, partitions, row counts
        (``Lengths``), culling and IO fusion are dask's."""

        @property
        def _funcname(self):
            return "daskwp-read-parquet"

        @functools.cached_property
        def _dask_read(self) -> DaskRead:
            """dask's partition read, pickled once for all the partitions' tasks (one
            ``cloudpickle.dumps`` per task was ~1 ms of the client's CPU each, before the
            first task started)."""
            return DaskRead(self._io_func)

        def _filtered_task(self, name, index: int) -> Task:
            column = self.columns[0]
            pieces = tuple((p["piece"][0], p["piece"][1])
                           for p in _part_pieces(self._plan["parts"][index]))
            dtype = self._dataset_info["base_meta"][column].dtype
            part = self._plan["parts"][index]
            task = Task(name, read_text_partition, pieces, column, dtype,
                        self._dask_read, part, _data_producer=True)
            if self._series:
                import operator
                return Task(name, operator.getitem, task, column)
            return task

    DirectTextRead.__module__, DirectTextRead.__qualname__ = __name__, "DirectTextRead"
    return DirectTextRead


def _part_pieces(part) -> list:
    return part if isinstance(part, list) else [part]


def direct_text_source(expr):
    """``expr`` (the accessor's source Series expression) with dask's Parquet read swapped
    for :class:`DirectTextRead` where that reads the same partitions, rows and values (see
    the module's docstring); otherwise ``expr`` unchanged."""
    from ..distributed.dask_compat import Projection, ReadParquetFSSpec

    try:
        simple = expr.simplify()
    except Exception:
        return expr
    read, column = None, None
    if isinstance(simple, Projection) and type(simple.frame) is ReadParquetFSSpec:
        read, column = simple.frame, simple.operand("columns")
    elif type(simple) is ReadParquetFSSpec and simple._series:
        read, column = simple, simple.columns[0]
    if read is None or not isinstance(column, str) or read.columns != [column]:
        return expr
    try:
        if not _plain_read(read, column):
            return expr
    except Exception:   # a dataset dask plans otherwise: its own read
        return expr
    direct = _direct_read_class()(*read.operands)
    return Projection(direct, column) if simple is not read else direct


def _plain_read(read, column: str) -> bool:
    """Whether dask's ``read`` of ``column`` gives exactly what :func:`read_text_partition`
    gives: local files, no filters, index, categories or read options, no hive partition
    keys, a string or large_string column read as pandas' Arrow-backed string dtype, no
    index but a RangeIndex from 0 in the (first) file's pandas metadata (each task checks
    its own files' footers again)."""
    if read.operand("filters") or read.operand("categories") or read.operand("index") or \
            read.operand("_partitions") is not None:
        return False
    if {k: v for k, v in (read.operand("kwargs") or {}).items()
            if v is not None} or read.operand("storage_options"):
        return False
    info = read._dataset_info
    # [None]: the files' pandas metadata holds a RangeIndex, restored by dask's read
    if any(i is not None for i in (info["index"] or ())) or info.get("partitions") or info.get("partition_names") or \
            info.get("filters"):
        return False
    fs = info["fs"]
    if "file" not in ((fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)):
        return False
    if not _plain_footer(info["schema"], column):
        return False
    dtype = info["base_meta"][column].dtype
    if not (isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow"):
        return False
    plan = read._plan
    if plan["empty"]:
        return False
    for part in plan["parts"]:
        for p in _part_pieces(part):
            if set(p) != {"piece"} or len(p["piece"]) != 3 or p["piece"][2]:
                return False
    return True
