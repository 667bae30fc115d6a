"""Reading a tokenized dataset back: ``daskwp.read_tokenized(path)`` (docs/design.md §7).

A tokenized dataset is a folder of Parquet files with the partition-frame columns
(``logID, start, stop, input_ids, attention_mask, window``; docs/design.md §3), as
``daskwp tokenize`` / ``daskwp run`` and the accessor's ``to_parquet`` write them: rows padded
to one width or ragged (``padding=do_not_pad``), with or without a stored mask. This module
opens any of them as a Dask DataFrame and turns rows into model-ready batches: padded
``input_ids`` and ``attention_mask`` of a chosen width, with ``metadata`` and ``window``,
per file or in fixed-size batches, as NumPy arrays or torch tensors, and as a torch
``IterableDataset`` sharded over DataLoader workers.

Padding ragged rows needs the vocabulary's [PAD] id (never a constant): it is read from the
files' ``daskwp`` metadata when recorded there, else pass ``pad_id=`` or ``tokenizer=``.

Per-position outputs (``token_type_ids``, ``sequence_ids``, ...; docs/design.md §3.3) come
back in every batch beside ``input_ids``, padded as ``tok(..., padding="max_length")`` pads
them (each output's ``pad`` in :data:`daskwp.frames.schema.POSITION_OUTPUTS`), in their
stored dtype, ``offset_mapping``-like outputs as rows x width x k.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from .. import _ext
from ..core.options import check as check_option
from ..core.options import check_int, check_tensors
from ..core.ragged import BatchWindows
from ..core.windows import check_padded_bytes, convert_tensors
from ..frames.schema import METADATA_COLUMNS, POSITION_OUTPUTS, position_output
from ..frames import storage

__all__ = ["TokenizedDataset", "pad_rows", "read_tokenized"]

_REQUIRED = (*METADATA_COLUMNS, "input_ids")
_METADATA_KEY = b"daskwp"


def _natural(name: str) -> list:
    """Sort key: numbers in names by value (``part.10`` after ``part.9``), so files are in
    logID order for both ``part-00010`` (jobs) and ``part.10`` (``to_parquet``) names."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name)]


def _url_data_files(url: str, storage_options: dict | None) -> list[str]:
    """:func:`_data_files` of an fsspec URL: the object, the glob's objects, or the
    ``.parquet`` objects below a folder (no ``.``/``_`` names), as URLs."""
    fs, path = storage.filesystem(url, storage_options or {})
    path = path.rstrip("/") or path
    try:
        if glob.has_magic(path):
            found = [p for p, i in fs.glob(path, detail=True).items() if i.get("type") == "file"]
        elif fs.isdir(path):
            found = [p for p in fs.find(path) if p.endswith(".parquet") and not any(
                c.startswith((".", "_")) for c in p[len(path):].strip("/").split("/"))]
        elif fs.isfile(path):
            return [url]
        else:
            found = []
    except FileNotFoundError as e:
        if "bucket" in str(e).lower():
            raise storage.storage_error(url, e) from None
        found = []
    except storage.StorageError:
        raise
    except Exception as e:
        raise storage.storage_error(url, e) from None
    if not found:
        raise FileNotFoundError(f"no tokenized Parquet files at {url!r}")
    return sorted((fs.unstrip_protocol(p) for p in found), key=_natural)


def _source(f: str, storage_options: dict | None):
    """What pyarrow opens for the file ``f``: a local path, or a URL's file object."""
    if not storage.is_url(f):
        return f
    with storage.using(storage_options or {}):
        return storage.open_input(f)


def _data_files(path, storage_options: dict | None = None) -> list[str]:
    if storage.is_url(os.fspath(path)):
        return _url_data_files(os.fspath(path), storage_options)
    p = Path(storage.local_path(os.fspath(path)))
    if p.is_file():
        return [str(p)]
    if p.is_dir():
        files = sorted((str(f) for f in p.rglob("*.parquet")
                        if not any(part.startswith((".", "_"))
                                   for part in f.relative_to(p).parts)), key=_natural)
    else:
        files = sorted((f for f in glob.glob(str(path)) if os.path.isfile(f)), key=_natural)
    if not files:
        raise FileNotFoundError(f"no tokenized Parquet files at {str(path)!r}")
    return files


