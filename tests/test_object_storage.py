"""Batch jobs on object storage (docs/batch-jobs.md "Object storage"): inputs and outputs
as fsspec URLs, against a real S3 endpoint on loopback (moto's server mode with s3fs) and
fsspec's in-memory filesystem.

The reference for every job on a bucket is the same job on local files: identical parts.
One moto server serves the whole module; each test uses its own bucket. The credentials are
dummy values in the environment (moto accepts any).
"""

from __future__ import annotations

import bz2
import functools
import gzip
import json
import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from daskwp import jobs
from daskwp.cli import main
from daskwp.frames import storage
from daskwp.jobs import inputs
from daskwp.jobs.inputs import byte_ranges

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "daskwp" / "data" / "sample.txt"
#: Credentials the tests pass as storage options: they must never be written anywhere.
SECRET_KEY = "AKIAOBJSTOREMARKER01"
SECRET = "s3cr3t-0bjst0re-marker-value"


@pytest.fixture(scope="module")
def endpoint():
    """A moto S3 server on 127.0.0.1 (a free port) for the module, with dummy credentials
    in the environment and the instance-metadata lookup off (no network)."""
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true")
    import logging
    logging.getLogger("werkzeug").setLevel(logging.WARNING)   # one line per request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def bucket(endpoint):
    """A new, empty bucket: ``(name, storage_options, fs)``."""
    import s3fs
    options = {"endpoint_url": endpoint}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    name = f"b-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    return name, options, fs


def sample_lines(n: int | None = None) -> list[str]:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    return lines[:n] if n else lines


def line_start(data: bytes, pos: int) -> int:
    """Where a cut at ``pos`` moves to: the first line start at or after it."""
    return 0 if pos == 0 else (data.find(b"\n", pos - 1) + 1 or len(data))


def exact(data: bytes, spec) -> tuple[int, int]:
    """The bytes a text or JSON Lines partition planned at cuts holds."""
    assert spec.cut_at_lines
    start = line_start(data, spec.byte_start)
    return start, max(start, line_start(data, spec.byte_end))


def corpus_files(lines: list[str]) -> dict[str, bytes]:
    """The same documents as text, JSON Lines, CSV and Parquet (several row groups), plain
    and compressed (a new dict; the files are made once per list of lines: the 80,000
    lines of the head-once cases take 2.9 CPU s)."""
    return dict(_corpus_files(tuple(lines)))


@functools.lru_cache(maxsize=4)
def _corpus_files(lines: tuple[str, ...]) -> dict[str, bytes]:
    lines = list(lines)
    text = ("\n".join(lines) + "\n").encode()
    jsonl = "".join(json.dumps({"text": t, "id": i}) + "\n"
                    for i, t in enumerate(lines)).encode()
    table = pa.table({"text": lines, "id": list(range(len(lines)))})
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    csv = sink.getvalue().to_pybytes()
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=200)
    return {"a.txt": text, "b.jsonl": jsonl, "c.csv": csv,
            "d.parquet": sink.getvalue().to_pybytes(), "e.txt.gz": gzip.compress(text),
            "f.jsonl.bz2": bz2.compress(jsonl), "g.csv.gz": gzip.compress(csv)}


def job_config(inp, out, **kw):
    values = {"input": inp, "output": out, "partition_size": 8000, "quiet": True,
              "scheduler_address": "synchronous", "keep_columns": None}
    values.update(kw)
    return jobs.make_config(values)


def part_tables(folder, options=None) -> list[pa.Table]:
    """Every part of an output folder (local path or URL), in order, without metadata."""
    folder = storage.Folder(folder, options)
    names = sorted(n for n in folder.listdir()
                   if n.startswith("part") and n.endswith(".parquet"))
    out = []
    for n in names:
        with folder.open(n) as fh:
            out.append(pq.read_table(fh).replace_schema_metadata(None))
    return out


def assert_same_parts(a, b, options=None):
    ta, tb = part_tables(a), part_tables(b, options)
    assert len(ta) == len(tb) > 1
    for x, y in zip(ta, tb):
        assert x.equals(y)


# -- inputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["text", "jsonl", "csv", "parquet"])
def test_bucket_inputs_equal_the_same_job_on_local_files(tmp_path, bucket, kind):
    name, options, fs = bucket
    files = corpus_files(sample_lines(600))
    chosen = {k: v for k, v in files.items()
              if {"text": ".txt", "jsonl": ".jsonl", "csv": ".csv",
                  "parquet": ".parquet"}[kind] in k}
    (tmp_path / "in").mkdir()
    for k, v in chosen.items():
        (tmp_path / "in" / k).write_bytes(v)
        fs.pipe(f"{name}/corpus/{k}", v)
    local = jobs.run_job(job_config(str(tmp_path / "in"), str(tmp_path / "local")))
    remote = jobs.run_job(job_config(f"s3://{name}/corpus", str(tmp_path / "remote"),
                                     storage_options=options))
    assert remote["documents"] == local["documents"] == 600 * len(chosen)
    assert remote["tokens"] == local["tokens"]
    assert remote["partitions"] == local["partitions"] > len(chosen)
    assert_same_parts(tmp_path / "local", tmp_path / "remote")
    job = json.loads((tmp_path / "remote" / jobs.JOB_FILE).read_text())
    assert [f["path"] for f in job["input"]["files"]] == [
        f"s3://{name}/corpus/{k}" for k in sorted(chosen)]


def _collected_ids() -> set:
    """The ids of the objects the collector scans (frozen ones are not among them)."""
    import gc
    return {id(o) for o in gc.get_objects()}


def test_a_protocols_import_is_kept_from_the_collector_where_the_heap_is_frozen(
        monkeypatch):
    """In a process that froze its heap (the daskwp command: gc.freeze in cli.main), the
    first resolution of a protocol (its implementation's import) runs without a
    collection and freezes what it made; a protocol resolved before, or a process that
    froze nothing, is left as it was (the collector's state restored either way)."""
    import gc
    runs = []

    def count(phase, info):
        if phase == "start":
            runs.append(info["generation"])
    monkeypatch.setattr(storage, "_IMPORTED", set())
    gc.callbacks.append(count)
    try:
        assert gc.get_freeze_count() == 0 and gc.isenabled()
        storage._url_to_fs("memory://a/b", None)       # nothing frozen: no freeze
        assert gc.get_freeze_count() == 0 and gc.isenabled()
        gc.freeze()
        runs.clear()   # (the memory protocol's first import may have collected)
        with storage._kept_from_collector("file:///x"):
            assert not gc.isenabled()
            made = [[i] for i in range(50_000)]       # (collections, were it enabled)
        assert runs == [] and gc.isenabled()
        # frozen: out of every generation the collector scans (an exact test; the freeze
        # count also drops when another thread frees a frozen object)
        assert not _collected_ids().intersection(map(id, made))
        with storage._kept_from_collector("file:///y"):   # resolved before
            assert gc.isenabled()
            more = [[i] for i in range(50_000)]
        with storage._kept_from_collector("/local/path"):
            assert gc.isenabled()
        assert _collected_ids().issuperset(map(id, more))   # (none of them frozen)
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()


def test_memory_urls_globs_and_include_exclude(tmp_path):
    import fsspec
    m = fsspec.filesystem("memory")
    root = f"/objstore-{uuid.uuid4().hex[:8]}"
    lines = sample_lines(300)
    files = corpus_files(lines)
    for k in ("a.txt", "b.jsonl"):
        m.pipe(f"{root}/x/{k}", files[k])
        m.pipe(f"{root}/y/{k}", files[k])
    m.pipe(f"{root}/x/_hidden.txt", b"not an input\n")
    listed = inputs.list_input_files(f"memory://{root}/*/*.txt")
    assert [f.path for f in listed] == [f"memory://{root}/x/a.txt", f"memory://{root}/y/a.txt"]
    listed = inputs.list_input_files(f"memory://{root}", include=["*.jsonl"],
                                     exclude=["y"])
    assert [f.path for f in listed] == [f"memory://{root}/x/b.jsonl"]
    assert [f.format for f in listed] == ["jsonl"]
    with pytest.raises(jobs.InputError, match="input not found"):
        inputs.list_input_files(f"memory://{root}/nothing.txt")
    with pytest.raises(jobs.InputError, match="no input file matches"):
        inputs.list_input_files(f"memory://{root}/*.csv")


def spy_fetches(monkeypatch) -> list[tuple[int, int]]:
    """From now on, the byte range of every GET of an s3fs file, appended to the list."""
    import s3fs
    fetched = []
    real = s3fs.core.S3File._fetch_range

    def spy(self, start, end):
        fetched.append((start, end))
        return real(self, start, end)
    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", spy)
    return fetched


