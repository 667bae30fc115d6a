"""Normalization tables: the per-code-point behaviour of a tokenizer's normalizer and
pre-tokenizer, compiled into the blob the native core reads.

The raw properties are generated from HuggingFace ``tokenizers`` itself: BertNormalizer +
BertPreTokenizer by ``daskwp/kernels/gen_unicode_tables.py`` (``unicode_tables.npz``; see
``daskwp/kernels/UNICODE_TABLES.md`` for the Unicode version), the other normalizers and
pre-tokenizers by ``tools/gen_pipeline_tables.py`` (``pipeline_tables.npz``).
:func:`norm_blob` folds them, for one combination of BERT flags, into the flat two-level table
that the native core reads (layout: ``daskwp/kernels/model.hpp``); :func:`compile_pipeline`
does the same for any pipeline of a ``tokenizer.json`` that one pass over the code points can
carry (:func:`make_pipeline` says which, and refuses the others by name).

The modules, one job each: :mod:`.blob` (the blob's layout and packing), :mod:`.bert` (the
bundled BERT blob), :mod:`.steps` (``tokenizer.json`` components as steps and splits, or
refused), :mod:`.composer` (steps run on one code point), :mod:`.pipeline` (the
:class:`Pipeline` key) and :mod:`.compiled` (a pipeline compiled into a blob). This package
re-exports the names the backends use.
"""

from __future__ import annotations

from .bert import norm_blob
from .blob import (ASCII_FEED, ASCII_PUNCT, ASCII_REMOVE, ASCII_SLOW, ASCII_SPACE,
                   BLOB_VERSION, CLASS_MASK, CLASS_OTHER, CLASS_PUNCT, CLASS_SPACE, ISOLATE,
                   MAP_SHIFT, MAPPED, MARK_PENDING, N_CODEPOINTS, NONSTARTER_GONE, NORM_MAGIC,
                   REMOVE, TABLES_PATH, TO_SPACE, load_tables)
from .compiled import CompiledPipeline, compile_pipeline, internal_prefix, whitespace_vanishes
from .composer import PIPELINE_TABLES_PATH, load_pipeline_tables
from .pipeline import Pipeline, make_pipeline
from .steps import BERT_SPLITS, bert_steps, normalizer_steps, pre_tokenizer_splits

__all__ = ["ASCII_FEED", "ASCII_PUNCT", "ASCII_REMOVE", "ASCII_SLOW", "ASCII_SPACE",
           "BERT_SPLITS", "BLOB_VERSION", "CLASS_MASK", "CLASS_OTHER", "CLASS_PUNCT",
           "CLASS_SPACE", "CompiledPipeline", "ISOLATE", "MAPPED", "MAP_SHIFT", "MARK_PENDING",
           "NONSTARTER_GONE", "NORM_MAGIC", "N_CODEPOINTS", "PIPELINE_TABLES_PATH", "Pipeline",
           "REMOVE", "TABLES_PATH", "TO_SPACE", "bert_steps", "compile_pipeline",
           "internal_prefix", "load_pipeline_tables", "load_tables", "make_pipeline",
           "norm_blob", "normalizer_steps", "pre_tokenizer_splits", "whitespace_vanishes"]
