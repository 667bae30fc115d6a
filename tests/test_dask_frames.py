"""Tokenized Dask frames through the common dask operations, on a LocalCluster of worker
processes: shuffle, set_index, merge and groupby keep every row and value; dask's P2P
shuffle is the documented limit (Arrow list columns), with its workaround."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dask
import dask.dataframe as dd

import daskwp

TEXTS = [f"document {i} " + "word " * (i % 23) for i in range(300)] + ["", None]


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def frames(client):
    ddf = dd.from_pandas(pd.DataFrame({"text": TEXTS}), npartitions=5)
    res = ddf["text"].wordpiece.tokenize(max_length=12, stride=3)
    expected = pd.Series(TEXTS).wordpiece.tokenize(max_length=12, stride=3).to_frame()
    return res, expected


def _rows(frame: pd.DataFrame) -> list:
    f = frame.reset_index()[["logID", "window", "start", "stop", "input_ids"]]
    return sorted((int(r.logID), int(r.window), int(r.start), int(r.stop),
                   tuple(np.asarray(r.input_ids).tolist())) for r in f.itertuples())


def test_task_shuffle_keeps_every_row(frames):
    res, expected = frames
    got = res.to_frame().shuffle(on="logID", shuffle_method="tasks").compute()
    assert _rows(got) == _rows(expected)


def test_set_index_and_groupby(frames):
    res, expected = frames
    got = res.to_frame().set_index("logID").compute()
    assert _rows(got) == _rows(expected)
    counts = res.to_frame().groupby("logID")["window"].count().compute().sort_index()
    assert counts.tolist() == expected.groupby("logID")["window"].count().tolist()
    assert len(counts) == len(TEXTS)


def test_task_merge_with_source_columns(frames):
    res, expected = frames
    side = dd.from_pandas(pd.DataFrame({"logID": np.arange(len(TEXTS)),
                                        "doc_id": [f"d{i}" for i in range(len(TEXTS))]}),
                          npartitions=3)
    got = res.to_frame().merge(side, on="logID", shuffle_method="tasks").compute()
    assert _rows(got) == _rows(expected)
    assert (got["doc_id"] == "d" + got["logID"].astype(str)).all()


def test_stitch_after_a_shuffle(frames):
    res, _ = frames
    moved = res.to_frame().shuffle(on="stop", shuffle_method="tasks")
    got = res.stitch(moved, column="input_ids").compute().sort_values("logID")
    want = daskwp.WordPieceTokenizer().encode(TEXTS).to_list()
    assert [np.asarray(v).tolist() for v in got["input_ids"]] == want


def test_compute_tokenizes_once_without_mixing_collections(frames, recwarn):
    res, expected = frames
    eager = res.compute()
    assert not [w for w in recwarn if "mixed collections" in str(w.message)]
    assert np.array_equal(eager.input_ids, np.stack(expected["input_ids"].map(np.asarray)))
    assert eager.metadata["logID"].tolist() == expected["logID"].tolist()


def test_p2p_shuffle_is_the_documented_limit(frames):
    """If dask/pandas fix list columns in P2P, this fails: then drop the caveat in
    DaskWordPieceResult.to_frame and docs/guide/dask.md."""
    res, _ = frames
    with pytest.raises(Exception, match="P2P|list<item: int32>"):
        res.to_frame().shuffle(on="logID", shuffle_method="p2p").compute()
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):   # the workaround
        assert len(res.to_frame().shuffle(on="logID").compute()) == len(
            frames[1])