def test_a_text_partition_reads_its_byte_range_only(bucket, monkeypatch):
    """Planning and reading a partition of an object fetch byte ranges near the partition,
    never the whole object."""
    name, options, fs = bucket
    data = ("\n".join(sample_lines()) + "\n").encode()
    fs.pipe(f"{name}/big.txt", data)
    with storage.using(options):
        files = inputs.list_input_files(f"s3://{name}/big.txt")
        specs = inputs.plan_partitions(files, "text", 20_000)
    assert len(specs) > 5
    fetched = spy_fetches(monkeypatch)
    mid = specs[len(specs) // 2]
    got = inputs.read_partition(mid)
    start, end = exact(data, mid)
    expected = data[start:end].decode().splitlines()
    assert got.to_pylist() == [x.encode() for x in expected]
    # a small GET at each cut (its line start), then the partition's bytes
    look = byte_ranges._FIND_PIECE
    assert fetched[:2] == [(mid.byte_start - 1, mid.byte_start - 1 + look),
                           (mid.byte_end - 1, mid.byte_end - 1 + look)]
    assert fetched[2:] == [(start, end)]
    assert all(e - s < len(data) / 3 for s, e in fetched)


def _big_text(bucket, nbytes: int, partition_bytes: int):
    """``(data, specs)``: at least ``nbytes`` of the sample lines as the bucket's ``big.txt``,
    planned as text partitions of ``partition_bytes``."""
    name, options, fs = bucket
    line = ("\n".join(sample_lines()) + "\n").encode()
    data = line * (nbytes // len(line) + 1)
    fs.pipe(f"{name}/big.txt", data)
    with storage.using(options):
        specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/big.txt"),
                                       "text", partition_bytes)
    return data, specs


def test_counting_a_text_partition_fetches_big_ranges(bucket, monkeypatch):
    """The count of a URL partition's lines (the global-offset pass) reads its byte range in
    a few big GETs, not 1 MB ones: each request has a fixed cost (storage_bench.py)."""
    data, specs = _big_text(bucket, 6_000_000, 5_000_000)
    assert len(specs) == 2 and specs[0].byte_end - specs[0].byte_start > 2_500_000
    fetched = spy_fetches(monkeypatch)
    spec = specs[0]
    start, end = exact(data, spec)
    assert inputs.count_partition(spec) == data[:end].count(b"\n")
    # the line start at its last cut (one small GET), then the count's one GET
    assert fetched == [(spec.byte_end - 1, spec.byte_end - 1 + byte_ranges._FIND_PIECE),
                       (0, end)], fetched


def test_storage_options_from_the_cli_are_never_recorded(tmp_path, bucket, capsys):
    """--storage-option key=value reaches the filesystem; the credentials given that way
    appear in neither _job.json, the summary, nor the printed JSON."""
    name, options, fs = bucket
    fs.pipe(f"{name}/in.txt", ("\n".join(sample_lines(100)) + "\n").encode())
    saved = {k: os.environ.pop(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    try:
        rc = main(["tokenize", f"s3://{name}/in.txt", str(tmp_path / "out"), "--scheduler",
                   "synchronous", "--json", "--storage-option",
                   f"endpoint_url={options['endpoint_url']}", "--storage-option",
                   f"key={SECRET_KEY}", "--storage-option", f"secret={SECRET}"])
    finally:
        os.environ.update(saved)
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert json.loads(printed)["documents"] == 100
    for path in (tmp_path / "out").iterdir():
        text = path.read_bytes()
        assert SECRET.encode() not in text and SECRET_KEY.encode() not in text, path
    assert SECRET not in printed and SECRET_KEY not in printed


def test_storage_option_values_are_checked():
    from daskwp.core.options import check
    assert check("storage_options", ["anon=true", "client_kwargs={region_name: x}"]) == {
        "anon": True, "client_kwargs": {"region_name": "x"}}
    with pytest.raises(ValueError, match="key=value"):
        check("storage_options", ["anon"])
    with pytest.raises(TypeError, match="mapping"):
        check("storage_options", 3)


def test_count_reads_a_bucket(tmp_path, bucket):
    from daskwp.jobs.count import run_count
    name, options, fs = bucket
    data = corpus_files(sample_lines(400))["e.txt.gz"]
    fs.pipe(f"{name}/c/in.txt.gz", data)
    (tmp_path / "in.txt.gz").write_bytes(data)
    remote = run_count(job_config(f"s3://{name}/c", "unused", storage_options=options))
    local = run_count(job_config(str(tmp_path / "in.txt.gz"), "unused"))
    assert remote["total"]["documents"] == 400
    assert remote["total"]["tokens"] == local["total"]["tokens"] > 0


# -- output -------------------------------------------------------------------------------

def objects(fs, prefix: str) -> dict[str, str]:
    """name -> ETag of the objects under ``prefix`` (a new upload changes the ETag's
    identity only with new bytes; LastModified is compared too)."""
    fs.invalidate_cache()
    try:
        found = fs.find(prefix, detail=True)
    except FileNotFoundError:
        return {}
    return {p.rsplit("/", 1)[-1]: (i["ETag"], i["LastModified"]) for p, i in found.items()
            if i.get("type") == "file"}


def test_bucket_to_bucket_equals_local_and_reads_back(tmp_path, bucket):
    """Text, JSON Lines, CSV and Parquet objects (plain and compressed) -> Parquet parts in
    the bucket: the parts of the same job on local files, read back by read_tokenized; no
    temporary object is left, and the credentials are not in _job.json or the summary."""
    import daskwp
    name, options, fs = bucket
    files = corpus_files(sample_lines(300))
    (tmp_path / "in").mkdir()
    for k, v in files.items():
        (tmp_path / "in" / k).write_bytes(v)
        fs.pipe(f"{name}/in/{k}", v)
    local = jobs.run_job(job_config(str(tmp_path / "in"), str(tmp_path / "out")))
    opts = dict(options, key=SECRET_KEY, secret=SECRET)
    remote = jobs.run_job(job_config(f"s3://{name}/in", f"s3://{name}/out",
                                     storage_options=opts))
    assert remote["tokens"] == local["tokens"] and remote["documents"] == 300 * len(files)
    url = f"s3://{name}/out"
    assert_same_parts(tmp_path / "out", url, options)
    names = set(objects(fs, f"{name}/out"))
    assert jobs.JOB_FILE in names and jobs.SUMMARY_FILE in names
    assert not [n for n in names if n.startswith(".")]
    for n in (jobs.JOB_FILE, jobs.SUMMARY_FILE):
        text = fs.cat_file(f"{name}/out/{n}")
        assert SECRET.encode() not in text and SECRET_KEY.encode() not in text
    got = daskwp.read_tokenized(url, storage_options=options)
    want = daskwp.read_tokenized(str(tmp_path / "out"))
    assert len(got.files) == len(want.files) and got.pad_id == want.pad_id
    for a, b in zip(got.batches(64, max_length=512), want.batches(64, max_length=512)):
        assert a.keys() == b.keys()
        for k in a:
            assert (a[k] == b[k]).all()
    assert got.to_dask().compute().equals(want.to_dask().compute())


def test_rerun_keeps_complete_parts_and_replaces_broken_ones(tmp_path, bucket, capsys):
    """A rerun uploads nothing when every part is complete; a truncated part and a missing
    one are written again, every other part is left untouched (same ETag and time)."""
    name, options, fs = bucket
    fs.pipe(f"{name}/in.txt", ("\n".join(sample_lines()) + "\n").encode())
    cfg = job_config(f"s3://{name}/in.txt", f"s3://{name}/out", storage_options=options)
    first = jobs.run_job(cfg)
    n = first["partitions"]
    assert n > 4
    before = objects(fs, f"{name}/out")
    again = jobs.run_job(cfg)
    assert again["partitions_skipped"] == n and again["partitions_written"] == 0
    after = objects(fs, f"{name}/out")
    assert {k: v for k, v in after.items() if k.startswith("part-")} == \
        {k: v for k, v in before.items() if k.startswith("part-")}
    broken, gone = jobs.part_name(1, n), jobs.part_name(3, n)
    data = fs.cat_file(f"{name}/out/{broken}")
    fs.pipe(f"{name}/out/{broken}", data[: len(data) // 2])
    fs.rm_file(f"{name}/out/{gone}")
    third = jobs.run_job(cfg)
    assert third["partitions_written"] == 2 and third["tokens"] == first["tokens"]
    final = objects(fs, f"{name}/out")
    changed = {k for k in final if k.startswith("part-") and final[k] != after.get(k)}
    assert changed == {broken, gone}
    assert fs.cat_file(f"{name}/out/{broken}") == data


def test_overwrite_and_overlap_on_urls(tmp_path, bucket):
    name, options, fs = bucket
    text = ("\n".join(sample_lines(200)) + "\n").encode()
    fs.pipe(f"{name}/data/in.txt", text)
    fs.pipe(f"{name}/other/x.csv", b"text\nhello\n")
    # an output folder inside the input folder is left out of the input
    first = jobs.run_job(job_config(f"s3://{name}/data", f"s3://{name}/data/out",
                                    storage_options=options))
    second = jobs.run_job(job_config(f"s3://{name}/data", f"s3://{name}/data/out",
                                     storage_options=options))
    assert second["partitions_skipped"] == first["partitions"] and second["documents"] == 200
    with pytest.raises(jobs.OutputConflictError, match="read its own output"):
        jobs.run_job(job_config(f"s3://{name}/data/out/*.parquet", f"s3://{name}/data/out",
                                storage_options=options))
    # another job's folder: refused, then replaced with overwrite
    with pytest.raises(jobs.OutputConflictError, match="files daskwp did not write"):
        jobs.run_job(job_config(f"s3://{name}/data/in.txt", f"s3://{name}/other",
                                storage_options=options))
    with pytest.raises(jobs.OutputConflictError, match="another job's data"):
        jobs.run_job(job_config(f"s3://{name}/data/in.txt", f"s3://{name}/data/out",
                                storage_options=options, max_length=64))
    done = jobs.run_job(job_config(f"s3://{name}/data/in.txt", f"s3://{name}/data/out",
                                   storage_options=options, max_length=64, overwrite=True))
    assert done["partitions_written"] == done["partitions"]


def run_cli(args, env_changes, cwd, scheduler=("--scheduler", "synchronous")):
    import subprocess
    import sys
    import time
    env = dict(os.environ, AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_CONFIG_FILE=os.devnull,
               AWS_EC2_METADATA_DISABLED="true")
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "daskwp", *args, *scheduler,
                        "--quiet"], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    return p, time.perf_counter() - t


@pytest.mark.slow   # three CLI processes; the endpoint that does not answer is retried
def test_missing_bucket_wrong_endpoint_and_no_credentials_fail_fast(tmp_path, bucket,
                                                                      endpoint):
    """Each is a one-line error within 30 s, and nothing is written: no bucket created, no
    object added, no local output folder."""
    name, options, fs = bucket
    (tmp_path / "in.txt").write_text("hello world\n")
    fs.pipe(f"{name}/in.txt", b"hello world\n")
    before = objects(fs, name)
    cases = {
        "the bucket does not exist": (
            ["tokenize", "in.txt", f"s3://{name}-missing/out", "--storage-option",
             f"endpoint_url={endpoint}"], {}),
        "cannot reach the object store": (
            ["tokenize", f"s3://{name}/in.txt", "out", "--storage-option",
             "endpoint_url=http://127.0.0.1:9"], {}),
        "no credentials": (
            ["tokenize", "in.txt", f"s3://{name}/out", "--storage-option",
             f"endpoint_url={endpoint}"],
            {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}),
    }
    for why, (args, env) in cases.items():
        p, seconds = run_cli(args, env, tmp_path)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (why, p.stderr)
        assert lines[0].startswith("daskwp: error: ") and why in lines[0], (why, lines)
        assert seconds < 30, (why, seconds)
    fs.invalidate_cache()
    assert not fs.exists(f"{name}-missing")
    assert objects(fs, name) == before
    assert not (tmp_path / "out").exists()


def test_packing_refuses_a_url_by_name(tmp_path):
    (tmp_path / "in.txt").write_text("hello\n")
    with pytest.raises(jobs.ConfigError, match="packing writes to a local"):
        jobs.run_job(job_config(str(tmp_path / "in.txt"), "memory://objstore-refused/out",
                                packing=16))


def test_accessor_to_parquet_writes_to_a_bucket(tmp_path, bucket):
    """``.wordpiece.tokenize(...).to_parquet("s3://...", storage_options=...)``: daskwp's
    part writer, each part uploaded complete; the same parts as to a local folder;
    ``overwrite`` replaces them."""
    import dask.dataframe as dd
    import pandas as pd

    import daskwp  # noqa: F401  (registers the accessor)
    name, options, fs = bucket
    ddf = dd.from_pandas(pd.DataFrame({"text": sample_lines(400)}), npartitions=4)
    res = ddf["text"].wordpiece.tokenize(max_length=64, stride=16, truncation=True,
                                         return_overflowing_tokens=True)
    res.to_parquet(str(tmp_path / "local"))
    url = f"s3://{name}/acc"
    res.to_parquet(url, storage_options=options)
    names = sorted(objects(fs, f"{name}/acc"))
    assert names == [f"part.{i}.parquet" for i in range(4)]
    assert_same_parts(tmp_path / "local", url, options)
    fs.pipe(f"{name}/acc/stale.parquet", b"x")
    res.to_parquet(url, storage_options=options, overwrite=True)
    assert sorted(objects(fs, f"{name}/acc")) == names
    ds = daskwp.read_tokenized(url, storage_options=options)
    assert len(ds) == len(daskwp.read_tokenized(str(tmp_path / "local")))
    with pytest.raises(OSError, match="the bucket does not exist"):
        res.to_parquet(f"s3://{name}-missing/acc", storage_options=options)


@pytest.mark.slow
def test_worker_killed_mid_job_then_rerun_rewrites_nothing(tmp_path, bucket, spool_tmp,
                                                          monkeypatch):
    """Kill a worker process while a bucket-to-bucket job runs on a real cluster: Dask
    reruns its tasks, no temporary or torn object is left, the parts equal those of the same
    job on local files; a rerun then uploads nothing (every part kept, same ETag and
    time). The workers' fetch spool (in their temporary folder) is empty at the end."""
    from conftest import run_killing_a_worker
    from distributed import Client, LocalCluster
    monkeypatch.setenv("TMPDIR", str(spool_tmp.parent))   # the workers' temporary folder
    name, options, fs = bucket
    data = ("\n".join(sample_lines() * 2) + "\n").encode()
    fs.pipe(f"{name}/in.txt", data)
    (tmp_path / "in.txt").write_bytes(data)
    values = {"partition_size": "8KB", "device": "cpu", "scheduler_address": None,
              "storage_options": options}
    cfg = job_config(f"s3://{name}/in.txt", f"s3://{name}/out", **values)

    def parts_written():
        return len([k for k in objects(fs, f"{name}/out") if k.startswith("part-")]) >= 2
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        summary, killed = run_killing_a_worker(
            cluster, lambda: jobs.run_job(cfg, client=client), parts_written, poll=0.05)
        assert killed, "the job ended before a worker could be killed"
        written = objects(fs, f"{name}/out")
        assert spool_tmp.exists() and spool_files(spool_tmp) == []
        assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []
        again = jobs.run_job(cfg, client=client)
    assert again["partitions_written"] == 0 and again["partitions_skipped"] == \
        summary["partitions"]
    final = objects(fs, f"{name}/out")
    assert {k: v for k, v in final.items() if k.startswith("part-")} == \
        {k: v for k, v in written.items() if k.startswith("part-")}
    assert not [k for k in final if k.startswith(".")]
    local = jobs.run_job(job_config(str(tmp_path / "in.txt"), str(tmp_path / "out"),
                                    partition_size="8KB"))
    assert local["tokens"] == summary["tokens"]
    assert_same_parts(tmp_path / "out", f"s3://{name}/out", options)


@pytest.mark.parametrize("merge_parts", [True, False])
def test_megatron_output_in_a_bucket_equals_local(tmp_path, bucket, merge_parts):
    """Megatron .bin/.idx pairs (and the merged pair) written to a bucket: byte for byte
    those of the same job on local files; a rerun keeps every part (nothing uploaded)."""
    name, options, fs = bucket
    data = ("\n".join(sample_lines()) + "\n").encode()
    fs.pipe(f"{name}/in.txt", data)
    (tmp_path / "in.txt").write_bytes(data)
    kw = {"output_format": "megatron", "merge_parts": merge_parts, "max_length": None,
          "truncation": None, "padding": None}
    kw = {k: v for k, v in kw.items() if v is not None}
    local = jobs.run_job(job_config(str(tmp_path / "in.txt"), str(tmp_path / "out"), **kw))
    cfg = job_config(f"s3://{name}/in.txt", f"s3://{name}/out", storage_options=options,
                     **kw)
    remote = jobs.run_job(cfg)
    assert remote["partitions"] == local["partitions"] > 2
    files = sorted(p.name for p in (tmp_path / "out").iterdir()
                   if p.suffix in (".bin", ".idx"))
    # (a local in-process job writes the merged pair only, no part pairs)
    assert sorted(k for k in objects(fs, f"{name}/out") if k.endswith((".bin", ".idx"))
                  and not (merge_parts and k.startswith("part-"))) == files
    for f in files:
        assert fs.cat_file(f"{name}/out/{f}") == (tmp_path / "out" / f).read_bytes(), f
    args = fs.cat_file(f"{name}/out/_megatron_data_args.txt").decode()
    assert args == (tmp_path / "out" / "_megatron_data_args.txt").read_text().replace(
        str(tmp_path / "out"), f"s3://{name}/out")
    before = objects(fs, f"{name}/out")
    again = jobs.run_job(cfg)
    assert again["partitions_written"] == 0
    after = objects(fs, f"{name}/out")
    assert {k: v for k, v in after.items() if k.endswith((".bin", ".idx"))} == \
        {k: v for k, v in before.items() if k.endswith((".bin", ".idx"))}


def test_storage_options_in_a_job_file_and_file_urls(tmp_path, bucket):
    """``storage_options:`` of a job YAML (and ``--set storage_options={...}``) reach the
    filesystem; a ``file://`` URL is the local path (the POSIX path of today)."""
    import yaml
    name, options, fs = bucket
    fs.pipe(f"{name}/in.txt", ("\n".join(sample_lines(50)) + "\n").encode())
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"input": f"s3://{name}/in.txt", "output": "out",
                                   "storage_options": options, "quiet": True,
                                   "scheduler_address": "synchronous"}))
    cfg = jobs.load_config(job)
    assert cfg.storage_options == options and cfg.output == str(tmp_path / "out")
    assert jobs.run_job(cfg)["documents"] == 50
    cfg = jobs.load_config(job, ["storage_options={endpoint_url: 'http://127.0.0.1:9'}"])
    assert cfg.storage_options == {"endpoint_url": "http://127.0.0.1:9"}
    (tmp_path / "local.txt").write_text("hello world\n")
    cfg = job_config(f"file://{tmp_path}/local.txt", f"file://{tmp_path}/out2")
    assert cfg.input == str(tmp_path / "local.txt") and cfg.output == str(tmp_path / "out2")
    assert jobs.run_job(cfg)["documents"] == 1
    with pytest.raises(jobs.ConfigError, match="not from a URL"):
        job_config("in.txt", "out", vocab=f"s3://{name}/vocab.txt")


def test_datasets_output_in_a_bucket_equals_local(tmp_path, bucket):
    """``output_format: datasets`` to a bucket: the Arrow shards and the two JSON files of
    the same job on local files, byte for byte; a rerun uploads nothing; the datasets
    library loads it from the bucket."""
    datasets = pytest.importorskip("datasets")
    name, options, fs = bucket
    data = ("\n".join(sample_lines(600)) + "\n").encode()
    fs.pipe(f"{name}/in.txt", data)
    (tmp_path / "in.txt").write_bytes(data)
    local = jobs.run_job(job_config(str(tmp_path / "in.txt"), str(tmp_path / "out"),
                                    output_format="datasets"))
    cfg = job_config(f"s3://{name}/in.txt", f"s3://{name}/out", storage_options=options,
                     output_format="datasets")
    remote = jobs.run_job(cfg)
    assert remote["partitions"] == local["partitions"] > 2
    files = sorted(p.name for p in (tmp_path / "out").iterdir()
                   if p.suffix == ".arrow" or p.name in ("dataset_info.json", "state.json"))
    assert len(files) == local["partitions"] + 2
    for f in files:
        got, want = fs.cat_file(f"{name}/out/{f}"), (tmp_path / "out" / f).read_bytes()
        if f == "state.json":   # its fingerprint is the job id's (the input's paths differ)
            got, want = (dict(json.loads(x), _fingerprint=None) for x in (got, want))
        assert got == want, f
    before = objects(fs, f"{name}/out")
    assert jobs.run_job(cfg)["partitions_written"] == 0
    after = objects(fs, f"{name}/out")
    assert {k: after[k] for k in files if k.endswith(".arrow")} == \
        {k: before[k] for k in files if k.endswith(".arrow")}
    ds = datasets.load_from_disk(f"s3://{name}/out", storage_options=options)
    assert ds["logID"] == datasets.load_from_disk(str(tmp_path / "out"))["logID"]


@pytest.mark.parametrize("merge_parts", [True, False])
def test_accessor_to_megatron_writes_to_a_bucket(tmp_path, bucket, merge_parts):
    """``.wordpiece.to_megatron("s3://...", storage_options=...)``: the pairs of the same
    call on a local prefix, byte for byte (merged: the parts are removed)."""
    import dask.dataframe as dd
    import pandas as pd

    import daskwp  # noqa: F401  (registers the accessor)
    name, options, fs = bucket
    s = dd.from_pandas(pd.DataFrame({"text": sample_lines(300)}), npartitions=3)["text"]
    local = s.wordpiece.to_megatron(str(tmp_path / "m" / "text"), merge_parts=merge_parts)
    remote = s.wordpiece.to_megatron(f"s3://{name}/m/text", merge_parts=merge_parts,
                                     storage_options=options)
    files = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert sorted(objects(fs, f"{name}/m")) == files
    assert len(files) == (2 if merge_parts else 6)
    for f in files:
        assert fs.cat_file(f"{name}/m/{f}") == (tmp_path / "m" / f).read_bytes(), f
    assert {k: v for k, v in remote.items() if k not in ("prefix", "prefixes")} == \
        {k: v for k, v in local.items() if k not in ("prefix", "prefixes")}


# -- the fetch spool: each input byte fetched once ------------------------------------------

@pytest.fixture
def spool_tmp(tmp_path, monkeypatch):
    """The system temporary folder of this process (where the spool lives) in tmp_path."""
    import tempfile
    d = tmp_path / "systmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    from daskwp.jobs.inputs import fetch_spool
    return Path(fetch_spool.spool_root())


def spool_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.name != ".lock") if root.exists() else []


