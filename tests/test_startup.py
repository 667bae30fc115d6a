"""A small job's start-up (issue 42): the in-process command imports no pandas (about 0.2 s
of CPU: pyarrow's ``pa.array`` / ``to_numpy`` and ``pyarrow.dataset`` import it, so the job's
Arrow path converts with ``frames.schema.arrow_of_numpy`` / ``numpy_of_arrow``), and the
parts' pandas metadata, built without pandas, is byte for byte what pandas records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import daskwp
from conftest import corpus_files, read_documents
from daskwp.frames import part_writer
from daskwp.frames.partition import table_from_output
from daskwp.frames.schema import arrow_of_numpy, empty_texts, numpy_of_arrow

REPO = Path(__file__).resolve().parent.parent
TOK = daskwp.WordPieceTokenizer()


def _docs(n: int = 3000) -> list[str]:
    docs = []
    for p in corpus_files():
        if p.suffix != ".json" and p.stem in ("en_ewt", "HDFS_2k", "zh"):
            docs += read_documents(p)[:n // 3]
    return docs


def _python(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout


@pytest.mark.parametrize("padding", ["do_not_pad", "max_length", "bucket"])
def test_the_in_process_command_imports_no_pandas(tmp_path, padding):
    """``daskwp tokenize`` without a cluster option, several partitions of several row
    groups: it runs on threads, never imports pandas, and its parts are ``tok(...)``'s."""
    docs = _docs()
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(docs) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    code = ("import sys\nfrom daskwp.cli import main\n"
            f"assert main(['tokenize', {str(inp)!r}, {str(out)!r}, '-q', '--max-length', "
            f"'16', '--stride', '4', '--padding', {padding!r}, '--partition-size', '60kB']) "
            "== 0\n"
            "print('PANDAS', sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))")
    printed = _python(code)
    assert printed.strip().splitlines()[-1] == "PANDAS []", printed[-2000:]
    summary = json.loads((out / "_summary.json").read_text())
    assert summary["run"]["mode"] == "threads"
    parts = sorted(out.glob("part-*.parquet"))
    assert len(parts) > 2
    got = daskwp.read_tokenized(out).batches(max_length=16)
    meta = np.concatenate([np.asarray(b["metadata"]) for b in got])
    want = TOK(docs, max_length=16, stride=4, padding="max_length")
    np.testing.assert_array_equal(meta, want.metadata)


def _pandas_route(schema: pa.Schema) -> bytes:
    """What the part writer recorded before: pandas' own metadata of an empty frame of these
    columns (numpy integer columns, Arrow list columns), made portable."""
    import pandas as pd
    empty = schema.empty_table().to_pandas(types_mapper=pd.ArrowDtype)
    for f in schema:
        if pa.types.is_integer(f.type):
            empty[f.name] = empty[f.name].astype(f.type.to_pandas_dtype())
    table = part_writer.portable_pandas_metadata(pa.Table.from_pandas(empty,
                                                                      preserve_index=False))
    return table.schema.metadata[b"pandas"]


def _layout_schemas() -> list[pa.Schema]:
    docs = _docs(300)
    outs = [TOK(docs, max_length=32, stride=8, padding=False),
            TOK(docs, max_length=32, stride=8),
            TOK(docs, max_length=32, stride=8, padding="bucket"),
            TOK(docs, max_length=32, stride=8, padding=False, return_offsets_mapping=True,
                return_word_ids=True, return_special_tokens_mask=True,
                return_token_type_ids=True),
            TOK(docs, max_length=32, stride=8, mask_dtype="int8")]
    schemas = [table_from_output(o).schema for o in outs]
    schemas.append(table_from_output(outs[1], attention_mask=True).schema)
    kept = pa.schema([("input_index", pa.int64()), ("a", pa.int8()), ("b", pa.int16()),
                      ("c", pa.int32()), ("d", pa.uint32()), ("e", pa.list_(pa.int64()))])
    return [s.remove_metadata() for s in schemas] + [pa.schema(list(schemas[0]) + list(kept))]


def test_pandas_metadata_is_pandas_own_without_pandas():
    for schema in _layout_schemas():
        built = part_writer._integer_pandas_metadata(schema)
        assert built is not None, schema
        assert built == _pandas_route(schema), schema
        assert part_writer._portable_pandas_schema_metadata(schema) == {b"pandas": built}
    # other columns (kept strings, floats) still go through pandas itself
    odd = pa.schema([("logID", pa.int64()), ("name", pa.large_string()), ("x", pa.float64())])
    assert part_writer._integer_pandas_metadata(odd) is None
    assert part_writer._portable_pandas_schema_metadata(odd) == {b"pandas": _pandas_route(odd)}