def pad_rows(values: np.ndarray, offsets: np.ndarray, width: int, pad_id: int,
             mask_values: np.ndarray | None = None, num_threads: int = 1):
    """Ragged rows (flat ``values`` + ``rows + 1`` ``offsets``) as a ``rows x width`` matrix
    padded with ``pad_id``, and its attention mask (the stored mask's values when given, else
    1 on every stored token). A row longer than ``width`` is an error, never cut.
    ``num_threads``: of the extension's fill (<= 0: all cores)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    n = len(lengths)
    if n and int(lengths.max()) > width:
        r = int(np.argmax(lengths))
        raise ValueError(f"row {r} holds {int(lengths[r])} tokens, more than max_length="
                         f"{width}; read with a larger max_length (nothing is cut)")
    if mask_values is None and n and values.dtype == np.int32:
        # The extension's fill (the padding='bucket' fill of ragged rows): ids and mask in
        # one pass, into blocks of the host memory pool, which the next batch reuses once
        # this one is dropped (NumPy's full and astype fault in fresh memory every batch).
        return _ext.pad_rows(np.ascontiguousarray(values), offsets, None, int(width),
                             int(pad_id), False, int(num_threads))
    ids = np.full((n, width), pad_id, dtype=np.int32)
    # Row-major boolean assignment fills the real cells in row order: exactly the values.
    real = np.arange(width, dtype=np.int64)[None, :] < lengths[:, None]
    total = int(offsets[-1] - offsets[0]) if n else 0
    if total:
        ids[real] = values[offsets[0]:offsets[-1]]
    if mask_values is None:
        return ids, real.astype(np.int32)
    mask = np.zeros((n, width), dtype=np.int32)
    if total:
        mask[real] = mask_values[offsets[0]:offsets[-1]]
    return ids, mask


def _pad_cells(cells: np.ndarray, offsets: np.ndarray, width: int, fill) -> np.ndarray:
    """Ragged rows of per-position values (``cells``: ``(tokens,)`` or ``(tokens, k)``,
    ``offsets`` from 0, in positions) as rows x width [x k], ``fill`` on padding."""
    lengths = np.diff(offsets)
    out = np.full((len(lengths), width) + cells.shape[1:], fill, dtype=cells.dtype)
    if int(offsets[-1]) if len(offsets) else 0:
        out[np.arange(width, dtype=np.int64)[None, :] < lengths[:, None]] = \
            cells[:int(offsets[-1])]
    return out


def _position_cells(table: pa.Table, name: str, offsets: np.ndarray) -> np.ndarray:
    """The values of per-position output ``name`` aligned with the ``input_ids`` cells
    ``offsets[0]:offsets[-1]``: ``(tokens,)`` or ``(tokens, k)``."""
    per = position_output(name).values
    values, off = _list_buffers(table.column(name))
    if not np.array_equal(off - off[0], (offsets - offsets[0]) * per):
        raise ValueError(f"{name} rows do not match input_ids rows ({per} value(s) per "
                         f"token)")
    cells = values[off[0]:off[-1]]
    return cells.reshape(-1, per) if per != 1 else cells


def _list_buffers(col) -> tuple[np.ndarray, np.ndarray]:
    """(flat values, offsets) of an Arrow list column (any chunking, list or large_list)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    offsets = col.offsets.to_numpy().astype(np.int64)
    values = col.values.to_numpy(zero_copy_only=False)
    return values, offsets


def _part_metadata(pf) -> dict:
    """The ``daskwp`` footer object of a part (``pf``: a ``pq.ParquetFile`` or its
    ``FileMetaData``), or {}."""
    if pf is None:
        return {}
    md = pf.metadata if hasattr(pf, "schema_arrow") else pf   # a ParquetFile, or its footer
    kv = md.metadata or {}
    try:
        value = json.loads(kv[_METADATA_KEY]) if _METADATA_KEY in kv else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def recorded_padding(pf) -> dict | None:
    """``{"width": W, "mask_dtype": ...}`` of a part whose rows were padded to ``W`` and are
    stored trimmed to their real tokens (docs/design.md §3.3), or None."""
    padded = _part_metadata(pf).get("padded")
    if isinstance(padded, dict) and isinstance(padded.get("width"), int):
        return padded
    return None


