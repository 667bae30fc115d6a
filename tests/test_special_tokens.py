"""Registered special tokens: ``tok.add_special_tokens([...])`` (docs/design.md §7).

The oracle is HuggingFace ``tokenizers``: ``BertWordPieceTokenizer`` on the same vocabulary,
with the same strings given to its ``add_special_tokens``. Registered tokens are matched
literally in the raw text before normalization, leftmost-longest with the vocabulary's own
special tokens, inside words, at word edges, repeated, one a prefix of another; on real
corpus lines with tokens spliced in (inside words too), with 10,000 of them; the ids follow
the largest id in use; collisions are refused by name; the tokenizer pickles, runs on Dask
workers and in batch jobs, gives the CPU's ids on the (emulated) GPU, and decodes them back.
"""

from __future__ import annotations

import functools
import json
import pickle
import random
import time

import numpy as np
import pandas as pd
import pytest
from dask.base import tokenize as dask_tokenize

from conftest import corpus_files, read_documents, requires_data, vocab_path

import daskwp
from daskwp.backends import cuda
from daskwp.backends.cpu import CPU
from daskwp.core.ragged import to_host
from daskwp.core.vocab import Vocabulary

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, BertWordPieceTokenizer, Tokenizer  # noqa: E402

pytestmark = requires_data

UNCASED, CASED = "bert-base-uncased", "bert-base-cased"
LOWER = {UNCASED: True, CASED: False}

# Overlapping on purpose: "<|a|>" is a prefix of "<|a|><|b|>", "<|a|" of both, "[CLS" and
# "[CLS]x" overlap BERT's [CLS]; "tok_a" starts with a letter (so it matches inside words),
# "«ts»" and "🤗x" with non-ASCII bytes, "<|HOST|>" has capitals an uncased vocabulary
# lowercases (matched before normalization: only the exact spelling is the token).
TOKENS = ["<|ts|>", "<|host|>", "<|a|>", "<|a|><|b|>", "<|a|", "[CLS", "[CLS]x", "tok_a",
          "«ts»", "🤗x", "<|HOST|>", "中文标记", "@@", "<s>", "</s>"]

TEXTS = [
    "", "<|ts|>", "<|ts|><|ts|><|ts|>", "a<|ts|>b", "word<|host|>word", " <|ts|> ",
    "x <|ts|>, y<|host|>.", "<|a|>", "<|a|><|b|>", "<|a|><|b|><|a|>", "<|a|><|b", "<|a|<|a|>",
    "<|a<|a|", "[CLS]", "[CLS]x", "[CLS]xy", "[CLS][CLS]x[SEP]", "[CLS", "[CL", "[cls]x",
    "stok_ab tok_a tok_b TOK_A", "«ts»«ts» «TS»", "🤗x🤗 🤗xx", "<|HOST|> <|host|> <|Host|>",
    "这是中文标记。中文标记", "@@@ @@ @", "<s>hello</s> <s> </s>", "<|ts|>\t<|host|>\n<|ts|>",
    "naïve<|ts|>café", "<|t\u0301s|>", "<\u200b|ts|>", "<|ts|>\x00<|host|>",
    "[MASK]<|a|><|b|>[SEP]<|a|", "<<|ts|>>", "<|ts|>" * 50 + "x" * 150,
]


@functools.lru_cache(maxsize=None)
def hf(vocab_name: str, tokens: tuple) -> BertWordPieceTokenizer:
    t = BertWordPieceTokenizer(str(vocab_path(vocab_name)), lowercase=LOWER[vocab_name])
    t.add_special_tokens(list(tokens))
    return t


def hf_ids(h, texts) -> list[list[int]]:
    return [e.ids for e in h.encode_batch(list(texts), add_special_tokens=False)]


def registered(vocab_name: str, tokens=TOKENS, **kw) -> daskwp.WordPieceTokenizer:
    tok = daskwp.WordPieceTokenizer(str(vocab_path(vocab_name)), lowercase=LOWER[vocab_name],
                                    **kw)
    tok.add_special_tokens(list(tokens))
    return tok


