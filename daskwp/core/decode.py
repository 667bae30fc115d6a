"""Token ids back to text (HuggingFace's BERT decoding) and the word-level view of a
document (cyBERT's convention: a word carries the value of its first piece)."""

from __future__ import annotations

import numpy as np

from .cache import BoundedCache
from .labels import first_pieces
from .options import check_bool
from .ragged import BatchWindows, RaggedRows, array_module, to_host
from .vocab import Vocabulary

__all__ = ["cleanup_token", "decode", "merge_wordpieces"]

_DECODE_TABLES = BoundedCache("decode_tables", 8)


def _decode_table(vocab):
    """id -> token as HuggingFace's reverse vocabulary sees it (None where an id lost its
    token to a later duplicate), special ids, and the prefix (cached per vocabulary hash)."""
    return _DECODE_TABLES.get_or_create(vocab.hash, lambda: _build_decode_table(vocab))


def _build_decode_table(vocab):
    table = []
    for i, t in enumerate(vocab.tokens):
        table.append(t if vocab.token_to_id(t) == i else None)
    return table, frozenset(vocab.special_ids), vocab.continuing_subword_prefix


def _as_vocab(vocab):
    if isinstance(vocab, Vocabulary):
        return vocab
    inner = getattr(vocab, "vocab", None)
    if isinstance(inner, Vocabulary):
        return inner
    raise TypeError(f"vocab must be a daskwp.Vocabulary or WordPieceTokenizer, got "
                    f"{type(vocab).__name__}")


def _id_rows(ids):
    """(rows, batched): ids as a list of 1-D int arrays, and whether the input was a batch."""
    if isinstance(ids, BatchWindows) or (isinstance(ids, dict) and "input_ids" in ids):
        ids = ids["input_ids"]     # the windows of tok(texts): one text per row
    if isinstance(ids, RaggedRows):
        return [np.asarray(r) for r in RaggedRows(to_host(ids.values),
                                                  to_host(ids.offsets))], True
    if isinstance(ids, (list, tuple)):
        if len(ids) and not isinstance(ids[0], (int, np.integer)) and \
                getattr(ids[0], "ndim", 1) != 0:
            return [to_host(r).reshape(-1) for r in ids], True
        arr = np.asarray(ids) if len(ids) else np.zeros(0, dtype=np.int64)
    else:
        arr = to_host(ids)
    if arr.ndim == 2:
        return list(arr), True
    if arr.ndim > 2:
        raise ValueError(f"ids must be 1-D or 2-D, got shape {arr.shape}")
    return [arr.reshape(-1)], False


def _check_ids(arr: np.ndarray) -> list[int]:
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"token ids must be integers, got dtype {arr.dtype}")
    vals = arr.tolist()
    if arr.size and int(arr.min()) < 0:
        bad = next(v for v in vals if v < 0)
        raise ValueError(f"token ids must be >= 0, got {bad}")
    return vals


def cleanup_token(token: str) -> str:
    """HF's WordPiece decoder cleanup, applied to every token separately."""
    return (token.replace(" .", ".").replace(" ?", "?").replace(" !", "!")
            .replace(" ,", ",").replace(" ' ", "'").replace(" n't", "n't")
            .replace(" 'm", "'m").replace(" do not", " don't").replace(" 's", "'s")
            .replace(" 've", "'ve").replace(" 're", "'re"))


def _decode_one(ids: list[int], table, specials, prefix, skip: bool) -> str:
    out = []
    n_table = len(table)
    for i in ids:
        t = table[i] if i < n_table else None
        if t is None or (skip and i in specials):
            continue  # ids with no token are dropped, as HF does
        if out:
            t = t.replace(prefix, "", 1) if t.startswith(prefix) else " " + t
        out.append(cleanup_token(t))
    return "".join(out)


def decode(vocab, ids, skip_special_tokens: bool = True):
    """Token ids back to text, as HuggingFace's BERT decoding does.

    Special tokens are dropped (``skip_special_tokens``); pieces are joined with a space,
    except that a continuation piece ("##") loses its prefix and sticks to the previous
    one; each piece then gets HF's cleanup (no space before ``. ? ! ,`` and a few English
    contractions). This equals ``tokenizers.decoders.WordPiece(prefix, cleanup=True)`` /
    ``BertWordPieceTokenizer.decode``; like HF, an id with no token is skipped.

    Parameters
    ----------
    vocab : Vocabulary
    ids : list of int, 1-D array -> str; list of lists, 2-D array, RaggedRows -> list of str
    skip_special_tokens : bool, default True

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> daskwp.decode(tok, [101, 7592, 2088, 999, 102])
    'hello world!'
    >>> daskwp.decode(tok, [[7592, 2088], [15743, 7668]])
    ['hello world', 'naive cafe']
    """
    v = _as_vocab(vocab)
    skip = check_bool("skip_special_tokens", skip_special_tokens)
    table, specials, prefix = _decode_table(v)
    rows, batched = _id_rows(ids)
    texts = [_decode_one(_check_ids(r), table, specials, prefix, skip) for r in rows]
    return texts if batched else texts[0]