def spy_object_fetches(monkeypatch) -> list[tuple[str, int, int]]:
    """From now on, ``(name, start, end)`` of every GET that s3fs sends (``end``
    exclusive; a GET without a range: the whole object, ``end`` None)."""
    import s3fs
    fetched = []
    real = s3fs.core.S3FileSystem._call_s3

    async def spy(self, method, *args, **kw):
        if method == "get_object":
            r = kw.get("Range")
            start, end = r.split("=")[1].split("-") if r else (0, None)
            fetched.append((kw["Key"].rsplit("/", 1)[-1], int(start),
                            int(end) + 1 if end else None))
        return await real(self, method, *args, **kw)
    monkeypatch.setattr(s3fs.core.S3FileSystem, "_call_s3", spy)
    return fetched


@pytest.mark.parametrize("kind", ["a.txt", "b.jsonl", "c.csv"])
def test_each_partition_is_fetched_once_with_the_spool(tmp_path, bucket, kind, spool_tmp,
                                                       monkeypatch):
    """The count pass fetches a partition's byte range into the spool and the write reads it
    from there: each range is fetched once (twice with spool_max_bytes 0); the parts equal
    those of the same job on local files; no spool file is left."""
    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    data = corpus_files(sample_lines(600))[kind]
    fs.pipe(f"{name}/{kind}", data)
    (tmp_path / kind).write_bytes(data)
    local = jobs.run_job(job_config(str(tmp_path / kind), str(tmp_path / "local")))
    with storage.using(options):
        specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/{kind}"),
                                       "text", 8000)
    assert len(specs) > 3
    for spool, times in (("4GB", 1), (0, 2)):
        fetched = spy_object_fetches(monkeypatch)
        out = f"s3://{name}/out-{times}"
        remote = jobs.run_job(job_config(f"s3://{name}/{kind}", out, storage_options=options,
                                         spool_max_bytes=spool))
        assert remote["documents"] == local["documents"] == 600
        assert_same_parts(tmp_path / "local", out, options)
        for s in specs[1:]:    # (the first partition's range is also the listing's head)
            if not s.cut_at_lines:   # CSV pieces
                assert fetched.count((kind, s.byte_start, s.byte_end)) == times, (spool, s)
            elif spool:    # from the byte before its first cut, past its last
                assert fetched.count((kind, s.byte_start - 1,
                                      s.byte_end + fetch_spool.MARGIN)) == 1, s
            else:          # once by the count, once by the write
                assert fetched.count((kind, *exact(data, s))) == 2, s
        assert spool_files(spool_tmp) == []
    assert [p.name for p in spool_tmp.iterdir() if p.is_dir()] == []


def test_spooled_partitions_compressed_and_csv_equal_local(tmp_path, bucket, spool_tmp):
    """Whole compressed objects and CSV pieces (the header read with every piece) are
    spooled too: the same parts as on local files, nothing left in the spool."""
    name, options, fs = bucket
    files = corpus_files(sample_lines(500))
    (tmp_path / "in").mkdir()
    for k in ("c.csv", "e.txt.gz", "f.jsonl.bz2", "g.csv.gz"):
        (tmp_path / "in" / k).write_bytes(files[k])
        fs.pipe(f"{name}/in/{k}", files[k])
    local = jobs.run_job(job_config(str(tmp_path / "in"), str(tmp_path / "local"),
                                    partition_size=4000))
    remote = jobs.run_job(job_config(f"s3://{name}/in", str(tmp_path / "remote"),
                                     storage_options=options, partition_size=4000))
    assert remote["documents"] == local["documents"] == 2000
    assert_same_parts(tmp_path / "local", tmp_path / "remote")
    assert spool_files(spool_tmp) == []


def _text_object_planned(bucket) -> tuple[bytes, list]:
    """The sample lines as the bucket's object ``t.txt``, planned in 20 kB partitions:
    ``(its bytes, the partitions)``."""
    name, options, fs = bucket
    data = ("\n".join(sample_lines()) + "\n").encode()
    fs.pipe(f"{name}/t.txt", data)
    with storage.using(options):
        return data, inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/t.txt"),
                                            "text", 20_000)


def test_the_write_reads_the_spool_of_this_version_only(bucket, spool_tmp, monkeypatch):
    """count_partition leaves the fetched range in the spool; read_partition reads it (no
    GET) and removes it; without a spool file (another host) the range is fetched; the
    partition reads the version of the object planning listed: replaced after the count,
    the write reads the spool (the bytes counted), a GET of the replaced object fails with
    one line; a spool file of another version of the object is never read."""
    import dataclasses

    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    data, specs = _text_object_planned(bucket)
    spec = dataclasses.replace(specs[2], spool=(fetch_spool.run_token("ab" * 8, "r1"), 1 << 30))
    start, end = exact(data, spec)
    want = [x.encode() for x in data[start:end].decode().splitlines()]
    fetched = spy_object_fetches(monkeypatch)
    assert inputs.count_partition(spec) == len(want)
    assert fetched == [("t.txt", spec.byte_start - 1, spec.byte_end + fetch_spool.MARGIN)]
    assert len(spool_files(spool_tmp)) == 1
    assert inputs.read_partition(spec).to_pylist() == want
    assert len(fetched) == 1 and spool_files(spool_tmp) == []
    # no spool file here: fetched from the store (after a small GET at each cut)
    assert inputs.read_partition(spec).to_pylist() == want
    assert fetched[3:] == [("t.txt", start, end)]
    # the object replaced after the count (same size, other bytes): the write reads the
    # spool, the version listed and counted; without it a GET pinned to that ETag fails
    assert inputs.count_partition(spec) == len(want)
    changed = data[:start] + data[start:end].upper() + data[end:]
    fs.pipe(f"{name}/t.txt", changed)
    fs.invalidate_cache()
    assert inputs.read_partition(spec).to_pylist() == want
    assert spool_files(spool_tmp) == []
    with pytest.raises(jobs.InputError) as e:
        inputs.read_partition(spec)
    assert "t.txt" in str(e.value) and "\n" not in str(e.value), e.value
    with pytest.raises(jobs.InputError):
        inputs.count_partition(spec)
    assert spool_files(spool_tmp) == []
    # a spool file of another version: the bytes listed back (their ETag again) and
    # counted, then replaced and listed again: the new plan's write fetches the new bytes,
    # never reads the old spool
    fs.pipe(f"{name}/t.txt", data)
    fs.invalidate_cache()
    assert inputs.count_partition(spec) == len(want)
    assert len(spool_files(spool_tmp)) == 1
    fs.pipe(f"{name}/t.txt", changed)
    fs.invalidate_cache()
    with storage.using(options):
        again = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/t.txt"),
                                       "text", 20_000)
    assert again[2].object_version != spec.object_version
    spec = dataclasses.replace(again[2], spool=spec.spool)
    got = inputs.read_partition(spec).to_pylist()
    assert got == [x.upper() for x in want]
    assert spool_files(spool_tmp) == []
    # over spool_max_bytes: nothing spooled, the write fetches again
    small = dataclasses.replace(spec, spool=(spec.spool[0], 100))
    n = len(fetched)
    assert inputs.count_partition(small) == len(want)
    assert spool_files(spool_tmp) == []
    assert inputs.read_partition(small).to_pylist() == [x.upper() for x in want]
    assert fetched[n:] == [("t.txt", *r) for r in [
        (spec.byte_start - 1, spec.byte_start - 1 + byte_ranges._FIND_PIECE),
        (spec.byte_end - 1, spec.byte_end - 1 + byte_ranges._FIND_PIECE), (start, end)] * 2]


@pytest.mark.parametrize("kind", ["a.txt", "b.jsonl"])
def test_a_spool_file_is_read_through_a_map(bucket, spool_tmp, monkeypatch, kind):
    """A text or JSON Lines partition's count and read stage read its spool file through a
    memory map, as a local file's (no copy of its bytes into a buffer: neither
    ``read_range_into`` nor ``read_pieces``), pieces and documents equal to the same
    partition's read from the store, and the write removes the spool file."""
    import dataclasses

    from daskwp.jobs.inputs import fetch_spool, reading, text
    name, options, fs = bucket
    data = corpus_files(sample_lines(600))[kind]
    fs.pipe(f"{name}/{kind}", data)
    with storage.using(options):
        specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/{kind}"),
                                       "text", 8000)
    assert len(specs) > 3
    want = [(inputs.count_partition(s), inputs.read_partition(s).to_pylist())
            for s in specs]     # no spool: from the store
    token = fetch_spool.run_token("cd" * 8, "m1")
    spooled = [dataclasses.replace(s, spool=(token, 1 << 30)) for s in specs]
    mapped = []
    real_map = byte_ranges.map_range

    def spy_map(spec):
        view = real_map(spec)
        mapped.append(view is not None)
        return view

    def no_copy(*a, **kw):
        raise AssertionError("a spool file's bytes copied into a buffer")
    for module in (byte_ranges, text, reading):
        monkeypatch.setattr(module, "map_range", spy_map)
        for f in ("read_range_into", "read_pieces"):
            if hasattr(module, f):
                monkeypatch.setattr(module, f, no_copy)
    fetched = spy_object_fetches(monkeypatch)
    for s, (count, docs) in zip(spooled, want):
        assert inputs.count_partition(s) == count
        assert len(spool_files(spool_tmp)) == 1
        n = len(fetched)
        assert inputs.read_partition(s).to_pylist() == docs
        assert len(fetched) == n and spool_files(spool_tmp) == []   # no GET: the spool
    assert mapped and all(mapped)
    assert sum(c for c, _ in want) == 600
    # outside a spool the same partition is read from the store: nothing mapped
    monkeypatch.undo()
    with storage.using(options):
        assert byte_ranges.map_range(byte_ranges.exact_range(specs[1])) is None


def test_a_new_run_removes_the_spool_of_a_killed_one(bucket, spool_tmp):
    """Spool folders of an earlier run of the same job (its driver killed before its
    cleanup) are removed when a run of that job starts spooling on the host; another job's
    recent folder is left alone."""
    import dataclasses

    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    fs.pipe(f"{name}/t.txt", ("\n".join(sample_lines(300)) + "\n").encode())
    with storage.using(options):
        spec = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/t.txt"),
                                      "text", 1 << 20)[0]
    job = "cd" * 8
    old = spool_tmp / fetch_spool.run_token(job, "killed")
    other = spool_tmp / fetch_spool.run_token("ef" * 8, "running")
    for d in (old, other):
        d.mkdir(parents=True)
        (d / "000000-x.bin").write_bytes(b"left")
    spec = dataclasses.replace(spec, spool=(fetch_spool.run_token(job, "new"), 1 << 30))
    assert inputs.count_partition(spec) == 300
    assert not old.exists() and (other / "000000-x.bin").exists()
    fetch_spool.remove_run_spools(spec.spool[0])
    assert spool_files(spool_tmp) == ["ef" * 8 + "-running/000000-x.bin"]


def test_a_failed_job_leaves_no_spool(tmp_path, bucket, spool_tmp, monkeypatch):
    """A job that fails after its count pass removes the spool files of the partitions it
    did not write. The driver's stream, which moves the partitions it brought into the
    run's folder (slowed here: it has many left at the failure), has stopped by then: a
    partition moved in while the folder's files were being removed stayed there."""
    import threading

    from daskwp.jobs import driver, parts
    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    fs.pipe(f"{name}/t.txt", ("\n".join(sample_lines()) + "\n").encode())
    real = parts.read_counted_partition
    real_into, real_remove = fetch_spool._fetch_into, driver.remove_spools
    moving = []

    def slow_into(*a, **kw):
        time.sleep(0.05)
        return real_into(*a, **kw)

    def remove_spools(*a):
        moving.extend(t.name for t in threading.enumerate()
                      if t.name == "daskwp-stream-finish")
        real_remove(*a)
    monkeypatch.setattr(fetch_spool, "_fetch_into", slow_into)
    monkeypatch.setattr(driver, "remove_spools", remove_spools)
    spooled = []

    def fail_third(spec, *a, **kw):
        if spec.index == 2:
            spooled.extend(spool_files(spool_tmp))
            raise jobs.InputError("partition 2 fails")
        return real(spec, *a, **kw)
    monkeypatch.setattr(parts, "read_counted_partition", fail_third)
    with pytest.raises(jobs.InputError, match="partition 2 fails"):
        jobs.run_job(job_config(f"s3://{name}/t.txt", str(tmp_path / "out"),
                                storage_options=options))
    assert any(f.split("/")[1].startswith("000002-") for f in spooled), spooled
    assert moving == []
    assert spool_files(spool_tmp) == []
    assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []


@pytest.mark.parametrize("kind,gets", [("a.txt", 1), ("b.jsonl", 1), ("c.csv", 2),
                                       ("f.jsonl.bz2", 1)])
def test_listing_and_planning_fetch_an_objects_head_once(bucket, monkeypatch, kind, gets):
    """Listing (codec and format sniffed) and planning (the columns found, the JSON keys
    sampled) look at an object's first bytes several times: one GET of its first MB serves
    them all, where a look fetched a read-ahead block of 8 MB each before (pyarrow's CSV
    reader reads blocks ahead of the header's: then one more GET, from the first MB on)."""
    name, options, fs = bucket
    data = corpus_files(sample_lines() * 40)[kind]
    assert len(data) > storage.HEAD_BYTES
    fs.pipe(f"{name}/{kind}", data)
    fetched = spy_object_fetches(monkeypatch)
    with storage.using(options):
        specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/{kind}"),
                                       "text", 1 << 40)
    assert len(specs) == 1
    assert fetched[0] == (kind, 0, storage.HEAD_BYTES) and len(fetched) == gets, fetched
    assert all(s >= storage.HEAD_BYTES for _, s, _ in fetched[1:])
    fetched.clear()   # reading the partition: as before
    assert len(inputs.read_partition(specs[0])) == len(sample_lines()) * 40
    assert sum(e - s for _, s, e in fetched) >= len(data)


