"""transformers 4's ``truncate_sequences`` and ``prepare_for_model`` for the drop-in
(docs/design.md §3.6).

transformers 5 dropped both; code written against transformers 4's ``BertTokenizerFast``
(question answering and token classification preprocessing that works on ids) calls them.
They follow transformers 4.57 (the last 4.x release, ``PreTrainedTokenizerBase``): the same
results, types, logged errors and warnings (on transformers' logger) and raised errors, with
these exceptions, each a clear error or a defined result instead of 4.x's accident:

* ``prepare_for_model(..., return_offsets_mapping=True)`` raises ``NotImplementedError``
  (ids have no characters; 4.x ignores the flag and returns no ``offset_mapping``);
* ``return_special_tokens_mask=True`` with special tokens gives the mask of BERT's template
  (4.x's slow ``BertTokenizer``; 4.x's ``BertTokenizerFast`` fails an ``assert`` there);
* ids must be a sequence of ints (a list, tuple or NumPy array: a list is returned); a
  negative ``stride`` or ``max_length`` and an unknown ``padding_side`` raise ``ValueError``;
* ``return_overflowing_tokens=True`` without a ``max_length`` raises a ``TypeError`` that
  says so (4.x's is ``int - None``).

The functions take the drop-in (``TransformersTokenizer``, duck typing: this module does not
import :mod:`~daskwp.backends.transformers_compat`) as their first argument; its methods of
the same names call them. Truncation ranges come from
:mod:`~daskwp.backends.transformers_truncation`, padding from the drop-in's ``pad``.
"""

from __future__ import annotations

import logging
import warnings
from enum import Enum

import numpy as np

from .transformers_batch import BatchEncoding, as_tensor, tensor_kind
from .transformers_truncation import cut_one, longest_first_cuts

__all__ = ["TruncationStrategy", "prepare_for_model", "truncate_sequences"]

#: transformers' logger for its tokenizers' messages (the drop-in's other warnings go there).
logger = logging.getLogger("transformers.tokenization_utils_base")


class TruncationStrategy(str, Enum):
    """transformers 4's truncation strategies (its messages print the member, e.g.
    ``TruncationStrategy.ONLY_FIRST`` on Python 3.11, as this class does)."""

    ONLY_FIRST = "only_first"
    ONLY_SECOND = "only_second"
    LONGEST_FIRST = "longest_first"
    DO_NOT_TRUNCATE = "do_not_truncate"


def _strategy(value) -> TruncationStrategy:
    v = getattr(value, "value", value)
    try:
        return TruncationStrategy(v)
    except ValueError:
        raise ValueError(f"{value} is not a valid TruncationStrategy, please select one of "
                         f"{[s.value for s in TruncationStrategy]}") from None


def truncate_sequences(tok, ids, pair_ids=None, num_tokens_to_remove: int = 0,
                       truncation_strategy="longest_first", stride: int = 0):
    """transformers 4's ``truncate_sequences``: ``(ids, pair_ids, overflowing_tokens)`` with
    ``num_tokens_to_remove`` tokens cut on ``tok.truncation_side``. ``only_first`` /
    ``only_second`` (and ``longest_first`` without a pair) give the removed tokens and
    ``stride`` more as ``overflowing_tokens``; ``longest_first`` on a pair cuts the longer
    first, gives no overflow and logs transformers' warning saying so; where the sequence to
    cut is not longer than ``num_tokens_to_remove``, nothing is cut and transformers' error is
    logged; ``only_second`` without a pair and ``do_not_truncate`` cut nothing. The inputs
    are sliced (their type is kept); nothing is cut when ``num_tokens_to_remove <= 0``."""
    if num_tokens_to_remove <= 0:
        return ids, pair_ids, []
    strategy = _strategy(truncation_strategy)
    if stride < 0:
        raise ValueError(f"stride must be >= 0, got {stride}")
    side = tok.truncation_side
    overflowing = []
    if strategy == TruncationStrategy.ONLY_FIRST or (
            strategy == TruncationStrategy.LONGEST_FIRST and pair_ids is None):
        cut = cut_one(len(ids), num_tokens_to_remove, stride, side)
        if cut is None:
            msg = (f"We need to remove {num_tokens_to_remove} to truncate the input but the "
                   f"first sequence has a length {len(ids)}. ")
            if strategy == TruncationStrategy.ONLY_FIRST:
                msg += (f"Please select another truncation strategy than {strategy}, for "
                        f"instance 'longest_first' or 'only_second'.")
            logger.error(msg)
        else:
            (a, b), (c, d) = cut
            ids, overflowing = ids[a:b], ids[c:d]
    elif strategy == TruncationStrategy.LONGEST_FIRST:
        logger.warning(
            "Be aware, overflowing tokens are not returned for the setting you have chosen, "
            "i.e. sequence pairs with the 'longest_first' truncation strategy. So the returned "
            "list will always be empty even if some tokens have been removed.")
        (a, b), (c, d) = longest_first_cuts(len(ids), len(pair_ids), num_tokens_to_remove,
                                            side)
        ids, pair_ids = ids[a:b], pair_ids[c:d]
    elif strategy == TruncationStrategy.ONLY_SECOND and pair_ids is not None:
        cut = cut_one(len(pair_ids), num_tokens_to_remove, stride, side)
        if cut is None:
            logger.error(
                f"We need to remove {num_tokens_to_remove} to truncate the input but the "
                f"second sequence has a length {len(pair_ids)}. Please select another "
                f"truncation strategy than {strategy}, for instance 'longest_first' or "
                f"'only_first'.")
        else:
            (a, b), (c, d) = cut
            pair_ids, overflowing = pair_ids[a:b], pair_ids[c:d]
    return ids, pair_ids, overflowing


