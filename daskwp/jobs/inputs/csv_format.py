"""CSV and TSV inputs: the Arrow CSV options (every column read as bytes), cutting a file into
pieces at record boundaries that are known to be safe (:func:`_csv_boundary`, each piece read
again with the header), and reading a partition, where under the row policy a record with
another number of fields becomes an empty document.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import pyarrow as pa

from ...frames.storage import is_url, open_input
from .byte_ranges import next_line_start, read_range
from .columns import kept_table, partition_documents, text_columns_of
from .compression import READ_CHUNK, read_all
from .specs import InputFile, PartitionSpec


def csv_options(spec_format: str, columns: Sequence[str], size: int, quoting: str = "csv"):
    import pyarrow.csv as pacsv
    read = pacsv.ReadOptions(block_size=int(min(max(size + 1, 1 << 20), 2**31 - 1)),
                             use_threads=False)
    delimiter = "\t" if spec_format == "tsv" else ","
    if quoting == "none":
        parse = pacsv.ParseOptions(delimiter=delimiter, quote_char=False,
                                   newlines_in_values=False)
    else:
        parse = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    # Every column as bytes: no UTF-8 check (invalid bytes are the tokenizer's U+FFFD).
    convert = pacsv.ConvertOptions(include_columns=list(columns),
                                   column_types={c: pa.large_binary() for c in columns})
    return read, parse, convert


def _csv_boundary(fh, start: int, target: int, size: int, delimiter: int,
                  quoting: str) -> tuple[int | None, int | None]:
    """The first record boundary at or after ``target`` of a CSV file whose bytes from
    ``start`` begin a record: ``(position, None)`` (``size`` if none), or ``(None, q)``
    when the quote at byte ``q`` makes the boundaries after it unknowable.

    With ``quoting: csv``, a newline ends a record when an even number of quotes precede it
    (from ``start``) and every quote before it is where RFC 4180 puts quotes: an opening
    quote at the start of a field (after a delimiter, a line end, or the closing quote of a
    doubled ``""``), a closing one before a delimiter, a line end, the end of the file or
    another quote. Such a file has the same records for the parity count as for Arrow's CSV
    parser. A quote anywhere else (``5" screen``: Arrow reads it as a plain character) stops
    the scan. The file is read once, in 8 MB pieces."""
    if quoting == "none":
        return next_line_start(fh, max(target, start + 1), size), None
    quote, nl, cr = 34, 10, 13
    ok = np.array([delimiter, nl, cr, quote], dtype=np.uint8)
    pos, parity, prev = start, 0, nl
    while pos < size:
        fh.seek(pos)
        data = fh.read(min(READ_CHUNK, size - pos) + 1)
        n = min(len(data), size - pos)
        if n <= 0:
            break
        b = np.frombuffer(data, dtype=np.uint8)
        chunk = b[:n]
        q = np.flatnonzero(chunk == quote)
        limit, bad = n, None
        if len(q):
            opener = ((np.arange(len(q)) + parity) % 2) == 0
            before = chunk[np.maximum(q - 1, 0)].copy()
            before[q == 0] = prev
            after = chunk[np.minimum(q + 1, n - 1)].copy()
            last = q == n - 1
            after_ok = np.isin(after, ok)
            after_ok[last] = len(b) == n or bool(np.isin(b[n], ok))
            wrong = (opener & ~np.isin(before, ok)) | (~opener & ~after_ok)
            if wrong.any():
                limit = int(q[np.argmax(wrong)])
                bad = pos + limit
        lo = max(0, target - 1 - pos)
        if lo < limit:
            nls = np.flatnonzero(chunk[lo:limit] == nl) + lo
            if len(nls):
                even = ((np.searchsorted(q, nls) + parity) % 2) == 0
                if even.any():
                    return pos + int(nls[np.argmax(even)]) + 1, None
        if bad is not None:
            return None, bad
        parity = (parity + len(q)) % 2
        prev = int(chunk[-1])
        pos += n
    return size, None


def plan_csv(f: InputFile, partition_size: int, quoting: str, add, warn) -> None:
    """A CSV/TSV file as pieces of about ``partition_size`` bytes cut at record boundaries
    (each read with the header), or as one partition where it is small, compressed, or has
    no boundary that is safe to cut at (with a warning)."""
    if f.compression:
        if f.size > partition_size:
            warn(f"daskwp: {f.path}: a compressed CSV file ({f.compression}) is read as one "
                 f"partition ({f.size:,} compressed bytes, more than partition_size "
                 f"{partition_size:,}); decompress it or split it into several files for "
                 f"smaller partitions")
        add(path=f.path, format=f.format, byte_start=0, byte_end=f.size,
            compression=f.compression)
        return
    if f.size <= partition_size:
        add(path=f.path, format=f.format, byte_start=0, byte_end=f.size)
        return
    delimiter = 9 if f.format == "tsv" else 44
    pieces, bad = [], None
    with open_input(f.path) as fh:
        header_end, bad = _csv_boundary(fh, 0, 1, f.size, delimiter, quoting)
        start = header_end if header_end is not None else 0
        while header_end is not None and start < f.size:
            if f.size - start <= partition_size:
                pieces.append((start, f.size))
                break
            cut, bad = _csv_boundary(fh, start, start + partition_size, f.size, delimiter,
                                     quoting)
            if cut is None:
                pieces.append((start, f.size))
                break
            pieces.append((start, cut))
            start = cut
    if bad is not None:
        warn(f"daskwp: {f.path}: cannot split this CSV file at record boundaries after byte "
             f"{start:,}: the quote at byte {bad:,} is inside a value that does not start "
             f"with a quote (a plain character to the CSV parser), so the newlines after it "
             f"may be inside or outside quoted values. The rest of the file "
             f"({f.size - start:,} bytes) is one partition. With quoting: none, quotes are "
             f"plain characters and the file splits at any newline")
    if len(pieces) <= 1:
        add(path=f.path, format=f.format, byte_start=0, byte_end=f.size)
        return
    for s, e in pieces:
        add(path=f.path, format=f.format, byte_start=s, byte_end=e, header_end=header_end)


def read_csv(spec: PartitionSpec, with_kept: bool, bad: list | None = None):
    import pyarrow.csv as pacsv
    keep = spec.keep_columns if with_kept else ()
    text_columns = text_columns_of(spec)
    columns = text_columns + [k for k in keep if k not in text_columns]
    if spec.compression:
        source = pa.BufferReader(read_all(spec.path, spec.compression))
        size = source.size()
    elif spec.header_end:
        header = read_range(spec.path, 0, spec.header_end, spec.describe())
        body = read_range(spec.path, spec.byte_start, spec.byte_end, spec.describe())
        source = pa.BufferReader(header + body)
        size = len(header) + len(body)
    elif is_url(spec.path):   # the object's bytes, fetched once (one range request)
        source = pa.BufferReader(read_range(spec.path, 0, spec.byte_end, spec.describe()))
        size = source.size()
    else:
        source, size = spec.path, os.path.getsize(spec.path)
    read, parse, convert = csv_options(spec.format, columns, size, spec.quoting)
    skipped = []
    if bad is not None:
        # the row policy: a record with another number of fields (an unterminated quote
        # too) is skipped by the reader and becomes an empty document here. ``number``
        # counts the records read, the header being 1.
        def invalid_row(row):
            n = row.actual_columns
            skipped.append((row.number - 2, f"CSV record has {n} field{'s' * (n != 1)}, "
                                            f"the header {row.expected_columns}"))
            return "skip"
        parse.invalid_row_handler = invalid_row
    table = pacsv.read_csv(source, read_options=read, parse_options=parse,
                           convert_options=convert)
    if skipped:
        table = _with_empty_rows(table, [i for i, _ in skipped])
        bad.extend(skipped)
    texts = partition_documents(spec, [table.column(c).combine_chunks() for c in text_columns])
    kept = kept_table({k: table.column(k) for k in keep}, spec) if keep else None
    return texts, kept


def _with_empty_rows(table: pa.Table, rows: Sequence[int]) -> pa.Table:
    """``table`` with rows of nulls inserted so that they stand at positions ``rows`` (in
    increasing order) of the result."""
    n = table.num_rows + len(rows)
    take = np.full(n, -1, dtype=np.int64)
    mask = np.zeros(n, dtype=bool)
    mask[list(rows)] = True
    take[~mask] = np.arange(table.num_rows)
    return table.take(pa.array(take, mask=mask))
