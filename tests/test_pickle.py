"""Every object daskwp returns pickles and comes back equal (issue 37 item 3).

One case per public object and result type, enumerated from ``daskwp.__all__`` and what its
functions and methods return: tokenizers (every device, every way of making one), the
vocabulary, encodings, windows (padded, ragged, longest, buckets, pairs, offsets),
``windows_from_encoding``, stitch outputs, labels, decode, the accessors' results (eager,
lazy, computed, their frames and arrays, the lazy stitch), ``read_tokenized``'s dataset and
batches, the transformers drop-in and its ``BatchEncoding``, the info dicts, and the errors
daskwp raises (a Dask worker sends them back pickled). ``connect`` returns a
``distributed.Client`` (distributed's object, not daskwp's) and ``register_accessors``
returns None; they are not cases.

Each case goes through ``pickle`` (every protocol from 2) and a ``multiprocessing`` pool
that starts its worker with ``spawn`` (a fresh interpreter: nothing is inherited), and must
come back equal: same type, same data, same behaviour (a tokenizer tokenizes alike, a lazy
result computes to the same frame). With PyTorch installed, ``read_tokenized(...).to_torch``
runs in a ``DataLoader`` with two spawned workers.
"""

from __future__ import annotations

import functools
import multiprocessing
import operator
import pickle

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from conftest import BUNDLED_DATA

import daskwp
from daskwp.accessors.eager import WordPieceResult
from daskwp.accessors.lazy import DaskWordPieceResult
from daskwp.backends.transformers_compat import BatchEncoding, TransformersTokenizer
from daskwp.core.buckets import BucketedWindows
from daskwp.core.ragged import RaggedRows
from daskwp.io.tokenized import TokenizedDataset

TEXTS = ["Hello world!", None, "naïve café, " * 40 + "<x1> end", "", "  \t ",
         "\u4e2d\u6587 text <x1>"]
QUESTIONS = ["what is it?", "who", "", None]
CONTEXTS = ["the context " * 30, "a b c", "only context", "x"]
WINDOWS = dict(max_length=16, stride=5)
MODEL_FOLDER = BUNDLED_DATA / "vocab" / "bert-base-uncased"


# -- comparing ----------------------------------------------------------------------------

def _frame_equal(a, b) -> None:
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    else:
        pd.testing.assert_series_equal(a, b)


def _cupy() -> bool:
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    return True


def _tokenizer_equal(a, b) -> None:
    assert a.__dask_tokenize__() == b.__dask_tokenize__()
    assert a.settings == b.settings and a.num_threads == b.num_threads
    assert a.vocab.tokens == b.vocab.tokens and a.vocab.hash == b.vocab.hash
    assert getattr(a, "transformers_settings", None) == \
        getattr(b, "transformers_settings", None)
    if a.device == "gpu" and not _cupy():
        return   # the same settings and vocabulary; its kernel needs a GPU to run
    assert_equal(a.encode(TEXTS, return_offsets_mapping=True, return_word_ids=True),
                 b.encode(TEXTS, return_offsets_mapping=True, return_word_ids=True))
    assert_equal(a(TEXTS, **WINDOWS), b(TEXTS, **WINDOWS))