def padded_table(table: pa.Table, padded: dict, pad_id: int,
                 position_outputs=()) -> pa.Table:
    """A part's table of padded rows stored trimmed, padded back: ``input_ids`` rows of
    ``padded["width"]`` ids (``pad_id`` after the real tokens), ``attention_mask`` (1 on the
    real tokens, 0 after them, in ``padded["mask_dtype"]``) after it, and every
    per-position output of ``position_outputs`` padded with its padding value: the columns
    and values of ``tok(..., padding="max_length")``'s partition frame (docs/design.md §3.3).
    """
    from ..frames.partition import list_array
    width = int(padded["width"])
    names = table.column_names
    if "input_ids" not in names:   # metadata columns only: nothing to pad
        return table
    values, offsets = _list_buffers(table.column("input_ids"))
    ids, mask = pad_rows(values, offsets, width, pad_id)
    new_off = offsets - offsets[0]
    cols = {}
    for name in names:
        if name == "input_ids":
            cols[name] = list_array(ids)
            cols["attention_mask"] = list_array(mask.astype(padded.get("mask_dtype", "int32"),
                                                            copy=False))
        elif name in position_outputs:
            cells = _position_cells(table, name, offsets)
            cols[name] = list_array(_pad_cells(cells, new_off, width,
                                               position_output(name).pad))
        else:
            cols[name] = table.column(name)
    return pa.table(cols)