def assert_same(got, expected, texts, what=""):
    bad = [i for i in range(len(texts)) if got[i] != expected[i]]
    assert not bad, (f"{what}: {len(bad)} of {len(texts)} differ, e.g. "
                     f"{[(texts[i][:80], got[i][:16], expected[i][:16]) for i in bad[:3]]}")


@functools.lru_cache(maxsize=None)
def corpus_lines(per_file: int = 400) -> tuple:
    """The first lines of every corpus file (every language, logs, naughty strings)."""
    docs = []
    for path in corpus_files():
        docs += read_documents(path)[:per_file]
    return tuple(docs)


def spliced(lines, tokens, seed=0, per_line=3) -> list[str]:
    """Each line with tokens inserted at random character positions (inside words, at
    their edges, next to punctuation), some twice in a row."""
    rng = random.Random(seed)
    out = []
    for line in lines:
        s = line
        for _ in range(rng.randint(0, per_line)):
            at = rng.randint(0, len(s))
            tok = rng.choice(tokens)
            s = s[:at] + (tok * rng.choice((1, 1, 2))) + s[at:]
        out.append(s)
    return out


# ---------------------------------------------------------------------------------------
# Ids equal HuggingFace's
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab_name", [UNCASED, CASED])
def test_ids_equal_hf_on_edge_texts(vocab_name):
    tok = registered(vocab_name)
    h = hf(vocab_name, tuple(TOKENS))
    assert [tok.vocab.token_to_id(t) for t in TOKENS] == [h.token_to_id(t) for t in TOKENS]
    assert_same(tok.encode(TEXTS).to_list(), hf_ids(h, TEXTS), TEXTS, vocab_name)


@pytest.mark.parametrize("vocab_name", [UNCASED, pytest.param(CASED, marks=pytest.mark.slow)])
def test_ids_equal_hf_on_corpus_lines_with_tokens_spliced_in(vocab_name):
    tok = registered(vocab_name)
    h = hf(vocab_name, tuple(TOKENS))
    lines = list(corpus_lines())
    docs = spliced(lines, TOKENS, seed=1) + lines
    assert any(t in d for d in docs for t in ("<|a|><|b|>", "tok_a"))
    assert_same(tok.encode(docs).to_list(), hf_ids(h, docs), docs, vocab_name)


def test_ten_thousand_tokens_equal_hf_and_register_under_a_second():
    many = [f"<|tok_{i:05d}|>" for i in range(10_000)] + \
        [f"w{i}x" for i in range(0, 3000, 7)]  # some start with a letter
    tok = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    # CPU seconds of this process (every thread), not wall time: another test process on
    # the same cores (pytest-xdist, a loaded machine) stretched the wall time past 2 s
    t0 = time.process_time()
    ids = tok.add_special_tokens(many)
    elapsed = time.process_time() - t0
    assert elapsed < 1.0, f"registering {len(many)} tokens took {elapsed:.2f} CPU s"
    assert ids == list(range(30522, 30522 + len(many)))
    h = hf(UNCASED, tuple(many))
    rng = random.Random(2)
    pool = many + ["<|tok_", "<|tok_0000", "<|tok_99999|>", "w7", "w7x"]  # near misses
    docs = spliced(corpus_lines(150), pool, seed=3, per_line=5)
    docs += ["".join(rng.choice(pool) for _ in range(30)) for _ in range(200)]
    assert_same(tok.encode(docs).to_list(), hf_ids(h, docs), docs, "10,000 tokens")


def test_ids_follow_the_largest_id_in_use(tmp_path):
    # A tokenizer.json whose added tokens go beyond the model's vocabulary.
    h = Tokenizer.from_str(hf(UNCASED, ()).to_str())
    h.add_tokens([AddedToken("newword", normalized=False)])
    h.add_special_tokens([AddedToken("<x>", special=True, normalized=False)])
    path = tmp_path / "tokenizer.json"
    h.save(str(path))
    tok = daskwp.WordPieceTokenizer(path)
    assert tok.vocab.token_to_id("<x>") == 30523
    assert tok.add_special_tokens(["<y>", "<z>"]) == [30524, 30525]
    assert h.add_special_tokens(["<y>", "<z>"]) == 2
    assert [h.token_to_id("<y>"), h.token_to_id("<z>")] == [30524, 30525]
    assert tok.add_special_tokens(["<w>"]) == [30526]
    assert tok.vocab.registered_special_tokens == ("<y>", "<z>", "<w>")
    assert len(tok.vocab) == 30527 and tok.vocab.id_to_token(30526) == "<w>"
    assert tok.add_special_tokens([]) == []