def assert_equal(a, b, where: str = "") -> None:
    """``b`` is ``a`` again: the same type and data, compared all the way down."""
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, daskwp.WordPieceTokenizer):
        _tokenizer_equal(a, b)
    elif isinstance(a, daskwp.Vocabulary):
        assert a.hash == b.hash and a.tokens == b.tokens, where
        assert a.special_names == b.special_names, where
        assert a.blob == b.blob, where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, (pd.DataFrame, pd.Series)):
        _frame_equal(a, b)
    elif isinstance(a, (dd.DataFrame, dd.Series)):
        assert a._name == b._name, where
        _frame_equal(a.compute(scheduler="sync"), b.compute(scheduler="sync"))
    elif hasattr(a, "__dask_graph__") and hasattr(a, "chunks"):   # a dask Array
        assert a.name == b.name and a.dtype == b.dtype, where
        assert_equal(a.compute(scheduler="sync"), b.compute(scheduler="sync"), where)
    elif isinstance(a, DaskWordPieceResult):
        assert a.options == b.options, where
        _tokenizer_equal(a.tokenizer, b.tokenizer)
        assert_equal(a.to_frame(), b.to_frame(), where + ".to_frame()")
    elif isinstance(a, WordPieceResult):
        assert a.options == b.options, where
        _tokenizer_equal(a.tokenizer, b.tokenizer)
        _frame_equal(a.to_frame(), b.to_frame())
    elif isinstance(a, TransformersTokenizer):
        _tokenizer_equal(a.tokenizer, b.tokenizer)
        assert {k: v for k, v in vars(a).items() if k != "tokenizer"} == \
            {k: v for k, v in vars(b).items() if k != "tokenizer"}, where
        for kw in (dict(padding=True), dict(padding="max_length", truncation=True,
                                             max_length=12, return_tensors="np")):
            assert_equal(a(TEXTS[:1] + TEXTS[2:], **kw), b(TEXTS[:1] + TEXTS[2:], **kw))
    elif isinstance(a, BatchEncoding):
        assert_equal(dict(a), dict(b), where)
        assert a.word_ids(0) == b.word_ids(0), where   # asked for before pickling
    elif isinstance(a, TokenizedDataset):
        assert vars(a) == vars(b), where
        for x, y in zip(a.batches(), b.batches(), strict=True):
            assert_equal(x, y, where + ".batches()")
    elif isinstance(a, BucketedWindows):
        assert_equal(a.buckets, b.buckets, where + ".buckets")
    elif isinstance(a, RaggedRows):   # and Encoding
        for k in ("values", "offsets", "offset_mapping", "word_ids", "offsets_unit"):
            assert_equal(getattr(a, k, None), getattr(b, k, None), f"{where}.{k}")
    elif isinstance(a, BaseException):
        assert a.args == b.args and str(a) == str(b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_equal(a[k], b[k], f"{where}[{k!r}]")
        if type(a) is not dict:   # BatchWindows: doc_row_offsets
            assert_equal(vars(a), vars(b), where)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, f"{where}[{i}]")
    elif type(a).__module__.split(".")[0] == "torch":
        assert a.dtype == b.dtype and a.equal(b), where
    elif type(a).__name__ == "TokenizedBatches":
        assert_equal(vars(a), vars(b), where)
        for x, y in zip(a, b, strict=True):
            assert_equal(x, y, where + " batches")
    elif hasattr(a, "__dict__") and type(a).__module__.startswith("daskwp"):
        assert_equal(vars(a), vars(b), where)
    else:
        assert a == b, where


# -- the objects ---------------------------------------------------------------------------

def _tokenizer_with_added_token():
    tok = daskwp.WordPieceTokenizer()
    tok.add_special_tokens(["<x1>"])
    return tok


def _from_transformers():
    transformers = pytest.importorskip("transformers")
    hf = transformers.BertTokenizerFast.from_pretrained(str(MODEL_FOLDER))
    return daskwp.WordPieceTokenizer.from_transformers(hf)


def _error(call):
    try:
        call()
    except Exception as e:
        return e
    raise AssertionError("no error")