def _id_list(ids, name: str) -> list:
    """``ids`` as a list of Python ints; a TypeError naming what it got otherwise."""
    if isinstance(ids, (str, bytes)) or not hasattr(ids, "__len__"):
        raise TypeError(f"prepare_for_model: {name} must be a list of token ids (int), got "
                        f"{type(ids).__name__} {ids!r:.60}")
    out = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
    out = [int(i) if isinstance(i, np.integer) else i for i in out]
    for i in out:
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"prepare_for_model: {name} must be a list of token ids (int), "
                            f"got an item {i!r:.60} of type {type(i).__name__}")
    return out


def _tensor(key, value, kind: str, prepend: bool):
    """transformers 4's ``BatchEncoding.convert_to_tensors`` of one value: a number (the
    ``length`` or ``num_truncated_tokens`` of one sequence) is not converted but refused,
    empty values are int64."""
    if prepend:
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"Unable to create tensor, you should probably activate truncation and/or padding "
            f"with 'padding=True' 'truncation=True' to have batched tensors with the same "
            f"length. Perhaps your features (`{key}` in this case) have excessive nesting "
            f"(inputs type `list` where type `int` is expected). (transformers 4.x cannot make "
            f"a tensor of the number {value!r} of one sequence: pass prepend_batch_axis=True)")
    if not value or (isinstance(value[0], (list, tuple)) and not any(len(v) for v in value)):
        empty = np.asarray(value, dtype=np.int64)
        return as_tensor(key, empty, kind)
    return as_tensor(key, value, kind)