def test_arrow_numpy_conversions_equal_pyarrows():
    rng = np.random.default_rng(7)
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint16, np.float32, np.float64):
        values = rng.integers(-100, 100, 1000).astype(dtype)
        for v in (values, values[3:], values[::3], values[:0]):
            a = arrow_of_numpy(v)
            assert a.equals(pa.array(v)) and a.type == pa.array(v).type
            if v.flags.c_contiguous and len(v):   # shared, not copied
                assert np.shares_memory(numpy_of_arrow(a), v)
        arr = pa.array(values)
        for a in (arr, arr.slice(5), arr.slice(5, 10), arr.slice(0, 0),
                  pa.chunked_array([arr]), pa.chunked_array([arr.slice(1), arr.slice(0, 4)]),
                  pa.chunked_array([], type=arr.type)):
            np.testing.assert_array_equal(numpy_of_arrow(a), a.to_numpy())
            assert numpy_of_arrow(a).dtype == a.to_numpy().dtype
    # nulls, booleans and strings: as to_numpy / pa.array give them
    nulls = pa.array([1, None, 3])
    np.testing.assert_array_equal(numpy_of_arrow(nulls), nulls.to_numpy(zero_copy_only=False))
    flags = pa.array([True, False, True])
    np.testing.assert_array_equal(numpy_of_arrow(flags), flags.to_numpy(zero_copy_only=False))
    assert arrow_of_numpy(np.array([True, False])).equals(pa.array([True, False]))
    empty = pa.Array.from_buffers(pa.int64(), 0, [None, None])   # no data buffer
    assert numpy_of_arrow(empty).dtype == np.int64 and len(numpy_of_arrow(empty)) == 0
    texts = empty_texts(3)
    assert texts.type == pa.large_string() and texts.to_pylist() == ["", "", ""]


def _pool_after_worker_state(env: dict) -> str:
    import os
    clean = {k: v for k, v in os.environ.items()
             if k not in ("MALLOC_TRIM_THRESHOLD_", "ARROW_DEFAULT_MEMORY_POOL",
                          "DASKWP_WORKER_MALLOC")}
    code = ("import pyarrow as pa\nfrom daskwp.distributed.state import WorkerState\n"
            "before = pa.default_memory_pool().backend_name\nWorkerState()\n"
            "print(before, pa.default_memory_pool().backend_name)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=120, env={**clean, **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.split()


def test_a_nannys_worker_gives_arrow_allocations_to_jemalloc():
    """In a nanny's worker (``MALLOC_TRIM_THRESHOLD_`` set) the per-worker state makes
    Arrow's default pool jemalloc (docs/design.md §3.5); not elsewhere, not when
    ``ARROW_DEFAULT_MEMORY_POOL`` chose one, not with ``DASKWP_WORKER_MALLOC=0``."""
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no jemalloc pool")
    default, after = _pool_after_worker_state({})
    assert after == default != "jemalloc"
    assert _pool_after_worker_state({"MALLOC_TRIM_THRESHOLD_": "65536"}) == [default, "jemalloc"]
    assert _pool_after_worker_state({"MALLOC_TRIM_THRESHOLD_": "65536",
                                     "DASKWP_WORKER_MALLOC": "0"}) == [default, default]
    assert _pool_after_worker_state({"MALLOC_TRIM_THRESHOLD_": "65536",
                                     "ARROW_DEFAULT_MEMORY_POOL": "system"}) == ["system"] * 2


@pytest.mark.parametrize("argv, orig_argv, main_file, command", [
    (["/venv/bin/daskwp", "count"], ["/venv/bin/python", "/venv/bin/daskwp", "count"],
     "/venv/bin/daskwp", True),                                     # the console script
    (["-m", "count"], ["python", "-m", "daskwp", "count"], None, True),
    (["-m"], ["python", "-X", "importtime", "-m", "daskwp.cli"], None, True),
    (["-m"], ["python", "-mdaskwp"], None, True),
    (["-m"], ["python", "-m", "daskwp.jobs"], None, False),
    (["-m"], ["python", "-m", "pytest", "-m", "daskwp"], None, False),
    (["-c"], ["python", "-c", "import daskwp"], None, False),
    (["job.py"], ["python", "job.py", "-m", "daskwp"], "/home/u/job.py", False),
    (["daskwp_job.py"], ["python", "daskwp_job.py"], "/home/u/daskwp_job.py", False),
])
def test_started_as_command(argv, orig_argv, main_file, command):
    assert daskwp._started_as_command(argv, orig_argv, main_file) is command


def _openblas_threads(tmp_path, script_name: str, env: dict) -> str:
    import os
    folder = tmp_path / script_name.replace(".", "_")
    folder.mkdir()
    script = folder / script_name   # as pip's console script: `from daskwp.cli import ...`
    script.write_text("import os\nfrom daskwp.cli import console_main\n"
                      "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=REPO, timeout=120, env={**clean, **env})
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_the_command_runs_one_openblas_thread_unless_told(tmp_path):
    """The ``daskwp`` command sets OPENBLAS_NUM_THREADS=1 before numpy loads OpenBLAS (whose
    idle threads spin at start-up); a value in the environment wins; a program that imports
    daskwp keeps OpenBLAS's own default."""
    assert _openblas_threads(tmp_path, "daskwp", {}) == "1"
    assert _openblas_threads(tmp_path, "other.py", {}) == "None"
    assert _openblas_threads(tmp_path, "daskwp-script.py", {"OPENBLAS_NUM_THREADS": "4"}) == "4"
