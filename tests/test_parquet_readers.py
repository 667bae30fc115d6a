"""Which Parquet readers read a job's parts (docs/batch-jobs.md "Output", "Readers").

The default layout stores the values of the list columns BYTE_STREAM_SPLIT; pyarrow, polars
and DuckDB read it, fastparquet refuses it. ``parquet_compat: true`` (``--parquet-compat``)
stores them PLAIN, and all four readers give the same rows (issue 37, item 8). Both of
daskwp's writers are covered: its own (token columns only) and Arrow's (a kept input
column of another type).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from daskwp.cli import main

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"

fastparquet = pytest.importorskip("fastparquet")
polars = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

#: columns compared across readers (every column of these parts)
COLUMNS = ("logID", "start", "stop", "input_ids", "window", "token_type_ids", "sequence_ids")
LIST_COLUMNS = ("input_ids", "token_type_ids", "sequence_ids")


def _job(tmp_path: Path, name: str, *extra) -> Path:
    lines = SAMPLE.read_text(encoding="utf-8")[:-1].split("\n")[:60]
    inp = tmp_path / "docs.jsonl"
    inp.write_text("".join(json.dumps({"text": t, "id": f"d{i}"}) + "\n"
                           for i, t in enumerate(lines)), encoding="utf-8")
    out = tmp_path / name
    rc = main(["tokenize", str(inp), str(out), "--scheduler", "synchronous", "-q",
               "--max-length", "24", "--stride", "8", "--return-token-type-ids",
               "--return-sequence-ids", *extra])
    assert rc == 0
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) == 1
    return parts[0]


def _rows(get) -> dict:
    """``{column: list of Python values}`` from a column getter."""
    out = {}
    for c in COLUMNS:
        values = get(c)
        out[c] = [[int(x) for x in v] for v in values] if c in LIST_COLUMNS else \
            [int(x) for x in values]
    return out


def _pyarrow(path):
    t = pq.read_table(path)
    return _rows(lambda c: t.column(c).to_pylist()), t


def _polars(path):
    df = polars.read_parquet(path)
    return _rows(lambda c: df[c].to_list())


def _duckdb(path):
    con = duckdb.connect()
    rel = con.sql(f"SELECT * FROM read_parquet('{path}')")
    cols = rel.columns
    data = list(zip(*rel.fetchall()))
    return _rows(lambda c: data[cols.index(c)])


def _fastparquet(path):
    df = fastparquet.ParquetFile(str(path)).to_pandas()
    return _rows(lambda c: df[c].tolist())


def _encodings(path) -> dict:
    md = pq.ParquetFile(path).metadata.row_group(0)
    return {md.column(i).path_in_schema: md.column(i).encodings
            for i in range(md.num_columns)}


@pytest.mark.parametrize("keep", [(), ("--keep-columns", "id")], ids=["own-writer", "arrow"])
def test_default_layout_needs_byte_stream_split_readers(tmp_path, keep):
    part = _job(tmp_path, "out", *keep)
    assert "BYTE_STREAM_SPLIT" in _encodings(part)["input_ids.list.element"]
    expected, _ = _pyarrow(part)
    assert len(expected["logID"]) > 60   # windows
    assert _polars(part) == expected
    assert _duckdb(part) == expected
    with pytest.raises(NotImplementedError, match="Encoding 9"):   # BYTE_STREAM_SPLIT
        _fastparquet(part)


@pytest.mark.parametrize("keep", [(), ("--keep-columns", "id")], ids=["own-writer", "arrow"])
def test_compat_layout_is_read_equal_by_every_reader(tmp_path, keep):
    part = _job(tmp_path, "compat", "--parquet-compat", *keep)
    for column, encodings in _encodings(part).items():
        assert "BYTE_STREAM_SPLIT" not in encodings, (column, encodings)
    expected, table = _pyarrow(part)
    assert _polars(part) == expected
    assert _duckdb(part) == expected
    assert _fastparquet(part) == expected
    # the same rows as the default layout's
    default, _ = _pyarrow(_job(tmp_path, "default", *keep))
    assert default == expected
    if keep:
        assert table.column("id").to_pylist()[:1] == ["d0"]
    recorded = json.loads((part.parent / "_job.json").read_text())["parameters"]
    assert recorded["parquet_compat"] is True
    assert np.all(np.diff(expected["logID"]) >= 0)


def test_accessor_parts_take_the_compat_layout(tmp_path):
    """The Dask accessor's ``to_parquet`` writes the jobs' default layout (BYTE_STREAM_SPLIT:
    fastparquet refuses it) and, with ``parquet_compat=True``, the layout every reader takes
    (issue 37.8's class): the same rows by pyarrow, polars, DuckDB and fastparquet."""
    import dask
    import dask.dataframe as dd
    import pandas as pd
    lines = SAMPLE.read_text(encoding="utf-8")[:-1].split("\n")[:60]
    ddf = dd.from_pandas(pd.DataFrame({"q": lines, "c": lines[::-1]}), npartitions=2)
    res = ddf["q"].wordpiece.tokenize(text_pair=ddf["c"], max_length=160, stride=8,
                                      return_sequence_ids=True)
    with dask.config.set(scheduler="synchronous"):
        res.to_parquet(tmp_path / "default")
        res.to_parquet(tmp_path / "compat", parquet_compat=True)
    default = sorted((tmp_path / "default").glob("part.*.parquet"))
    compat = sorted((tmp_path / "compat").glob("part.*.parquet"))
    assert len(compat) == 2
    with pytest.raises(NotImplementedError, match="Encoding 9"):
        _fastparquet(default[0])
    for d, part in zip(default, compat):
        for column, encodings in _encodings(part).items():
            assert "BYTE_STREAM_SPLIT" not in encodings, (column, encodings)
        expected, _ = _pyarrow(part)
        assert _pyarrow(d)[0] == expected
        assert _polars(part) == expected
        assert _duckdb(part) == expected
        assert _fastparquet(part) == expected
    with pytest.raises(ValueError, match="parquet_compat"):
        res.to_parquet(tmp_path / "bad", parquet_compat="yes")
