"""The single-machine tokenizer: HuggingFace-exact WordPiece over whole batches."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core import config
from ..core.added_spans import strip_flags, widen_added_spans
from ..core.cache import BoundedCache
from ..core.decode import decode as decode_ids
from ..core.normalizer import (compile_pipeline, internal_prefix, make_pipeline,
                               whitespace_vanishes)
from ..core.options import (TOKENIZER, check, names,
                            normalize_device)
from ..core.pairs import extras_options, sequence_options
from ..core.postprocess import BERT, read_post_processor
from ..core.ragged import Encoding
from ..core.vocab import (DEFAULT_SPECIAL_NAMES, SPECIAL_NAME_OPTIONS, Vocabulary,
                          check_new_special_tokens)
from ..core.windows import WINDOW_OPTIONS, window_params
from .cpu import CPU, default_num_threads
from .protocol import KernelModel

if TYPE_CHECKING:   # the drop-in is imported by the two methods that use it (its import
    # is ~0.03 s of the command's start, which builds a tokenizer and never uses it)
    from .transformers_compat import TransformersTokenizer

__all__ = ["FROM_FILE", "TOKENIZER_OPTIONS", "WordPieceTokenizer", "resolve_tokenizer"]


def _extras_options(return_offsets_mapping, return_word_ids, offsets_unit):
    """(offsets unit or None, word ids wanted) of checked extra-output options."""
    rom = check("return_offsets_mapping",
                False if return_offsets_mapping is None else return_offsets_mapping)
    rwi = check("return_word_ids", False if return_word_ids is None else return_word_ids)
    unit = check("offsets_unit", "chars" if offsets_unit is None else offsets_unit)
    return (unit if rom else None), rwi

#: Tokenizer options of ``tokenize(...)`` besides ``vocab`` and ``lowercase`` (option table).
TOKENIZER_OPTIONS = tuple(n for n in names(TOKENIZER)
                          if n not in ("vocab", "lowercase", "num_threads", "device"))


class _FromFile:
    """Default of a tokenizer setting: the vocabulary file's (a ``tokenizer.json``), else the
    option table's default. Pass a value to override it."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "FROM_FILE"

    def __reduce__(self):
        return (_FromFile, ())


#: Default of the BERT flags and ``max_input_chars_per_word``: the file's, else the table's.
FROM_FILE = _FromFile()

#: BertNormalizer's flags, with HF's defaults.
BERT_FLAGS = {"clean_text": True, "handle_chinese_chars": True, "strip_accents": None,
              "lowercase": True}
_FLAG_ORDER = ("lowercase", "strip_accents", "clean_text", "handle_chinese_chars")
_BERT_PRE_TOKENIZER = {"type": "BertPreTokenizer"}


