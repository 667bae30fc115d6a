"""A written partition leaves no garbage for the cyclic collector: its writers and their page
buffers are freed when the task returns (docs/design.md §3.5 "Worker malloc": a worker's full
collections grow rarer as its objects grow, and buffers held by a reference cycle piled up
between them, its peak RSS growing with the partitions it had written)."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest

import daskwp
from daskwp.distributed.tasks import write_tokenized_part
from daskwp.frames import parquet_writer

TOK = daskwp.WordPieceTokenizer(num_threads=1)
TEXTS = pa.array(["the quick brown fox jumps over the lazy dog " * 8] * 4000,
                 type=pa.large_string())
OPTIONS = dict(max_length=32, stride=8, truncation=False, add_special_tokens=True,
               padding="do_not_pad")


def _writers() -> int:
    return sum(isinstance(o, parquet_writer.NativeParquetWriter) for o in gc.get_objects())


@pytest.mark.parametrize("compression", ["lz4", "zstd", None])
def test_a_written_part_leaves_no_writer_to_the_cyclic_collector(tmp_path, compression):
    write_tokenized_part(TEXTS[:10], TOK, OPTIONS, str(tmp_path / "warm.parquet"),
                         str(tmp_path / ".warm.tmp"), compression=compression)
    gc.collect()
    before = _writers()
    gc.disable()
    try:
        for i in range(3):
            stats = write_tokenized_part(TEXTS, TOK, OPTIONS, str(tmp_path / f"p{i}.parquet"),
                                         str(tmp_path / f".p{i}.tmp"), compression=compression,
                                         piece_bytes=64 << 10)
            assert stats["documents"] == len(TEXTS)
        left = _writers() - before
    finally:
        gc.enable()
    assert left == 0, f"{left} writers wait for the cyclic collector"
