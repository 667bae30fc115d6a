"""Partition tasks: the functions every Dask graph of daskwp runs, one partition at a time.

The accessor's lazy result and the batch jobs build their graphs from these same functions
(docs/design.md §8): tokenizing a partition into a partition frame, counting its documents,
and the nodes of the global-offset pass (:class:`daskwp.distributed.graph.PartitionCounts`).
They import no Dask, so they run on any worker, in threads, or in the calling process.
"""

from __future__ import annotations

import functools
import threading
import time

import numpy as np

from ..core.cpu_clock import stage_cpu_seconds
from ..core.lengths import LengthCounts
from ..core.options import DEFAULT_COMPRESSION, WINDOWS, names
from ..frames.storage import Folder, is_url
from ..core.windows import WINDOW_OPTIONS
from ..frames.partition import (attach_kept_columns, attach_range_index, attach_source,
                                frame_from_output, frame_to_table, is_cudf, source_table,
                                split_source, stores_mask, table_from_output)
from ..frames.part_writer import PartWriter, native_for_kept
from ..frames.schema import INPUT_INDEX_COLUMN, numpy_of_arrow, position_outputs_of
from .state import cached_tokenizer

__all__ = ["CALL_OPTIONS", "PIECE_BYTES", "add_counts", "add_logid_offset", "call_options",
           "count_documents", "finish_parts", "hold", "owned_unknown_tokens",
           "partition_error", "source_hook",
           "sum_counts", "text_bytes", "tokenize_global", "tokenize_partition",
           "vocabulary_pad_id",
           "write_partition_part", "write_tokenized_part"]

#: The options of ``tok(texts, ...)`` that the partition tasks pass on from the accessors'
#: and jobs' options: the window options and every other option of the ``windows`` surface
#: of the option table (``return_overflowing_tokens``, ``return_token_type_ids``,
#: ``return_sequence_ids``, ...: a new one is carried without new code), except the
#: second texts, the array type and the logID offset, which the tasks set themselves.
CALL_OPTIONS = tuple(dict.fromkeys((*WINDOW_OPTIONS, *(
    n for n in names(WINDOWS) if n not in ("text_pair", "return_tensors", "logid_offset")))))


def call_options(options: dict) -> dict:
    """The :data:`CALL_OPTIONS` among ``options`` (what the partition tasks pass to
    ``tok(...)``)."""
    return {k: options[k] for k in CALL_OPTIONS if k in options}


def _is_pairs(texts) -> bool:
    """Whether a partition holds sentence pairs: two columns (a pandas / cudf frame or an
    Arrow table: the texts, then the second sequences)."""
    import pyarrow as pa
    return isinstance(texts, pa.Table) or getattr(texts, "ndim", 1) == 2

#: Text bytes tokenized at a time when a partition is written: the next piece is tokenized
#: while the previous one is encoded and compressed into its row groups (both release the
#: GIL), and only about two pieces' outputs are alive at once.
PIECE_BYTES = 8 << 20


def partition_error(exc: BaseException, partition) -> BaseException:
    """``exc`` again, its message prefixed with the partition it came from."""
    msg = f"daskwp: tokenizing partition {partition} of the input failed: " \
          f"{type(exc).__name__}: {exc}"
    try:
        new = type(exc)(msg)
        if str(new) != msg:
            raise TypeError
    except Exception:
        new = RuntimeError(msg)
    return new


def _tok_call(tok, texts, options: dict, **kw):
    """``tok(texts, **options)`` (the :data:`CALL_OPTIONS` of ``options``); a two-column
    partition (a frame, or an Arrow table) is sentence pairs (text, text_pair)."""
    import pyarrow as pa
    options = call_options(options)
    if isinstance(texts, pa.Table):
        return tok(texts.column(0), **options, text_pair=texts.column(1), **kw)
    if getattr(texts, "ndim", 1) == 2:
        return tok(texts.iloc[:, 0], **options, text_pair=texts.iloc[:, 1], **kw)
    return tok(texts, **options, **kw)