class TokenizedDataset:
    """A tokenized dataset on disk (see :func:`read_tokenized`).

    Attributes
    ----------
    files : list of str
        Its Parquet files, in logID order (sorted names, as daskwp writes them).
    pad_id : int or None
        The vocabulary's [PAD] id, from the files' metadata or the caller.
    position_outputs : list of str
        The per-position outputs stored beside ``input_ids`` (``token_type_ids``, ...), as
        the files record them (else the columns of known outputs in the first file).
    """

    def __init__(self, files: list[str], pad_id: int | None,
                 position_outputs: list[str] | None = None,
                 storage_options: dict | None = None):
        self.files = files
        self.pad_id = pad_id
        self.position_outputs = list(position_outputs or [])
        #: the fsspec options of URL files (never shown)
        self.storage_options = storage_options

    def __repr__(self) -> str:
        extra = f", position_outputs={self.position_outputs}" if self.position_outputs else ""
        return f"TokenizedDataset(files={len(self.files)}, pad_id={self.pad_id}{extra})"

    def __len__(self) -> int:
        """Rows (windows) in the dataset, from the Parquet footers."""
        import pyarrow.parquet as pq
        return sum(pq.ParquetFile(_source(f, self.storage_options)).metadata.num_rows
                   for f in self.files)

    # -- Dask ---------------------------------------------------------------------------
    def to_dask(self, columns=None):
        """The dataset as a Dask DataFrame (one partition per file; list columns as Arrow
        ``list<int32>``): the partition frames as written (docs/design.md §3.3), padded
        rows with their ``attention_mask`` also where the parts store them trimmed."""
        import dask.dataframe as dd
        ddf = dd.read_parquet(self.files, columns=columns, dtype_backend="pyarrow",
                              split_row_groups=False,
                              storage_options=self.storage_options or None)
        padded = recorded_padding(_first_metadata(self.files, self.storage_options))
        if padded is None or "input_ids" not in ddf.columns:
            return ddf
        meta = self._pad_frame(ddf._meta, padded)
        return ddf.map_partitions(self._pad_frame, padded, meta=meta)

    def _pad_frame(self, frame, padded: dict):
        import pandas as pd
        table = pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None)
        table = padded_table(table, padded, self._required_pad_id(), self.position_outputs)
        out = table.to_pandas(types_mapper=pd.ArrowDtype)
        for c in out.columns:   # every column read keeps the dtype read_parquet gave it
            if c in frame.columns and out[c].dtype != frame[c].dtype:
                out[c] = out[c].astype(frame[c].dtype)
        out.index = frame.index
        return out

    def _required_pad_id(self) -> int:
        if self.pad_id is None:
            raise ValueError("these rows must be padded, and the dataset does not record "
                             "the vocabulary's [PAD] id: pass pad_id= or tokenizer= to "
                             "read_tokenized")
        return self.pad_id

    def to_table(self, columns=None, files=None) -> pa.Table:
        """The dataset (or ``files`` of it) as one Arrow table of the partition-frame
        columns as written: rows padded to ``max_length`` come back padded, with their
        ``attention_mask``, also where the parts store them trimmed (docs/design.md §3.3);
        ragged and bucketed parts as stored. Schema metadata is dropped.

        Memory: the whole table (use :meth:`batches` for model input)."""
        import pyarrow.parquet as pq
        tables = []
        for f in (self.files if files is None else files):
            pf = pq.ParquetFile(_source(f, self.storage_options))
            cols = None if columns is None else \
                [c for c in columns if c != "attention_mask" or c in pf.schema_arrow.names]
            table = pf.read(columns=cols).replace_schema_metadata(None)
            padded = recorded_padding(pf)
            if padded is not None:
                table = padded_table(table, padded, self._required_pad_id(),
                                     self.position_outputs)
                if columns is not None:
                    table = table.select([c for c in columns if c in table.column_names])
            tables.append(table)
        return pa.concat_tables(tables)

    def to_pandas(self, columns=None):
        """:meth:`to_table` as a pandas DataFrame: list columns as Arrow ``list<...>``
        (``pd.ArrowDtype``), the metadata and ``window`` as numpy int64 / int32."""
        import pandas as pd
        table = self.to_table(columns)
        frame = table.to_pandas(types_mapper=lambda t: pd.ArrowDtype(t)
                                if pa.types.is_list(t) or pa.types.is_large_list(t) else None)
        return frame

    @property
    def metadata(self):
        """Dask DataFrame ``logID, start, stop`` (stop inclusive), global logIDs."""
        return self.to_dask(columns=list(METADATA_COLUMNS))

    # -- batches ------------------------------------------------------------------------
    def _width(self, table: pa.Table, max_length, padded: dict | None = None) -> int:
        if max_length is not None:
            return check_int("max_length", max_length, lo=1, allowed=">= 1")
        if padded is not None:     # padded rows stored trimmed: their width
            return int(padded["width"])
        values, offsets = _list_buffers(table.column("input_ids"))
        return int(np.diff(offsets).max()) if len(offsets) > 1 else 0

    def _batch(self, table: pa.Table, width: int, return_tensors: str,
               num_threads: int = 1) -> BatchWindows:
        values, offsets = _list_buffers(table.column("input_ids"))
        lengths = np.diff(offsets)
        mask_values = None
        if "attention_mask" in table.column_names:
            mask_values, m_off = _list_buffers(table.column("attention_mask"))
            if not np.array_equal(m_off - m_off[0], offsets - offsets[0]):
                raise ValueError("attention_mask rows do not match input_ids rows")
            mask_values = mask_values[m_off[0] - offsets[0]:] if m_off[0] != offsets[0] \
                else mask_values
        stored_padded = len(lengths) > 0 and bool((lengths == lengths[0]).all())
        names = [n for n in self.position_outputs if n in table.column_names]
        cells = {n: _position_cells(table, n, offsets) for n in names}
        extras = {}
        if stored_padded and int(lengths[0]) == width:
            ids = values[offsets[0]:offsets[-1]].reshape(-1, width).astype(np.int32,
                                                                          copy=False)
            mask = (mask_values[offsets[0]:offsets[-1]].reshape(-1, width)
                    .astype(np.int32, copy=False) if mask_values is not None
                    else np.ones_like(ids))
            extras = {n: c.reshape((-1, width) + c.shape[1:]) for n, c in cells.items()}
        else:
            # ids and mask (int32), each per-position output: refused before allocating
            per_cell = 8 + sum(c.itemsize * int(np.prod(c.shape[1:])) for c in cells.values())
            check_padded_bytes(len(lengths), width, per_cell,
                               f"max_length={width}, a batch of {len(lengths):,} rows")
            pad = self.pad_id
            if pad is None:
                raise ValueError("these rows must be padded, and the dataset does not record "
                                 "the vocabulary's [PAD] id: pass pad_id= or tokenizer= to "
                                 "read_tokenized")
            if mask_values is not None and stored_padded:
                # rows stored padded: keep only their real tokens, then pad to the new width
                real = mask_values[offsets[0]:offsets[-1]].reshape(len(lengths), -1) != 0
                keep = real.sum(axis=1)
                if keep.size and int(keep.max()) > width:
                    r = int(np.argmax(keep))
                    raise ValueError(f"row {r} holds {int(keep[r])} tokens, more than "
                                     f"max_length={width}; read with a larger max_length "
                                     f"(nothing is cut)")
                sel = real.reshape(-1)
                flat = values[offsets[0]:offsets[-1]][sel]
                new_off = np.concatenate([[0], np.cumsum(keep)])
                ids, mask = pad_rows(flat, new_off, width, pad)
                cells = {n: c[sel] for n, c in cells.items()}
            else:
                ids, mask = pad_rows(values, offsets, width, pad, mask_values, num_threads)
                new_off = offsets - offsets[0]
            extras = {n: _pad_cells(c, new_off, width, position_output(n).pad)
                      for n, c in cells.items()}
        meta = np.stack([table.column(c).to_numpy().astype(np.int64)
                         for c in METADATA_COLUMNS], axis=1)
        data = {"input_ids": convert_tensors(ids, return_tensors),
                "attention_mask": convert_tensors(mask, return_tensors),
                "metadata": convert_tensors(meta, return_tensors)}
        for n, v in extras.items():
            data[n] = convert_tensors(np.ascontiguousarray(v), return_tensors)
        if "bucket" in table.column_names:
            data["bucket"] = convert_tensors(
                table.column("bucket").to_numpy().astype(np.int32), return_tensors)
        if "window" in table.column_names:
            data["window"] = convert_tensors(
                table.column("window").to_numpy().astype(np.int32), return_tensors)
        return BatchWindows(data)

    def batches(self, batch_size: int | None = None, *, max_length: int | None = None,
                return_tensors: str = "np", files=None,
                num_threads: int | None = None) -> Iterator[BatchWindows]:
        """Model-ready batches: ``input_ids`` and ``attention_mask`` padded to
        ``max_length`` (default: each batch's longest row; stored padded rows keep their
        width; a bucketed dataset gives one batch per bucket width), every stored
        per-position output (:attr:`position_outputs`) padded alike, ``metadata`` (rows x 3
        int64) and ``window`` (and ``bucket``).

        ``batch_size`` rows per batch (default: one batch per file); the last batch of a
        file may be smaller. ``return_tensors``: "np" or "pt" (torch, zero-copy).
        ``files``: read only these of :attr:`files` (what a DataLoader worker shards).
        ``num_threads``: of the padding fill (default: all cores, one inside a Dask worker).
        Without ``batch_size``, the next file is read (a thread) while a batch is in use.

        Memory: one batch (or one file) of rows at a time, and the next file's table.
        """
        from ..backends.cpu import default_num_threads
        return_tensors = check_tensors("return_tensors", return_tensors)
        if batch_size is not None:
            batch_size = check_int("batch_size", batch_size, lo=1, allowed=">= 1")
        threads = default_num_threads() if num_threads is None else \
            check_int("num_threads", num_threads, allowed="an integer (<= 0: all cores)")
        paths = list(self.files if files is None else files)
        opened = (self._open(f) for f in paths) if batch_size is not None else \
            _read_ahead(paths, lambda f: self._open(f, read=True))
        for pf, padded, cols, whole in opened:
            tables = [whole] if batch_size is None else \
                (pa.Table.from_batches([rb])
                 for rb in pf.iter_batches(batch_size=batch_size, columns=cols))
            for table in tables:
                if not table.num_rows:
                    continue
                if "bucket" in table.column_names and max_length is None:
                    # a bucketed dataset: one batch per bucket width, rows in order
                    width = table.column("bucket").to_numpy()
                    for w in np.unique(width):
                        sub = table.filter(pa.array(width == w))
                        yield self._batch(sub, int(w), return_tensors)
                    continue
                yield self._batch(table, self._width(table, max_length, padded),
                                  return_tensors, threads)

    def _open(self, f: str, read: bool = False):
        """(ParquetFile, its recorded padding, the columns to read, the whole table when
        ``read``) of a part; a file without the tokenized columns is refused by name."""
        import pyarrow.parquet as pq
        pf = pq.ParquetFile(_source(f, self.storage_options))
        cols = [c for c in (*_REQUIRED, "attention_mask", "window", "bucket",
                            *self.position_outputs) if c in pf.schema_arrow.names]
        missing = [c for c in _REQUIRED if c not in cols]
        if missing:
            raise ValueError(f"{f!r} is not a tokenized dataset: no column(s) {missing}")
        # pq.read_table, not ParquetFile.read: it decodes the row groups on Arrow's threads
        # rather than one after another (measured: benchmarks/results/codec_bench.md)
        return pf, recorded_padding(pf), cols, pq.read_table(
            _source(f, self.storage_options), columns=cols) if read else None

    def to_torch(self, batch_size: int, *, max_length: int | None = None):
        """A ``torch.utils.data.IterableDataset`` of :meth:`batches` (torch tensors), its
        files sharded over the DataLoader's workers (worker k of n reads files k, k+n, ...).
        Use it with ``DataLoader(ds, batch_size=None, num_workers=...)``."""
        try:
            from .torch_batches import TokenizedBatches
        except ImportError:
            raise ImportError("to_torch needs PyTorch, which is not installed; use "
                              "batches(return_tensors='np')") from None
        return TokenizedBatches(self, batch_size, max_length)


