"""tok.decode / daskwp.decode against HuggingFace's BERT decoding
(``BertWordPieceTokenizer.decode`` and ``decoders.WordPiece(prefix="##", cleanup=True)``)."""

from __future__ import annotations

import numpy as np
import pytest

import daskwp
from conftest import DATA, VOCAB_LOWERCASE, read_documents, requires_data, vocab_path
from daskwp import RaggedRows, decode

CORPORA = ["en_ewt.txt", "logs/Apache_2k.log", "logs/Windows_2k.log", "multi/de.txt",
           "multi/zh.txt", "multi/ru.txt", "edge/blns.txt"]


def sample_lines(per_file=60):
    lines = []
    for name in CORPORA:
        docs = read_documents(DATA / "corpus" / name)
        lines.extend(docs[:: max(1, len(docs) // per_file)][:per_file])
    return lines


@requires_data
@pytest.mark.parametrize("vocab_name", ["bert-base-uncased", "bert-base-cased",
                                        "bert-base-multilingual-cased", "bert-base-chinese"])
def test_decode_equals_hf_on_corpus(vocab_name):
    from tokenizers import BertWordPieceTokenizer

    hf = BertWordPieceTokenizer(str(vocab_path(vocab_name)),
                                lowercase=VOCAB_LOWERCASE[vocab_name])
    tok = daskwp.WordPieceTokenizer(vocab_path(vocab_name),
                                    lowercase=VOCAB_LOWERCASE[vocab_name])
    lines = sample_lines()
    ids = [e.ids for e in hf.encode_batch(lines, add_special_tokens=True)]
    for skip in (True, False):
        want = hf.decode_batch(ids, skip_special_tokens=skip)
        got = tok.decode(ids, skip_special_tokens=skip)
        bad = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
        assert not bad, (vocab_name, skip, [(lines[i], got[i], want[i]) for i in bad[:3]])
    # one at a time, and as arrays
    for row in ids[:50]:
        assert tok.decode(row) == hf.decode(row)
        assert tok.decode(np.asarray(row, dtype=np.int32)) == hf.decode(row)


@requires_data
def test_decode_windows_and_ragged_rows():
    from tokenizers import BertWordPieceTokenizer

    hf = BertWordPieceTokenizer(str(vocab_path("bert-base-uncased")), lowercase=True)
    tok = daskwp.WordPieceTokenizer(vocab_path("bert-base-uncased"))
    lines = sample_lines(20)
    out = tok(lines, max_length=16, stride=4)
    want = hf.decode_batch(out.input_ids.tolist())
    assert tok.decode(out.input_ids) == want  # 2-D array: padding and specials skipped
    rag = tok(lines, max_length=16, stride=4, padding=False)
    assert tok.decode(rag.input_ids) == want
    assert tok.decode(out.input_ids.tolist()) == want
    assert tok.decode([np.asarray(r) for r in out.input_ids.tolist()]) == want


def test_decoder_rules_equal_hf_wordpiece_decoder():
    """Token sequences that exercise every rule: "##" on the first token stays, an empty
    token and a bare "##", per-token cleanup (only inside one token), contractions."""
    from tokenizers import decoders

    hf = decoders.WordPiece(prefix="##", cleanup=True)
    seqs = [
        ["##ing", "a", ".", "do", "not", "'", "s"],
        ["hello", " .", "x ,y", "a ' b", "do not", "n't", " 's", "'m", "?", "!", ","],
        ["a", "", "##", "b", "####c", "##d##e"],
        ["it", "'", "s", "don", "'", "t", " 've", " 're", "you 're"],
        [],
        ["[CLS]", "hi", "[SEP]"],
    ]
    tokens = sorted({t for s in seqs for t in s} | {"[UNK]"})
    v = daskwp.Vocabulary.from_tokens(tokens, special_tokens=[])
    for s in seqs:
        ids = [v.token_to_id(t) for t in s]
        assert decode(v, ids) == hf.decode(s), s


def test_special_tokens_and_odd_ids_come_from_the_vocabulary():
    from conftest import hf_from_tokens

    tokens = ["hello", "world", "[SEP]", "the", "[UNK]", "a", "[MASK]", "##s", "[CLS]", "test",
              "[PAD]", ".", "cat"]
    v = daskwp.Vocabulary.from_tokens(tokens)
    hf = hf_from_tokens(tokens)
    from tokenizers import decoders

    hf.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    ids = [8, 0, 1, 12, 7, 11, 4, 6, 2, 10, 10]
    for skip in (True, False):
        assert decode(v, ids, skip_special_tokens=skip) == hf.decode(ids,
                                                                     skip_special_tokens=skip)
    assert decode(v, ids) == "hello world cats."


def test_duplicate_tokens_and_unknown_ids_follow_hf(tmp_path):
    """An id whose token reappears later in vocab.txt has no token for HF (the later id
    wins), and ids past the vocabulary are dropped, as HF does."""
    from tokenizers import BertWordPieceTokenizer

    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\nhello\n##s\n", encoding="utf-8")
    hf = BertWordPieceTokenizer(str(path), lowercase=True)
    v = daskwp.Vocabulary.from_file(path)
    for ids in ([4, 5, 6, 7], [6, 4, 999, 5], [2, 999, 3, 4]):
        assert decode(v, ids) == hf.decode(ids), ids
        assert decode(v, ids, skip_special_tokens=False) == \
            hf.decode(ids, skip_special_tokens=False), ids


def test_input_forms_and_errors():
    tok = daskwp.WordPieceTokenizer()
    hello = [7592, 2088]
    assert tok.decode(hello) == "hello world"
    assert tok.decode(tuple(hello)) == "hello world"
    assert tok.decode(np.array(hello, dtype=np.int64)) == "hello world"
    assert tok.decode([np.int32(7592), np.int32(2088)]) == "hello world"
    assert tok.decode([]) == ""
    assert tok.decode(np.zeros(0, dtype=np.int32)) == ""
    assert tok.decode([hello, [2088]]) == ["hello world", "world"]
    assert tok.decode(np.array([hello, [101, 102]])) == ["hello world", ""]
    assert tok.decode(RaggedRows(np.array([7592, 2088, 2088], dtype=np.int32),
                                 np.array([0, 2, 3], dtype=np.int64))) == ["hello world",
                                                                            "world"]
    assert tok.decode([101, 7592, 102], skip_special_tokens=False) == "[CLS] hello [SEP]"
    with pytest.raises(ValueError, match="token ids must be >= 0, got -5"):
        tok.decode([7592, -5])
    with pytest.raises(TypeError, match="token ids must be integers, got dtype float64"):
        tok.decode(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        tok.decode(np.zeros((1, 1, 1), dtype=np.int32))
    with pytest.raises(TypeError, match="skip_special_tokens must be True or False"):
        tok.decode(hello, skip_special_tokens="yes")