def prepare_for_model(tok, ids, pair_ids=None, add_special_tokens: bool = True, padding=False,
                      truncation=None, max_length: int | None = None, stride: int = 0,
                      pad_to_multiple_of: int | None = None, padding_side: str | None = None,
                      return_tensors=None, return_token_type_ids: bool | None = None,
                      return_attention_mask: bool | None = None,
                      return_overflowing_tokens: bool = False,
                      return_special_tokens_mask: bool = False,
                      return_offsets_mapping: bool = False, return_length: bool = False,
                      verbose: bool = True, prepend_batch_axis: bool = False) -> BatchEncoding:
    """transformers 4's ``prepare_for_model``: the ids of one sequence (or a pair) framed
    with BERT's special tokens, truncated (:func:`truncate_sequences`), padded and converted
    as ``tok(text, ...)`` would for one text, in a ``BatchEncoding`` (un-batched lists
    unless ``return_tensors`` is set; ``prepend_batch_axis=True`` adds the batch axis)."""
    if return_offsets_mapping:
        raise NotImplementedError(
            "prepare_for_model(..., return_offsets_mapping=True): ids have no characters to "
            "map (transformers 4.x ignores the flag and returns no offset_mapping); call the "
            "tokenizer on the text for offsets")
    ids = _id_list(ids, "ids")
    pair_ids = None if pair_ids is None else _id_list(pair_ids, "pair_ids")
    if padding_side is not None and padding_side not in ("left", "right"):
        raise ValueError(f"Invalid padding strategy:{padding_side}")
    if int(stride) < 0:
        raise ValueError(f"stride must be >= 0, got {stride}")
    if verbose and max_length is not None:
        # transformers 4's notices about a max_length that the other options ignore
        if padding is False and truncation is None:
            key = "Truncation-not-explicitly-activated"
            if not tok.deprecation_warnings.get(key):
                logger.warning(
                    "Truncation was not explicitly activated but `max_length` is provided a "
                    "specific value, please use `truncation=True` to explicitly truncate "
                    "examples to max length. Defaulting to 'longest_first' truncation "
                    "strategy. If you encode pairs of sequences (GLUE-style) with the "
                    "tokenizer you can select this strategy more precisely by providing a "
                    "specific strategy to `truncation`.")
            tok.deprecation_warnings[key] = True
        elif padding is True and truncation in (None, False, "do_not_truncate"):
            warnings.warn("`max_length` is ignored when `padding`=`True` and there is no "
                          "truncation strategy. To pad to max length, use "
                          "`padding='max_length'`.")
    pad, strategy, max_length = tok._strategies(padding, truncation, max_length,
                                                pad_to_multiple_of)
    pair = pair_ids is not None
    if return_token_type_ids and not add_special_tokens:
        raise ValueError(
            "Asking to return token_type_ids while setting add_special_tokens to False results "
            "in an undefined behavior. Please set add_special_tokens to True or set "
            "return_token_type_ids to None.")
    if return_overflowing_tokens and strategy == "longest_first" and pair:
        raise ValueError(
            "Not possible to return overflowing tokens for pair of sequences with the "
            "`longest_first`. Please select another truncation strategy than "
            "`longest_first`, for instance `only_second` or `only_first`.")
    if return_token_type_ids is None:
        return_token_type_ids = "token_type_ids" in tok.model_input_names
    if return_attention_mask is None:
        return_attention_mask = "attention_mask" in tok.model_input_names
    total = len(ids) + (len(pair_ids) if pair else 0) + \
        (tok.num_special_tokens_to_add(pair=pair) if add_special_tokens else 0)
    out: dict = {}
    overflowing = []
    if strategy is not None and max_length and total > max_length:
        ids, pair_ids, overflowing = truncate_sequences(
            tok, ids, pair_ids=pair_ids, num_tokens_to_remove=total - max_length,
            truncation_strategy=strategy, stride=stride)
    if return_overflowing_tokens:
        if max_length is None:
            raise TypeError(
                "return_overflowing_tokens=True needs a max_length (none was given, and "
                "truncation is off or the tokenizer has no model_max_length): "
                "num_truncated_tokens is the length less max_length (transformers 4.x fails "
                "here too)")
        out["overflowing_tokens"] = overflowing
        out["num_truncated_tokens"] = total - max_length
    if add_special_tokens:
        sequence = tok.build_inputs_with_special_tokens(ids, pair_ids)
        token_type_ids = tok.create_token_type_ids_from_sequences(ids, pair_ids)
    else:
        sequence = ids + pair_ids if pair else list(ids)
        token_type_ids = [0] * len(sequence)
    out["input_ids"] = sequence
    if return_token_type_ids:
        out["token_type_ids"] = token_type_ids
    if return_special_tokens_mask:
        out["special_tokens_mask"] = tok.get_special_tokens_mask(ids, pair_ids) \
            if add_special_tokens else [0] * len(sequence)
    if max_length is None and verbose and tok.model_max_length != 0:
        tok._warn_if_too_long(sequence)
    if pad != "do_not_pad" or return_attention_mask:
        out = dict(tok.pad(out, padding=pad, max_length=max_length,
                           pad_to_multiple_of=pad_to_multiple_of, padding_side=padding_side,
                           return_attention_mask=return_attention_mask).data)
    if return_length:
        out["length"] = len(out["input_ids"])
    if return_tensors is not None:
        kind = tensor_kind(return_tensors)
        out = {k: _tensor(k, v, kind, bool(prepend_batch_axis)) for k, v in out.items()}
    return BatchEncoding(out, owner=tok)