def tokenize_partition(texts, tokenizer, options: dict, partition=None):
    """Tokenize one partition (pandas or cudf Series) into a partition frame.

    The tokenizer is the worker's one instance of ``tokenizer`` (per-worker state). logIDs
    are 0-based within the partition. An empty partition gives an empty frame with the same
    columns and dtypes; an error is raised again naming ``partition``.

    ``options["keep_columns"]`` (the accessors; absent for batch jobs): a list of the kept
    input columns, the partition's last columns (:func:`~daskwp.frames.partition.split_source`);
    the frame then also carries the input index and those columns.
    """
    tok = cached_tokenizer(tokenizer)
    texts, kept, index = split_source(texts, options.get("keep_columns"))
    try:
        if is_cudf(texts):  # the tokenizer runs cudf input on the GPU; outputs stay there
            from ..frames.cudf_frames import frame_from_output as cudf_frame_from_output
            frame = cudf_frame_from_output(_tok_call(tok, texts, options, return_tensors="cp"))
        else:
            frame = frame_from_output(_tok_call(tok, texts, options, return_tensors="np"))
        return attach_source(frame, index, kept)
    except Exception as e:
        if partition is None:
            raise
        raise partition_error(e, partition) from e


def count_documents(texts) -> int:
    """Documents in a partition: its number of rows (every row is one document)."""
    return len(texts)


def add_counts(a: int, b: int) -> int:
    """Sum of two partial document counts (a node of the prefix-sum tree)."""
    return a + b


def hold(value) -> None:
    """A task that only takes ``value`` (a key of the graph) and returns None: run on a
    chosen worker, it has the worker fetch ``value`` ahead of the tasks that need it."""
    return None


def sum_counts(*counts) -> int:
    """Sum of partial document counts: a partition's global offset from its prefix nodes."""
    return int(sum(counts))


def add_logid_offset(frame, *counts):
    """``frame`` with ``sum(counts)`` added to its logIDs (the global offset pass)."""
    offset = sum(counts)
    if offset == 0:
        return frame
    return frame.assign(logID=frame["logID"] + offset)


def tokenize_global(texts, tokenizer, options: dict, partition=None, columns=None, *counts):
    """``tokenize_partition`` and ``add_logid_offset`` in one task: partition ``partition``
    with the global offset ``sum(counts)`` added to its logIDs, only ``columns`` kept
    (None: all; a str: that column as a Series). The offset goes to the tokenizer
    (``logid_offset``), so the logIDs are written once."""
    offset = sum(counts)
    tok = cached_tokenizer(tokenizer)
    try:
        if is_cudf(texts):
            frame = add_logid_offset(tokenize_partition(texts, tok, options), offset)
        else:
            texts, kept, index = split_source(texts, options.get("keep_columns"))
            out = _tok_call(tok, texts, options, return_tensors="np", logid_offset=int(offset))
            wanted = [columns] if isinstance(columns, str) else columns
            carried = () if index is None else \
                (INPUT_INDEX_COLUMN, *(() if kept is None else kept.columns))
            own = None if wanted is None else [c for c in wanted if c not in carried]
            if own is not None and index is not None and "logID" not in own and \
                    len(own) < len(wanted):
                own.append("logID")   # the source columns are taken by logID
            frame = attach_source(frame_from_output(out, own), index, kept, offset, wanted)
            if isinstance(columns, str):
                return frame[columns]
            return frame if wanted is None or list(frame.columns) == wanted else frame[wanted]
    except Exception as e:
        if partition is None:
            raise
        raise partition_error(e, partition) from e
    return frame if columns is None else frame[columns]


def write_partition_part(texts, tokenizer, options: dict, write: dict, partition, *counts):
    """Partition ``partition`` tokenized and written as ``write["path"]/part.<partition>
    .parquet`` by :func:`write_tokenized_part` (atomically: a retried task writes the same
    file again), its logIDs offset by ``sum(counts)``. Returns the part's statistics."""
    import os
    import uuid
    offset = int(sum(counts))
    # on an object store (``write["storage_options"]``) the part is written complete in a
    # local staging folder, then uploaded under its name (Folder.publish)
    folder = Folder(write["path"], write.get("storage_options"))
    name = f"part.{partition}.parquet"
    texts, kept, index = split_source(texts, options.get("keep_columns"))
    hook = None
    if index is not None:   # the accessors: the input index and the kept columns
        hook, kept = source_hook(index, kept, offset)
    with folder.staging() as staging:
        tmp = os.path.join(staging, f".{name}.{uuid.uuid4().hex}.tmp")
        stats = write_tokenized_part(texts, tokenizer, options, os.path.join(staging, name),
                                     tmp, logid_offset=offset,
                                     compression=write["compression"],
                                     metadata={"partition": partition, "logid_offset": offset},
                                     partition=partition, table_hook=hook,
                                     native=native_for_kept(kept),
                                     parquet_compat=bool(write.get("parquet_compat")),
                                     drop_cache=not folder.remote)
        if folder.remote:
            folder.publish(os.path.join(staging, name), name)
    stats.update(partition=partition, logid_offset=offset)
    return stats