def _read_ahead(paths: list, read) -> Iterator:
    """``read(p)`` of each path in order, the next one running in a thread (Arrow's Parquet
    read releases the GIL) while the caller uses the current one."""
    if not paths:
        return
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="daskwp-read") as pool:
        pending = pool.submit(read, paths[0])
        for k in range(len(paths)):
            current = pending.result()
            pending = pool.submit(read, paths[k + 1]) if k + 1 < len(paths) else None
            yield current


def _first_metadata(files: list[str], storage_options: dict | None = None):
    import pyarrow.parquet as pq
    return pq.read_metadata(_source(files[0], storage_options)) if files else None


def _recorded_position_outputs(files: list[str],
                               storage_options: dict | None = None) -> list[str]:
    """The per-position output columns of a dataset: as the first part's ``daskwp``
    metadata records them (daskwp's part writer), else the columns of the first file named
    in :data:`~daskwp.frames.schema.POSITION_OUTPUTS` (frames written by other writers)."""
    import pyarrow.parquet as pq
    for f in files[:1]:
        md = pq.read_metadata(_source(f, storage_options))
        kv = md.metadata or {}
        if _METADATA_KEY in kv:
            try:
                value = json.loads(kv[_METADATA_KEY]).get("position_outputs")
            except ValueError:
                value = None
            if isinstance(value, list):
                return [str(v) for v in value]
        names = md.schema.to_arrow_schema().names
        return [o.name for o in POSITION_OUTPUTS if o.name in names]
    return []