@pytest.mark.parametrize("kind", ["a.txt", "b.jsonl"])
def test_a_job_plans_without_a_get_per_cut(tmp_path, bucket, kind, spool_tmp, monkeypatch):
    """Planning a text or JSON Lines object sends no GET at its partitions' cuts (it sent one
    of 1 MB at each, one after the other on the driver): with the spool, a job in this
    process sends one GET, which brings the object's first MB (listing, planning) and goes
    on through every partition (each count reads its range, with the line starts at its
    cuts, from that GET's spool file; its write reads that); the parts equal those of the
    same job on local files."""
    name, options, fs = bucket
    data = corpus_files(sample_lines() * 12)[kind]
    assert len(data) > 2 * storage.HEAD_BYTES
    fs.pipe(f"{name}/{kind}", data)
    (tmp_path / kind).write_bytes(data)
    size = len(data) // 9
    local = jobs.run_job(job_config(str(tmp_path / kind), str(tmp_path / "local"),
                                    partition_size=size))
    fetched = spy_object_fetches(monkeypatch)
    out = f"s3://{name}/out"
    remote = jobs.run_job(job_config(f"s3://{name}/{kind}", out, storage_options=options,
                                     partition_size=size))
    n = remote["partitions"]
    assert n == local["partitions"] >= 9
    assert remote["documents"] == local["documents"] == len(sample_lines()) * 12
    gets = [f for f in fetched if f[0] == kind]
    assert gets == [(kind, 0, len(data))], gets
    assert_same_parts(tmp_path / "local", out, options)
    assert spool_files(spool_tmp) == []


@pytest.mark.parametrize("spool", ["4GB", 0])
def test_lines_longer_than_a_partition_or_the_margin(tmp_path, bucket, spool_tmp, spool,
                                                     monkeypatch):
    """A line longer than the partitions leaves the partitions whose cuts all fall inside
    it empty, and one longer than the spool's margin past the last cut is fetched on (more
    GETs); every line is read once, the parts equal those of the same job on local
    files."""
    from daskwp.jobs.inputs import fetch_spool
    monkeypatch.setattr(fetch_spool, "MARGIN", 1000)
    name, options, fs = bucket
    lines = sample_lines(300)
    lines[40] = " ".join(lines[:200])       # ~40 kB: five partitions of 8000 bytes
    lines[250] = "x" * 5000                 # past the margin, within a partition
    data = ("\n".join(lines) + "\n").encode()
    fs.pipe(f"{name}/t.txt", data)
    (tmp_path / "t.txt").write_bytes(data)
    local = jobs.run_job(job_config(str(tmp_path / "t.txt"), str(tmp_path / "local")))
    remote = jobs.run_job(job_config(f"s3://{name}/t.txt", str(tmp_path / "remote"),
                                     storage_options=options, spool_max_bytes=spool))
    assert remote["documents"] == local["documents"] == 300
    assert remote["partitions"] == local["partitions"]
    assert_same_parts(tmp_path / "local", tmp_path / "remote")
    docs = [p["documents"] for p in
            json.loads((tmp_path / "remote" / jobs.JOB_FILE).read_text())["partitions"]]
    assert docs.count(0) >= 2 and sum(docs) == 300, docs
    assert spool_files(spool_tmp) == []


# -- requests per job ---------------------------------------------------------------------