def merge_wordpieces(ids, values=None, *, vocab, skip_special_tokens: bool = True):
    """The word-level view of one document: "##" pieces merged into words, each word
    carrying the value of its FIRST piece (cyBERT's log-parsing convention).

    Use it on stitched sequences (:func:`stitch`): there every token appears once, so no
    piece is lost at window boundaries (cyBERT sliced windows with ``[start:stop]`` while
    ``stop`` is inclusive, dropping the last token of every window).

    Parameters
    ----------
    ids : 1-D ints (list, NumPy or CuPy array)
        Token ids of one document; a list of such sequences gives a list of results.
    values : array aligned with ``ids`` along axis 0, optional
        Per-token values (labels, probabilities, logits rows). NumPy or CuPy; a list of
        them when ``ids`` is a list of sequences.
    vocab : Vocabulary or WordPieceTokenizer
    skip_special_tokens : bool, default True
        Drop [CLS], [SEP] and [PAD] pieces (other special tokens such as [UNK] are words).

    Returns
    -------
    (words, word_values)
        ``words``: list of str (pieces concatenated, prefix removed); ``word_values``:
        ``values[first_piece_index]`` (same array module as ``values``), or None.
        A document that starts with a continuation piece starts a word with it.

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()
    >>> ids = tok.encode(["Lovelace wrote"])[0]
    >>> ids
    array([ 2293, 19217,  2626], dtype=int32)
    >>> daskwp.merge_wordpieces(ids, [1, 2, 3], vocab=tok)   # a word keeps its first piece's value
    (['lovelace', 'wrote'], array([1, 3]))
    """
    v = _as_vocab(vocab)
    skip = check_bool("skip_special_tokens", skip_special_tokens)
    rows, batched = _id_rows(ids)
    if batched:
        if values is not None and len(values) != len(rows):
            raise ValueError(f"got {len(rows)} id sequences but {len(values)} value arrays")
        return [_merge_one(r, None if values is None else values[i], v, skip)
                for i, r in enumerate(rows)]
    return _merge_one(rows[0], values, v, skip)


def _merge_one(ids: np.ndarray, values, v, skip: bool):
    table, _, prefix = _decode_table(v)
    ids_list = _check_ids(ids)
    if values is not None and int(values.shape[0] if hasattr(values, "shape")
                                  else len(values)) != len(ids_list):
        raise ValueError(f"values has {len(values)} entries along axis 0 but ids has "
                         f"{len(ids_list)}")
    drop = set()
    if skip:
        for name in ("[CLS]", "[SEP]", "[PAD]"):
            i = v.token_to_id(name)
            if i is not None:
                drop.add(i)
    pos = [p for p, i in enumerate(ids_list) if i not in drop]
    n_table = len(table)
    pieces = []
    for p in pos:
        i = ids_list[p]
        t = table[i] if i < n_table else None
        pieces.append(v.unk_token if t is None else t)
    # Word ids from the prefix (a "##" piece continues the word before it), then the one
    # first-piece rule of the label functions (docs/design.md §7.1).
    cont = np.array([bool(prefix) and t.startswith(prefix) for t in pieces], dtype=bool)
    if cont.size:
        cont[0] = False
    wid = np.cumsum(~cont) - 1
    starts = np.nonzero(first_pieces(wid))[0] if wid.size else np.zeros(0, dtype=np.int64)
    bounds = np.append(starts, len(pieces)).tolist()
    words = []
    for k in range(len(starts)):
        lo, hi = bounds[k], bounds[k + 1]
        head = pieces[lo][len(prefix):] if cont.size and lo == 0 and prefix and \
            pieces[lo].startswith(prefix) else pieces[lo]
        words.append(head + "".join(t[len(prefix):] for t in pieces[lo + 1:hi]))
    first = [pos[k] for k in starts.tolist()]
    if values is None:
        return words, None
    xp = array_module(values)
    vals = values if xp is not np else np.asarray(values)
    return words, vals[xp.asarray(np.asarray(first, dtype=np.int64))]