def test_ids_follow_the_largest_id_where_hf_would_reuse_one(tmp_path):
    """A vocab.txt with a duplicated line: HF's next id is its number of distinct tokens,
    which is an id in use ("world" and "<x>" would both be 6); daskwp takes the largest id
    in use plus one (docs/differences-hf.md)."""
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nhello\nworld\n")
    h = BertWordPieceTokenizer(str(path))
    h.add_special_tokens(["<x>"])
    assert h.token_to_id("<x>") == 6 == h.token_to_id("world")
    tok = daskwp.WordPieceTokenizer(path)
    assert tok.add_special_tokens(["<x>"]) == [7]
    assert tok.encode(["world <x>"]).to_list() == [[6, 7]]


def test_a_tokenizer_json_with_the_tokens_equals_registering_them(tmp_path):
    """HF registers the tokens and saves the file; daskwp reads it (``special``, ``lstrip``,
    ``rstrip``, ``single_word``, ``normalized`` as HF writes them) and gives the ids that
    registering them on daskwp's own tokenizer gives."""
    h = Tokenizer.from_str(hf(UNCASED, tuple(TOKENS)).to_str())
    path = tmp_path / "tokenizer.json"
    h.save(str(path))
    added = {a["content"]: a for a in json.loads(path.read_text())["added_tokens"]}
    assert added["<|ts|>"] == {"id": 30522, "content": "<|ts|>", "single_word": False,
                               "lstrip": False, "rstrip": False, "normalized": False,
                               "special": True}
    from_json = daskwp.WordPieceTokenizer(path)
    own = registered(UNCASED)
    docs = TEXTS + spliced(corpus_lines(100), TOKENS, seed=4)
    assert from_json.encode(docs).to_list() == own.encode(docs).to_list() == hf_ids(h, docs)
    # More tokens on top of the file's.
    assert from_json.add_special_tokens(["<|more|>"]) == [30522 + len(TOKENS)]
    assert from_json.decode([30522, 101], skip_special_tokens=False) == "<|ts|> [CLS]"


def test_normalized_added_tokens_stay_refused_by_name(tmp_path):
    h = Tokenizer.from_str(hf(UNCASED, ()).to_str())
    h.add_tokens(["domainword"])  # HF's default for a non-special token: normalized
    path = tmp_path / "tokenizer.json"
    h.save(str(path))
    with pytest.raises(ValueError, match=r"'domainword' has \"normalized\": true"):
        daskwp.WordPieceTokenizer(path)


# ---------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------
REFUSED = [
    (["hello"], r"'hello' is already a token of vocabulary .*, with id 7592"),
    (["##ing"], r"'##ing' is already a token of vocabulary .*, with id 2075"),
    (["[CLS]"], r"'\[CLS\]' is already a special token of vocabulary .*, with id 101"),
    (["Hello"], r"'Hello' is another spelling of the token 'hello' \(id 7592\)"),
    (["HELLO"], r"'HELLO' is another spelling of the token 'hello' \(id 7592\)"),
    (["café"], r"'café' is another spelling of the token 'cafe' \(id 7668\)"),
    (["[CLS]\x00"], r"'\[CLS\]\\x00' is another spelling of the token '\[CLS\]' \(id 101\)"),
    (["a b"], r"'a b' contains whitespace \(' '\)"),
    (["<x>\u3000"], r"contains whitespace \('\\u3000'\)"),
    (["\t<x>"], r"contains whitespace \('\\t'\)"),
    (["##<x>"], r"'##<x>' starts with the continuing-subword prefix '##'"),
    ([""], r"special token 0 is the empty string"),
    (["<a>", "<b>", "<a>"], r"'<a>' is given twice \(positions 1 and 3\)"),
    (["<\ud800>"], r"lone surrogate U\+D800"),
    (["<\ufffd>"], r"U\+FFFD"),
]