def _json_text(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _is_bert_normalizer(spec) -> bool:
    return isinstance(spec, dict) and spec.get("type") == "BertNormalizer"


def _describe(spec) -> str:
    if spec is None:
        return "none"
    if isinstance(spec, dict) and spec.get("type") == "Sequence":
        return "Sequence[" + ", ".join(_describe(x) for x in spec.get("normalizers") or
                                       spec.get("pretokenizers") or []) + "]"
    return spec.get("type") if isinstance(spec, dict) else repr(spec)


class WordPieceTokenizer:
    """WordPiece tokenizer with HuggingFace ``tokenizers`` semantics: by default
    ``BertWordPieceTokenizer``'s (BertNormalizer, BertPreTokenizer, WordPiece), or a
    ``tokenizer.json``'s own pipeline.

    Parameters
    ----------
    vocab : Vocabulary, str or path, optional
        A :class:`Vocabulary`, or a path to ``vocab.txt`` / ``tokenizer.json`` / a model
        folder. Default: the bundled bert-base-uncased vocabulary. A ``tokenizer.json``
        brings its normalizer, pre-tokenizer, word limit and special tokens; the keywords
        below override them.
    lowercase : bool, default: the file's BertNormalizer setting, else True
        Lowercase the text (per character, as HF does).
    strip_accents : bool or None, default: the file's, else None
        Remove combining marks after NFD; None follows ``lowercase`` (HF's rule).
    clean_text : bool, default: the file's, else True
        Remove control/format characters and map whitespace to spaces.
    handle_chinese_chars : bool, default: the file's, else True
        Make every CJK ideograph a word of its own.
        (These four are BertNormalizer's flags; with another normalizer they are refused.)
    max_input_chars_per_word : int, default: the file's, else 100
        A longer word (in characters after normalization) becomes the unknown token.
    num_threads : int, optional
        Threads for a batch; default all cores (1 inside a Dask worker thread).
    device : {"cpu", "cuda"}, default "cpu"
        Where ``encode`` and ``__call__`` run. cudf and other device-resident inputs always
        run on the GPU (``daskwp.backends.cuda``: the same core compiled with NVRTC), and their
        outputs stay there (CuPy arrays).
    normalizer, pre_tokenizer : dict or str, optional
        A HF normalizer / pre-tokenizer as in a ``tokenizer.json`` (the object or its JSON
        text; ``"null"``: none). Default: the file's, else BertNormalizer (from the flags
        above) and BertPreTokenizer. What daskwp runs exactly is in docs/design.md §1.7;
        anything else is refused with a ValueError naming the component.
    post_processor : dict or str, optional
        The special tokens and type ids around the sequences of a row, as a HF
        post-processor (``tokenizer.json`` JSON, an object or its text; ``"null"``: none):
        ``BertProcessing``, ``TemplateProcessing`` (``$A`` once, ``$B`` once after it, any
        special tokens and type ids around them), none, or a ``Sequence`` holding at most one
        of them; others (``RobertaProcessing``, ``ByteLevel``, ...) are refused by name.
        Default: the ``tokenizer.json``'s, else ``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B:1
        [SEP]:1`` with ``cls_token`` and ``sep_token``. Its special tokens per row set the
        room of the windows (docs/design.md §1.7, §2.1).
    unk_token, cls_token, sep_token, pad_token, mask_token : str, optional
        The special tokens, for vocabularies that spell them differently (default: the
        ``tokenizer.json``'s, else ``[UNK] [CLS] [SEP] [PAD] [MASK]``).

    Notes
    -----
    **Differences from HuggingFace.** The ids are HF's wherever HF accepts the input. Input
    that is not valid UTF-8 (binary columns, lone surrogates) decodes to U+FFFD, which
    ``clean_text`` removes, where HF refuses it; the other cases (special tokens,
    ``tokenizer.json`` pipelines that are refused by name) are in docs/differences-hf.md.

    Examples
    --------
    >>> import daskwp
    >>> tok = daskwp.WordPieceTokenizer()          # the bundled bert-base-uncased
    >>> enc = tok.encode(["Hello world!", "naïve café"])
    >>> enc.to_list()
    [[7592, 2088, 999], [15743, 7668]]
    >>> out = tok(["Hello world!"], max_length=8)
    >>> out.input_ids
    array([[ 101, 7592, 2088,  999,  102,    0,    0,    0]], dtype=int32)
    >>> out.metadata                               # (logID, start, stop), stop inclusive
    array([[0, 1, 3]], dtype=int64)
    >>> tok.decode(enc[0])
    'hello world!'
    """

    def __init__(self, vocab: Vocabulary | str | os.PathLike | None = None, *,
                 lowercase: bool = FROM_FILE, strip_accents: bool | None = FROM_FILE,
                 clean_text: bool = FROM_FILE, handle_chinese_chars: bool = FROM_FILE,
                 max_input_chars_per_word: int = FROM_FILE, num_threads: int | None = None,
                 device: str = "auto", normalizer=None, pre_tokenizer=None,
                 post_processor=None, unk_token: str | None = None, cls_token: str | None = None,
                 sep_token: str | None = None, pad_token: str | None = None,
                 mask_token: str | None = None):
        given = {"lowercase": lowercase, "strip_accents": strip_accents,
                 "clean_text": clean_text, "handle_chinese_chars": handle_chinese_chars}
        given = {k: check(k, v) for k, v in given.items() if v is not FROM_FILE}
        names = {k: check(k, v) for k, v in (("unk_token", unk_token),
                                             ("cls_token", cls_token),
                                             ("sep_token", sep_token),
                                             ("pad_token", pad_token),
                                             ("mask_token", mask_token))}
        normalizer = check("normalizer", normalizer)
        pre_tokenizer = check("pre_tokenizer", pre_tokenizer)
        post_processor = check("post_processor", post_processor)
        if vocab is None:
            vocab = Vocabulary.default()
        elif not isinstance(vocab, Vocabulary):
            vocab = Vocabulary.from_file(vocab, **names)
        vocab = vocab.with_special_names(**names)
        self.vocab = vocab
        file = vocab.config if "normalizer" in (vocab.config or {}) else {}
        where = f"tokenizer file {vocab.source!r}" if file else "tokenizer"

        # The normalizer: given, else the file's, else BertNormalizer.
        if normalizer is not None:
            norm_spec, where_norm = json.loads(normalizer), "tokenizer"
        elif file:
            norm_spec, where_norm = file.get("normalizer"), where
        else:
            norm_spec, where_norm = {"type": "BertNormalizer", **BERT_FLAGS}, "tokenizer"
        if _is_bert_normalizer(norm_spec):
            flags = {}
            for k, default in BERT_FLAGS.items():
                v = given.get(k, norm_spec.get(k, default))
                flags[k] = check(k, v) if k in given else self._file_flag(where_norm, k, v)
            norm_spec = {"type": "BertNormalizer", **flags}
            for k in _FLAG_ORDER:
                setattr(self, k, flags[k])
        else:
            if given:
                raise ValueError(
                    f"{where_norm}: {', '.join(sorted(given))} set a BertNormalizer's flags, but "
                    f"the normalizer is {_describe(norm_spec)}; pass normalizer=... to change "
                    f"it")
            for k in _FLAG_ORDER:
                setattr(self, k, None)
        if pre_tokenizer is not None:
            pre_spec, where_pre = json.loads(pre_tokenizer), "tokenizer"
        elif file:
            pre_spec, where_pre = file.get("pre_tokenizer"), where
        else:
            pre_spec, where_pre = _BERT_PRE_TOKENIZER, "tokenizer"
        if max_input_chars_per_word is FROM_FILE:
            max_input_chars_per_word = file.get("max_input_chars_per_word", 100)
        self.max_input_chars_per_word = check("max_input_chars_per_word",
                                              max_input_chars_per_word)
        self.num_threads = check("num_threads", num_threads)
        self.device = normalize_device(device)
        try:
            pipeline = make_pipeline(norm_spec, pre_spec)
        except ValueError as e:
            at = where_norm if str(e).startswith("normalizer") else where_pre
            raise ValueError(f"{at}: {e}") from None
        self.normalizer = _json_text(norm_spec)
        self.pre_tokenizer = _json_text(pre_spec)
        self.pipeline = pipeline
        compiled = compile_pipeline(pipeline)
        stripped = (vocab.config or {}).get("stripped_added_tokens") or ()
        if stripped and not whitespace_vanishes(pipeline):
            raise ValueError(
                f"tokenizer file {vocab.source!r}: added token {stripped[0]!r} has \"lstrip\" "
                f"or \"rstrip\": true (it takes the whitespace next to it), which daskwp "
                f"supports only with a pre-tokenizer that removes whitespace (this one, "
                f"{_describe(pre_spec)}, keeps it in its pieces)")
        self._compiled = compiled
        self._where = where
        self._read_post_processor(post_processor, file, where)
        self._bind(vocab)

    def _read_post_processor(self, given, file: dict, where: str) -> None:
        """The post-processor (docs/design.md §1.7): ``given`` (JSON text), else the
        file's, else BERT's frame from the vocabulary's ``cls_token`` / ``sep_token``."""
        if given is not None:
            self.post_processor = given
            self.processor = read_post_processor(given)
            return
        if "post_processor" not in file:
            self.post_processor, self.processor = None, BERT
            return
        spec = file["post_processor"]
        self.processor = read_post_processor(spec, where)
        self.post_processor = _json_text(spec)
        if self.processor.kind == "template":
            named = file.get("special_names") or {}
            for k in ("cls_token", "sep_token"):
                want = named.get(k, DEFAULT_SPECIAL_NAMES[k])
                if self.vocab.special_names[k] != want:
                    raise ValueError(
                        f"{where}: {k}={self.vocab.special_names[k]!r} would rename "
                        f"{want!r}, but the ids of the post_processor "
                        f"({self.processor.name}) come from the file, as in HF; pass "
                        f"post_processor=... to frame rows with other tokens")

    def _bind(self, vocab: Vocabulary) -> None:
        """Make ``vocab`` this tokenizer's vocabulary: the kernels' model with it."""
        compiled = self._compiled
        try:
            prefix = vocab.prefix_choice(
                compiled.digest,
                lambda: internal_prefix(compiled, vocab.continuing_subword_prefix,
                                        vocab.model_tokens))
        except ValueError as e:
            raise ValueError(f"{self._where}: {e}") from None
        limit = self.max_input_chars_per_word

        def model() -> KernelModel:
            vocab_blob = vocab.blob if prefix is None else vocab.blob_for_prefix(prefix)
            return KernelModel(vocab=vocab, vocab_blob=np.frombuffer(vocab_blob, dtype=np.uint8),
                               norm_blob=np.frombuffer(compiled.blob, dtype=np.uint8),
                               max_input_chars_per_word=limit)

        # One model per vocabulary, normalization and word limit: tokenizers unpickled in a
        # worker share it, and with it the backends' per-model state (the CPU word memo's key,
        # a hash of both blobs)
        self.kernel_model = vocab.derived(("kernel_model", compiled.digest, prefix, limit), model)
        self.vocab = vocab

    @staticmethod
    def _file_flag(where: str, name: str, value):
        try:
            return check(name, value)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: BertNormalizer {e}") from None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, **kwargs) -> "WordPieceTokenizer":
        """Load a model folder: its ``tokenizer.json`` (with its pipeline) when it has one,
        else its ``vocab.txt``. ``tokenizer_config.json``'s ``do_lower_case``,
        ``strip_accents`` and ``tokenize_chinese_chars`` set the BertNormalizer's flags (as in
        ``transformers``; they do not apply to another normalizer), and with a ``vocab.txt``
        its special-token names apply; keyword arguments override all of them."""
        folder = Path(folder)
        cfg = {}
        cfg_path = folder / "tokenizer_config.json" if folder.is_dir() else None
        if cfg_path is not None and cfg_path.is_file():
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        names = {k: kwargs.pop(k) for k in SPECIAL_NAME_OPTIONS if kwargs.get(k) is not None}
        kwargs = {k: v for k, v in kwargs.items() if k not in SPECIAL_NAME_OPTIONS}
        has_json = folder.is_dir() and (folder / "tokenizer.json").is_file()
        if folder.is_dir() and not has_json:
            for k in SPECIAL_NAME_OPTIONS:
                v = cfg.get(k)
                v = v.get("content") if isinstance(v, dict) else v
                if isinstance(v, str) and v:
                    names.setdefault(k, v)
        vocab = Vocabulary.from_file(folder, **names)
        settings: dict = {}
        file_norm = vocab.config.get("normalizer") if "normalizer" in vocab.config else \
            {"type": "BertNormalizer"}
        norm = kwargs.get("normalizer")
        norm = json.loads(check("normalizer", norm)) if norm is not None else file_norm
        if _is_bert_normalizer(norm):
            if "do_lower_case" in cfg:
                settings["lowercase"] = bool(cfg["do_lower_case"])
            if "strip_accents" in cfg:
                settings["strip_accents"] = cfg["strip_accents"]
            if "tokenize_chinese_chars" in cfg:
                settings["handle_chinese_chars"] = bool(cfg["tokenize_chinese_chars"])
        settings.update(kwargs)
        return cls(vocab, **settings)

    # -- encoding -------------------------------------------------------------------------
    def _threads(self, num_threads) -> int:
        if num_threads is not None:
            return check("num_threads", num_threads)
        return self.num_threads if self.num_threads is not None else default_num_threads()

    def encode(self, texts, *, num_threads: int | None = None,
               return_offsets_mapping: bool = False, return_word_ids: bool = False,
               offsets_unit: str = "chars") -> Encoding:
        """Token ids (no special tokens added) of every document, ragged.

        ``texts``: a str, a list of str (None/NaN are empty documents), a pandas Series
        (object, string or Arrow dtype), or a pyarrow (Large)String/Binary array or
        ChunkedArray.

        ``return_offsets_mapping=True`` adds ``offset_mapping`` (tokens x 2 int64: each
        token's ``[begin, end)`` in its ORIGINAL document, in ``offsets_unit``: ``"chars"``,
        Python string positions as HF's ``Encoding.offsets``, or ``"bytes"``, UTF-8
        positions), ``return_word_ids=True`` adds ``word_ids`` (int32: the token's
        pre-tokenized word within its document, HF's ``Encoding.word_ids``). Both come from
        the same single pass as the ids. The contract (special tokens, [UNK] spans, invalid
        UTF-8): docs/design.md §2.9.
        """
        threads = self._threads(num_threads)
        unit, words = _extras_options(return_offsets_mapping, return_word_ids, offsets_unit)
        if self._on_gpu(texts):
            from .cuda import encode_cuda
            if unit or words:
                token_ids, offsets, spans, wids = encode_cuda(self, texts, offsets_unit=unit,
                                                              word_ids=words)
                return widen_added_spans(Encoding(token_ids, offsets, spans, wids, unit),
                                         texts, strip_flags(self.vocab))
            token_ids, offsets = encode_cuda(self, texts)
            return Encoding(token_ids, offsets)
        enc = CPU.encode(self.kernel_model, texts, threads, unit, words)
        return widen_added_spans(enc, texts, strip_flags(self.vocab)) if unit else enc

    def count_lengths(self, texts, *, num_threads: int | None = None) -> tuple:
        """``(lengths, unknown_tokens)``: the number of tokens of every document (int64 NumPy
        array; no special tokens added) and how many of all the tokens are ``[UNK]``, equal
        to what :meth:`encode`'s offsets and ids give, without making the ids: on the CPU the
        extension's count loop (same core and word memos as :meth:`encode`), on the GPU
        only the counts come back from the device. ``texts``: as :meth:`encode`."""
        if self._on_gpu(texts):
            from .cuda import count_cuda
            return count_cuda(self, texts)
        # the threads asked before each piece (an in-process job's share of the moment)
        lengths, _, unknown = CPU.count(self.kernel_model, texts,
                                        lambda: self._threads(num_threads))
        return lengths, unknown

    def __call__(self, texts, max_length: int | None = None, stride: int | None = None,
                 truncation: bool | str | None = None, add_special_tokens: bool | None = None,
                 padding=None, return_tensors: str | None = None, logid_offset: int = 0,
                 mask_dtype: str = "int32", bucket_widths="auto", *, text_pair=None,
                 return_overflowing_tokens: bool | None = None,
                 return_token_type_ids: bool | None = None,
                 return_sequence_ids: bool | None = None,
                 return_offsets_mapping: bool | None = None,
                 return_word_ids: bool | None = None,
                 return_special_tokens_mask: bool | None = None,
                 offsets_unit: str | None = None):
        """Tokenize ``texts`` and cut every document into strided windows (GST outputs).

        Parameters
        ----------
        texts : str, list of str, pandas Series, pyarrow string array, cudf Series
            None/NaN, empty and whitespace-only documents each give one empty row.
        max_length : int, default 128
            Row width, special tokens included; ``L = max_length - 2`` body tokens per row
            with special tokens (so max_length >= 3), else ``L = max_length``.
        stride : int, default 0
            Tokens shared by consecutive windows (HuggingFace's meaning), ``0 <= stride < L``.
        truncation : bool or str, default False
            True: one row per document, tokens past ``L`` dropped. False: nothing is lost,
            ``1 + ceil((n - L) / (L - stride))`` rows for ``n > L`` tokens. HF's strategy
            names: "longest_first" (True), "only_first", "only_second" (pairs: the side
            that is truncated), "do_not_truncate" (False).
        text_pair : like ``texts``, optional
            Second sequences, one per text: rows ``[CLS] text [SEP] pair [SEP]``, HF-exact
            (docs/design.md §2.8). ``truncation=False`` windows the second sequence
            (``only_second`` with overflow); a strategy gives one row per pair (HF's first
            encoding) unless ``return_overflowing_tokens=True``.
        return_overflowing_tokens : bool, default False
            With a truncation strategy: HF's encoding followed by its overflowing windows
            (``longest_first`` with pairs is refused: HF pairs every window of one side with
            every window of the other).
        return_token_type_ids, return_sequence_ids : bool, default None / False
            Also ``token_type_ids`` (the mask's dtype; 0 on the first segment, its [CLS] and
            [SEP] included, 1 on the second; None: returned for pairs, as HF does for BERT,
            not for single texts) and ``sequence_ids`` (int8: 0 / 1 on the
            sequences' tokens, -1 on special tokens and padding), as HF's ``Encoding``.
        return_offsets_mapping, return_word_ids, return_special_tokens_mask : bool, default False
            Also ``offset_mapping`` (int64, rows x width x 2: each token's ``[begin, end)`` in
            its original text, in ``offsets_unit``; ``(0, 0)`` on [CLS], [SEP] and padding),
            ``word_ids`` (int32, -1 on special and padding positions) and
            ``special_tokens_mask`` (the mask's dtype: 1 on [CLS], [SEP] and padding), as
            HF's overflow encodings; for pairs the offsets are in whichever text the token
            came from. Ragged with ``padding=False``. docs/design.md §2.9.
        offsets_unit : "chars" (default) or "bytes"
            Unit of ``offset_mapping``: Python string positions (HF's) or UTF-8 bytes.
        add_special_tokens : bool, default True
            Frame every row as ``[CLS] body [SEP]`` (ids from the vocabulary).
        padding : "max_length", True, "longest", False or "do_not_pad"
            "max_length" (default) and True pad every row to ``max_length`` with the
            vocabulary's [PAD]; "longest" pads to the longest row of this batch (at most
            ``max_length``); False / "do_not_pad" return ragged rows (:class:`RaggedRows`).
            Note: unlike ``transformers``, where ``padding=True`` means "longest", True here
            means "max_length" (fixed-shape tensors are the GST use).
        return_tensors : "np", "pt" or "cp"
            NumPy arrays (default), torch tensors (zero-copy), or CuPy arrays (the default
            when the work runs on the GPU).
        logid_offset : int, default 0
            logID of the first document (the Dask layer passes the partition's global
            offset).
        mask_dtype : "int32" (default) or "int8"
            dtype of ``attention_mask``.
        bucket_widths : "auto" (default) or a sequence of int
            With ``padding="bucket"``: the row widths (see :mod:`daskwp.core.buckets`);
            the result is then a :class:`~daskwp.core.buckets.BucketedWindows`.

        Window options left at None take the configured default (``daskwp.<name>`` in
        ``dask.config``; the defaults above). Semantics: docs/design.md §2.

        Returns
        -------
        BatchWindows
            ``input_ids`` (int32) and ``attention_mask``: rows x width, or
            :class:`RaggedRows` with ``padding=False``; ``metadata``: rows x 3 int64
            ``(logID, start, stop)``, stop inclusive. Rows are in document order, then window
            order.

        Notes
        -----
        **Memory.** ``rows * width * (4 + mask bytes) + rows * 24`` bytes, allocated once at
        its exact size.
        """
        seq_opts = dict(text_pair=text_pair, return_overflowing_tokens=return_overflowing_tokens,
                        return_token_type_ids=return_token_type_ids,
                        return_sequence_ids=return_sequence_ids,
                        return_offsets_mapping=return_offsets_mapping,
                        return_word_ids=return_word_ids,
                        return_special_tokens_mask=return_special_tokens_mask,
                        offsets_unit=offsets_unit)
        extras = extras_options(return_offsets_mapping, return_word_ids,
                                return_special_tokens_mask, offsets_unit)
        unit = extras["offsets_unit"] if extras["offset_mapping"] else None
        strips = strip_flags(self.vocab) if unit else {}
        if self._on_gpu(texts):
            if strips:
                raise NotImplementedError(
                    f"return_offsets_mapping on the GPU windows: added token "
                    f"{self.vocab.id_to_token(next(iter(strips)))!r} has lstrip / rstrip "
                    f"(HF's span takes the whitespace next to it), which only the CPU windows "
                    f"and encode() widen; call it on CPU texts or without offsets")
            from .cuda import windows_cuda
            return windows_cuda(self, texts, max_length=max_length, stride=stride,
                                truncation=truncation, add_special_tokens=add_special_tokens,
                                padding=padding,
                                return_tensors="cp" if return_tensors is None else return_tensors,
                                logid_offset=logid_offset, mask_dtype=mask_dtype,
                                bucket_widths=bucket_widths, **seq_opts)
        p = window_params(max_length, stride, truncation, add_special_tokens, padding,
                          "np" if return_tensors is None else return_tensors, logid_offset,
                          mask_dtype, bucket_widths, post=self.processor, vocab=self.vocab)
        p, seq = sequence_options(p, text_pair is not None, return_overflowing_tokens,
                                  return_token_type_ids, return_sequence_ids)
        threads = self._threads(None)
        enc = widen_added_spans(
            CPU.encode(self.kernel_model, texts, threads, unit, extras["word_ids"]), texts,
            strips)
        if text_pair is not None:
            enc_b = widen_added_spans(
                CPU.encode(self.kernel_model, text_pair, threads, unit, extras["word_ids"]),
                text_pair, strips)
            return CPU.build_pair_windows(enc, enc_b, self.vocab, p, seq, extras)
        return CPU.build_windows(enc, self.vocab, p, threads, seq, extras)

    def _on_gpu(self, texts) -> bool:
        if self.device == "gpu":
            return True
        mod = type(texts).__module__.split(".")[0]
        if self.device == "auto" and (mod in ("cudf", "pylibcudf")
                                      or type(texts).__name__ == "DeviceStrings"):
            from .cuda import is_device_input
            return is_device_input(texts)
        return False

    def decode(self, ids, skip_special_tokens: bool = True):
        """Token ids back to text, BERT style (HF's WordPiece decoder with cleanup)."""
        return decode_ids(self.vocab, ids, skip_special_tokens=skip_special_tokens)

    # -- special tokens -------------------------------------------------------------------
    def add_special_tokens(self, tokens) -> list[int]:
        """Register ``tokens`` (a list of strings) as special tokens of this tokenizer, in
        place (as HuggingFace's ``Tokenizer.add_special_tokens``), and return their ids.

        Each new token takes the next id after the largest id in use, in the order given
        (HF's rule). It is matched literally in the raw text, case-sensitively, before
        normalization, even inside a word, leftmost-longest together with the other special
        tokens (``[CLS]``, ...; the longer wins where one is a prefix of another), on the CPU
        and the GPU alike; it is never a WordPiece piece, ``decode`` writes it back
        (``skip_special_tokens=True`` drops it), and it is one id that windows never split.

        Refused with a ``ValueError`` naming the string, before anything changes (the
        exact rules; docs/differences-hf.md, docs/design.md §7):

        * the empty string, a string given twice, one with a lone surrogate or U+FFFD;
        * a string that is already a token of the vocabulary (a WordPiece piece, a special
          or added token, or one registered before): the error names its id (HF would
          reuse the id and make the token special);
        * a string with a Unicode White_Space character (pre-tokenizers split words there);
        * a string that starts with the continuing-subword prefix (``##``);
        * a string that this tokenizer, as it is before the call, tokenizes to exactly one
          token other than the unknown token: another spelling of that token, e.g. ``"Hello"``
          with an uncased vocabulary is ``hello`` (the error names the token and its id).
          ``"[cls]"`` with bert-base-uncased is accepted: it tokenizes to
          ``[ "[", "cl", "##s", "]" ]``, and ``[CLS]`` stays 101.

        The vocabulary becomes a new :class:`Vocabulary` (``tok.vocab``; the old one is not
        changed), so its content hash, the dask token, the per-worker and device caches all
        see the change. Register before building a lazy Dask result with this tokenizer: a
        result built earlier computes with the tokens registered by the time it runs, under
        the graph name it was built with.

        Returns
        -------
        list of int
            The new tokens' ids, in order.

        Notes
        -----
        **Differences from HuggingFace.** HF returns the number of tokens added, and reuses
        the id of a string already in the vocabulary; daskwp returns the ids, and refuses
        such a string (above).

        Examples
        --------
        >>> import daskwp
        >>> tok = daskwp.WordPieceTokenizer()
        >>> tok.add_special_tokens(["<ent>", "</ent>"])
        [30522, 30523]
        >>> tok.encode(["Ada <ent>Lovelace</ent>"]).to_list()
        [[15262, 30522, 2293, 19217, 30523]]
        """
        tokens = check_new_special_tokens(self.vocab, tokens)
        if not tokens:
            return []
        unk = self.vocab.unk_id
        ids = CPU.encode(self.kernel_model, tokens, 1).to_list()
        for t, got in zip(tokens, ids):
            if len(got) == 1 and got[0] != unk:
                onto = self.vocab.id_to_token(got[0])
                raise ValueError(
                    f"special token {t!r} is another spelling of the token {onto!r} "
                    f"(id {got[0]}): this tokenizer already tokenizes it to that one token")
        vocab = self.vocab.with_special_tokens(tokens, _checked=True)
        self._bind(vocab)
        return [vocab.token_to_id(t) for t in tokens]

    # -- identity -------------------------------------------------------------------------
    @property
    def settings(self) -> dict:
        """Everything that, with the vocabulary, decides the output: the keyword arguments
        that rebuild this tokenizer (``WordPieceTokenizer(tok.vocab, **tok.settings)``). The
        BERT flags are present only when the normalizer is a BertNormalizer; ``normalizer``
        and ``pre_tokenizer`` are their tokenizers JSON text."""
        out = {}
        if self.lowercase is not None:
            out.update(lowercase=self.lowercase, strip_accents=self.strip_accents,
                       clean_text=self.clean_text,
                       handle_chinese_chars=self.handle_chinese_chars)
        out.update(max_input_chars_per_word=self.max_input_chars_per_word,
                   normalizer=self.normalizer, pre_tokenizer=self.pre_tokenizer)
        if self.post_processor is not None:
            out["post_processor"] = self.post_processor
        out.update(self.vocab.special_names)
        return out

    def __dask_tokenize__(self):
        # The device is part of the identity: a GPU job and a CPU job are different graphs.
        return ("daskwp.WordPieceTokenizer", self.vocab.hash,
                tuple(sorted(self.settings.items())), self.device)

    def __reduce__(self):
        # transformers_settings (from_transformers) travel too: as_transformers() after a
        # round trip gives the same drop-in
        settings = getattr(self, "transformers_settings", None)
        state = None if settings is None else {"transformers_settings": settings}
        return (_rebuild_tokenizer, (self.vocab, self.settings, self.num_threads, self.device),
                state)

    def __repr__(self) -> str:
        shown = {k: v for k, v in self.settings.items()
                 if not (k == "normalizer" and self.lowercase is not None)
                 and not (k == "pre_tokenizer" and v == _json_text(_BERT_PRE_TOKENIZER))
                 and not (k in DEFAULT_SPECIAL_NAMES and v == DEFAULT_SPECIAL_NAMES[k])}
        s = ", ".join(f"{k}={v!r}" for k, v in shown.items())
        return f"WordPieceTokenizer({self.vocab!r}, {s})"

    # -- transformers (docs/design.md §3.6) --------------------------------------------
    @classmethod
    def from_transformers(cls, obj, **kwargs) -> "WordPieceTokenizer":
        """A tokenizer from a transformers BERT-family tokenizer (fast: its
        ``backend_tokenizer``; slow ``BertTokenizer``: its vocabulary, ``do_lower_case``,
        ``strip_accents``, ``tokenize_chinese_chars`` and added tokens) or a
        ``tokenizers.Tokenizer``: vocabulary, normalizer, special and added tokens; its
        ``model_max_length``, ``padding_side`` and ``truncation_side`` are kept for
        :meth:`as_transformers` (attribute ``transformers_settings``, pickled with it). Keyword
        arguments override the tokenizer's settings (``num_threads``, ``device``, ...).
        Anything daskwp does not run exactly is refused with a ValueError naming the
        component (daskwp/backends/transformers_compat.py)."""
        from .transformers_compat import from_transformers as read_transformers
        args, settings = read_transformers(obj)
        args.pop("_where", None)
        args.update(kwargs)
        tok = cls(**args)
        added = settings.pop("added")
        if added:
            ids = tok.add_special_tokens([t for t, _ in added])
            for (t, want), got in zip(added, ids):
                if want != got:
                    raise ValueError(f"added token {t!r} has id {want} in the transformers "
                                     f"tokenizer, but daskwp gives the next id after the "
                                     f"vocabulary ({got}); ids must follow the vocabulary")
        tok.transformers_settings = settings
        return tok

    def as_transformers(self, **settings) -> TransformersTokenizer:
        """This tokenizer behind transformers' ``BertTokenizerFast`` API (``__call__``,
        ``encode_plus``, ``batch_encode_plus``, ``decode``, ``pad``, ``save_pretrained``, ...;
        docs/design.md §3.6). ``settings``: ``model_max_length``, ``padding_side``,
        ``truncation_side``, ``clean_up_tokenization_spaces`` (default: those
        :meth:`from_transformers` kept, else transformers' defaults)."""
        if self.processor.kind != "bert":
            try:
                bert = self.processor.frame(self.vocab, True) == BERT.frame(self.vocab, True)
            except ValueError:
                bert = False
            if not bert:
                raise ValueError(
                    f"as_transformers: the drop-in frames rows as BERT does ([CLS] $A [SEP] / "
                    f"[CLS] $A [SEP] $B:1 [SEP]:1), but this tokenizer's post_processor "
                    f"({self.processor.name}) frames them otherwise; call the tokenizer itself")
        from .transformers_compat import TransformersTokenizer
        base = dict(getattr(self, "transformers_settings", None) or {})
        base.update(settings)
        return TransformersTokenizer(self, **base)


def _rebuild_tokenizer(vocab, settings, num_threads, device="auto"):
    return WordPieceTokenizer(vocab, num_threads=num_threads, device=device, **settings)


# -- resolving what a user named ----------------------------------------------------------

_VOCABULARIES = BoundedCache("vocabularies_by_path", 8)


def _vocabulary_from_path(path, names: dict | None = None) -> Vocabulary:
    """``Vocabulary.from_file``, cached by path, size, modification time and the special
    tokens' names."""
    names = {k: v for k, v in (names or {}).items() if v is not None}
    p = Path(path)
    try:
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns, tuple(sorted(names.items())))
    except OSError:
        return Vocabulary.from_file(p, **names)  # raises the reader's clear error
    return _VOCABULARIES.get_or_create(key, lambda: Vocabulary.from_file(p, **names))