def source_hook(index, kept, logid_offset: int) -> tuple:
    """``(table_hook, kept table or None)`` of a part written from an accessor's source
    partition (``index`` and ``kept`` of :func:`split_source`): the hook appends
    ``input_index`` and the kept columns to every table written. A ``RangeIndex`` with no
    kept columns (``dd.read_parquet`` without an index, a default index) has its labels
    computed from the rows' logIDs (:func:`attach_range_index`), no index materialized and
    gathered; anything else goes through :func:`source_table` and
    :func:`attach_kept_columns`."""
    import pandas as pd   # (the index is a pandas one, or cudf's)
    if kept is None and isinstance(index, pd.RangeIndex):
        return functools.partial(attach_range_index, start=int(index.start),
                                 step=int(index.step), logid_offset=int(logid_offset)), None
    table = source_table(index, kept)
    return functools.partial(attach_kept_columns, kept=table,
                             logid_offset=int(logid_offset)), table


def finish_parts(write: dict, *stats) -> dict:
    """The end of a ``to_parquet``: every part is written; temporary files left by attempts
    that did not finish (a killed worker) are removed. Returns the summed statistics."""
    import os
    folder = write["path"]
    try:
        # an object store's parts are staged on the workers: no temporary object
        names = [] if is_url(folder) else os.listdir(folder)
    except OSError:
        names = []
    for n in names:
        if n.startswith(".part.") and n.endswith(".tmp"):
            try:
                os.unlink(os.path.join(folder, n))
            except FileNotFoundError:
                pass
    total = {k: sum(s[k] for s in stats) for k in ("rows", "documents", "tokens",
                                                   "unknown_tokens", "text_bytes")}
    total["parts"] = len(stats)
    cpu: dict = {}
    for st in stats:
        for k, v in (st.get("cpu_seconds") or {}).items():
            cpu[k] = cpu.get(k, 0.0) + float(v)
    total["cpu_seconds"] = cpu
    return total


# -- writing a tokenized partition -------------------------------------------------------

def vocabulary_pad_id(tok):
    """The vocabulary's [PAD] id, or None when it has no padding token."""
    try:
        return int(tok.vocab.pad_id)
    except (ValueError, KeyError, AttributeError):
        return None


def owned_unknown_tokens(table, unk_id: int) -> int:
    """Unknown tokens inside the rows' owned slices ``[start, stop]`` of a partition table
    (each document token counted once)."""
    if table.num_rows == 0:
        return 0
    ids = table.column("input_ids").combine_chunks()
    offsets = numpy_of_arrow(ids.offsets).astype(np.int64)
    values = numpy_of_arrow(ids.values)
    start = numpy_of_arrow(table.column("start"))
    stop = numpy_of_arrow(table.column("stop"))
    lo, hi = offsets[:-1] + start, offsets[:-1] + stop + 1
    unk = np.flatnonzero(values == unk_id)  # few: count those inside the owned slices
    return int(np.sum(np.searchsorted(unk, hi) - np.searchsorted(unk, lo)))


def _pieces(arr, piece_bytes: int):
    """Zero-copy slices of a chunked string/binary array, about ``piece_bytes`` of text
    each (a piece holds at least one document)."""
    from ..core.strings import chunk_buffers, piece_ranges
    for chunk in arr.chunks:
        off = chunk_buffers(chunk).offsets
        for start, end in piece_ranges(off, piece_bytes):
            yield chunk.slice(start, end - start), int(off[end] - off[start])


_POOL = None
_POOL_LOCK = threading.Lock()


