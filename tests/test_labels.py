"""align_labels, spans_to_labels, labels_to_spans (docs/design.md §7.1) on real logs.

The oracle for offsets and word ids here is HF ``tokenizers`` itself (``Encoding.offsets``,
``Encoding.word_ids``), so these tests check the label functions independently of daskwp's
own offsets; tests/test_offsets.py checks those against HF.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import daskwp
from daskwp.core.labels import first_pieces

from conftest import data_file, hf_tokenizer, read_lines, slow_unless

# Each log format's own structure: named fields of a line, in order (loghub's formats).
LOG_FORMATS = {
    "HDFS_2k.log": r"(?P<date>\d{6}) (?P<time>\d{6}) (?P<pid>\d+) (?P<level>\w+) "
                   r"(?P<component>[^:]+): (?P<content>.*)",
    "OpenSSH_2k.log": r"(?P<month>\w{3}) +(?P<day>\d+) (?P<time>[\d:]+) (?P<host>\S+) "
                      r"(?P<component>[\w-]+)\[(?P<pid>\d+)\]: (?P<content>.*)",
    "Apache_2k.log": r"\[(?P<time>[^\]]+)\] \[(?P<level>\w+)\] (?P<content>.*)",
    "Zookeeper_2k.log": r"(?P<date>[\d-]+) (?P<time>[\d:,]+) - (?P<level>\w+) +"
                        r"\[(?P<node>.*?)\] - (?P<content>.*)",
}
FIELD_IDS = {name: i + 1 for i, name in enumerate(
    ["date", "time", "pid", "level", "component", "content", "month", "day", "host", "node"])}


def _field_spans(lines, pattern):
    """(lines that match, per line the (begin, end, field id) spans of its fields)."""
    rx = re.compile(pattern)
    kept, spans = [], []
    for line in lines:
        m = rx.fullmatch(line)
        if not m:
            continue
        kept.append(line)
        spans.append([(m.start(g), m.end(g), FIELD_IDS[g]) for g in rx.groupindex
                      if m.end(g) > m.start(g)])
    return kept, spans


def _hf_rows(lines):
    hf = hf_tokenizer("bert-base-uncased")
    encs = hf.encode_batch(lines, add_special_tokens=True)
    offs = [np.array(e.offsets, dtype=np.int64).reshape(-1, 2) for e in encs]
    wids = [np.array([-1 if w is None else w for w in e.word_ids], dtype=np.int64)
            for e in encs]
    return encs, offs, wids


def _hf_align(labels, word_ids, label_all_tokens):
    """HF's token-classification loop (run_ner's tokenize_and_align_labels), as written there."""
    out, prev = [], None
    for w in word_ids:
        if w is None:
            out.append(-100)
        elif w != prev:
            out.append(labels[w])
        else:
            out.append(labels[w] if label_all_tokens else -100)
        prev = w
    return out


@pytest.mark.slow   # every line of every log; test_spans_to_labels_and_back_on_real_logs stays fast
@pytest.mark.parametrize("label_all_tokens", [False, True])
def test_align_labels_equals_hf_convention_on_every_log_line(label_all_tokens):
    for path in sorted(data_file("corpus/logs").glob("*.log")):
        lines = read_lines(path)
        encs, _, wids = _hf_rows(lines)
        rng = np.random.default_rng(len(lines))
        word_labels = [rng.integers(0, 9, size=(max(w.max(), -1) + 1)) for w in wids]
        got = daskwp.align_labels(word_labels, wids, label_all_tokens)
        for i, e in enumerate(encs):
            want = _hf_align(word_labels[i].tolist(), e.word_ids, label_all_tokens)
            assert got[i].tolist() == want, (path.name, i, lines[i])


def test_align_labels_windows_rows_restart_words_and_take_documents():
    # Two documents; rows cut from them by hand, the second row of document 0 starting in the
    # middle of word 2: HF restarts previous_word_idx per row, so that piece is a first piece.
    wid = np.array([[-1, 0, 1, 2, 2, -1],
                    [-1, 2, 3, 3, -1, -1],
                    [-1, 0, 0, 1, -1, -1]])
    labels = [np.array([5, 6, 7, 8]), np.array([1, 2])]
    got = daskwp.align_labels(labels, wid, document_of_row=[0, 0, 1])
    assert got.tolist() == [[-100, 5, 6, 7, -100, -100],
                            [-100, 7, 8, -100, -100, -100],
                            [-100, 1, -100, 2, -100, -100]]
    assert first_pieces(wid).sum() == 7
    with pytest.raises(ValueError, match="document_of_row"):
        daskwp.align_labels(labels, wid)
    with pytest.raises(ValueError, match="word id 3 but its document 1 has 2"):
        daskwp.align_labels(labels, wid, document_of_row=[0, 1, 1])
    with pytest.raises(TypeError, match="integers"):
        daskwp.align_labels(labels, wid.astype(float), document_of_row=[0, 0, 1])
    ragged = daskwp.RaggedRows(np.array([0, 0, 1, -1, 0]), np.array([0, 4, 5]))
    r = daskwp.align_labels([np.array([3, 4]), np.array([9])], ragged)
    assert isinstance(r, daskwp.RaggedRows) and r.values.tolist() == [3, -100, 4, -100, 9]


@pytest.mark.parametrize("log", slow_unless(sorted(LOG_FORMATS), fast={"Apache_2k.log"}))
def test_spans_to_labels_and_back_on_real_logs(log):
    lines, spans = _field_spans(read_lines(data_file(f"corpus/logs/{log}")), LOG_FORMATS[log])
    assert len(lines) >= 1900, f"{log}: only {len(lines)} lines match its format"
    encs, offs, wids = _hf_rows(lines)
    tok_labels = daskwp.spans_to_labels(spans, offs, outside=0)
    for i in range(len(lines)):
        # Direct: the field that holds each token's first character.
        want = []
        for (b, e), w in zip(offs[i].tolist(), wids[i].tolist()):
            if e <= b:
                want.append(-100)
                continue
            want.append(next((f for s, t, f in spans[i] if s <= b < t), 0))
        assert tok_labels[i].tolist() == want, (log, i, lines[i])
    back = daskwp.labels_to_spans(tok_labels, offs, wids, outside=0)
    assert list(back) == list(range(len(lines)))
    for i, line in enumerate(lines):
        # One span per word: the word's tokens' range, labelled by its field; every field's
        # text is covered by the words inside it, so each field is rebuilt from its words.
        words = {}
        for (b, e), w in zip(offs[i].tolist(), wids[i].tolist()):
            if w >= 0:
                words.setdefault(w, [b, e])[1] = e
        want = [(b, e, next(f for s, t, f in spans[i] if s <= b < t))
                for b, e in words.values() if any(s <= b < t for s, t, _ in spans[i])]
        assert back[i] == want, (log, i, line)
        for s, t, f in spans[i]:
            inside = [(b, e) for b, e, g in back[i] if g == f and s <= b < t]
            if inside and line[s:t].strip():
                assert inside[0][0] >= s and inside[-1][1] <= t


def test_labels_to_spans_stitches_overlapping_windows():
    # Windows of one long log line (HF overflow with a stride), each token owned once by the
    # metadata: the spans equal those of the whole line in one row.
    line = " ".join(read_lines(data_file("corpus/logs/HDFS_2k.log"))[:12])
    hf = hf_tokenizer("bert-base-uncased")
    whole = hf.encode(line)
    off = np.array(whole.offsets, dtype=np.int64)
    wid = np.array([-1 if w is None else w for w in whole.word_ids])
    labels = (wid * 7 + 3) % 5
    labels[wid < 0] = -100
    n, L, stride = len(whole.ids) - 2, 30, 8
    step = L - stride
    rows, meta = [], []
    starts = list(range(0, max(n - stride, 1), step))
    for k, s in enumerate(starts):
        body = np.arange(1 + s, 1 + min(s + L, n))
        idx = np.concatenate([[0], body, [len(whole.ids) - 1]])
        pad = L + 2 - len(idx)
        rows.append((np.pad(idx, (0, pad), constant_values=-1)))
        own0 = 1 if k == 0 else 1 + stride // 2
        own1 = len(body) if k == len(starts) - 1 else len(body) - (stride - stride // 2)
        meta.append((0, own0, own1))
    rows = np.array(rows)
    take = np.where(rows >= 0, rows, 0)
    r_lab = np.where(rows >= 0, labels[take], -100)
    r_off = np.where((rows >= 0)[..., None], off[take], 0)
    r_wid = np.where(rows >= 0, wid[take], -1)
    meta = np.array(meta)
    stitched = daskwp.stitch(r_wid, meta)[0]
    assert stitched.tolist() == wid[1:-1].tolist()
    got = daskwp.labels_to_spans(r_lab, r_off, r_wid, meta)
    want = daskwp.labels_to_spans(labels[None], off[None], wid[None])
    assert got == want and len(got[0]) == wid.max() + 1
    assert got[0][0][0] == 0 and got[0][-1][1] == len(line)
    assert daskwp.labels_to_spans(r_lab, r_off, r_wid, meta, outside=0) == {
        0: [s for s in want[0] if s[2] != 0]}


def test_spans_to_labels_refuses_overlaps_and_reversed_spans():
    off = np.array([[0, 0], [0, 3], [4, 7], [0, 0]])
    with pytest.raises(ValueError, match="overlap"):
        daskwp.spans_to_labels([[(0, 5, 1), (4, 7, 2)]], off)
    with pytest.raises(ValueError, match="ends before it begins"):
        daskwp.spans_to_labels([[(5, 1, 1)]], off)
    assert daskwp.spans_to_labels([[(4, 7, 2)]], off, outside=9).tolist() == [-100, 9, 2, -100]
    assert daskwp.spans_to_labels([[]], off).tolist() == [-100, 0, 0, -100]


def test_merge_wordpieces_uses_the_same_first_piece_rule():
    tok = daskwp.WordPieceTokenizer()
    text = "unaffable tokenization of 10.251.73.220:50010"
    ids = tok.encode([text])[0]
    hf = hf_tokenizer("bert-base-uncased").encode(text, add_special_tokens=False)
    wid = np.array(hf.word_ids)
    words, vals = daskwp.merge_wordpieces(ids, np.arange(len(ids)), vocab=tok)
    # Words from "##" pieces: each first piece per the prefix is a first piece per word ids
    # wherever the word has no inner punctuation (here: all of them but the address).
    assert words[:4] == ["unaffable", "tokenization", "of", "10"]
    assert set(vals.tolist()) <= set(np.nonzero(first_pieces(wid))[0].tolist())