def _recorded_pad_id(files: list[str], storage_options: dict | None = None) -> int | None:
    """The ``pad_id`` that daskwp's part writer records in each part's ``daskwp`` key-value
    metadata (the footer: read without reading any data), from the first file."""
    import pyarrow.parquet as pq
    for f in files[:1]:
        md = pq.read_metadata(_source(f, storage_options)).metadata or {}
        if _METADATA_KEY in md:
            try:
                value = json.loads(md[_METADATA_KEY]).get("pad_id")
            except ValueError:
                value = None
            if value is not None:
                return int(value)
    return None


def read_tokenized(path, *, pad_id: int | None = None, tokenizer=None,
                   storage_options: dict | None = None) -> TokenizedDataset:
    """Open a tokenized dataset that daskwp wrote (a folder, a file or a glob; local, or
    an fsspec URL such as ``s3://bucket/out``).

    Parameters
    ----------
    path : str or path
    pad_id : int, optional
        The [PAD] id for padding ragged rows; default: recorded in the files, or the
        ``tokenizer``'s vocabulary.
    tokenizer : WordPieceTokenizer or Vocabulary, optional
        Source of the [PAD] id.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``path`` (``endpoint_url``, ...);
        credentials otherwise come from its usual sources (environment, config files).

    Returns
    -------
    TokenizedDataset
        ``.to_dask()``, ``.metadata``, ``.batches(batch_size, max_length=...,
        return_tensors=...)``, ``.to_torch(batch_size)``.

    Examples
    --------
    >>> import tempfile
    >>> import dask.dataframe as dd
    >>> import pandas as pd
    >>> import daskwp
    >>> out = tempfile.mkdtemp()
    >>> ddf = dd.from_pandas(pd.DataFrame({"text": ["Hello world!", "hi"]}), npartitions=1)
    >>> ddf["text"].wordpiece.tokenize(max_length=8, padding=False).to_parquet(out)
    >>> batch = next(daskwp.read_tokenized(out).batches(max_length=8))
    >>> batch["input_ids"]
    array([[ 101, 7592, 2088,  999,  102,    0,    0,    0],
           [ 101, 7632,  102,    0,    0,    0,    0,    0]], dtype=int32)
    """
    storage_options = check_option("storage_options", storage_options)
    files = _data_files(path, storage_options)
    if pad_id is None and tokenizer is not None:
        vocab = getattr(tokenizer, "vocab", tokenizer)
        pad_id = vocab.pad_id
    if pad_id is None:
        pad_id = _recorded_pad_id(files, storage_options)
    if pad_id is not None:
        pad_id = check_int("pad_id", pad_id, lo=0, allowed=">= 0")
    return TokenizedDataset(files, pad_id, _recorded_position_outputs(files, storage_options),
                            storage_options)