_ANSI = __import__("re").compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def requests_log(endpoint):
    """The requests moto's server receives in the test, ``(kind, bucket, key)`` each; kind:
    ``LIST`` (a GET of the bucket: a listing), ``GET``, ``HEAD``, ``PUT``, ``POST`` (a
    multipart upload's steps), ``DELETE``. From werkzeug's line per request."""
    import logging
    got = []

    class Log(logging.Handler):
        def emit(self, record):
            quoted = _ANSI.sub("", record.getMessage()).split('"')
            if len(quoted) < 3 or len(quoted[1].split()) != 3:
                return
            method, target, _ = quoted[1].split()
            path = target.split("?")[0].lstrip("/")
            bucket, _, key = path.partition("/")
            kind = "LIST" if method == "GET" and not key else method
            got.append((kind, bucket, key))

    logger = logging.getLogger("werkzeug")
    handler, level = Log(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield got
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def request_counts(log, bucket: str) -> dict:
    """``{kind: count}`` of the requests in ``log`` (:func:`requests_log`) for ``bucket``."""
    import collections
    return dict(collections.Counter(k for k, b, _ in log if b == bucket))


def test_a_job_sends_no_request_it_can_do_without(tmp_path, bucket, requests_log,
                                                   spool_tmp):
    """The requests of a bucket -> bucket job, by kind (moto's log): planning lists the
    output once and sends no HEAD / LIST per missing part; a part's write sends no DELETE
    for a rejects file the listing does not hold; the logID check reads each part's footer
    in one GET (not its row groups) after one listing. A rerun with a stale rejects file
    removes it."""
    name, options, fs = bucket
    data = corpus_files(sample_lines() * 12)["a.txt"]
    fs.pipe(f"{name}/a.txt", data)
    (tmp_path / "a.txt").write_bytes(data)
    size = len(data) // 9
    out = f"s3://{name}/out"
    local = jobs.run_job(job_config(str(tmp_path / "a.txt"), str(tmp_path / "local"),
                                    partition_size=size))
    requests_log.clear()
    remote = jobs.run_job(job_config(f"s3://{name}/a.txt", out, storage_options=options,
                                     partition_size=size))
    log = list(requests_log)
    got = request_counts(log, name)
    outputs = [(k, key) for k, _, key in log if key.startswith("out/")]
    n = remote["partitions"]
    assert n == local["partitions"] >= 9
    assert_same_parts(tmp_path / "local", out, options)
    # PUTs: the probe, _job.json twice (when the scheduler is up, before any part; at the
    # end with the offsets), each part, _summary.json
    assert got["PUT"] == n + 4, got
    assert [key for k, key in outputs if k == "PUT"].count(f"out/{jobs.JOB_FILE}") == 2
    # DELETEs: the probe only (no rejects file, no _summary.json to remove)
    assert got.get("DELETE", 0) == 1 and ("DELETE", "out/_rejects-00000.jsonl") \
        not in outputs, got
    # listings: the input's (which gives the object's size and ETag, and says it is no
    # folder: no HEAD), the output's one at planning (which says too that no object
    # has the output's name: no HEAD; and, the output being empty, no listing of its
    # names after it, nor s3fs's of its parent), one at the end (temporary objects, the
    # parts' sizes for the check, rejects files)
    assert got["LIST"] == 3, got
    # GETs: the input's one (its head, then every partition's range); each part's
    # footer once
    assert got["GET"] == 1 + n, got
    assert sorted(key for k, key in outputs if k == "GET") == \
        [f"out/{jobs.part_name(i, n)}" for i in range(n)]
    assert not [key for k, key in outputs if k == "HEAD" and "part-" in key], outputs
    # no HEAD: neither of the input (its listing has its size and ETag) nor of the output
    # (its listing says it is a folder); none per partition: its count and its write read
    # the version the listing saw (If-Match its ETag)
    assert got.get("HEAD", 0) == 0, log
    # a stale rejects file is removed by the rerun that rewrites its part
    stale = "out/_rejects-00003.jsonl"
    fs.pipe(f"{name}/{stale}", b"{}\n")
    fs.rm(f"{name}/out/{jobs.part_name(3, n)}")
    fs.invalidate_cache()
    requests_log.clear()
    again = jobs.run_job(job_config(f"s3://{name}/a.txt", out, storage_options=options,
                                    partition_size=size))
    deletes = [key for k, _, key in requests_log if k == "DELETE" and "probe" not in key]
    assert again["partitions_written"] == 1 and again["rejects_files"] == []
    assert sorted(deletes) == ["out/_rejects-00003.jsonl", "out/_summary.json"], deletes
    assert not fs.exists(f"{name}/{stale}")
    assert_same_parts(tmp_path / "local", out, options)


@pytest.mark.parametrize("spool", ["4GB", 0])
def test_an_input_object_replaced_after_planning_is_never_tokenized(
        tmp_path, bucket, spool_tmp, monkeypatch, spool):
    """The partitions read the version of the object that the listing saw (each GET with
    If-Match its ETag): an object replaced after planning (the same size, other bytes) is
    never tokenized. Without a spool the job fails with one line naming the object and
    writes no part; with it, the listing's GET had brought the whole object (the job runs
    in this process: its head stream goes on through every partition) before it was
    replaced, and the job writes the version it listed."""
    from daskwp.jobs import driver
    name, options, fs = bucket
    data = corpus_files(sample_lines(300))["a.txt"]
    fs.pipe(f"{name}/a.txt", data)
    real = driver.plan_partitions

    def plan_then_replace(*a, **kw):
        specs = real(*a, **kw)
        heads = storage._HEAD_SOURCE.get()
        if heads is not None and heads.stream is not None:   # (its GET's bytes all in)
            st = heads.stream
            with st.cond:
                while st.written < len(data) and not st.done:
                    st.cond.wait()
        fs.pipe(f"{name}/a.txt", data.upper())
        return specs
    monkeypatch.setattr(driver, "plan_partitions", plan_then_replace)
    out = f"s3://{name}/out"
    cfg = job_config(f"s3://{name}/a.txt", out, storage_options=options,
                     spool_max_bytes=spool)
    if spool:
        jobs.run_job(cfg)
        (tmp_path / "a.txt").write_bytes(data)
        jobs.run_job(job_config(str(tmp_path / "a.txt"), str(tmp_path / "local")))
        assert_same_parts(tmp_path / "local", out, options)
        assert spool_files(spool_tmp) == []
        return
    with pytest.raises(jobs.JobError) as e:
        jobs.run_job(cfg)
    msg = str(e.value)
    assert f"{name}/a.txt" in msg and "\n" not in msg, msg
    fs.invalidate_cache()
    assert not [p for p in fs.find(f"{name}/out") if "part-" in p]
    assert spool_files(spool_tmp) == []


def test_the_logid_check_reads_footers_and_refuses_wrong_parts(bucket, requests_log,
                                                               monkeypatch):
    """The job's logID check (parts.verify_parquet_output) reads each part's footer (one
    ranged GET after one listing, the parts' GETs sent together; a footer longer than the
    read: one more) and refuses a
    part with other logIDs (one part copied over another: its metadata; logIDs shifted
    under the same metadata: its logID statistics) and a missing part; what a footer
    cannot show (the order within a row group) the writer refuses before publishing."""
    from daskwp.jobs import parts
    name, options, fs = bucket
    fs.pipe(f"{name}/a.txt", corpus_files(sample_lines(600))["a.txt"])
    out = f"s3://{name}/out"
    jobs.run_job(job_config(f"s3://{name}/a.txt", out, storage_options=options))
    record = json.loads(fs.cat_file(f"{name}/out/{jobs.JOB_FILE}"))
    plan = [{"index": i, "documents": p["documents"], "logid_offset": p["logid_offset"]}
            for i, p in enumerate(record["partitions"])]
    n = len(plan)
    assert n >= 3
    key = [f"{name}/out/{jobs.part_name(i, n)}" for i in range(n)]
    good = fs.cat_file(key[1])
    import asyncio

    import s3fs
    flight = [0, 0]     # GETs of footers in flight now, at most
    real_cat = s3fs.S3FileSystem._cat_file

    async def cat(self, path, *a, **kw):
        flight[0] += 1
        flight[1] = max(flight)
        await asyncio.sleep(0.05)      # (the next ones start meanwhile if sent together)
        try:
            return await real_cat(self, path, *a, **kw)
        finally:
            flight[0] -= 1
    with storage.using(options):
        requests_log.clear()
        monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", cat)
        parts.verify_parquet_output(out, plan)
        monkeypatch.undo()
        assert request_counts(requests_log, name) == {"LIST": 1, "GET": n}
        assert flight[1] == n, flight   # the parts' ends: their GETs sent together
        monkeypatch.setattr(parts, "FOOTER_BATCH", 2)
        requests_log.clear()
        parts.verify_parquet_output(out, plan)
        assert request_counts(requests_log, name) == {"LIST": 1, "GET": n}
        monkeypatch.undo()
        monkeypatch.setattr(parts, "FOOTER_READ", 64)
        requests_log.clear()
        parts.verify_parquet_output(out, plan)
        assert request_counts(requests_log, name) == {"LIST": 1, "GET": 2 * n}
        monkeypatch.undo()

        fs.pipe(key[1], fs.cat_file(key[2]))
        with pytest.raises(jobs.JobError, match=r"part-00001.*records partition 2"):
            parts.verify_parquet_output(out, plan)
        table = pq.read_table(pa.BufferReader(good))
        shifted = table.set_column(table.schema.get_field_index("logID"), "logID",
                                   pa.compute.add(table.column("logID"), 1))
        shifted = shifted.replace_schema_metadata(pq.read_metadata(pa.BufferReader(good))
                                                  .metadata)
        sink = pa.BufferOutputStream()
        pq.write_table(shifted, sink)
        fs.pipe(key[1], sink.getvalue().to_pybytes())
        with pytest.raises(jobs.JobError, match=r"part-00001.*row group 0 holds logIDs"):
            parts.verify_parquet_output(out, plan)
        fs.pipe(key[1], good)
        parts.verify_parquet_output(out, plan)
        fs.rm(key[2])
        with pytest.raises(jobs.JobError, match=r"part-00002.*missing"):
            parts.verify_parquet_output(out, plan)

    check = parts.LogidCheck(10)
    check(pa.table({"logID": [10, 11, 11]}))
    check(pa.table({"logID": [12]}))
    check.finish(3, "/nonexistent")
    with pytest.raises(jobs.JobError, match="end at 12"):
        check.finish(4, "/nonexistent")
    for ids in ([11, 12], [10, 12], [10, 11, 10]):
        with pytest.raises(jobs.JobError, match="not in order"):
            parts.LogidCheck(10)(pa.table({"logID": ids}))
    check = parts.LogidCheck(10)
    check(pa.table({"logID": [10, 11]}))
    with pytest.raises(jobs.JobError, match="not in order"):
        check(pa.table({"logID": [13]}))    # (a gap between two pieces)


def test_the_spool_fetch_streams_each_get_to_disk(bucket, spool_tmp, monkeypatch):
    """The count's fetch of a partition into the spool writes each GET's body to the spool
    file a piece at a time (storage.copy_range): it never holds the partition's range in
    memory (a buffer that big is fresh memory: a page fault per 4 kB), sends one GET per
    range as before, and the spool holds the object's bytes. A response that breaks off is
    read on with the file's own read (one more GET, from where it broke off): the same
    bytes."""
    import dataclasses

    from aiobotocore import response

    from daskwp.jobs.inputs import fetch_spool
    data, specs = _big_text(bucket, 12_000_000, 6_000_000)
    spec = dataclasses.replace(specs[0], spool=("job0-run0", 1 << 32))
    ranges = fetch_spool.regions(spec)
    (start, end), = ranges
    assert end - start > 4_000_000

    def fetch():
        path, held = fetch_spool._fetch(spec, ranges)
        (a, b), = held
        assert Path(path).read_bytes() == data[a:b] and a == start and b >= exact(data, spec)[1]
        os.unlink(path)

    real, reads = response.AioStreamingBody.read, []

    async def spy(self, amt=None):
        got = await real(self, amt)
        reads.append((amt, len(got)))
        return got
    monkeypatch.setattr(response.AioStreamingBody, "read", spy)
    fetched = spy_object_fetches(monkeypatch)
    fetch()
    assert fetched == [("big.txt", start, end)], fetched
    # the body read a piece at a time (s3fs's own read takes it whole: read(None))
    assert len(reads) > 4 and all(a is not None and n <= a <= storage.STREAM_PIECE
                                  for a, n in reads), reads
    assert sum(n for _, n in reads) == min(end, len(data)) - start

    reads.clear()

    async def breaks_off(self, amt=None):
        if len(reads) == 2:
            reads.append((amt, -1))
            raise ConnectionResetError("the test's broken response")
        got = await real(self, amt)
        reads.append((amt, len(got)))
        return got
    monkeypatch.setattr(response.AioStreamingBody, "read", breaks_off)
    fetched.clear()
    fetch()
    resumed = start + reads[0][1] + reads[1][1]
    assert fetched == [("big.txt", start, end), ("big.txt", resumed, end)], fetched


def test_a_part_is_uploaded_from_its_file_as_it_is_sent(tmp_path, bucket, monkeypatch):
    """Folder.publish uploads a staged file smaller than s3fs's multipart size in one PUT
    whose body is the open file, read as it is sent (s3fs's put_file reads the file whole
    into memory first: fresh memory of the part's size); a file of the multipart size or
    more goes through put_file. Either way: one object with the file's bytes, complete
    under its name, and the local file removed."""
    import s3fs
    name, options, fs = bucket
    sent = []
    real = s3fs.core._error_wrapper

    async def spy(func, *, args=(), kwargs=None, retries):
        if "Body" in (kwargs or {}):
            sent.append((kwargs["Key"], type(kwargs["Body"]).__name__))
        return await real(func, args=args, kwargs=kwargs, retries=retries)
    monkeypatch.setattr(s3fs.core, "_error_wrapper", spy)
    folder = storage.Folder(f"s3://{name}/out", options)
    data = os.urandom(300_000)
    for limit, body in ((storage.S3_MULTIPART_BYTES, "BufferedReader"), (1000, "bytes")):
        monkeypatch.setattr(storage, "S3_MULTIPART_BYTES", limit)
        staged = tmp_path / "part.parquet"
        staged.write_bytes(data)
        assert folder.listdir() == [] or "part.parquet" in folder.listdir()
        sent.clear()
        folder.publish(str(staged), "part.parquet")
        assert sent == [("out/part.parquet", body)], sent
        assert not staged.exists()
        assert folder.listdir() == ["part.parquet"]     # (no stale listing)
        assert fs.cat_file(f"{name}/out/part.parquet") == data
        fs.rm(f"{name}/out/part.parquet")


@pytest.fixture
def staging_tmp(tmp_path, monkeypatch):
    """The staging root (and handover folders) in a folder of the test's own."""
    root = tmp_path / "staging"
    monkeypatch.setattr(storage, "staging_root", lambda: str(root))
    return root


def spy_uploads(monkeypatch) -> list:
    """``(name, thread)`` of each upload of Folder (publish's, or the driver's Uploads')."""
    import threading
    sent = []
    upload = storage.Folder._upload

    def spy(self, local_file, target):
        sent.append((target, threading.current_thread().name))
        return upload(self, local_file, target)
    monkeypatch.setattr(storage.Folder, "_upload", spy)
    return sent


class _UploadGate:
    """Whether the driver's Uploads thread may send: :meth:`open` lets its passes run,
    :meth:`close` stops them once a pass under way has ended (a pass begun while the gate
    was open could otherwise list a file written after it closed)."""

    def __init__(self):
        import threading
        self._open = threading.Event()
        self.passing = threading.Lock()    # held through a pass of the driver's thread

    def set(self) -> None:
        self._open.set()

    def clear(self) -> None:
        with self.passing:
            self._open.clear()


def gate_uploads(monkeypatch) -> _UploadGate:
    """The driver's Uploads thread sends nothing until the returned gate is set."""
    gate = _UploadGate()

    def upload_waiting(self, real=storage.Uploads._upload_waiting):
        with gate.passing:
            if gate._open.is_set():
                real(self)
    monkeypatch.setattr(storage.Uploads, "_upload_waiting", upload_waiting)
    return gate


def test_files_handed_over_are_uploaded_by_the_driver_in_order(tmp_path, bucket,
                                                               staging_tmp, monkeypatch):
    """Folder.publish in a process told to hand its uploads over (hand_over_uploads) moves
    the file into the handover folder, and nothing is in the store until the Uploads of
    the driver sends it; Uploads sends the files in the order they were published (a
    part's record after its files), from its own thread, and removes its folder."""
    import threading
    name, options, fs = bucket
    folder = storage.Folder(f"s3://{name}/out/", options)
    sent = spy_uploads(monkeypatch)
    gate = gate_uploads(monkeypatch)
    uploads = storage.Uploads(storage.Folder(f"s3://{name}/out", options))
    try:
        storage.hand_over_uploads(f"s3://{name}/out", uploads.path)
        for i, n in enumerate(["b.parquet", "a.parquet", "a.record"]):
            staged = tmp_path / n
            staged.write_bytes(n.encode() * (i + 1))
            folder.publish(str(staged), n)
            assert not staged.exists()
        assert objects(fs, f"{name}/out") == {} and sent == []
        assert len(os.listdir(uploads.path)) == 3
        gate.set()
        uploads.poke()
        uploads.finish()
    finally:
        uploads.close()
    assert sent == [(n, "daskwp-uploads") for n in ["b.parquet", "a.parquet", "a.record"]]
    assert fs.cat_file(f"{name}/out/a.record") == b"a.record" * 3
    assert sorted(objects(fs, f"{name}/out")) == ["a.parquet", "a.record", "b.parquet"]
    assert not os.path.exists(uploads.path)
    # the handover is over: this process uploads again
    staged = tmp_path / "c.parquet"
    staged.write_bytes(b"c")
    folder.publish(str(staged), "c.parquet")
    assert sent[-1] == ("c.parquet", threading.current_thread().name)


def test_past_the_files_waiting_a_process_uploads_itself_after_its_own(
        tmp_path, bucket, staging_tmp, monkeypatch):
    """With HANDOVER_MAX_WAITING_BYTES waiting in the handover folder, a process does not
    hand its next file over: it waits until its own files handed over earlier are sent
    (their order), then uploads the file itself; with none of its own waiting it uploads
    at once. The files waiting stay few, and the processes upload in parallel where the
    driver's one thread falls behind."""
    import threading
    import time
    name, options, fs = bucket
    monkeypatch.setattr(storage, "HANDOVER_MAX_WAITING_BYTES", 1)
    sent = spy_uploads(monkeypatch)
    gate = gate_uploads(monkeypatch)
    folder = storage.Folder(f"s3://{name}/out", options)
    uploads = storage.Uploads(folder)

    def publish(n):
        staged = tmp_path / n
        staged.write_bytes(n.encode())
        folder.publish(str(staged), n)
    try:
        storage.hand_over_uploads(folder.location, uploads.path)
        publish("a.parquet")      # handed over: nothing waits
        assert sent == [] and len(os.listdir(uploads.path)) == 1
        later = threading.Thread(target=publish, args=("b.parquet",), name="b-publisher")
        later.start()
        time.sleep(0.5)
        assert later.is_alive() and sent == []    # waits for its own a.parquet
        gate.set()
        later.join(20)
        assert not later.is_alive()
        assert sent == [("a.parquet", "daskwp-uploads"), ("b.parquet", "b-publisher")]
        # another process's file waiting: this one uploads at once
        gate.clear()              # (a pass begun while the gate was open has ended)
        other = os.path.join(uploads.path, f"{time.monotonic_ns():020d}-1-x.parquet")
        with open(other, "wb") as fh:
            fh.write(b"x")
        publish("c.parquet")
        assert sent[-1] == ("c.parquet", threading.current_thread().name)
        gate.set()
        uploads.poke()
        uploads.finish()
    finally:
        uploads.close()
    assert sorted(objects(fs, f"{name}/out")) == ["a.parquet", "b.parquet", "c.parquet",
                                                   "x.parquet"]
    assert fs.cat_file(f"{name}/out/b.parquet") == b"b.parquet"


def test_a_failed_handed_over_upload_fails_the_driver_in_one_line(tmp_path, bucket,
                                                                 staging_tmp):
    """An upload of the driver's Uploads that fails (here: no such bucket) is raised by
    check and finish as a one-line StorageError naming the object; nothing is left."""
    name, options, fs = bucket
    target = f"s3://{name}-missing-{uuid.uuid4().hex[:6]}/out"
    uploads = storage.Uploads(storage.Folder(target, options))
    try:
        storage.hand_over_uploads(target, uploads.path)
        staged = tmp_path / "part.parquet"
        staged.write_bytes(b"x")
        storage.Folder(target, options).publish(str(staged), "part.parquet")
        with pytest.raises(storage.StorageError) as e:
            uploads.finish()
    finally:
        uploads.close()
    assert "\n" not in str(e.value) and "part.parquet" in str(e.value)
    assert "bucket does not exist" in str(e.value)
    with pytest.raises(storage.StorageError):
        uploads.check()
    assert not os.path.exists(uploads.path)
    assert storage._HANDOVER == {}


def test_uploads_keep_the_ends_of_the_files_the_store_holds_as_sent(tmp_path, bucket,
                                                                    staging_tmp):
    """Uploads keeps the end of each file it sends that ``keep_end`` asks for, with the
    size and ETag of the store's answer; ``stored_ends`` gives those the folder's listing
    shows with that size and ETag only: an object put again since (other bytes) is left
    out, and so is one past KEPT_ENDS_MAX_BYTES. verify_parquet_output reads the ends
    given for its parts instead of the store's: an end of other bytes fails the check."""
    from daskwp.jobs import parts
    name, options, fs = bucket
    folder = storage.Folder(f"s3://{name}/out", options)
    table = pa.table({"logID": list(range(10)), "x": list(range(10))})
    files = {}
    for i, n in enumerate(["part-0.parquet", "part-1.parquet", "a.record", "part-2.parquet"]):
        sink = pa.BufferOutputStream()
        pq.write_table(table.slice(0, 3 + i), sink)
        files[n] = sink.getvalue().to_pybytes()
    uploads = storage.Uploads(folder, keep_end=lambda n: 1000 if n.endswith(".parquet") else 0)
    uploads.KEPT_ENDS_MAX_BYTES = 2000     # two ends
    try:
        storage.hand_over_uploads(folder.location, uploads.path)
        for n, data in files.items():
            (tmp_path / n).write_bytes(data)
            folder.publish(str(tmp_path / n), n)
        uploads.finish()
    finally:
        uploads.close()
    ends = uploads.stored_ends(folder.entries())
    assert ends == {n: files[n][-1000:] for n in ("part-0.parquet", "part-1.parquet")}
    assert folder.entries()["part-0.parquet"][0] == len(files["part-0.parquet"])
    # part-1 put again by another writer: not what was sent
    fs.pipe(f"{name}/out/part-1.parquet", files["part-1.parquet"][:-1] + b"!")
    assert set(uploads.stored_ends(folder.entries())) == {"part-0.parquet"}
    # the check takes the end given for a part instead of reading the store's
    fs.pipe(f"{name}/in/a.txt", ("\n".join(sample_lines(300)) + "\n").encode())
    out = f"s3://{name}/job"
    summary = jobs.run_job(job_config(f"s3://{name}/in/a.txt", out, partition_size=4000,
                                      storage_options=options))
    record = json.loads(fs.cat_file(f"{name}/job/{jobs.JOB_FILE}"))
    plan = [{"index": i, "documents": p["documents"], "logid_offset": p["logid_offset"]}
            for i, p in enumerate(record["partitions"])]
    job = storage.Folder(out, options)
    sizes = job.sizes()
    first = jobs.part_name(0, summary["partitions"])
    end = job.read_range(first, max(0, sizes[first] - parts.FOOTER_READ), sizes[first])
    with storage.using(options):
        parts.verify_parquet_output(out, plan, sizes, {first: end})
        with pytest.raises(jobs.JobError, match="cannot be read back"):
            parts.verify_parquet_output(out, plan, sizes, {first: b"x" * len(end)})
        # (an end of another length is not the part's: read from the store)
        parts.verify_parquet_output(out, plan, sizes, {first: b"x"})


@pytest.mark.parametrize("n_workers", [None, 1])
def test_a_jobs_parts_are_uploaded_by_its_driver(tmp_path, bucket, staging_tmp,
                                                  monkeypatch, n_workers):
    """A job on threads of its own process, or on its own local cluster, writing to a
    bucket: its write tasks hand their parts over and the driver's Uploads thread sends
    them (a task goes on with its next partition meanwhile); the parts equal those of the
    same job on local files, and no handover folder is left. The job's check reads the
    footers the driver kept of the parts it sent: no GET of a part."""
    from daskwp.jobs import driver
    name, options, fs = bucket
    data = ("\n".join(sample_lines(300)) + "\n").encode()
    fs.pipe(f"{name}/in/a.txt", data)
    (tmp_path / "a.txt").write_bytes(data)
    sent = spy_uploads(monkeypatch)
    fetched = spy_object_fetches(monkeypatch)
    made: list = []
    monkeypatch.setattr(driver, "connect_cluster", _own_cluster(made))
    kw = {"n_workers": n_workers, "scheduler_address": None} if n_workers else \
        {"scheduler_address": "threads"}
    summary = jobs.run_job(job_config(f"s3://{name}/in/a.txt", f"s3://{name}/out",
                                      partition_size=4000, storage_options=options, **kw))
    n = summary["partitions"]
    assert n >= 3
    assert sorted(t for t, _ in sent if t.startswith("part-")) == \
        [jobs.part_name(i, n) for i in range(n)]
    assert {th for t, th in sent if t.startswith("part-")} == {"daskwp-uploads"}
    assert [f for f in fetched if f[0].startswith("part-")] == []
    jobs.run_job(job_config(str(tmp_path / "a.txt"), str(tmp_path / "local"),
                            scheduler_address="synchronous", partition_size=4000))
    assert_same_parts(tmp_path / "local", f"s3://{name}/out", options)
    assert not staging_tmp.exists() or os.listdir(staging_tmp) == []
    assert storage._HANDOVER == {}


@pytest.mark.parametrize("n_workers", [None, 1])
def test_a_failed_upload_of_the_driver_fails_the_job_and_a_rerun_completes_it(
        tmp_path, bucket, staging_tmp, monkeypatch, n_workers):
    """A part whose upload by the driver fails (access denied, here) fails the job with
    one line naming the part: that part is not in the store, no handover folder is
    left, and a rerun writes it (and only the parts not in the store)."""
    from daskwp.jobs import driver
    name, options, fs = bucket
    fs.pipe(f"{name}/in/a.txt", ("\n".join(sample_lines(300)) + "\n").encode())
    upload = storage.Folder._upload

    def failing(self, local_file, target):
        if target.startswith("part-00001"):
            raise PermissionError("AccessDenied: no")
        return upload(self, local_file, target)
    monkeypatch.setattr(storage.Folder, "_upload", failing)
    made: list = []
    monkeypatch.setattr(driver, "connect_cluster", _own_cluster(made))
    kw = {"n_workers": n_workers, "scheduler_address": None} if n_workers else \
        {"scheduler_address": "threads"}
    cfg = job_config(f"s3://{name}/in/a.txt", f"s3://{name}/out", partition_size=4000,
                     storage_options=options, **kw)
    with pytest.raises(jobs.JobError) as e:
        jobs.run_job(cfg)
    assert "\n" not in str(e.value) and "part-00001" in str(e.value)
    assert "access denied" in str(e.value)
    assert not any(n.startswith("part-00001") for n in objects(fs, f"{name}/out"))
    assert not staging_tmp.exists() or os.listdir(staging_tmp) == []
    assert storage._HANDOVER == {}
    monkeypatch.setattr(storage.Folder, "_upload", upload)
    before = objects(fs, f"{name}/out")
    summary = jobs.run_job(cfg)
    after = objects(fs, f"{name}/out")
    n = summary["partitions"]
    assert all(after[jobs.part_name(i, n)] == before[jobs.part_name(i, n)]
               for i in range(n) if jobs.part_name(i, n) in before)
    assert sorted(k for k in after if k.startswith("part-")) == \
        [jobs.part_name(i, n) for i in range(n)]


def test_a_retried_streamed_put_sends_the_whole_file(tmp_path, bucket, monkeypatch):
    """s3fs repeats a PUT that failed after botocore's own retries with the same open file,
    now at its end: each try must send the file from its start (else an empty object is
    stored as the part, and the staged file deleted)."""
    import s3fs
    name, options, fs = bucket
    real = s3fs.core._error_wrapper
    tries = []

    async def flaky(func, *, args=(), kwargs=None, retries):
        async def once(*a, **kw):
            tries.append(kw["Body"].tell() if "Body" in kw else None)
            if len(tries) == 1 and "Body" in kw:
                kw["Body"].read()       # the body sent, then the connection broke
                raise s3fs.core.S3_RETRYABLE_ERRORS[0]("connection reset")
            return await func(*a, **kw)
        return await real(once, args=args, kwargs=kwargs, retries=retries)
    monkeypatch.setattr(s3fs.core, "_error_wrapper", flaky)
    folder = storage.Folder(f"s3://{name}/out", options)
    data = os.urandom(200_000)
    staged = tmp_path / "part.parquet"
    staged.write_bytes(data)
    folder.publish(str(staged), "part.parquet")
    assert len(tries) == 2, tries
    assert fs.cat_file(f"{name}/out/part.parquet") == data


def test_a_streamed_get_checks_the_etag_where_s3fs_does(bucket, monkeypatch):
    """Where s3fs checks an object's ETag itself (``local_expiry_check``: a store without
    If-Match), copy_range compares it too: an object replaced since it was opened copies
    nothing (the caller's f.read then raises as s3fs does), never the new bytes."""
    import io
    name, options, fs = bucket
    url = f"s3://{name}/changing.txt"
    fs.pipe(f"{name}/changing.txt", b"a" * 100_000)
    with storage.using(options):
        s3, _ = storage.filesystem(url, options)
        monkeypatch.setattr(s3, "local_expiry_check", True, raising=False)
        with storage.open_input(url) as f:
            assert "IfMatch" not in (getattr(f, "read_kw", None) or {})
            fs.pipe(f"{name}/changing.txt", b"b" * 100_000)
            out = io.BytesIO()
            assert storage.copy_range(f, 0, 50_000, out) == 0
            assert out.getvalue() == b""


def _own_cluster(made: list, processes: bool = False, **kw):
    """A connect_cluster of the job's own: a cluster of one worker with two threads (in
    this process unless ``processes``); its clients kept in ``made``."""
    def connect(cfg, device):
        from distributed import Client
        client = Client(n_workers=1, threads_per_worker=2, processes=processes,
                        dashboard_address=":0", **kw)
        made.append(client)
        return client
    return connect


#: A worker preload that records, in the file named by $DASKWP_TEST_FS_LOG, the thread
#: that builds each S3 filesystem and each S3 client in the worker's process.
_FS_LOG_PRELOAD = """
import os, threading
import s3fs

def _log(what):
    with open(os.environ["DASKWP_TEST_FS_LOG"], "a") as f:
        f.write(f"{what} {threading.current_thread().name}\\n")

def _patch(cls):
    init, session = cls.__init__, cls.set_session

    def __init__(self, *a, **kw):
        _log("filesystem")
        init(self, *a, **kw)

    async def set_session(self, *a, **kw):
        if getattr(self, "_s3", None) is None:
            _log("client")
        return await session(self, *a, **kw)

    cls.__init__, cls.set_session = __init__, set_session
    cls._daskwp_test_logged = True

if not getattr(s3fs.S3FileSystem, "_daskwp_test_logged", False):   # (run once)
    _patch(s3fs.S3FileSystem)
"""


@pytest.mark.parametrize("spool", [0, None])
def test_the_cluster_starts_while_a_url_input_is_planned_and_warms_the_workers(
        tmp_path, bucket, monkeypatch, spool):
    """A job on a local cluster of its own (n_workers set) reading and writing a bucket:
    the cluster starts while the driver plans the input (the planner waits for it).
    Without a spool the worker process builds its S3 filesystem and client once, in its
    warm-up thread, before its first task: no task thread builds one. With the spool the
    driver fetches every partition (its head stream) and uploads every part (the parts
    handed over): the worker builds none."""
    import threading

    from daskwp.jobs import driver
    name, options, fs = bucket
    fs.pipe(f"{name}/in/a.txt", ("\n".join(sample_lines(300)) + "\n").encode())
    preload = tmp_path / "fs_log_preload.py"
    preload.write_text(_FS_LOG_PRELOAD)
    fs_log = tmp_path / "fs.log"
    monkeypatch.setenv("DASKWP_TEST_FS_LOG", str(fs_log))
    made: list = []
    connect = _own_cluster(made, processes=True, preload=[str(preload)])
    connecting = threading.Event()

    def connect_cluster(cfg, device):
        connecting.set()
        return connect(cfg, device)

    seen = {}
    plan = driver.plan_partitions

    def slow_plan(*a, **kw):
        seen["cluster started while planning"] = connecting.wait(20)
        return plan(*a, **kw)

    monkeypatch.setattr(driver, "connect_cluster", connect_cluster)
    monkeypatch.setattr(driver, "plan_partitions", slow_plan)
    # the listing (its s3fs import) waits for the cluster thread's import of distributed
    order = []
    wait, listing = driver.ClusterStart.wait_imported, driver.list_input_files
    monkeypatch.setattr(driver.ClusterStart, "wait_imported", lambda self, *a: (
        wait(self, *a), order.append(("waited", self.imported.is_set())))[0])
    monkeypatch.setattr(driver, "list_input_files", lambda *a, **kw: (
        order.append("listed"), listing(*a, **kw))[1])
    extra = {} if spool is None else {"spool_max_bytes": spool}
    summary = jobs.run_job(job_config(f"s3://{name}/in", f"s3://{name}/out", n_workers=1,
                                      scheduler_address=None, partition_size=4000,
                                      storage_options=options, **extra))
    assert seen == {"cluster started while planning": True}
    assert order == [("waited", True), "listed"]
    assert summary["documents"] == 300 and summary["partitions"] >= 3
    if spool == 0:
        # (a client is built on fsspec's event loop thread, for the thread that asks)
        assert fs_log.read_text().splitlines() == ["filesystem daskwp-storage-warm",
                                                   "client fsspecIO"]
    else:
        assert not fs_log.exists()
        assert sorted(n for n in objects(fs, f"{name}/out") if n.startswith("part-")) == \
            [jobs.part_name(i, summary["partitions"]) for i in range(summary["partitions"])]
    assert [c.status for c in made] == ["closed"]


@pytest.mark.parametrize("missing", ["input", "output"])
def test_a_missing_bucket_fails_fast_with_a_cluster_started_early(tmp_path, bucket,
                                                                   monkeypatch, missing):
    """The cluster started while the input is listed is closed when the listing (a missing
    input bucket) or the output's check (a missing output bucket) fails; the error is the
    same one line as without a cluster, and nothing is written."""
    from daskwp.jobs import driver
    name, options, fs = bucket
    fs.pipe(f"{name}/in/a.txt", b"hello world\n")
    inp, out = f"s3://{name}/in", f"s3://{name}/out"
    if missing == "input":
        inp = f"s3://{name}-missing/in"
    else:
        out = f"s3://{name}-missing/out"
    errors = []
    for n_workers in (None, 1):   # in this process (synchronous), then a cluster of its own
        made: list = []
        monkeypatch.setattr(driver, "connect_cluster", _own_cluster(made))
        before = objects(fs, name)
        with pytest.raises(jobs.JobError) as e:
            jobs.run_job(job_config(inp, out, storage_options=options, **(
                {"n_workers": 1, "scheduler_address": None} if n_workers else {})))
        errors.append(str(e.value))
        assert len(made) == (1 if n_workers else 0) and all(c.status == "closed"
                                                            for c in made)
        fs.invalidate_cache()
        assert objects(fs, name) == before and not fs.exists(f"{name}-missing")
    assert errors[0] == errors[1] and "\n" not in errors[0], errors
    assert ("input not found" if missing == "input" else "the bucket does not exist") \
        in errors[0], errors


@pytest.mark.slow   # a CLI process with a cluster of its own
def test_no_credentials_fail_fast_while_the_cluster_starts(tmp_path, bucket, endpoint):
    """With --n-workers the cluster starts while the input is listed: missing credentials
    are still one line within 30 s (the cluster's start included), nothing written."""
    name, options, fs = bucket
    fs.pipe(f"{name}/in.txt", b"hello world\n")
    before = objects(fs, name)
    p, seconds = run_cli(
        ["tokenize", f"s3://{name}/in.txt", f"s3://{name}/out", "--storage-option",
         f"endpoint_url={endpoint}"], {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None},
        tmp_path, scheduler=("--n-workers", "1", "--threads-per-worker", "1"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("daskwp: error: ") and "no credentials" in lines[0], lines
    assert seconds < 30, seconds
    fs.invalidate_cache()
    assert objects(fs, name) == before


# -- the count pass's network waits --------------------------------------------------------

_WAITS: dict = {}


def _wait_on_network(name: str) -> str:
    """A task that waits on the network (here: for an event another task sets)."""
    with storage.waiting_on_network():
        _WAITS.setdefault("log", []).append(f"in {name}")
        assert _WAITS[name].wait(20), f"{name}: the other task never ran"
        _WAITS["log"].append(f"out {name}")
    return name


def _set_event(name: str) -> str:
    _WAITS[name].set()
    return "set"


def test_a_task_waiting_on_the_network_frees_its_workers_thread():
    """On a worker with daskwp's plugin and one thread, a task within
    ``waiting_on_network`` leaves the thread pool: the task it waits for runs meanwhile
    (it would wait for ever otherwise). One such wait per thread goes on at a time (the
    second task's block starts when the first's ends); outside a worker the block changes
    nothing."""
    import threading

    from distributed import Client

    from daskwp.distributed.plugin import (NETWORK_WAITS_PER_THREAD, NetworkWait,
                                           register_worker_plugin)
    _WAITS.clear()
    _WAITS.update(a=threading.Event(), b=threading.Event())
    with Client(n_workers=1, threads_per_worker=1, processes=False,
                dashboard_address=":0") as client:
        register_worker_plugin(client)
        waiting = [client.submit(_wait_on_network, k, key=f"wait-{k}") for k in "ab"]
        # (submitted after both: a worker's one thread runs them only if both left it)
        sets = [client.submit(_set_event, k, key=f"set-{k}", priority=-1) for k in "ab"]
        assert client.gather(waiting + sets, errors="raise") == ["a", "b", "set", "set"]
    log = _WAITS["log"]
    assert sorted(log) == ["in a", "in b", "out a", "out b"]
    assert log[1] == log[0].replace("in", "out"), log     # one after the other
    assert NETWORK_WAITS_PER_THREAD >= 2
    hook = NetworkWait(1)
    assert hook() is None and hook.waiting == 0    # not a task of a worker: stays
    with storage.waiting_on_network():             # (no hook in this process now)
        pass


_COUNTED: list = []


def _recording_count(spec, on_bad_row="error"):
    from daskwp.jobs.parts import count_job_partition
    _COUNTED.append(spec.index)
    return count_job_partition(spec, on_bad_row)


def test_a_cluster_counts_the_partitions_in_order(tmp_path, bucket, monkeypatch):
    """On a cluster the pass's counts run in partition order (each write waits for the
    counts before its partition; a count that fetches from a bucket leaves its thread to
    the writes while it waits), and the job's parts equal the in-process run's."""
    from distributed import Client

    from daskwp.jobs import driver
    name, options, fs = bucket
    fs.pipe(f"{name}/in/a.txt", ("\n".join(sample_lines(600)) + "\n").encode())
    made: list = []

    def connect(cfg, device):
        client = Client(n_workers=1, threads_per_worker=1, processes=False,
                        dashboard_address=":0")
        made.append(client)
        return client

    monkeypatch.setattr(driver, "connect_cluster", connect)
    monkeypatch.setattr(driver, "count_job_partition", _recording_count)
    _COUNTED.clear()
    summary = jobs.run_job(job_config(f"s3://{name}/in", f"s3://{name}/out", n_workers=1,
                                      scheduler_address=None, partition_size=4000,
                                      storage_options=options))
    n = summary["partitions"]
    assert n >= 5 and _COUNTED == list(range(n)), _COUNTED
    local = jobs.run_job(job_config(f"s3://{name}/in", str(tmp_path / "local"),
                                    partition_size=4000, storage_options=options))
    assert local["documents"] == summary["documents"] == 600
    assert_same_parts(tmp_path / "local", f"s3://{name}/out", options)
    assert [c.status for c in made] == ["closed"]


def test_count_starts_its_cluster_while_a_url_input_is_planned(tmp_path, bucket, monkeypatch):
    """``daskwp count`` on a local cluster of its own (n_workers set) of a bucket's input
    starts the cluster while it lists and plans, as a job does; a failed listing closes
    it."""
    import threading

    from daskwp.jobs import count, driver
    name, options, fs = bucket
    fs.pipe(f"{name}/c/a.txt", ("\n".join(sample_lines(300)) + "\n").encode())
    made: list = []
    connect = _own_cluster(made)
    connecting = threading.Event()

    def connect_cluster(cfg, device):
        connecting.set()
        return connect(cfg, device)

    seen = {}
    plan = count.plan_partitions

    def slow_plan(*a, **kw):
        seen["cluster started while planning"] = connecting.wait(20)
        return plan(*a, **kw)

    monkeypatch.setattr(driver, "connect_cluster", connect_cluster)
    monkeypatch.setattr(count, "plan_partitions", slow_plan)
    cfg = dict(n_workers=1, scheduler_address=None, partition_size=4000,
               storage_options=options)
    report = count.run_count(job_config(f"s3://{name}/c", "unused", **cfg))
    assert seen == {"cluster started while planning": True}
    assert report["total"]["documents"] == 300 and report["run"]["mode"] == "local_cluster"
    with pytest.raises(jobs.JobError):
        count.run_count(job_config(f"s3://{name}-missing/c", "unused", **cfg))
    assert len(made) == 2 and [c.status for c in made] == ["closed", "closed"]


def test_a_prefetched_first_partition_is_counted_and_written_without_a_get(bucket,
                                                                         spool_tmp,
                                                                         monkeypatch):
    """Prefetch fetches partition 0's range (one GET, in its thread) into a folder of its
    own; adopted by the run, its count and its write read that file (no GET) and nothing
    is left; a run where it is not adopted (an object replaced since: the prefetch
    fails) fetches as before and leaves nothing either; no prefetch for a local file."""
    import dataclasses

    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    data, specs = _text_object_planned(bucket)
    assert len(specs) >= 3
    fetched = spy_object_fetches(monkeypatch)
    token = fetch_spool.run_token("ab" * 8, "r1")
    run = [dataclasses.replace(s, spool=(token, 1 << 30)) for s in specs]
    with storage.using(options):
        pre = fetch_spool.start_prefetch(specs, 1 << 30)
    assert pre is not None and pre.adopt(run)
    assert fetched == [("t.txt", 0, specs[0].byte_end + fetch_spool.MARGIN)]
    assert spool_files(spool_tmp) == [f"{token}/" + spool_files(spool_tmp)[0].split("/")[1]]
    start, end = exact(data, specs[0])
    want = [x.encode() for x in data[start:end].decode().splitlines()]
    assert inputs.count_partition(run[0]) == len(want)
    assert inputs.read_partition(run[0]).to_pylist() == want
    assert len(fetched) == 1 and spool_files(spool_tmp) == []
    fetch_spool.remove_run_spools(token)
    assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []
    # the object replaced after listing: the prefetch's GET (pinned) fails, nothing kept
    fs.pipe(f"{name}/t.txt", data.upper())
    fs.invalidate_cache()
    with storage.using(options):
        pre = fetch_spool.start_prefetch(specs, 1 << 30)
    assert not pre.adopt(run)
    assert spool_files(spool_tmp) == [] and \
        [p for p in spool_tmp.iterdir() if p.is_dir()] == []
    with pytest.raises(jobs.InputError):
        inputs.count_partition(run[0])
    fetch_spool.remove_run_spools(token)
    # discarded without a run: its folder removed; too small a spool: nothing fetched
    fs.pipe(f"{name}/t.txt", data)
    fs.invalidate_cache()
    with storage.using(options):
        specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/t.txt"),
                                       "text", 20_000)
        pre = fetch_spool.start_prefetch(specs, 1 << 30)
        pre.discard()
        assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []
        n = len(fetched)
        assert not fetch_spool.start_prefetch(specs, 100).adopt(run)
        assert len(fetched) == n
    assert fetch_spool.start_prefetch([dataclasses.replace(specs[0], path="/x/t.txt",
                                                           storage_options=None)],
                                      1 << 30) is None


def test_a_job_on_its_own_cluster_prefetches_its_first_partitions(tmp_path, bucket,
                                                                 spool_tmp, monkeypatch):
    """A job whose local cluster starts while it plans fetches partition 0 and the next
    partitions of its object meanwhile, by the GET that brought the object's head, and
    their counts use those files: an object that this GET holds whole is fetched once, by
    one GET (the parts equal those of the same job on local files), and no spool is
    left."""
    from daskwp.jobs import driver
    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    data = ("\n".join(sample_lines(400)) + "\n").encode()
    fs.pipe(f"{name}/in/a.txt", data)
    (tmp_path / "a.txt").write_bytes(data)
    made: list = []
    monkeypatch.setattr(driver, "connect_cluster", _own_cluster(made))
    adopted = []
    adopt = fetch_spool.StreamPrefetch.adopt

    def spy_adopt(self, specs):
        adopted.append((adopt(self, specs), len(self.taken)))
        return adopted[-1][0]
    monkeypatch.setattr(fetch_spool.StreamPrefetch, "adopt", spy_adopt)
    fetched = spy_object_fetches(monkeypatch)
    summary = jobs.run_job(job_config(f"s3://{name}/in/a.txt", f"s3://{name}/out",
                                      n_workers=1, scheduler_address=None,
                                      partition_size=8000, storage_options=options))
    n = summary["partitions"]
    assert n >= 3 and adopted == [(True, n)]
    # one GET: the listing's head, then every partition (HeadStreams, StreamPrefetch)
    assert [(s, e) for n_, s, e in fetched if n_ == "a.txt"] == [(0, len(data))], fetched
    jobs.run_job(job_config(str(tmp_path / "a.txt"), str(tmp_path / "local"),
                            scheduler_address="synchronous", partition_size=8000))
    assert_same_parts(tmp_path / "local", f"s3://{name}/out", options)
    assert spool_files(spool_tmp) == []


def test_an_output_url_naming_an_object_is_refused(bucket):
    """An output URL that names an object (not a folder) is refused with one line before
    anything is written; the object is left as it was."""
    name, options, fs = bucket
    fs.pipe(f"{name}/in.txt", b"one\ntwo\n")
    fs.pipe(f"{name}/taken", b"not a folder")
    with pytest.raises(jobs.OutputConflictError) as e:
        jobs.run_job(job_config(f"s3://{name}/in.txt", f"s3://{name}/taken",
                                storage_options=options))
    assert "is an object, not a folder" in str(e.value) and "\n" not in str(e.value)
    fs.invalidate_cache()
    assert fs.cat(f"{name}/taken") == b"not a folder"
    assert not fs.exists(f"{name}/taken/{jobs.JOB_FILE}")


def test_the_output_check_is_one_listing(bucket, requests_log, monkeypatch):
    """The check of an output folder on S3 (no object of its name, objects can be put in
    it) lists the names that start with the folder's once, where a HEAD and a listing of
    the folder were two requests: an empty folder's names come from that listing ([]), a
    folder holding objects is listed after it (None: not known); names that only start
    like the folder's (a folder "out-2", an object "out.txt") are not in it, over pages of
    the listing too; an object of the folder's name is refused."""
    name, options, fs = bucket
    for other in ("out-2/a", "out.txt", "out-a", "out0/b", *(f"out-{i:04d}" for i in range(3))):
        fs.pipe(f"{name}/{other}", b"x")
    requests_log.clear()
    folder = storage.Folder(f"s3://{name}/out", options)
    assert folder.check_writable(".tmp-probe-") == []
    kinds = [k for k, b, _ in requests_log if b == name]
    assert kinds == ["LIST", "PUT", "DELETE"], requests_log
    fs.pipe(f"{name}/out/part-0.parquet", b"x")
    assert folder.check_writable(".tmp-probe-") is None
    assert folder.listdir() == ["part-0.parquet"]
    # a listing in pages of 2 names: the folder "out/" comes after the page that holds
    # "out-0000" ... "out.txt" ("-" and "." sort before "/")
    import s3fs
    call = s3fs.core.S3FileSystem._call_s3

    async def paged(self, method, *args, **kw):
        if method == "list_objects_v2":
            kw["MaxKeys"] = 2
        return await call(self, method, *args, **kw)
    monkeypatch.setattr(s3fs.core.S3FileSystem, "_call_s3", paged)
    assert folder.check_writable(".tmp-probe-") is None
    fs.rm(f"{name}/out/part-0.parquet")
    assert folder.check_writable(".tmp-probe-") == []
    assert storage.Folder(f"s3://{name}/out-2", options).check_writable() is None
    with pytest.raises(NotADirectoryError, match="is an object, not a folder"):
        storage.Folder(f"s3://{name}/out.txt", options).check_writable()
    assert fs.cat(f"{name}/out.txt") == b"x"


def test_an_input_url_is_listed_once(bucket, requests_log, monkeypatch):
    """An input URL on S3 is told from a folder by one listing of the names that start with
    it, which gives an object's size and ETag too (no HEAD): an object among names that
    only start like it ("a.txt.bak", "a.txt-2/x"), over pages of the listing; a folder of
    the name (an object "d" and objects below "d/": the folder, as before); a missing
    object or bucket is "input not found"."""
    import s3fs
    from daskwp.jobs.inputs import list_input_files
    name, options, fs = bucket
    for other, data in (("a.txt", b"one\ntwo\n"), ("a.txt.bak", b"x"), ("a.txt-2/x", b"x"),
                        ("a.txt0", b"x"), ("d", b"x"), ("d/1.txt", b"1\n"), ("d/2.txt", b"2\n")):
        fs.pipe(f"{name}/{other}", data)
    fs.invalidate_cache()
    call = s3fs.core.S3FileSystem._call_s3

    async def paged(self, method, *args, **kw):
        if method == "list_objects_v2" and kw.get("Delimiter") == "/":
            kw["MaxKeys"] = 1
        return await call(self, method, *args, **kw)
    for pages in (False, True):
        if pages:
            monkeypatch.setattr(s3fs.core.S3FileSystem, "_call_s3", paged)
        with storage.using(options):
            requests_log.clear()
            files = list_input_files(f"s3://{name}/a.txt")
            assert [(f.path, f.size) for f in files] == [(f"s3://{name}/a.txt", 8)]
            kinds = [k for k, b, key in requests_log if b == name]
            assert "HEAD" not in kinds and kinds.count("GET") <= 1, requests_log
            info = fs.info(f"{name}/a.txt")    # (the HEAD's: the same version)
            assert files[0].version == storage.object_version(info)
            assert [f.path for f in list_input_files(f"s3://{name}/d")] == \
                [f"s3://{name}/d/1.txt", f"s3://{name}/d/2.txt"]
            for missing in (f"s3://{name}/a.tx", f"s3://{name}-missing/a.txt"):
                with pytest.raises(jobs.InputError, match="input not found"):
                    list_input_files(missing)


def test_the_last_job_file_is_put_while_the_output_is_listed(tmp_path, bucket, spool_tmp,
                                                             monkeypatch):
    """At a bucket job's end its ``_job.json`` with the offsets is put while the folder is
    listed for the check (two requests at once, not one after the other); the summary
    comes after both."""
    name, options, fs = bucket
    fs.pipe(f"{name}/a.txt", corpus_files(sample_lines() * 4)["a.txt"])
    out = f"s3://{name}/out"
    real = storage.Folder.entries
    seen = []

    def entries(self):
        # the end's listing: wait (up to 120 s) for the _job.json that has the offsets
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            fs.invalidate_cache()
            try:
                job = json.loads(fs.cat(f"{name}/out/{jobs.JOB_FILE}"))
            except FileNotFoundError:
                job = {}
            if job.get("documents") is not None:
                seen.append(job["documents"])
                break
            time.sleep(0.05)
        assert not fs.exists(f"{name}/out/{jobs.SUMMARY_FILE}")
        return real(self)
    monkeypatch.setattr(storage.Folder, "entries", entries)
    summary = jobs.run_job(job_config(f"s3://{name}/a.txt", out, storage_options=options,
                                      partition_size=4096))
    assert seen == [summary["documents"]] and summary["partitions"] > 1
    assert json.loads(fs.cat(f"{name}/out/{jobs.JOB_FILE}"))["documents"] == \
        summary["documents"]


def test_the_listings_head_and_the_first_partitions_come_in_one_get(bucket, spool_tmp,
                                                                     monkeypatch):
    """HeadStreams: the object head that listing and planning read is the start of one GET
    (in a thread, into a spool folder of its own) that the prefetch takes over for
    partition 0 and the next partitions of the object: one GET for all, where the head
    was a GET of 1 MB of its own; each partition's spool file is what a prefetch of its
    own fetches. A stream that no prefetch takes (a compressed object) is stopped and
    leaves nothing; another object's head is fetched as before."""
    import dataclasses

    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    data = ("\n".join(sample_lines() * 60) + "\n").encode()
    assert len(data) > 3 * storage.HEAD_BYTES
    fs.pipe(f"{name}/h/t.txt", data)
    fs.pipe(f"{name}/h/u.txt", data)
    fetched = spy_object_fetches(monkeypatch)
    token = fetch_spool.run_token("cd" * 8, "r1")
    with storage.using(options):
        heads = fetch_spool.HeadStreams(1 << 30)
        with storage.head_source(heads):
            files = inputs.list_input_files(f"s3://{name}/h")
            specs = inputs.plan_partitions(files, "text", 2 * storage.HEAD_BYTES)
        pre = fetch_spool.start_prefetch(specs, 1 << 30, heads)
        heads.close()
        run = [dataclasses.replace(s, spool=(token, 1 << 30)) for s in specs]
        assert pre.adopt(run)
        pre.wait(60)
        pre.discard()
    assert specs[0].path.endswith("/t.txt") and specs[0].byte_start == 0
    in_t = [s for s in run if s.path.endswith("/t.txt")]
    assert len(in_t) >= 2 and len(in_t) < len(run)
    # t.txt: one GET from its start (head and its partitions); u.txt: its head, 1 MB
    assert fetched == [("t.txt", 0, len(data)), ("u.txt", 0, storage.HEAD_BYTES)], fetched
    spooled = spool_files(spool_tmp)
    assert len(spooled) == len(in_t)
    held = (spool_tmp / spooled[0]).read_bytes()
    assert held.startswith(data[:exact(data, specs[0])[1]]) and data.startswith(held)
    fetched.clear()
    for spec in in_t:
        start, end = exact(data, spec)
        want = [x.encode() for x in data[start:end].decode().splitlines()]
        assert inputs.count_partition(spec) == len(want)
        assert inputs.read_partition(spec).to_pylist() == want
    assert fetched == [] and spool_files(spool_tmp) == []
    fetch_spool.remove_run_spools(token)
    # a compressed object: no prefetch takes the stream; stopped, nothing left
    fs.pipe(f"{name}/z/t.txt.gz", gzip.compress(data, 1))
    fetched.clear()
    with storage.using(options):
        heads = fetch_spool.HeadStreams(1 << 30)
        with storage.head_source(heads):
            specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/z"),
                                           "text", 1 << 40)
        assert fetch_spool.start_prefetch(specs, 1 << 30, heads) is None
        heads.close()
        heads.stream._thread.join(30)
    assert not heads.stream._thread.is_alive()
    assert fetched[0][:2] == ("t.txt.gz", 0)
    assert spool_files(spool_tmp) == [] and \
        [p for p in spool_tmp.iterdir() if p.is_dir()] == []


def _streamed_object(bucket, monkeypatch, spool_tmp, folder: str = "s"):
    """An object of ~6 head stream pieces (FETCH_PIECE 1 MB here) planned in 1 MB
    partitions with the listing's head from a HeadStreams: ``(data, specs, prefetch, the
    run's specs, GETs sent)``."""
    import dataclasses

    from daskwp.jobs.inputs import fetch_spool
    name, options, fs = bucket
    monkeypatch.setattr(fetch_spool, "FETCH_PIECE", 1 << 20)
    monkeypatch.setattr(fetch_spool, "MARGIN", 1000)
    monkeypatch.setattr(storage, "STREAM_PIECE", 64 << 10)
    data = ("\n".join(sample_lines() * 100) + "\n").encode()
    assert len(data) > 6 << 20
    fs.pipe(f"{name}/{folder}/t.txt", data)
    fetched = spy_object_fetches(monkeypatch)
    with storage.using(options):
        heads = fetch_spool.HeadStreams(1 << 30)
        with storage.head_source(heads):
            specs = inputs.plan_partitions(inputs.list_input_files(f"s3://{name}/{folder}"),
                                           "text", 1 << 20)
        pre = fetch_spool.start_prefetch(specs, 1 << 30, heads)
        heads.close()
    token = fetch_spool.run_token("ef" * 8, "r1")
    run = [dataclasses.replace(s, spool=(token, 1 << 30)) for s in specs]
    return data, specs, pre, run, fetched


def test_the_head_stream_goes_on_past_its_first_piece_into_every_partition(
        bucket, spool_tmp, monkeypatch):
    """The driver's GET of the object's head goes on, once planned, through the next
    partitions (past the head's piece, FETCH_PIECE + MARGIN): each partition's range comes
    once (a second GET from where the first stopped only where the head's piece came before
    the plan), into a spool file of its own that its count and write read without a GET;
    nothing is left."""
    from daskwp.jobs.inputs import fetch_spool
    data, specs, pre, run, fetched = _streamed_object(bucket, monkeypatch, spool_tmp)
    assert isinstance(pre, fetch_spool.StreamPrefetch) and len(pre.taken) == len(specs) >= 6
    with storage.using(bucket[1]):
        assert pre.adopt(run)
        pre.wait(60)
        pre.discard()
    # from the start to the end; a GET that stopped at the head's piece (the plan came
    # later) followed by one from there: every byte once
    head_piece = fetch_spool.FETCH_PIECE + fetch_spool.MARGIN
    assert [(s, e) for _, s, e in fetched] in ([(0, len(data))], [(0, len(data)), (
        head_piece, len(data))]), fetched
    assert len(spool_files(spool_tmp)) == len(specs)
    fetched.clear()
    for spec in run:
        start, end = exact(data, spec)
        want = [x.encode() for x in data[start:end].decode().splitlines()]
        assert inputs.count_partition(spec) == len(want)
        assert inputs.read_partition(spec).to_pylist() == want
    assert fetched == [] and spool_files(spool_tmp) == []
    fetch_spool.remove_run_spools(run[0].spool[0])
    assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []


def _hold_stream_at(monkeypatch, at: int, until):
    """Make a claimed head stream's GET wait, once at byte ``at`` or past it, until
    ``until(stream)`` (at most 120 s)."""
    import time

    from daskwp.jobs.inputs import fetch_spool
    write = fetch_spool._Counted.write

    def held_write(self, data):
        st = self._stream
        if st.claimed and st.written >= at:
            deadline = time.monotonic() + 120
            while not until(st) and time.monotonic() < deadline:
                time.sleep(0.01)
        return write(self, data)
    monkeypatch.setattr(fetch_spool._Counted, "write", held_write)


def _wait_for_bytes(stream, n: int) -> None:
    import time
    deadline = time.monotonic() + 120
    while stream.written < n and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_head_stream_stopped_mid_partition_hands_over_what_it_holds(bucket, spool_tmp,
                                                                     monkeypatch):
    """A stream stopped while its GET is in partition k (an error, the job's end): the
    partitions before k are adopted whole (counted without a GET); partition k's spool
    file goes over with the bytes it holds, and its count fetches only the rest (one GET
    from where the stream stopped); the partitions after k are fetched by their counts as
    without a prefetch. The counts and reads are those of the bytes; nothing is left."""
    hold_at = 3 * (1 << 20) + 100_000
    _hold_stream_at(monkeypatch, hold_at, lambda st: st.stopped)
    data, specs, pre, run, fetched = _streamed_object(bucket, monkeypatch, spool_tmp)
    _wait_for_bytes(pre.stream, hold_at)
    with storage.using(bucket[1]):
        assert pre.adopt(run)
        pre.stream.stop()
        pre.wait(30)
    stopped = pre.stream.written
    assert hold_at <= stopped < hold_at + (64 << 10)
    k = next(i for i, s in enumerate(run) if s.byte_end + 1000 > stopped)
    assert 2 <= k < len(run) - 1
    pre.discard()    # (the stream's own folder: the files of the partitions it did not reach)
    names = spool_files(spool_tmp)
    assert all(n.startswith(run[0].spool[0] + "/") for n in names), names
    assert len(names) == k + 1 and len([n for n in names if ".held-" in n]) == 1, names
    fetched.clear()
    for i, spec in enumerate(run):
        start, end = exact(data, spec)
        want = [x.encode() for x in data[start:end].decode().splitlines()]
        assert inputs.count_partition(spec) == len(want)
        gets = [(s, e) for _, s, e in fetched]
        if i < k:
            assert gets == [], (i, gets)
        elif i == k:    # the rest of its range, from where the stream stopped
            assert gets == [(stopped, spec.byte_end + 1000)], (i, gets, stopped)
        else:
            assert gets == [(spec.byte_start - 1, spec.byte_end + 1000)], (i, gets)
        fetched.clear()
        assert inputs.read_partition(spec).to_pylist() == want
        assert fetched == []
    assert spool_files(spool_tmp) == []
    fetch_spool_remove(run)
    assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []


def fetch_spool_remove(run) -> None:
    from daskwp.jobs.inputs import fetch_spool
    fetch_spool.remove_run_spools(run[0].spool[0])


def test_a_count_waits_for_the_head_stream_that_brings_its_partition(bucket, spool_tmp,
                                                                    monkeypatch):
    """Adopted while its GET is in partition 1, the stream goes on: the count of a later
    partition (in another thread, as on a worker) waits for the stream's lock on it
    instead of fetching it, and counts from the spool file once the stream brought it; no
    GET but the stream's; each partition's lock file is gone once it is there."""
    import threading

    from daskwp.jobs.inputs import fetch_spool
    go = threading.Event()
    hold_at = (1 << 20) + 200_000
    _hold_stream_at(monkeypatch, hold_at, lambda st: go.is_set())
    data, specs, pre, run, fetched = _streamed_object(bucket, monkeypatch, spool_tmp)
    _wait_for_bytes(pre.stream, hold_at)
    with storage.using(bucket[1]):
        assert pre.adopt(run)
    locks = [n for n in spool_files(spool_tmp) if n.endswith(fetch_spool._STREAMING)]
    # (partition 0 came whole: in the run's folder, or about to be)
    assert len(run) - 1 <= len(locks) <= len(run), locks
    last = run[-1]
    got = []
    counting = threading.Thread(target=lambda: got.append(inputs.count_partition(last)))
    counting.start()
    counting.join(0.5)
    assert counting.is_alive() and not got    # waiting for the stream
    go.set()
    counting.join(60)
    start, end = exact(data, last)
    want_last = [x.encode() for x in data[start:end].decode().splitlines()]
    assert got == [len(want_last)]
    pre.wait(30)
    assert not [n for n in spool_files(spool_tmp) if n.endswith(fetch_spool._STREAMING)]
    head_piece = fetch_spool.FETCH_PIECE + fetch_spool.MARGIN
    assert [(s, e) for _, s, e in fetched] in ([(0, len(data))], [(0, len(data)), (
        head_piece, len(data))]), fetched
    for spec in run[:-1]:
        start, end = exact(data, spec)
        want = [x.encode() for x in data[start:end].decode().splitlines()]
        assert inputs.count_partition(spec) == len(want)
        assert inputs.read_partition(spec).to_pylist() == want
    assert inputs.read_partition(last).to_pylist() == want_last
    assert len(fetched) <= 2    # (the stream's)
    pre.discard()
    fetch_spool_remove(run)
    assert spool_files(spool_tmp) == []


def test_without_fcntl_the_head_stream_stops_when_the_run_starts(bucket, spool_tmp,
                                                                  monkeypatch):
    """Where there is no lock to wait on (no ``fcntl``), adopting the stream stops it
    first: what it brought goes into the run's folder (whole, or with the bytes it holds)
    and every partition counts and reads as its bytes; nothing is left."""
    import sys
    hold_at = 2 * (1 << 20) + 100_000
    _hold_stream_at(monkeypatch, hold_at, lambda st: st.stopped)
    data, specs, pre, run, fetched = _streamed_object(bucket, monkeypatch, spool_tmp)
    _wait_for_bytes(pre.stream, hold_at)
    monkeypatch.setitem(sys.modules, "fcntl", None)
    with storage.using(bucket[1]):
        assert pre.adopt(run)
        pre.discard()
    names = spool_files(spool_tmp)
    assert names and all(n.startswith(run[0].spool[0] + "/") for n in names), names
    assert len([n for n in names if ".held-" in n]) == 1, names
    for spec in run:
        start, end = exact(data, spec)
        want = [x.encode() for x in data[start:end].decode().splitlines()]
        assert inputs.count_partition(spec) == len(want)
        assert inputs.read_partition(spec).to_pylist() == want
    assert spool_files(spool_tmp) == []
    fetch_spool_remove(run)
    assert [p for p in spool_tmp.iterdir() if p.is_dir()] == []


def test_a_head_stream_keeps_to_the_partitions_still_to_count(bucket, spool_tmp,
                                                                monkeypatch):
    """StreamPrefetch.keep (a resumed job, some counts known): the stream stops at the end
    of the last partition kept, or at once where none is; nothing is left."""
    import dataclasses
    import threading
    kept = threading.Event()
    _hold_stream_at(monkeypatch, 1 << 20, lambda st: kept.is_set())
    data, specs, pre, run, fetched = _streamed_object(bucket, monkeypatch, spool_tmp)
    pre.keep([0, 2])
    kept.set()
    pre.stream._thread.join(60)
    assert pre.stream.written == specs[2].byte_end + 1000 < len(data)
    with storage.using(bucket[1]):
        assert pre.adopt(run)
        pre.wait(60)
        pre.discard()
    for spec in run[:3]:
        start, end = exact(data, spec)
        assert inputs.count_partition(spec) == len(data[start:end].decode().splitlines())
    fetch_spool_remove(run)
    kept.clear()
    data, specs, pre, run, fetched = _streamed_object(bucket, monkeypatch, spool_tmp, "s2")
    pre.keep([])
    kept.set()
    pre.stream._thread.join(60)
    assert pre.stream.written < len(data) and not pre.adopt(
        [dataclasses.replace(s, spool=None) for s in run])
    assert spool_files(spool_tmp) == [] and \
        [p for p in spool_tmp.iterdir() if p.is_dir()] == []


def test_an_http_endpoints_uploads_are_checked_by_their_signature_only(bucket, monkeypatch):
    """On a plain http:// endpoint botocore signs each body (its SHA-256, which the store
    checks): daskwp's S3 filesystem leaves botocore's second check of the same bytes (a
    CRC32 header) out. Over https, anonymous, or with the setting chosen (storage options,
    environment), botocore's defaults stay."""
    from fsspec.asyn import sync
    name, options, _ = bucket
    folder = storage.Folder(f"s3://{name}/ck", options)
    fs, _ = folder._fs()
    sync(fs.loop, fs.set_session)
    sent = []

    def record(request, **kw):
        sent.append({k.lower(): v for k, v in request.headers.items()})
    fs.s3.meta.events.register("before-send.s3.PutObject", record)
    try:
        folder.write_bytes("a.bin", b"daskwp" * 1000)
    finally:
        fs.s3.meta.events.unregister("before-send.s3.PutObject", record)
    assert len(sent) == 1
    assert len(sent[0]["x-amz-content-sha256"]) == 64    # the body's SHA-256, signed
    assert not [h for h in sent[0] if h.startswith("x-amz-checksum-")], sent[0]
    assert folder.read_bytes("a.bin") == b"daskwp" * 1000

    def config(url, **opts):
        return storage.filesystem(url, opts)[0].config_kwargs
    assert config("s3://b/k", endpoint_url="http://127.0.0.1:1") == {
        "request_checksum_calculation": "when_required"}
    assert config("s3://b/k", client_kwargs={"endpoint_url": "http://127.0.0.1:1"}) == {
        "request_checksum_calculation": "when_required"}
    assert config("s3://b/k", endpoint_url="https://127.0.0.1:1") == {}
    assert config("s3://b/k", endpoint_url="http://127.0.0.1:1", anon=True) == {}
    chosen = {"request_checksum_calculation": "when_supported"}
    assert config("s3://b/k", endpoint_url="http://127.0.0.1:1",
                  config_kwargs=chosen) == chosen
    monkeypatch.setenv("AWS_REQUEST_CHECKSUM_CALCULATION", "when_supported")
    assert config("s3://b/k", endpoint_url="http://127.0.0.1:2") == {}


def test_a_plain_http_endpoint_loads_no_ca_bundle(bucket, monkeypatch):
    """No TLS certificate is verified on a plain http:// endpoint: daskwp's S3 filesystem
    builds its client with ``verify=False`` there, so its first request loads no CA
    bundle (aiobotocore's default: a file of certificates parsed per process). Over https,
    with ``verify`` chosen, or with a proxy configured (a TLS proxy is verified with
    those settings), the client keeps its defaults."""
    import ssl
    for k in [k for k in os.environ if k.lower() in ("http_proxy", "https_proxy",
                                                      "all_proxy")]:
        monkeypatch.delenv(k)
    loaded = []
    load = ssl.SSLContext.load_verify_locations

    def record(self, *args, **kw):
        loaded.append(args or kw)
        return load(self, *args, **kw)
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", record)
    name, options, fs = bucket
    fs.pipe(f"{name}/v/a.txt", b"daskwp\n")
    folder = storage.Folder(f"s3://{name}/v", options)
    assert folder.listdir() == ["a.txt"]
    assert folder.read_bytes("a.txt") == b"daskwp\n"
    assert loaded == []

    def client_kwargs(url, **opts):
        return storage.filesystem(url, opts)[0].client_kwargs
    assert client_kwargs("s3://b/k", endpoint_url="http://127.0.0.1:1") == {"verify": False}
    assert client_kwargs("s3://b/k", client_kwargs={"endpoint_url": "HTTP://127.0.0.1:1"}) \
        == {"endpoint_url": "HTTP://127.0.0.1:1", "verify": False}
    assert client_kwargs("s3://b/k", endpoint_url="https://127.0.0.1:1") == {}
    assert client_kwargs("s3://b/k") == {}
    chosen = {"verify": "/etc/my-ca.pem"}
    assert client_kwargs("s3://b/k", endpoint_url="http://127.0.0.1:1",
                         client_kwargs=chosen) == chosen
    assert client_kwargs("s3://b/k", endpoint_url="http://127.0.0.1:1", config_kwargs={
        "proxies": {"http": "https://proxy.example:443"}}) == {}
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:443")
    assert client_kwargs("s3://b/k", endpoint_url="http://127.0.0.1:3") == {}
    # (a filesystem the options do not name, gs://, ... is left alone)
    assert storage._plain_http_options("gs://b/k", {"endpoint_url": "http://h"}) == \
        {"endpoint_url": "http://h"}