@pytest.mark.parametrize("tokens,pattern", REFUSED, ids=[repr(t)[:24] for t, _ in REFUSED])
def test_collisions_are_refused_by_name(tokens, pattern):
    tok = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    before = (tok.vocab.hash, tok.kernel_model.key)
    with pytest.raises(ValueError, match=pattern):
        tok.add_special_tokens(["<ok>"] + tokens if tokens != [""] else tokens)
    # Nothing changed, not even the tokens before the bad one.
    assert (tok.vocab.hash, tok.kernel_model.key) == before
    assert tok.vocab.token_to_id("<ok>") is None


def test_refusals_of_types_and_of_tokens_registered_before():
    tok = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    with pytest.raises(TypeError, match=r"list of strings, got one str '<x>'; pass \['<x>'\]"):
        tok.add_special_tokens("<x>")
    with pytest.raises(TypeError, match="special token 1 is not a string"):
        tok.add_special_tokens(["<x>", 5])
    assert tok.add_special_tokens(["<x>"]) == [30522]
    with pytest.raises(ValueError, match=r"'<x>' is already a special token .*id 30522"):
        tok.add_special_tokens(["<x>"])
    # A new token that this tokenizer already reads as one registered token.
    with pytest.raises(ValueError, match=r"'<x>\\u200b' is another spelling of the token "
                                         r"'<x>' \(id 30522\)"):
        tok.add_special_tokens(["<x>\u200b"])


def test_accepted_spellings():
    """Strings that tokenize to several pieces, or to the unknown token alone, are new."""
    tok = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    assert tok.encode(["[cls]", "🤗"]).to_list() == [[1031, 18856, 2015, 1033], [100]]
    assert tok.add_special_tokens(["[cls]", "🤗"]) == [30522, 30523]
    assert tok.encode(["[CLS][cls]🤗"]).to_list() == [[101, 30522, 30523]]
    cased = daskwp.WordPieceTokenizer(str(vocab_path(CASED)), lowercase=False)
    assert cased.add_special_tokens(["Hello!"]) == [28996]


# ---------------------------------------------------------------------------------------
# Identity: hash, caches, pickling
# ---------------------------------------------------------------------------------------
def test_identity_changes_and_pickles():
    tok = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    old_vocab, old_key, old_token = tok.vocab, tok.kernel_model.key, dask_tokenize(tok)
    old_blob = bytes(tok.kernel_model.vocab_blob)
    tok.add_special_tokens(["<|ts|>", "<|host|>"])
    assert tok.vocab is not old_vocab and tok.vocab.hash != old_vocab.hash
    assert old_vocab.token_to_id("<|ts|>") is None  # the old vocabulary is unchanged
    assert tok.kernel_model.vocab is tok.vocab
    assert tok.kernel_model.key != old_key and dask_tokenize(tok) != old_token
    assert bytes(tok.kernel_model.vocab_blob) != old_blob
    # The same tokens registered on another instance: the same identity.
    other = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    other.add_special_tokens(["<|ts|>", "<|host|>"])
    assert other.vocab.hash == tok.vocab.hash and dask_tokenize(other) == dask_tokenize(tok)
    # Order matters (the ids differ).
    swapped = daskwp.WordPieceTokenizer(str(vocab_path(UNCASED)))
    swapped.add_special_tokens(["<|host|>", "<|ts|>"])
    assert swapped.vocab.hash != tok.vocab.hash

    texts = ["a<|ts|>b <|host|>", "[CLS]<|ts|>"]
    for obj in (tok, tok.vocab):
        back = pickle.loads(pickle.dumps(obj))
        assert (back.vocab if obj is tok else back).hash == tok.vocab.hash
    back = pickle.loads(pickle.dumps(tok))
    assert back.vocab.registered_special_tokens == ("<|ts|>", "<|host|>")
    assert back.encode(texts).to_list() == tok.encode(texts).to_list() == \
        [[1037, 30522, 1038, 30523], [101, 30522]]
    assert dask_tokenize(back) == dask_tokenize(tok)
    assert back.add_special_tokens(["<|more|>"]) == [30524]
    # Other special-token names keep the registered tokens.
    renamed = tok.vocab.with_special_names(mask_token="[PAD]")
    assert renamed.registered_special_tokens == ("<|ts|>", "<|host|>")
    assert daskwp.WordPieceTokenizer(renamed).encode(texts).to_list() == \
        tok.encode(texts).to_list()