def _write_pool():
    """The process's threads that encode and compress row groups (one per partition
    being written at a time)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="daskwp-write")
        return _POOL


def _timed_write(writer, table, clock: dict) -> None:
    t = stage_cpu_seconds()
    writer.write(table)
    clock["write"] += stage_cpu_seconds() - t


def write_tokenized_part(texts, tokenizer, options: dict, path: str, tmp_path: str, *,
                         logid_offset: int = 0, compression=DEFAULT_COMPRESSION, metadata=None,
                         partition=None, piece_bytes: int = PIECE_BYTES,
                         table_hook=None, parquet_compat: bool = False,
                         native: bool | None = None, drop_cache: bool = True) -> dict:
    """Tokenize one partition and write it as one Parquet part, atomically: the stored
    layout of docs/batch-jobs.md "Output" (global logIDs from ``logid_offset``; the mask
    only for padded rows), the part's statistics and the vocabulary's ``pad_id`` in its
    ``daskwp`` metadata (with ``metadata``), the checksum of its data pages in the footer.

    ``texts``: an Arrow string/binary array or a pandas (or cudf) Series. On the CPU the
    partition is cut into pieces of about ``piece_bytes`` of text; while one piece's row
    groups are encoded and compressed (in a writer thread), the next is tokenized. Nothing
    goes through pandas or per-row Python.

    Returns the statistics: ``rows``, ``tokens`` (document tokens, each once),
    ``unknown_tokens``, ``documents``, ``text_bytes``, and ``cpu_seconds`` per stage
    (``tokenize``, ``arrow``, ``write``, ``finish``: footer, fsync, rename).

    ``table_hook(table) -> table``, when given, adds to every piece's table before it is
    written (the batch jobs' kept input columns). ``native``: :class:`PartWriter`'s (for
    kept columns, :func:`~daskwp.frames.part_writer.native_for_kept`: Arrow's writer where
    they hold nulls). ``parquet_compat``: list values PLAIN
    (:func:`~daskwp.frames.part_writer.parquet_write_options`). ``drop_cache``: the part's
    pages leave the page cache once it is on disk (:class:`PartWriter`; false for a part
    staged to be uploaded).

    Memory: the partition's text, about two pieces' outputs, the writer's pages.
    """
    tok = cached_tokenizer(tokenizer)
    clock = {"tokenize": 0.0, "arrow": 0.0, "write": 0.0, "finish": 0.0}
    with_mask = stores_mask(options["padding"])
    writer = PartWriter(path, tmp_path, compression, compat=parquet_compat, native=native,
                        drop_cache=drop_cache)
    if table_hook is not None:
        write_table = writer.write
        writer.write = lambda table: write_table(table_hook(table))
    stats = {"rows": 0, "tokens": 0, "unknown_tokens": 0, "documents": 0, "text_bytes": 0}
    try:
        try:
            gpu = is_cudf(texts) or getattr(tok, "device", "cpu") == "gpu"
            if gpu:
                _write_frame(texts, tok, options, logid_offset, with_mask, writer, stats,
                             clock)
            else:
                _write_pieces(texts, tok, options, logid_offset, with_mask, writer, stats,
                              clock, piece_bytes)
        except Exception as e:
            if partition is None:
                raise
            raise partition_error(e, partition) from e
        meta = dict(metadata or {})
        meta.update({k: stats[k] for k in ("rows", "tokens", "unknown_tokens", "documents",
                                           "text_bytes")})
        stats["length_counts"] = LengthCounts.merge(stats.get("length_counts", [])).to_json()
        meta["length_counts"] = stats["length_counts"]
        # the per-position output columns (docs/design.md §3.3), for read_tokenized
        meta["position_outputs"] = stats.pop("position_outputs", [])
        pad = vocabulary_pad_id(tok)
        if pad is not None:
            meta["pad_id"] = pad
        t = stage_cpu_seconds()
        writer.close(meta)
        clock["finish"] += stage_cpu_seconds() - t
    finally:
        writer.abort()
    stats["cpu_seconds"] = clock
    return stats


def _account(stats: dict, table, out_meta, enc, tok, options, doc_rows=None) -> None:
    """Adds a piece's rows, document tokens, unknown tokens and document lengths to
    ``stats``. ``out_meta``: the piece's metadata (rows x 3; None: read from ``table``);
    ``enc``: the encoding its windows were filled from (None: ``tok(...)`` made them);
    ``doc_rows``: its ``doc_row_offsets`` (rows in document order)."""
    stats.setdefault("position_outputs", position_outputs_of(table.column_names))
    stats["rows"] += table.num_rows
    whole = enc is not None and not options["truncation"]
    if whole:
        # untruncated windows own every token of their document once: the encoding's
        # lengths are the documents' (no pass over the rows' metadata)
        offsets = np.asarray(enc.offsets)
        if len(offsets) > 1:
            stats["tokens"] += int(offsets[-1] - offsets[0])
            stats.setdefault("length_counts", []).append(LengthCounts.of(np.diff(offsets)))
        # counted by the kernel as it wrote the ids (the CPU extension), no pass here
        stats["unknown_tokens"] += enc.count_id(tok.vocab.unk_id)
        return
    if table.num_rows:
        if out_meta is None:
            start = numpy_of_arrow(table.column("start"))
            stop = numpy_of_arrow(table.column("stop"))
        else:
            start, stop = out_meta[:, 1], out_meta[:, 2]
        owned = stop - start + 1
        stats["tokens"] += int(np.sum(owned))
        if doc_rows is not None:
            lengths = LengthCounts.of_rows(None, owned, doc_rows)
        else:
            logid = numpy_of_arrow(table.column("logID")) if out_meta is None else \
                out_meta[:, 0]
            lengths = LengthCounts.of_rows(logid, owned)
        stats.setdefault("length_counts", []).append(lengths)
    stats["unknown_tokens"] += owned_unknown_tokens(table, tok.vocab.unk_id)


#: Options that are no output of their own: ``mask_dtype`` (checked below) and
#: ``offsets_unit`` (every job sets it; it matters only with ``return_offsets_mapping``,
#: which is an output itself).
_NOT_OUTPUTS = ("mask_dtype", "offsets_unit")


def _plain(options: dict) -> bool:
    """Whether a call asks for ids, mask and metadata only (the encode + native fill path):
    no per-position output and no overflow option (``return_overflowing_tokens`` changes
    the rows of a truncating call)."""
    extra = [k for k in call_options(options) if k not in WINDOW_OPTIONS]
    return not any(options[k] for k in extra if k not in _NOT_OUTPUTS) and \
        options.get("mask_dtype", "int32") == "int32"


def _bert_frame(tok) -> bool:
    """Whether ``tok`` frames rows as :func:`~daskwp.backends.cpu.windows_from_encoding`
    does (BERT's ``[CLS] ... [SEP]`` from the vocabulary): its post-processor is BERT's."""
    return getattr(getattr(tok, "processor", None), "kind", None) == "bert"


def _pair_pieces(table, piece_bytes: int):
    """Zero-copy row slices of a two-column table of pairs, about ``piece_bytes`` of text
    (both sides) each (a piece holds at least one pair)."""
    from ..core.strings import chunk_buffers, to_arrow
    n = table.num_rows
    if n == 0:
        return
    total = np.zeros(n + 1, dtype=np.int64)
    for j in range(2):
        col = to_arrow(table.column(j)).combine_chunks()
        off = np.asarray(chunk_buffers(col).offsets, dtype=np.int64)
        total += off - off[0]
    start = 0
    while start < n:
        end = int(np.searchsorted(total, int(total[start]) + piece_bytes, side="right")) - 1
        end = min(max(end, start + 1), n)
        yield table.slice(start, end - start), int(total[end] - total[start])
        start = end


def _write_pieces(texts, tok, options, logid_offset, with_mask, writer, stats, clock,
                  piece_bytes) -> None:
    """A CPU partition, piece by piece. Single texts with no extra output: the encode and
    the native fill (the encoding counts the unknown tokens); sentence pairs and calls with
    per-position outputs: ``tok(...)`` itself on each piece."""
    from ..backends.cpu import default_num_threads, windows_from_encoding
    from ..core.buckets import BucketedWindows
    from ..core.strings import to_arrow

    t = stage_cpu_seconds()
    pairs = _is_pairs(texts)
    plain = not pairs and _plain(options) and _bert_frame(tok)
    if pairs:
        table = _pair_table(texts)
        pieces = list(_pair_pieces(table, piece_bytes)) or [(table.slice(0, 0), 0)]
    else:
        arr = to_arrow(texts)
        pieces = list(_pieces(arr, piece_bytes)) or [(arr.slice(0, 0), 0)]
    padded_width = None
    if not with_mask and options["padding"] not in (False, "do_not_pad"):
        # max_length rows are stored trimmed (docs/design.md §3.3): fill them ragged in the
        # first place (the same table, without padding and trimming every row)
        padded_width = int(options["max_length"])
        options = dict(options, padding="do_not_pad")
    window_options = {k: options[k] for k in WINDOW_OPTIONS if k in options}
    clock["tokenize"] += stage_cpu_seconds() - t
    pending = None
    base = int(logid_offset)
    pool = _write_pool()
    try:
        for piece, nbytes in pieces:
            t = stage_cpu_seconds()
            enc = None
            if plain:
                # each piece takes the cores it may use now: on in-process threads, a
                # partition left alone at the end of a job gets the ones the others freed
                threads = tok.num_threads if tok.num_threads is not None else \
                    default_num_threads()
                enc = tok.encode(piece, num_threads=threads)
                out = windows_from_encoding(enc, tok.vocab, **window_options,
                                            logid_offset=base, num_threads=threads)
            else:
                out = _tok_call(tok, piece, options, return_tensors="np", logid_offset=base)
            t1 = stage_cpu_seconds()
            table = table_from_output(out, attention_mask=with_mask, padded_width=padded_width,
                                      mask_dtype=options.get("mask_dtype", "int32"))
            bucketed = isinstance(out, BucketedWindows)
            meta = None if bucketed else np.asarray(out["metadata"]).reshape(-1, 3)
            _account(stats, table, meta, enc, tok, options,
                     None if bucketed else getattr(out, "doc_row_offsets", None))
            stats["documents"] += len(piece)
            stats["text_bytes"] += nbytes
            base += len(piece)
            del out, enc, meta
            clock["tokenize"] += t1 - t
            clock["arrow"] += stage_cpu_seconds() - t1
            if pending is not None:
                pending.result()
            pending = pool.submit(_timed_write, writer, table, clock)
            del table
    finally:
        if pending is not None:
            pending.result()


def _pair_table(texts):
    """A partition of pairs as a two-column Arrow table (texts, text_pair)."""
    import pyarrow as pa

    from ..core.strings import to_arrow
    if isinstance(texts, pa.Table):
        return texts
    return pa.table({"text": to_arrow(texts.iloc[:, 0]),
                     "text_pair": to_arrow(texts.iloc[:, 1])})


def _write_frame(texts, tok, options, logid_offset, with_mask, writer, stats,
                 clock) -> None:
    """A GPU worker's partition: tokenized on the device as a cudf frame, then written."""
    t = stage_cpu_seconds()
    frame = add_logid_offset(tokenize_partition(texts, tok, call_options(options)),
                             int(logid_offset))
    t1 = stage_cpu_seconds()
    table = frame_to_table(frame, attention_mask=with_mask)
    _account(stats, table, None, None, tok, dict(options, truncation=True))
    stats["documents"] += len(texts)
    stats["text_bytes"] += text_bytes(texts)
    clock["tokenize"] += t1 - t
    clock["arrow"] += stage_cpu_seconds() - t1
    _timed_write(writer, table, clock)


def text_bytes(texts) -> int:
    """UTF-8 bytes of a partition's documents (both sides of sentence pairs); 0 when they
    cannot be measured."""
    if _is_pairs(texts):   # both sides of every pair
        import pyarrow as pa
        if isinstance(texts, pa.Table):
            return sum(text_bytes(texts.column(j)) for j in range(2))
        return sum(text_bytes(texts.iloc[:, j]) for j in range(2))
    try:
        if is_cudf(texts):
            return int(texts.str.byte_count().sum())
        from ..core.strings import to_arrow
        import pyarrow.compute as pc
        arr = to_arrow(texts)
        return int(pc.sum(pc.binary_length(arr)).as_py() or 0) if len(arr) else 0
    except Exception:
        return 0