def resolve_tokenizer(vocab=None, lowercase=None, **options) -> WordPieceTokenizer:
    """The tokenizer that ``tokenize(vocab=..., lowercase=..., ...)`` describes (the
    accessors and batch jobs).

    ``vocab`` is a :class:`WordPieceTokenizer` (used as is), a :class:`Vocabulary`, a path to
    ``vocab.txt`` / ``tokenizer.json``, a model folder (read with
    :meth:`WordPieceTokenizer.from_pretrained`, so its ``tokenizer_config.json`` applies), or
    None for ``daskwp.vocab`` in ``dask.config`` (default: the bundled bert-base-uncased).
    Options left at None take the vocabulary file's setting (a ``tokenizer.json`` or a model
    folder), else the configured default.
    """
    unknown = sorted(set(options) - set(TOKENIZER_OPTIONS))
    if unknown:
        raise TypeError(f"tokenize() got unexpected keyword argument(s) {unknown}; allowed: "
                        f"vocab, lowercase, {', '.join(TOKENIZER_OPTIONS)}, "
                        f"{', '.join(WINDOW_OPTIONS)}")
    given = {k: check(k, v) for k, v in options.items() if v is not None}
    if isinstance(vocab, WordPieceTokenizer):
        if lowercase is not None or given:
            names_ = (["lowercase"] if lowercase is not None else []) + sorted(given)
            raise ValueError(f"vocab is already a WordPieceTokenizer; options {names_} cannot "
                             f"be applied to it (build the tokenizer with them instead)")
        return vocab
    vocab = check("vocab", config.get("vocab", vocab))
    if vocab is not None and not isinstance(vocab, Vocabulary) and Path(vocab).is_dir():
        if lowercase is not None:
            given["lowercase"] = lowercase
        return WordPieceTokenizer.from_pretrained(vocab, **given)
    names = {k: given.pop(k) for k in SPECIAL_NAME_OPTIONS if k in given}
    if vocab is None:
        vocab = Vocabulary.default()
    elif not isinstance(vocab, Vocabulary):  # a path (checked above)
        vocab = _vocabulary_from_path(vocab, names)
    if lowercase is None and "normalizer" not in given and \
            "normalizer" not in (vocab.config or {}):
        # Only a vocabulary without settings of its own takes the configured default.
        lowercase = config.get("lowercase", None)
    if lowercase is not None:
        given["lowercase"] = lowercase
    return WordPieceTokenizer(vocab, **names, **given)