def test_vocabulary_level_call_returns_a_new_vocabulary():
    v = Vocabulary.from_file(vocab_path(UNCASED))
    w = v.with_special_tokens(["<|ts|>"])
    assert v.token_to_id("<|ts|>") is None and w.token_to_id("<|ts|>") == 30522
    assert "<|ts|>" in w.special_tokens and 30522 in w.special_ids
    assert "<|ts|>" not in w.model_tokens  # never a WordPiece piece
    assert v.with_special_tokens([]) is v
    with pytest.raises(ValueError, match="already a special token"):
        w.with_special_tokens(["<|ts|>"])


# ---------------------------------------------------------------------------------------
# Decode, windows
# ---------------------------------------------------------------------------------------
def test_decode_round_trip_equals_hf():
    tok = registered(UNCASED)
    h = hf(UNCASED, tuple(TOKENS))
    docs = [t for t in TEXTS if t] + spliced(corpus_lines(50), TOKENS, seed=5)
    for ids in tok.encode(docs).to_list():
        for skip in (False, True):
            assert tok.decode(ids, skip_special_tokens=skip) == \
                h.decode(ids, skip_special_tokens=skip)
    ids = tok.encode(["hello <|ts|> world<|host|>"]).to_list()[0]
    assert tok.decode(ids, skip_special_tokens=False) == "hello <|ts|> world <|host|>"
    assert tok.decode(ids) == "hello world"
    # Decoded text tokenizes back to the same ids (the tokens are matched literally).
    text = tok.decode(ids, skip_special_tokens=False)
    assert tok.encode([text]).to_list()[0] == ids


def test_windows_never_split_a_registered_token():
    tok = registered(UNCASED)
    text = " ".join(["<|a|><|b|>x<|ts|>"] * 20)
    ids = tok.encode([text]).to_list()[0]
    out = tok([text], max_length=8, stride=2)
    rows = out["input_ids"].tolist()
    assert len(rows) > 3
    bodies = []
    for k, r in enumerate(rows):
        assert r[0] == tok.vocab.cls_id
        body = r[1:r.index(tok.vocab.sep_id)]  # [CLS] body [SEP] [PAD]...
        # Row k holds the document's ids from k * (L - stride) on: whole tokens, none cut.
        assert body == ids[4 * k:4 * k + len(body)]
        bodies.append(body)
    assert 4 * (len(rows) - 1) + len(bodies[-1]) == len(ids)
    assert daskwp.stitch(out["input_ids"], out["metadata"])[0].tolist() == ids
    regs = {tok.vocab.token_to_id(t) for t in TOKENS}
    assert sum(i in regs for r in bodies for i in r) >= 40


