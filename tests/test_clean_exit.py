"""The console command ends cleanly: no extension object outlives the interpreter's teardown.

The command freezes its heap before it exits (daskwp/cli.py: the shutdown's collections
would traverse the whole heap), so an extension object kept by a reference cycle is never
freed, and nanobind prints "leaked instances" warnings on stderr at the end of an otherwise
good job. A part's writers therefore let go of their files (and the files' checksum hashes,
``daskwp._ext.PartHash``) when a part is finished or abandoned, not when they are collected.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref

import pyarrow as pa
import pytest

from daskwp.frames import parquet_writer
from daskwp.frames.megatron import HashingWriter
from daskwp.frames.part_writer import PartWriter, checksum_hash

SAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "daskwp", "data", "sample.txt")


@pytest.mark.parametrize("args", [
    pytest.param(["--padding", "do_not_pad"], id="parquet"),
    pytest.param(["--pack", "128"], id="packed"),
    pytest.param(["--output-format", "megatron", "--append-eod"], id="megatron"),
    pytest.param(["--output-format", "datasets"], id="datasets"),
    pytest.param(None, id="count"),
])
def test_command_exits_without_leak_warnings(tmp_path, args):
    if args is None:
        cmd = ["count", SAMPLE]
    else:
        cmd = ["tokenize", SAMPLE, str(tmp_path / "out"), *args]
    proc = subprocess.run([sys.executable, "-m", "daskwp", *cmd, "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "leaked" not in proc.stderr, proc.stderr


def _table():
    return pa.table({"logID": pa.array([0, 1, 2], pa.int64()),
                     "input_ids": pa.array([[1, 2], [3], []], pa.list_(pa.int32()))})


def test_part_writer_lets_go_of_its_file_when_done(tmp_path):
    w = PartWriter(str(tmp_path / "p.parquet"), str(tmp_path / "p.tmp"), native=True)
    w.write(_table())
    file_ref = weakref.ref(w._file)
    w.close({"partition": 0})
    gc.disable()   # what a frozen heap does: only reference counts free anything
    try:
        assert file_ref() is None      # the writer (alive) holds neither file nor hash
    finally:
        gc.enable()
    w2 = PartWriter(str(tmp_path / "q.parquet"), str(tmp_path / "q.tmp"), native=True)
    w2.write(_table())
    file_ref = weakref.ref(w2._file)
    w2.abort()
    assert file_ref() is None and not os.path.exists(tmp_path / "q.tmp")


def test_native_writer_lets_go_of_its_sink_at_close(tmp_path):
    with open(tmp_path / "f.parquet", "wb") as fh:
        sink = HashingWriter(fh, checksum_hash())
        sink_ref = weakref.ref(sink)
        w = parquet_writer.NativeParquetWriter(sink, _table().schema, "lz4")
        del sink
        w.write_table(_table())
        w.close()
        gc.disable()
        try:
            assert sink_ref() is None
        finally:
            gc.enable()
        with pytest.raises(ValueError, match="closed"):
            w.write_table(_table())
