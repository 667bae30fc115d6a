"""Batch jobs on object storage (docs/batch-jobs.md "Object storage"): inputs and outputs
as fsspec URLs, against a real S3 endpoint on loopback (moto's server mode with s3fs) and
fsspec's in-memory filesystem.

The reference for every job on a bucket is the same job on local files: identical parts.
One moto server serves the whole module; each test uses its own bucket. The credentials are
dummy values in the environment (moto accepts any).
"""

from __future__ import annotations

import bz2
import gzip
import json
import os
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from daskwp import jobs
from daskwp.cli import main
from daskwp.io import storage
from daskwp.jobs import inputs

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


def corpus_files(lines: list[str]) -> dict[str, bytes]:
    """The same documents as text, JSON Lines, CSV and Parquet (several row groups), plain
    and compressed."""
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


def part_tables(folder) -> list[pa.Table]:
    """Every part of an output folder (local path or URL), in order, without metadata."""
    names = sorted(n for n in storage.Folder(folder).listdir()
                   if n.startswith("part-") and n.endswith(".parquet"))
    out = []
    for n in names:
        with storage.Folder(folder).open(n) as fh:
            out.append(pq.read_table(fh).replace_schema_metadata(None))
    return out


def assert_same_parts(a, b):
    ta, tb = part_tables(a), part_tables(b)
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


def test_a_text_partition_reads_its_byte_range_only(bucket, monkeypatch):
    """Planning and reading a partition of an object fetch byte ranges near the partition,
    never the whole object."""
    import s3fs
    name, options, fs = bucket
    data = ("\n".join(sample_lines()) + "\n").encode()
    fs.pipe(f"{name}/big.txt", data)
    with storage.using(options):
        files = inputs.list_input_files(f"s3://{name}/big.txt")
        specs = inputs.plan_partitions(files, "text", 20_000)
    assert len(specs) > 5
    fetched = []
    real = s3fs.core.S3File._fetch_range

    def spy(self, start, end):
        fetched.append((start, end))
        return real(self, start, end)
    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", spy)
    mid = specs[len(specs) // 2]
    got = inputs.read_partition(mid)
    expected = data[mid.byte_start:mid.byte_end].decode().splitlines()
    assert got.to_pylist() == [x.encode() for x in expected]
    assert fetched and all(mid.byte_start <= s and e <= mid.byte_end for s, e in fetched)
    assert sum(e - s for s, e in fetched) == mid.byte_end - mid.byte_start


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