# ---------------------------------------------------------------------------------------
# GPU (emulated CUDA build): the same blob and core
# ---------------------------------------------------------------------------------------
def test_gpu_equals_cpu(cuda_backend):
    """The GPU launcher and kernel file (emulated, or on a device: tests/conftest.py's
    ``cuda_backend``) give the CPU's ids (and HF's), chunked at any size, with 2,015
    registered tokens; registering in place reaches the device model."""
    many = TOKENS + [f"<|tok_{i:05d}|>" for i in range(2000)]
    cpu = registered(UNCASED, many)
    gpu = registered(UNCASED, many, device="gpu")
    assert gpu.vocab.hash == cpu.vocab.hash
    table = to_host(cuda._device_model(gpu).boundary)
    assert not any(table[ord(c)] for c in "<|>[@")  # bytes of special tokens
    docs = TEXTS + spliced(corpus_lines(60), many, seed=6, per_line=6)
    expected = CPU.encode(cpu.kernel_model, docs, 1).to_list()
    assert expected == hf_ids(hf(UNCASED, tuple(many)), docs)
    assert gpu.encode(docs).to_list() == expected
    for chunk_bytes in (1, 7, 64):
        ids, off = cuda.encode_cuda(gpu, docs, chunk_bytes=chunk_bytes)
        ids, off = to_host(ids), to_host(off)
        got = [ids[off[d]:off[d + 1]].tolist() for d in range(len(docs))]
        assert got == expected, chunk_bytes
    w_gpu = gpu(docs, max_length=16, stride=4, return_tensors="np")
    w_cpu = cpu(docs, max_length=16, stride=4)
    for k in ("input_ids", "attention_mask", "metadata"):
        np.testing.assert_array_equal(to_host(w_gpu[k]), to_host(w_cpu[k]))
    # Registering on the GPU tokenizer in place reaches the device model too.
    before = cuda._device_model(gpu)
    gpu.add_special_tokens(["<|late|>"])
    cpu.add_special_tokens(["<|late|>"])
    assert cuda._device_model(gpu) is not before
    late = ["x<|late|>y", "<|late|><|ts|>"]
    assert gpu.encode(late).to_list() == cpu.encode(late).to_list()
    assert cpu.encode(late).to_list()[0][1] == cpu.vocab.token_to_id("<|late|>")


# ---------------------------------------------------------------------------------------
# Dask: a LocalCluster of worker processes, the accessor and a batch job
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


def _docs(n=600) -> list[str]:
    return spliced(list(corpus_lines(100))[:n], TOKENS, seed=7)


@pytest.mark.slow
def test_local_cluster_accessor(client):
    import dask.dataframe as dd

    tok = registered(UNCASED)
    docs = _docs()
    ddf = dd.from_pandas(pd.DataFrame({"text": docs}), npartitions=6)
    res = ddf["text"].wordpiece.tokenize(vocab=tok, max_length=32, stride=8)
    ids = res.input_ids.compute()
    local = tok(docs, max_length=32, stride=8)
    np.testing.assert_array_equal(np.asarray(ids), local["input_ids"])
    np.testing.assert_array_equal(res.metadata.compute().to_numpy(), local["metadata"])
    regs = {tok.vocab.token_to_id(t) for t in TOKENS}
    assert np.isin(local["input_ids"], list(regs)).sum() > 100
    # The workers hold the registered tokenizer (its hash), not the plain one.
    from daskwp.distributed import state as worker_state
    keys = [k for ks in client.run(worker_state.cached_tokenizer_keys).values() for k in ks]
    assert worker_state.tokenizer_key(tok) in keys


@pytest.mark.slow   # a local cluster
def test_local_cluster_batch_job(client, tmp_path):
    from daskwp import jobs

    tok = registered(UNCASED)
    docs = _docs()
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(d.replace("\n", " ").replace("\r", " ") or "." for d in docs)
                   + "\n", encoding="utf-8")
    lines = inp.read_text(encoding="utf-8").split("\n")[:-1]
    out = tmp_path / "out"
    cfg = jobs.make_config({"input": str(inp), "output": str(out), "partition_size": "8KB",
                            "max_length": 32, "stride": 8, "quiet": True, "device": "cpu"})
    summary = jobs.run_job(cfg, client=client, tokenizer=tok)
    assert summary["documents"] == len(lines) and summary["partitions"] > 2
    # max_length rows are stored trimmed (docs/design.md §3.3): read them back padded
    table = daskwp.read_tokenized(out).to_table().sort_by(
        [("logID", "ascending"), ("window", "ascending")])
    local = tok(lines, max_length=32, stride=8)
    got = np.array(table.column("input_ids").to_pylist())
    np.testing.assert_array_equal(got, local["input_ids"])
    job = json.loads((out / "_job.json").read_text())
    assert json.dumps(job).count(tok.vocab.hash) >= 1