def _errors():
    """One instance of every public exception and warning class daskwp defines."""
    import importlib
    import pkgutil
    found = {}
    for info in pkgutil.walk_packages(daskwp.__path__, "daskwp."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:   # needs an optional package (torch, cupy, ...)
            continue
        for cls in vars(module).values():
            if isinstance(cls, type) and issubclass(cls, BaseException) and \
                    cls.__module__ == info.name and not cls.__name__.startswith("_"):
                found[cls.__qualname__] = cls(f"{cls.__name__}: bad thing")
    assert {"OptionValueError", "JobError", "InputWarning"} <= set(found), found
    return found


def _lazy_series():
    return dd.from_pandas(pd.Series(TEXTS, dtype=object, name="text"), npartitions=3)


def _lazy(tok):
    return _lazy_series().wordpiece.tokenize(tok, **WINDOWS, return_token_type_ids=True)


def _megatron_index(tok, folder):
    from daskwp.frames.megatron import read_index
    _lazy_series().wordpiece.to_megatron(folder.parent / "mega", tok)
    return read_index(str(folder.parent / "mega") + ".idx")


def _lazy_kept(tok):
    df = pd.DataFrame({"text": TEXTS, "id": np.arange(len(TEXTS)) + 7})
    ddf = dd.from_pandas(df, npartitions=2)
    return ddf[ddf["id"] != 8]["text"].wordpiece.tokenize(tok, keep_columns="id", **WINDOWS)


def _dataset(tok, folder):
    _lazy(tok).to_parquet(folder)
    return daskwp.read_tokenized(folder)


def _cases(tok, folder) -> dict:
    """name -> a zero-argument function making the object (a daskwp result or object)."""
    class Lazy:   # what several cases share, made when first asked for
        @functools.cached_property
        def enc(self):
            return tok.encode(TEXTS)

        @functools.cached_property
        def win(self):
            return tok(TEXTS, **WINDOWS, return_offsets_mapping=True, return_word_ids=True,
                       return_special_tokens_mask=True)

        @functools.cached_property
        def eager(self):
            return pd.Series(TEXTS, dtype=object).wordpiece.tokenize(tok, **WINDOWS)

        @functools.cached_property
        def dataset(self):
            return _dataset(tok, folder)

    made = Lazy()
    cases = {
        # tokenizers: every device, every way of making one
        "tokenizer": lambda: tok,
        "tokenizer_cpu": lambda: daskwp.WordPieceTokenizer(device="cpu", num_threads=1),
        "tokenizer_gpu": lambda: daskwp.WordPieceTokenizer(device="gpu"),
        "tokenizer_cased": lambda: daskwp.WordPieceTokenizer(lowercase=False,
                                                             max_input_chars_per_word=7),
        "tokenizer_json": lambda: daskwp.WordPieceTokenizer(MODEL_FOLDER / "tokenizer.json"),
        "tokenizer_folder": lambda: daskwp.WordPieceTokenizer.from_pretrained(MODEL_FOLDER),
        "tokenizer_normalizer": lambda: daskwp.WordPieceTokenizer(
            normalizer={"type": "Sequence", "normalizers": [{"type": "NFD"},
                                                            {"type": "Lowercase"}]},
            pre_tokenizer={"type": "WhitespaceSplit"}),
        "tokenizer_added_token": _tokenizer_with_added_token,
        "tokenizer_from_transformers": _from_transformers,
        "vocabulary": lambda: tok.vocab,
        # encodings and windows
        "encoding": lambda: made.enc,
        "encoding_offsets": lambda: tok.encode(TEXTS, return_offsets_mapping=True,
                                               return_word_ids=True, offsets_unit="bytes"),
        "encoding_row": lambda: made.enc[2],
        "windows": lambda: tok(TEXTS, **WINDOWS),
        "windows_int8_mask": lambda: tok(TEXTS, **WINDOWS, mask_dtype="int8"),
        "windows_ragged": lambda: tok(TEXTS, **WINDOWS, padding=False),
        "windows_longest": lambda: tok(TEXTS, **WINDOWS, padding="longest"),
        "windows_truncated": lambda: tok(TEXTS, max_length=16, truncation=True),
        "windows_offsets": lambda: made.win,
        "buckets": lambda: tok(TEXTS, **WINDOWS, padding="bucket",
                               return_offsets_mapping=True),
        "pairs": lambda: tok(QUESTIONS, text_pair=CONTEXTS, **WINDOWS,
                             truncation="only_second", return_overflowing_tokens=True,
                             return_token_type_ids=True, return_sequence_ids=True),
        "pairs_ragged_offsets": lambda: tok(QUESTIONS, text_pair=CONTEXTS, padding=False,
                                            return_offsets_mapping=True, **WINDOWS),
        "windows_from_encoding": lambda: daskwp.windows_from_encoding(made.enc, tok.vocab,
                                                                      **WINDOWS),
        # stitch, decode, labels
        "stitch": lambda: daskwp.stitch(made.win["input_ids"], made.win["metadata"]),
        "stitch_flat": lambda: daskwp.stitch_flat(made.win["offset_mapping"],
                                                  made.win["metadata"]),
        "decode": lambda: tok.decode(made.enc[0]),
        "merge_wordpieces": lambda: daskwp.merge_wordpieces(made.enc[2], made.enc[2] * 2,
                                                            vocab=tok.vocab),
        "align_labels": lambda: daskwp.align_labels(
            [list(range(int(w.max()) + 1 if len(w) else 0)) for w in
             daskwp.stitch(made.win["word_ids"], made.win["metadata"])],
            made.win["word_ids"], document_of_row=made.win["metadata"][:, 0]),
        "spans_to_labels": lambda: daskwp.spans_to_labels(
            [[(0, 5, 1)]] + [[]] * (len(TEXTS) - 1), made.win["offset_mapping"],
            document_of_row=made.win["metadata"][:, 0]),
        "labels_to_spans": lambda: daskwp.labels_to_spans(
            made.win["input_ids"] % 3, made.win["offset_mapping"], made.win["word_ids"],
            made.win["metadata"]),
        # the accessors
        "eager_result": lambda: made.eager,
        "eager_frame": lambda: made.eager.to_frame(),
        "eager_stitch": lambda: made.eager.stitch(made.eager.input_ids),
        "lazy_result": lambda: _lazy(tok),
        "lazy_result_kept_columns": lambda: _lazy_kept(tok),
        "lazy_metadata": lambda: _lazy(tok).metadata,
        "lazy_input_ids": lambda: _lazy(tok).input_ids,
        "lazy_token_type_ids": lambda: _lazy(tok).token_type_ids,
        "lazy_frame": lambda: _lazy(tok).to_frame(),
        "lazy_stitch": lambda: _lazy(tok).stitch(_lazy(tok).input_ids),
        "lazy_stitch_frame": lambda: _lazy(tok).stitch(_lazy(tok).to_frame(),
                                                       column="input_ids"),
        "computed_result": lambda: _lazy(tok).compute(scheduler="sync"),
        "token_counts": lambda: pd.Series(TEXTS, dtype=object).wordpiece.count(tok),
        "token_counts_lazy": lambda: _lazy_series().wordpiece.count(tok),
        "token_lengths": lambda: _lazy_series().wordpiece.count(tok).lengths,
        "megatron": lambda: _lazy_series().wordpiece.to_megatron(folder.parent / "mega", tok),
        "megatron_index": lambda: _megatron_index(tok, folder),
        # read_tokenized
        "tokenized_dataset": lambda: made.dataset,
        "tokenized_batch": lambda: next(made.dataset.batches(batch_size=3)),
        "tokenized_dask": lambda: made.dataset.to_dask(),
        "tokenized_table": lambda: made.dataset.to_table(),
        "torch_dataset": lambda: _torch() and made.dataset.to_torch(batch_size=2),
        "windows_torch": lambda: _torch() and tok(TEXTS, **WINDOWS, return_tensors="pt"),
        # the transformers drop-in
        "transformers_tokenizer": lambda: tok.as_transformers(model_max_length=64),
        "batch_encoding": lambda: _batch_encoding(tok),
        # information and errors
        "memory_info": daskwp.memory.info,
        "option_value_error": lambda: _error(lambda: tok(TEXTS, max_length=2)),
        "option_type_error": lambda: _error(lambda: tok(TEXTS, max_length=3.5)),
        "partition_error": lambda: _error(lambda: _lazy_bad(tok)),
        "errors": _errors,
        "version": lambda: daskwp.__version__,
    }
    return cases


def _torch():
    return pytest.importorskip("torch")


def _lazy_bad(tok):
    with dask.config.set({"dataframe.convert-string": False}):
        ds = dd.from_pandas(pd.Series(["a", 3, "b"], dtype=object), npartitions=1)
    return ds.wordpiece.tokenize(tok, **WINDOWS).metadata.compute(scheduler="sync")


def _batch_encoding(tok):
    enc = tok.as_transformers()(TEXTS[:1] + TEXTS[2:], padding=True)
    enc.word_ids(0)
    return enc


@pytest.fixture(scope="module")
def tok():
    return daskwp.WordPieceTokenizer()


@pytest.fixture(scope="module")
def cases(tok, tmp_path_factory):
    return _cases(tok, tmp_path_factory.mktemp("tokenized") / "parts")


CASE_NAMES = list(_cases(None, None))


@pytest.fixture(scope="module")
def spawned():
    """A pool of one worker started with ``spawn``: objects reach it only by pickle."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        yield pool


# -- tests ---------------------------------------------------------------------------------

def test_every_export_is_covered():
    # each name of daskwp.__all__ that makes or returns objects is a case above
    made = {"WordPieceTokenizer": "tokenizer", "Vocabulary": "vocabulary",
            "Encoding": "encoding", "RaggedRows": "windows_ragged",
            "BatchWindows": "windows", "TransformersTokenizer": "transformers_tokenizer",
            "align_labels": "align_labels", "labels_to_spans": "labels_to_spans",
            "spans_to_labels": "spans_to_labels", "memory": "memory_info",
            "decode": "decode", "merge_wordpieces": "merge_wordpieces",
            "read_tokenized": "tokenized_dataset", "stitch": "stitch",
            "stitch_flat": "stitch_flat", "windows_from_encoding": "windows_from_encoding",
            "__version__": "version"}
    # no object of daskwp's own: a Client, None
    returns_none_or_foreign = {"connect", "register_accessors"}
    # exception classes: each is an instance in the errors case (every class daskwp defines)
    errors = {name for name in daskwp.__all__
              if isinstance(getattr(daskwp, name), type)
              and issubclass(getattr(daskwp, name), BaseException)}
    assert errors <= set(_errors()), errors
    assert set(daskwp.__all__) == set(made) | returns_none_or_foreign | errors
    assert set(made.values()) <= set(CASE_NAMES)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_pickles_and_round_trips(cases, name):
    obj = cases[name]()
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert_equal(obj, pickle.loads(pickle.dumps(obj, protocol=protocol)), name)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_round_trips_through_a_spawned_process(cases, spawned, name):
    obj = cases[name]()
    back = spawned.apply(operator.itemgetter(0), ((obj,),))
    assert_equal(obj, back, name)


def test_objects_work_in_a_spawned_process(tok, cases, spawned):
    # a tokenizer and a lazy result sent to a fresh process run there as here
    for name in ("tokenizer", "tokenizer_added_token", "tokenizer_json"):
        t = cases[name]()
        assert_equal(t(TEXTS, **WINDOWS), spawned.apply(t, (TEXTS,), WINDOWS), name)
    lazy = cases["lazy_result_kept_columns"]()
    got = spawned.apply(operator.methodcaller("compute", scheduler="sync"), (lazy,))
    assert_equal(lazy.compute(scheduler="sync"), got)


@pytest.mark.slow   # two spawned workers import torch and daskwp: ~15 s
def test_torch_dataloader_with_spawned_workers(cases):
    torch = pytest.importorskip("torch")
    ds = cases["tokenized_dataset"]()
    loader = torch.utils.data.DataLoader(ds.to_torch(batch_size=2), batch_size=None,
                                         num_workers=2, multiprocessing_context="spawn")
    got = sorted(((tuple(b["metadata"].flatten().tolist()), b["input_ids"]) for b in loader),
                 key=operator.itemgetter(0))
    want = sorted(((tuple(b["metadata"].flatten().tolist()), b["input_ids"])
                   for b in ds.batches(batch_size=2, return_tensors="pt")),
                  key=operator.itemgetter(0))
    assert [g[0] for g in got] == [w[0] for w in want]
    for (_, g), (_, w) in zip(got, want):
        assert g.equal(w)
    # the tokenizer as a collate function: sent to each worker, its windows sent back
    tok = cases["tokenizer_added_token"]()
    collate = functools.partial(tok, max_length=16, stride=5, return_tensors="pt")
    loader = torch.utils.data.DataLoader(TEXTS * 4, batch_size=6, num_workers=2,
                                         collate_fn=collate, multiprocessing_context="spawn")
    for k, batch in enumerate(loader):
        assert_equal(collate(list(TEXTS * 4)[k * 6:(k + 1) * 6]), batch, f"batch {k}")
