"""The alignment methods of the drop-in's ``BatchEncoding`` (docs/design.md §3.6), on one
row: HuggingFace tokenizers' ``Encoding`` rules (``token_to_sequence``, ``token_to_word``,
``token_to_chars``, ``char_to_token``, ``char_to_word``, ``word_to_tokens``,
``word_to_chars``) over daskwp's sequence ids, word ids and character offsets.

A row is ``(sequence ids, word ids, offsets, number of sequences)``: per token 0 / 1 / None,
the word's index in its own sequence or None, ``(start, end)`` characters in its own text.
A sequence's range is the span of its tokens (as HF's ``sequence_ranges``: an empty sequence
has an empty range; a sequence the row does not have means the whole row).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["CharSpan", "TokenSpan", "char_to_token", "char_to_word", "token_to_chars",
           "token_to_sequence", "token_to_word", "word_to_chars", "word_to_tokens"]


class TokenSpan(NamedTuple):
    """Tokens ``start`` (included) to ``end`` (excluded), as transformers' TokenSpan."""
    start: int
    end: int


class CharSpan(NamedTuple):
    """Characters ``start`` (included) to ``end`` (excluded), as transformers' CharSpan."""
    start: int
    end: int


def _unsigned(value: int, what: str) -> int:
    if value < 0:   # HF's binding takes unsigned integers
        raise OverflowError(f"can't convert negative int to unsigned ({what}={value})")
    return value


def sequence_range(seq: list, n_sequences: int, sequence_index: int) -> range:
    _unsigned(sequence_index, "sequence_index")
    if sequence_index >= n_sequences:
        return range(len(seq))
    at = [k for k, s in enumerate(seq) if s == sequence_index]
    if not at:
        return range(0)
    return range(at[0], at[-1] + 1)


def token_to_sequence(seq: list, token: int):
    _unsigned(token, "token_index")
    return seq[token] if token < len(seq) else None


def token_to_word(seq: list, words: list, token: int):
    if token_to_sequence(seq, token) is None:
        return None
    return words[token]


def token_to_chars(seq: list, offsets: list, token: int):
    if token_to_sequence(seq, token) is None:
        return None
    return CharSpan(*offsets[token])


def char_to_token(seq: list, offsets: list, n_sequences: int, char: int,
                  sequence_index: int = 0):
    _unsigned(char, "char_index")
    for k in sequence_range(seq, n_sequences, sequence_index):
        start, end = offsets[k]
        if start <= char < end:
            return k
    return None


def char_to_word(seq: list, words: list, offsets: list, n_sequences: int, char: int,
                 sequence_index: int = 0):
    token = char_to_token(seq, offsets, n_sequences, char, sequence_index)
    return None if token is None else token_to_word(seq, words, token)


def word_to_tokens(seq: list, words: list, n_sequences: int, word: int,
                   sequence_index: int = 0):
    _unsigned(word, "word_index")
    start = end = None
    for k in sequence_range(seq, n_sequences, sequence_index):
        w = words[k]
        if w is not None and w > word:
            break                      # HF stops at the first later word
        if w == word:
            start = k if start is None else min(start, k)
            end = k + 1 if end is None else max(end, k + 1)
    return None if start is None else TokenSpan(start, end)


def word_to_chars(seq: list, words: list, offsets: list, n_sequences: int, word: int,
                  sequence_index: int = 0):
    span = word_to_tokens(seq, words, n_sequences, word, sequence_index)
    if span is None or span.end == 0:
        # transformers builds CharSpan(*None) here: a TypeError
        raise TypeError(f"word_to_chars: word {word} of sequence {sequence_index} has no "
                        f"tokens in this row (transformers: CharSpan() argument after * "
                        f"must be an iterable, not NoneType)")
    return CharSpan(offsets[span.start][0], offsets[span.end - 1][1])
