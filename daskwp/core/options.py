"""The option table: every option of daskwp, once (docs/design.md §3, §4).

Each :class:`Option` has one name (the same in Python, ``dask.config``, job YAML and the CLI,
where ``_`` becomes ``-``), one default, one validator, its allowed values, whether it changes
the output (so a batch job records it and a rerun with another value is refused), the
surfaces it appears on, and its help text. The tokenizer, both accessors, the job
configuration, ``conf/*.yaml``, the ``dask.config`` defaults (``daskwp.<name>``), the CLI flags
and ``docs/options.md`` are all derived from :data:`OPTIONS`.

Validators take ``(name, value)`` and return the normalized value or raise
:class:`OptionTypeError` (a value of the wrong type; it is a ``TypeError`` and a ``ValueError``)
or :class:`OptionValueError` (a value outside what is allowed); both messages name the option,
the value received and what is allowed.

A value of ``None`` for an option whose default is not None means "the default": the
configured ``daskwp.<name>`` (see :func:`daskwp.core.config.get`), else the table's default.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Callable

import numpy as np

__all__ = [
    "DEVICES", "INPUT_FORMATS", "OPTIONS", "Option", "OptionTypeError", "OptionValueError",
    "PADDING_CHOICES", "TENSOR_TYPES", "check", "check_bool", "check_int",
    "check_mask_dtype", "check_padding", "check_truncation", "config_defaults",
    "default", "env_value", "names", "normalize_device", "options_table_markdown",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

#: Devices, one vocabulary everywhere ("cuda" is accepted as another name of "gpu").
DEVICES = ("auto", "cpu", "gpu")
DEVICE_ALIASES = {"cuda": "gpu"}
#: Input formats of batch jobs ("auto": from the file extension).
INPUT_FORMATS = ("auto", "text", "csv", "tsv", "jsonl", "parquet")
#: Padding values and what they mean (True is "max_length", False "do_not_pad"; "bucket":
#: rows grouped by width, see core/buckets.py).
PADDING_CHOICES = ("max_length", "longest", "do_not_pad", "bucket")
#: Array types of ``return_tensors``.
TENSOR_TYPES = ("np", "pt", "cp")
#: Units of offset_mapping (docs/design.md §2.9).
OFFSETS_UNITS = ("chars", "bytes")
#: Parquet compressions of batch jobs.
COMPRESSIONS = ("zstd", "snappy", "gzip", "brotli", "lz4", "none")
#: Output formats of batch jobs: daskwp's Parquet parts, Megatron indexed datasets
#: (``.bin`` + ``.idx``, docs/batch-jobs.md "Megatron indexed datasets"), or a HuggingFace
#: ``datasets`` dataset on disk (``load_from_disk``).
OUTPUT_FORMATS = ("parquet", "megatron", "datasets")
#: The compression of tokenized parts: lz4 (Parquet's LZ4_RAW), chosen over zstd level 1
#: because it costs less of a part's write stage and reads back faster, for larger parts
#: (the figures: benchmarks/results/codec_bench.md; docs/batch-jobs.md "Output");
#: ``compression="zstd"`` for the smaller files.
DEFAULT_COMPRESSION = "lz4"
#: A CPU job of at most this many input file bytes runs on threads in the calling process
#: unless it asks for a cluster (docs/batch-jobs.md "Clusters"). The partition tasks release
#: the GIL in the kernel, the page encoder and the compression, so threads lose little to
#: it, while a local cluster's start is a fixed cost that dominates small jobs; above the
#: limit a job gets worker processes (isolation, a worker lost costs only its tasks).
#: benchmarks/pipeline_bench.py's ``--scheduler threads`` rows beside the cluster's, at
#: each size, are the data to move it by: threads beat the 2-worker cluster at 3 and 10 GB
#: and spend less CPU (no per-worker cold word cache, no worker processes' overhead), so
#: the limit covers the largest size measured (docs/batch-jobs.md "Clusters").
IN_PROCESS_MAX_BYTES = "16GB"


class OptionTypeError(TypeError, ValueError):
    """An option value of the wrong type (also a ValueError: it is a bad value too)."""


class OptionValueError(ValueError):
    """An option value outside what the option allows."""


# -- validators ---------------------------------------------------------------------------

def check_bool(name: str, value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise OptionTypeError(f"{name} must be True or False, got {value!r} "
                          f"({type(value).__name__})")


def check_opt_bool(name: str, value):
    return None if value is None else check_bool(name, value)


def check_int(name: str, value, lo: int | None = None, hi: int | None = None,
              allowed: str | None = None) -> int:
    """An integer (not bool, not float) in ``[lo, hi]``; ``allowed`` describes the range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise OptionTypeError(f"{name} must be an integer, got {value!r} "
                              f"({type(value).__name__})")
    v = int(value)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        if allowed is None:
            allowed = (f"in [{lo}, {hi}]" if lo is not None and hi is not None
                       else f">= {lo}" if lo is not None else f"<= {hi}")
        raise OptionValueError(f"{name} must be {allowed}, got {v}")
    return v


def _int_range(lo: int, hi: int, allowed: str | None = None, optional: bool = False):
    def check_range(name, value):
        if optional and value is None:
            return None
        return check_int(name, value, lo, hi, allowed)
    return check_range


def check_choice(choices: tuple, aliases: dict | None = None):
    def check_one_of(name, value):
        if isinstance(value, str):
            value = (aliases or {}).get(value, value)
            if value in choices:
                return value
        raise OptionValueError(f"{name} must be one of {', '.join(map(repr, choices))}; "
                               f"got {value!r}")
    return check_one_of


def normalize_device(value, name: str = "device") -> str:
    """'auto', 'cpu' or 'gpu' ('cuda' is 'gpu')."""
    return check_choice(DEVICES, DEVICE_ALIASES)(name, value)


def check_truncation(name: str, value):
    """True / False, or a HuggingFace strategy name: "longest_first" is True (HF's meaning of
    True), "do_not_truncate" is False; "only_first" and "only_second" stay names (they choose
    the truncated side of a sentence pair; for single texts "only_first" is True)."""
    if isinstance(value, str):
        if value == "longest_first":
            return True
        if value in ("only_first", "only_second"):
            return value
        if value == "do_not_truncate":
            return False
        raise OptionValueError(f"{name} must be True, False, 'longest_first', 'only_first', "
                               f"'only_second' or 'do_not_truncate', got {value!r}")
    return check_bool(name, value)


def check_padding(name: str, value) -> str:
    """'max_length' (True), 'longest', or 'do_not_pad' (False): rows padded to max_length, to
    the batch's longest row, or ragged."""
    if isinstance(value, (bool, np.bool_)):
        return "max_length" if value else "do_not_pad"
    if isinstance(value, str) and value in PADDING_CHOICES:
        return value
    raise OptionValueError(f"{name} must be one of 'max_length', True, 'longest', False, "
                           f"'do_not_pad', 'bucket', got {value!r}")


def check_tensors(name: str, value) -> str:
    if isinstance(value, str) and value in TENSOR_TYPES:
        return value
    raise OptionValueError(f"{name} must be one of {TENSOR_TYPES}, got {value!r}")


def check_mask_dtype(name: str, value) -> str:
    """'int32' or 'int8'."""
    try:
        dt = np.dtype(value)
    except TypeError:
        dt = None
    if dt == np.int32:
        return "int32"
    if dt == np.int8:
        return "int8"
    raise OptionValueError(f"{name} must be int32 or int8, got {value!r}")


def check_path_like(name: str, value):
    """A vocabulary: a path (str / os.PathLike) or an object built by daskwp (checked where
    it is used); None is the bundled default."""
    import os
    if value is None or isinstance(value, (str, os.PathLike)) or hasattr(value, "blob") \
            or hasattr(value, "vocab"):
        return value
    raise OptionTypeError(f"{name} must be a WordPieceTokenizer, a Vocabulary, a path to "
                          f"vocab.txt / tokenizer.json / a model folder, or None; got "
                          f"{type(value).__name__} ({value!r:.60})")


def check_str(name: str, value):
    if isinstance(value, str) and value:
        return value
    raise OptionValueError(f"{name} must be a non-empty string, got {value!r}")


def check_opt_str(name: str, value):
    return None if value is None else check_str(name, value)


def check_pipeline_json(name: str, value):
    """A HuggingFace ``tokenizers`` normalizer or pre-tokenizer, as in a ``tokenizer.json``:
    a mapping with a ``type``, or its JSON text (``"null"``: none at all); None: the
    vocabulary file's, else BERT's. Returns the canonical JSON text. Which components daskwp
    runs is checked when the tokenizer is built."""
    import json
    if value is None:
        return None
    obj = value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except json.JSONDecodeError as e:
            raise OptionValueError(f"{name} must be a tokenizers JSON object (or 'null'); "
                                   f"{value!r:.80} is not valid JSON: {e}") from None
    if obj is not None and not (isinstance(obj, dict) and isinstance(obj.get("type"), str)):
        raise OptionValueError(f"{name} must be a tokenizers JSON object with a 'type' (as in "
                               f"a tokenizer.json), its JSON text, or 'null'; got "
                               f"{value!r:.80}")
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_inputs(name: str, value):
    if isinstance(value, str) and value:
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(x, str) and x
                                                          for x in value):
        return list(value)
    raise OptionValueError(f"{name} must be a path, a glob or a list of them, got {value!r}")


def check_bytes(name: str, value) -> int:
    from dask.utils import parse_bytes
    try:
        n = parse_bytes(value) if isinstance(value, str) else (
            int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool)
            else None)
    except (ValueError, TypeError):
        n = None
    if n is None or n < 1:
        raise OptionValueError(f"{name} must be a size such as '64MB', '1GiB' or a number of "
                               f"bytes >= 1; got {value!r}")
    return int(n)


#: The ``scheduler_address`` values that run a job in this process, without a cluster:
#: dask's scheduler names (``dask.config.set(scheduler=...)``), its thread pool or one thread.
IN_PROCESS_SCHEDULERS = ("threads", "synchronous")


def check_scheduler(name: str, value):
    if value is None or (isinstance(value, str) and value.lower() in ("", "null", "none",
                                                                       "local")):
        return None
    if isinstance(value, str):
        if value.lower() in IN_PROCESS_SCHEDULERS:
            return value.lower()
        return value
    raise OptionValueError(f"{name} must be a scheduler address such as 'tcp://host:8786', "
                           f"'threads' or 'synchronous' (in this process, no cluster), or "
                           f"null (a local cluster, or threads for a small input); "
                           f"got {value!r}")


def check_size(name: str, value) -> int:
    """A size in bytes (``check_bytes``), 0 allowed."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value == 0:
        return 0
    if isinstance(value, str) and value.strip() in ("0", "0B"):
        return 0
    try:
        return check_bytes(name, value)
    except OptionValueError:
        raise OptionValueError(f"{name} must be a size such as '1GB', '500MiB', a number of "
                               f"bytes or 0; got {value!r}") from None


#: Keys of a ``security`` mapping (job YAML, ``daskwp.connect(security=...)``): the client's
#: TLS settings of distributed (``distributed.comm.tls.*``, docs/batch-jobs.md "TLS").
SECURITY_KEYS = ("ca_file", "cert", "key", "require_encryption")


def check_security(name: str, value):
    """None (distributed's own configuration), or a mapping of some of ``SECURITY_KEYS``:
    ``ca_file``, ``cert``, ``key`` (non-empty strings: paths) and ``require_encryption``
    (true / false). Returns a dict in ``SECURITY_KEYS`` order without the None values, or
    None when nothing is set."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OptionTypeError(f"{name} must be a mapping of {', '.join(SECURITY_KEYS)}, or "
                              f"null; got {value!r:.80} ({type(value).__name__})")
    unknown = sorted(map(str, set(value) - set(SECURITY_KEYS)))
    if unknown:
        raise OptionValueError(f"{name}: unknown key {unknown[0]!r}; allowed keys: "
                               f"{', '.join(SECURITY_KEYS)}")
    out = {}
    for key in SECURITY_KEYS:
        v = value.get(key)
        if v is None:
            continue
        out[key] = (check_bool(f"{name}.{key}", v) if key == "require_encryption"
                    else check_str(f"{name}.{key}", v))
    return out or None


def check_storage_options(name: str, value):
    """None, or the options of an fsspec filesystem (``endpoint_url``, ``key``, ``secret``,
    ``anon``, ``client_kwargs``, ...): a mapping with string keys, or a list of
    ``key=value`` strings (the CLI's ``--storage-option``; each value read as YAML). Returns
    a dict, or None when empty. The values are passed to fsspec as they are and never
    recorded (they may hold secrets)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        import yaml
        out = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item or not item.split("=", 1)[0]:
                raise OptionValueError(f"{name}: each item must be key=value, got {item!r:.80}")
            key, raw = item.split("=", 1)
            try:
                out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                out[key.strip()] = raw
        value = out
    if not isinstance(value, dict):
        raise OptionTypeError(f"{name} must be a mapping of fsspec storage options, a list "
                              f"of key=value strings, or null; got {type(value).__name__}")
    bad = [k for k in value if not isinstance(k, str) or not k]
    if bad:
        raise OptionValueError(f"{name}: keys must be non-empty strings, got {bad[0]!r}")
    return dict(value) or None


def check_compression(name: str, value) -> str:
    if value is None:
        return "none"
    if isinstance(value, str) and value.lower() in COMPRESSIONS:
        return value.lower()
    raise OptionValueError(f"{name} must be one of {', '.join(COMPRESSIONS)}; got {value!r}")


#: CSV/TSV quote handling of batch jobs (the ``quoting`` option).
QUOTING = ("csv", "none")
#: What a batch job does with a row it cannot read or tokenize (the ``on_bad_row`` option).
BAD_ROW_POLICIES = ("reject", "error")
#: Columns of a batch job's output parts; a kept input column may not take one of these names.
JOB_OUTPUT_COLUMNS = ("logID", "start", "stop", "input_ids", "attention_mask", "window")


def _str_list(name: str, value, what: str) -> list | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)) and all(isinstance(x, str) and x for x in value):
        return list(value) or None
    raise OptionValueError(f"{name} must be {what} or a list of them, got {value!r}")


def check_patterns(name: str, value) -> list | None:
    """None (no filter), a glob pattern, or a list of them."""
    return _str_list(name, value, "a glob pattern such as '**/*.jsonl' (matched against paths "
                                  "relative to the input directory)")


def check_columns(name: str, value) -> list | None:
    """None (no column), a column name, or a list of distinct names that are not output
    columns."""
    cols = _str_list(name, value, "a column name")
    if cols:
        dup = sorted({c for c in cols if cols.count(c) > 1})
        if dup:
            raise OptionValueError(f"{name} names the column {dup[0]!r} twice, got {value!r}")
        taken = [c for c in cols if c in JOB_OUTPUT_COLUMNS]
        if taken:
            raise OptionValueError(f"{name}: {taken[0]!r} is a column of the output "
                                   f"({', '.join(JOB_OUTPUT_COLUMNS)}); got {value!r}")
    return cols


def check_packing(name: str, value):
    """None (no packing), a block size, or ``{"block_size": N, "pad_last": bool}`` (a YAML
    mapping, or its text): returns None or the full mapping."""
    if isinstance(value, str):
        import yaml
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError:
            pass
    if value is None:
        return None
    if not isinstance(value, dict):
        value = {"block_size": value}
    unknown = sorted(set(value) - {"block_size", "pad_last"})
    if unknown or "block_size" not in value:
        raise OptionValueError(f"{name} must be a block size or a mapping with block_size "
                               f"(and pad_last); got {value!r}")
    return {"block_size": check_int(f"{name}.block_size", value["block_size"], 1, INT32_MAX),
            "pad_last": check_bool(f"{name}.pad_last", value.get("pad_last", False))}


# -- the table ----------------------------------------------------------------------------
# max_length and stride are checked here for their type; their ranges depend on each other
# and on add_special_tokens (core.windows.window_params checks them together).

#: Surfaces an option appears on.
TOKENIZER = "tokenizer"      # WordPieceTokenizer(...) and both accessors' tokenize(...)
WINDOWS = "windows"          # tok(texts, ...) and both accessors' tokenize(...)
JOB = "job"                  # job YAML keys, CLI flags, JobConfig fields
CONFIG = "config"            # a dask.config default daskwp.<name>
ACCESSOR = "accessor"        # both accessors' tokenize(...) only (not tok(...))
ENV = "env"                  # read from its environment variable only (Option.env)


@dataclasses.dataclass(frozen=True)
class Option:
    """One option. ``check(name, value)`` validates and normalizes a value."""

    name: str
    default: Any
    check: Callable[[str, Any], Any]
    allowed: str
    affects_output: bool
    surfaces: tuple
    help: str
    #: CLI: argparse type, choices (None: any the validator takes), metavar, negatable flag.
    cli_type: Any = None
    cli_choices: tuple | None = None
    metavar: str | None = None
    #: Whether batch jobs have a CLI flag for it (input/output are positional arguments).
    cli_flag: bool = True
    #: A list-valued option: its CLI flag may be given several times.
    repeatable: bool = False
    #: CLI help group; default from the surfaces ("tokenizer", "windows", else "input and
    #: output").
    group: str | None = None
    #: The environment variable that sets it for the process (read by :func:`env_value`,
    #: the one place daskwp reads its environment variables; the C++ reads none).
    env: str | None = None

    @property
    def cli_group(self) -> str:
        if self.group:
            return self.group
        if TOKENIZER in self.surfaces:
            return "tokenizer"
        if WINDOWS in self.surfaces:
            return "windows"
        return "input and output"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


#: A size in MB (word_cache_mb, host_pool_mb): an integer >= 0, or None.
_check_opt_mb = _int_range(0, 2**40, "an integer >= 0 (MB) or None", optional=True)


def _opt(*args, **kw) -> Option:
    return Option(*args, **kw)


OPTIONS: dict[str, Option] = {o.name: o for o in (
    # Tokenizer (HuggingFace BertWordPieceTokenizer flag names and defaults)
    _opt("vocab", None, check_path_like, "vocab.txt, tokenizer.json or a model folder; null: "
         "the bundled bert-base-uncased", False, (TOKENIZER, JOB, CONFIG),
         "vocab.txt, tokenizer.json or model folder (default: bundled bert-base-uncased; "
         "'package:NAME' names a bundled file)", metavar="PATH"),
    _opt("lowercase", True, check_bool, "true or false", True, (TOKENIZER, JOB, CONFIG),
         "lowercase the text (default: the model folder's setting, else yes)"),
    _opt("strip_accents", None, check_opt_bool, "true, false or null (follows lowercase)", True,
         (TOKENIZER, JOB), "remove accents (default: follows --lowercase)"),
    _opt("clean_text", True, check_bool, "true or false", True, (TOKENIZER, JOB),
         "remove control characters, map whitespace to spaces (default: yes)"),
    _opt("handle_chinese_chars", True, check_bool, "true or false", True, (TOKENIZER, JOB),
         "make every CJK ideograph a word (default: yes)"),
    _opt("max_input_chars_per_word", 100, _int_range(1, INT32_MAX), "an integer in "
         "[1, 2**31-1]", True, (TOKENIZER, JOB),
         "longer words (characters after normalization) become [UNK] (default 100)",
         cli_type=int, metavar="N"),
    _opt("num_threads", None, _int_range(0, 4096, "a non-negative integer (0: all cores) or "
                                          "None", optional=True),
         "an integer >= 0 or null (all cores; 1 inside a Dask worker)", False, (TOKENIZER,),
         "threads for one batch"),
    _opt("word_cache_mb", None, _check_opt_mb,
         "an integer >= 0 (MB; 0: nothing kept between calls) or null (the environment "
         "variable DASKWP_WORD_CACHE_MB, else 256)", False, (CONFIG,),
         "most memory of the CPU word cache, per process: word memos that threads keep "
         "between encode calls so that a process tokenizing batch after batch runs warm "
         "(daskwp.memory.info() reports it, daskwp.memory.clear() empties it)",
         cli_type=int, metavar="MB", cli_flag=False, env="DASKWP_WORD_CACHE_MB"),
    _opt("max_output_bytes", None, lambda n, v: None if v is None else check_bytes(n, v),
         "a size such as '8GB' or a number of bytes >= 1, or null (a quarter of the "
         "machine's physical memory)", False, (CONFIG,),
         "most bytes the padded windows of one call may take (ids, mask, the outputs asked "
         "for and metadata); a larger output is refused before anything is allocated, with "
         "an OutputSizeError (a MemoryError and a ValueError) naming the size and the "
         "parameters", metavar="SIZE", cli_flag=False),
    _opt("device", "auto", lambda n, v: normalize_device(v, n), "'auto', 'cpu' or 'gpu' "
         "('cuda' is 'gpu')", False, (TOKENIZER, JOB, CONFIG),
         "auto (default): GPUs when dask-cuda, cudf and a GPU are present (a tokenizer: "
         "device-resident input on the GPU, host input on the CPU)", cli_choices=DEVICES,
         group="cluster"),
    # Tokenizer: a tokenizer.json's pipeline, and special tokens spelled another way
    _opt("normalizer", None, check_pipeline_json, "a tokenizers normalizer (a tokenizer.json "
         "object or its JSON text; 'null': none) or null (the vocabulary file's, else "
         "BertNormalizer)", True, (TOKENIZER, JOB),
         "normalizer as tokenizers JSON, e.g. '{\"type\": \"NFKD\"}' (default: the "
         "tokenizer.json's, else BertNormalizer with the flags above)", metavar="JSON"),
    _opt("pre_tokenizer", None, check_pipeline_json, "a tokenizers pre-tokenizer (a "
         "tokenizer.json object or its JSON text; 'null': none) or null (the vocabulary "
         "file's, else BertPreTokenizer)", True, (TOKENIZER, JOB),
         "pre-tokenizer as tokenizers JSON, e.g. '{\"type\": \"WhitespaceSplit\"}' "
         "(default: the tokenizer.json's, else BertPreTokenizer)", metavar="JSON"),
    _opt("post_processor", None, check_pipeline_json, "a tokenizers post-processor (a "
         "tokenizer.json object or its JSON text; 'null': none) or null (the vocabulary "
         "file's, else BERT's [CLS] $A [SEP])", True, (TOKENIZER, JOB),
         "special tokens and type ids around the sequences as tokenizers JSON: none, "
         "BertProcessing or TemplateProcessing (default: the tokenizer.json's, else "
         "[CLS] $A [SEP] / [CLS] $A [SEP] $B:1 [SEP]:1)", metavar="JSON"),
    _opt("unk_token", None, check_opt_str, "a token of the vocabulary or null (the "
         "tokenizer.json's, else [UNK])", True, (TOKENIZER, JOB),
         "the unknown token (default: the tokenizer.json's, else [UNK])", metavar="TOKEN"),
    _opt("cls_token", None, check_opt_str, "a token of the vocabulary or null (the "
         "tokenizer.json's, else [CLS])", True, (TOKENIZER, JOB),
         "the token that starts every row (default: the tokenizer.json's, else [CLS])",
         metavar="TOKEN"),
    _opt("sep_token", None, check_opt_str, "a token of the vocabulary or null (the "
         "tokenizer.json's, else [SEP])", True, (TOKENIZER, JOB),
         "the token that ends every row (default: the tokenizer.json's, else [SEP])",
         metavar="TOKEN"),
    _opt("pad_token", None, check_opt_str, "a token of the vocabulary or null (the "
         "tokenizer.json's, else [PAD])", True, (TOKENIZER, JOB),
         "the padding token (default: the tokenizer.json's, else [PAD])", metavar="TOKEN"),
    _opt("mask_token", None, check_opt_str, "a token of the vocabulary or null ([MASK])", True,
         (TOKENIZER, JOB), "the mask token, matched literally in the text like the others "
         "(default: [MASK]; a tokenizer.json's added tokens instead)", metavar="TOKEN"),
    # Windows (docs/design.md §2)
    _opt("max_length", 128, check_int, "an integer in [3, 2**31-1] with "
         "special tokens, else [1, 2**31-1]", True, (WINDOWS, JOB, CONFIG),
         "tokens per row, [CLS]/[SEP] included (default 128)", cli_type=int, metavar="N"),
    _opt("stride", 0, check_int, "an integer in [0, L) (L: body tokens per "
         "row)", True, (WINDOWS, JOB, CONFIG),
         "tokens shared by consecutive windows of a document (default 0)", cli_type=int,
         metavar="N"),
    _opt("truncation", False, check_truncation, "true, false, 'longest_first' (true), "
         "'only_first', 'only_second' or 'do_not_truncate' (false)", True,
         (WINDOWS, JOB, CONFIG),
         "one row per document (pair), the rest dropped (default: no, keep all); a strategy "
         "name picks the truncated side of a pair"),
    _opt("add_special_tokens", True, check_bool, "true or false", True,
         (WINDOWS, JOB, CONFIG), "frame rows as [CLS] body [SEP] (default: yes)"),
    _opt("padding", "max_length", check_padding, "'max_length' (true), 'longest', "
         "'do_not_pad' (false: ragged rows) or 'bucket' (rows grouped by width)", True,
         (WINDOWS, JOB, CONFIG),
         "pad rows to max_length (default), store ragged rows, or group rows by width "
         "(bucket)", cli_choices=("max_length", "do_not_pad", "bucket")),
    _opt("bucket_widths", "auto", lambda n, v: v, "'auto' or a sequence of widths in "
         "[1, max_length] (max_length is added when missing)", True, (WINDOWS, JOB, CONFIG),
         "row widths of padding='bucket' (default 'auto': up to 4 widths that minimise "
         "padding)", cli_type=int, metavar="N", repeatable=True),
    _opt("text_pair", None, lambda n, v: v, "texts like the first argument, one per text, or "
         "None (single texts)", True, (WINDOWS,),
         "second sequences of sentence pairs: rows [CLS] text [SEP] pair [SEP] "
         "(docs/design.md §2.8)"),
    _opt("return_overflowing_tokens", False, check_bool, "true or false", True, (WINDOWS, JOB),
         "with a truncation strategy: also the overflow windows (HF's encoding followed by its "
         "overflowing); truncation=False always windows"),
    _opt("return_token_type_ids", None, check_opt_bool, "true, false or null (on for "
         "sentence pairs, off for single texts)", True, (WINDOWS, JOB),
         "token_type_ids: 0 on the first sequence (its [CLS] and [SEP]), 1 on the second; "
         "zeros for single texts (default: returned with text_pair / column_pair, as HF does "
         "for BERT; false turns them off)"),
    _opt("return_sequence_ids", False, check_bool, "true or false", True, (WINDOWS, JOB),
         "also sequence_ids (int8): 0 / 1 on the first / second sequence's tokens, -1 on "
         "special tokens and padding"),
    # Offsets and word ids (docs/design.md §2.9); encode() takes the first two and the unit
    _opt("return_offsets_mapping", False, check_bool, "true or false", True, (WINDOWS, JOB),
         "also offset_mapping (int64, [begin, end) of each token in the original text; (0, 0) "
         "on [CLS], [SEP] and padding)"),
    _opt("return_word_ids", False, check_bool, "true or false", True, (WINDOWS, JOB),
         "also word_ids (int32: the token's pre-tokenized word in its text; -1 on special "
         "tokens and padding)"),
    _opt("return_special_tokens_mask", False, check_bool, "true or false", True, (WINDOWS, JOB),
         "also special_tokens_mask (the mask's dtype: 1 on [CLS], [SEP] and padding, as HF)"),
    _opt("offsets_unit", "chars", check_choice(OFFSETS_UNITS), "'chars' or 'bytes'", True,
         (WINDOWS, JOB), "unit of offset_mapping: 'chars' (Python string positions, HF's "
         "Encoding.offsets) or 'bytes' (UTF-8 byte positions)", cli_choices=OFFSETS_UNITS),
    _opt("mask_dtype", "int32", check_mask_dtype, "'int32' or 'int8'", True, (WINDOWS,),
         "dtype of attention_mask"),
    _opt("return_tensors", None, lambda n, v: None if v is None else check_tensors(n, v),
         "'np', 'pt', 'cp' or None ('np', or 'cp' for work on the GPU)", False, (WINDOWS,),
         "array type of the outputs"),
    _opt("logid_offset", 0, _int_range(0, INT64_MAX, "a non-negative integer"), "an integer "
         ">= 0", True, (WINDOWS,), "logID of the first document of the batch"),
    # Batch jobs: input and output (docs/design.md §4)
    _opt("input", None, check_inputs, "a path, a glob or a list of them", False, (JOB,),
         "input file, glob or directory", cli_flag=False),
    _opt("output", None, check_str, "a directory path", False, (JOB,),
         "output directory", cli_flag=False),
    _opt("column", "text", check_str, "a column name", True, (JOB,),
         "text column of Parquet/CSV/JSON Lines input (default 'text')"),
    _opt("column_pair", None, check_opt_str, "a column name or null (single texts)", True,
         (JOB,), "second text column of sentence pairs (e.g. the context of a question in "
         "'column'), read beside it: rows [CLS] column [SEP] column_pair [SEP] "
         "(docs/design.md §2.8)", metavar="COLUMN"),
    _opt("input_format", "auto", check_choice(INPUT_FORMATS), "one of " +
         ", ".join(INPUT_FORMATS), True, (JOB,),
         "default: from the file extension (unknown extensions: text)",
         cli_choices=INPUT_FORMATS),
    _opt("partition_size", "64MB", check_bytes, "a size such as '64MB'", True, (JOB,),
         "input bytes per partition, e.g. 64MB (default)", metavar="SIZE"),
    _opt("compression", DEFAULT_COMPRESSION, check_compression,
         "one of " + ", ".join(COMPRESSIONS), True, (JOB,),
         "Parquet compression (default lz4; zstd: smaller, slower)"),
    _opt("overwrite", False, check_bool, "true or false", False, (JOB,),
         "replace the output of another job instead of refusing"),
    # Cluster (daskwp.connect and batch jobs)
    _opt("scheduler_address", None, check_scheduler, "tcp://host:port, 'threads', "
         "'synchronous' or null", False, (JOB, CONFIG),
         "a running scheduler (tcp://host:8786); 'threads' or 'synchronous' to run in this "
         "process without a cluster, on dask's threaded or synchronous scheduler; default "
         "(null): threads for an input of at most in_process_max_bytes, else a local cluster",
         metavar="ADDRESS", group="cluster"),
    _opt("in_process_max_bytes", IN_PROCESS_MAX_BYTES, check_size, "a size such as '1GB', or "
         "0 (always a cluster)", False, (JOB, CONFIG),
         "a job with no scheduler_address, n_workers or threads_per_worker runs on threads "
         "in this process (as scheduler_address 'threads') when its input files add up to at "
         "most this size, and starts a local cluster otherwise (default 16GB; 0: always a "
         "cluster; CPU jobs only)", metavar="SIZE", group="cluster"),
    _opt("n_workers", None, _int_range(1, INT32_MAX, optional=True), "an integer >= 1 or null",
         False, (JOB, CONFIG), "workers of a local cluster (default: one per GPU, or "
         "LocalCluster's choice); set, a job starts the cluster whatever its input size", cli_type=int, metavar="N", group="cluster"),
    _opt("threads_per_worker", None, _int_range(1, INT32_MAX, optional=True),
         "an integer >= 1 or null", False, (JOB, CONFIG),
         "threads per worker of a local cluster", cli_type=int, metavar="N",
         group="cluster"),
    _opt("pause_worker_profiler", True, check_bool, "true or false", False, (JOB, CONFIG),
         "on a running cluster (scheduler_address, a client given, the accessor's "
         "to_parquet): pause the workers' statistical profiler (distributed's stack "
         "sampling every 10 ms, ~0.8 CPU s per GB) while the job computes, and restore it "
         "after, also when the job fails; a lease the driver renews ends it within a minute "
         "if the driver dies (default: yes; a cluster a job starts runs without it)",
         group="cluster"),
    _opt("security", None, check_security, "a mapping of ca_file, cert, key (paths) and "
         "require_encryption (true/false), or null", False, (JOB,),
         "TLS of a running scheduler (tls://host:8786): the CA file, this client's certificate "
         "and key, and whether to refuse unencrypted addresses (CLI: --tls-ca-file, "
         "--tls-cert, --tls-key, --tls-require-encryption); null: distributed's own "
         "configuration (distributed.comm.tls.*)", cli_flag=False, group="cluster"),
    # Object storage: the fsspec options of s3:// (gs://, abfs://, ...) inputs and outputs
    _opt("storage_options", None, check_storage_options, "a mapping of fsspec storage "
         "options (or key=value strings), or null", False, (JOB,),
         "options of the fsspec filesystem of URL inputs and outputs (s3://, gs://, abfs://, "
         "hdfs://, memory://), e.g. endpoint_url=http://host:9000 or anon=true; credentials "
         "otherwise come from the filesystem's usual sources (environment, config files); "
         "never recorded in _job.json or the summary (CLI: --storage-option KEY=VALUE; "
         "Python: storage_options= of to_parquet, to_megatron and read_tokenized)",
         metavar="KEY=VALUE", repeatable=True),
    _opt("spool_max_bytes", "4GB", check_size, "a size such as '4GB', or 0 (no spool)", False,
         (JOB,), "object-store inputs: the local disk (system temporary folder) that the "
         "partitions fetched by a job's count pass may take on each host, kept for their "
         "write tasks so that each input byte is fetched once (default 4GB; a partition that "
         "does not fit, or 0, is fetched again by its write)", metavar="SIZE"),
    _opt("quiet", False, check_bool, "true or false", False, (JOB,),
         "no progress and no summary (it is in OUTPUT/_summary.json)", group="run"),
    # Batch jobs: which files of a directory, CSV quotes, input columns kept in the output
    _opt("include", None, check_patterns, "a glob pattern or a list of them", False, (JOB,),
         "read only the files of a directory input that match one of these patterns (relative "
         "to the directory; '**' spans folders; a pattern without '/' matches the file name)",
         metavar="PATTERN", repeatable=True),
    _opt("exclude", None, check_patterns, "a glob pattern or a list of them", False, (JOB,),
         "skip the files and folders of a directory input that match one of these patterns "
         "(as include)", metavar="PATTERN", repeatable=True),
    _opt("quoting", "csv", check_choice(QUOTING), "'csv' or 'none'", True, (JOB,),
         "CSV/TSV quotes: 'csv' (default): a value starting with \" may hold delimiters and "
         "newlines; 'none': quotes are plain characters, every newline ends a record",
         cli_choices=QUOTING),
    _opt("keep_columns", None, check_columns, "a column name or a list of them", True,
         (JOB, ACCESSOR),
         "input columns copied into every output row of their document (e.g. an id to join "
         "the rows back to their source); the accessors also take the columns themselves",
         metavar="COLUMN", repeatable=True),
    _opt("on_bad_row", "reject", check_choice(BAD_ROW_POLICIES), "'reject' or 'error'", False,
         (JOB,), "a row that cannot be read or tokenized (a broken JSON line, a CSV record "
         "with another number of fields, a non-text value, a question too long for "
         "only_second): 'reject' (default): an empty document, listed in "
         "OUTPUT/_rejects-NNNNN.jsonl; 'error': the job fails", cli_choices=BAD_ROW_POLICIES),
    _opt("parquet_compat", False, check_bool, "true or false", True, (JOB,),
         "write parts every Parquet reader takes (list values PLAIN, not BYTE_STREAM_SPLIT: "
         "fastparquet, older Spark/Hive) at some speed and size (default: no)"),
    # Batch jobs: the output format; Megatron indexed datasets (docs/batch-jobs.md)
    _opt("output_format", "parquet", check_choice(OUTPUT_FORMATS), "'parquet', 'megatron' or "
         "'datasets'", True, (JOB,), "'parquet' (default): windows in Parquet parts; "
         "'megatron': Megatron indexed datasets (.bin + .idx), one sequence per document (or "
         "per piece, with document_separator); 'datasets': the windows as a HuggingFace "
         "dataset that datasets.load_from_disk opens", cli_choices=OUTPUT_FORMATS),
    _opt("append_eod", False, check_bool, "true or false", True, (JOB,),
         "megatron output: end every document that has tokens with eod_token, as Megatron's "
         "preprocess_data.py --append-eod"),
    _opt("eod_token", None, check_opt_str, "a token of the vocabulary or null (sep_token)",
         True, (JOB,), "megatron output: the end-of-document token of append_eod (default: "
         "sep_token, [SEP])", metavar="TOKEN"),
    _opt("document_separator", None, check_opt_str, "a non-empty string or null (one "
         "sequence per document)", True, (JOB,),
         "megatron output: split each document on this string into sequences (e.g. \"\\n\" "
         "for sentence-per-line text in JSON Lines or Parquet); pieces without tokens are "
         "left out, as preprocess_data.py leaves out empty sentences", metavar="TEXT"),
    _opt("packing", None, check_packing, "null, a block size (an integer >= 1) or "
         "{block_size: N, pad_last: true/false}", True, (JOB,),
         "concatenate the tokenized documents of the whole input in input order and cut "
         "blocks of block_size tokens (HF run_mlm's group_texts over the whole corpus); the "
         "last remainder is dropped, or padded with pad_last", cli_type=int, metavar="N"),
    _opt("merge_parts", True, check_bool, "true or false", True, (JOB,),
         "megatron output: merge the partitions' .bin/.idx pairs into one pair (default); "
         "false: keep the per-partition pairs only, listed in _megatron_data_args.txt"),
    # Process settings read from the environment only (when daskwp is imported, except
    # debug and worker_malloc: when used)
    _opt("host_pool_mb", None, _check_opt_mb,
         "an integer >= 0 (MB; 0: no reuse) or null (an eighth of the physical memory, "
         "between 256 MB and 16 GB)", False, (ENV,),
         "most memory of freed output arrays of 4 MB and more that a process keeps for "
         "reuse (daskwp.memory.set_limit changes it at run time, daskwp.memory.info() "
         "reports it)", cli_flag=False, env="DASKWP_HOST_POOL_MB"),
    _opt("huge_pages", True, check_bool, "true or false", False, (ENV,),
         "the word memos (one per tokenizing thread, made once and reused) ask for "
         "transparent huge pages (madvise): faster warm lookups; false: 4 KB pages, where "
         "a process's first calls fault in less memory at once (the Megatron writers' pooled "
         "8 MB direct I/O buffers ask too; output arrays never ask, and the daskwp command and "
         "its cluster's workers turn NumPy's request off)",
         cli_flag=False, env="DASKWP_HUGE_PAGES"),
    _opt("worker_malloc", True, check_bool, "true or false", False, (ENV,),
         "in a Dask worker whose nanny set MALLOC_TRIM_THRESHOLD_ below 128 MB, and in the "
         "daskwp command's process unless a MALLOC_*_ variable is set, raise "
         "glibc's mmap and trim thresholds to 32 and 128 MB, and in any nanny's worker make "
         "Arrow's default memory pool jemalloc unless ARROW_DEFAULT_MEMORY_POOL is set, and "
         "start the workers of clusters daskwp.connect starts with MALLOC_ARENA_MAX set to "
         "their task threads unless it is set (docs/design.md §3.5); false: leave malloc "
         "alone", cli_flag=False,
         env="DASKWP_WORKER_MALLOC"),
    _opt("debug", False, check_bool, "true or false", False, (ENV,),
         "the daskwp command raises a failed job's exception with its traceback instead of "
         "printing one error line, and -q keeps standard error as it is", cli_flag=False,
         env="DASKWP_DEBUG"),
)}


def names(surface: str) -> tuple:
    """Names of the options on ``surface`` (TOKENIZER, WINDOWS, JOB or CONFIG), in table
    order."""
    return tuple(n for n, o in OPTIONS.items() if surface in o.surfaces)


def default(name: str):
    """The table's default of ``name`` (not the configured one: see core.config.get)."""
    return OPTIONS[name].default


def check(name: str, value):
    """``value`` validated and normalized by option ``name``'s validator."""
    return OPTIONS[name].check(name, value)


#: How an environment variable spells true and false (case-insensitive).
_ENV_TRUE = ("1", "true", "yes", "on")
_ENV_FALSE = ("0", "false", "no", "off")


def env_value(name: str):
    """The value of option ``name`` from its environment variable (:attr:`Option.env`),
    validated by the option; None when the variable is unset or empty.

    A value the option does not allow warns (a ``RuntimeWarning`` naming the variable, the
    value and what is allowed) and reads as unset: the option's default applies. Integers
    are written in decimal, booleans as 1/true/yes/on or 0/false/no/off.
    """
    opt = OPTIONS[name]
    raw = os.environ.get(opt.env or "", "").strip()
    if not raw:
        return None
    value: Any = raw
    if isinstance(opt.default, bool):
        value = True if raw.lower() in _ENV_TRUE else False if raw.lower() in _ENV_FALSE \
            else raw
    elif raw.lstrip("+-").isdigit():
        value = int(raw)
    try:
        return opt.check(opt.env, value)
    except (OptionTypeError, OptionValueError):
        allowed = ("1/true/yes/on or 0/false/no/off" if isinstance(opt.default, bool)
                   else opt.allowed)
        warnings.warn(f"environment variable {opt.env}={raw!r} ignored: it must be "
                      f"{allowed}; using the default of {name}", RuntimeWarning, stacklevel=2)
        return None


def config_defaults() -> dict:
    """``{"daskwp": {name: default}}`` for the options with a ``dask.config`` default."""
    return {"daskwp": {n: OPTIONS[n].default for n in names(CONFIG)}}


def options_table_markdown() -> str:
    """The option reference as a Markdown document: docs/options.md is exactly this
    (``python -m daskwp.core.options > docs/options.md``; a test checks it)."""
    rows = ["# Options", "",
            "Generated from the option table `daskwp/core/options.py`, the one source of every "
            "option's name, default, allowed values and help (docs/design.md §3). The same "
            "name is the Python keyword, the job YAML key, the `dask.config` key "
            "`daskwp.<name>` and (with `-` for `_`) the CLI flag. \"Changes the output\": a "
            "batch job records the value in `_job.json` and refuses to resume another job's "
            "output with a different one. Precedence for batch jobs: an explicit CLI flag > "
            "`--set key=value` > the job file > `dask.config` > the default below. In Python, "
            "a window or cluster option left at `None` takes the configured `daskwp.<name>`.",
            "",
            "| name | default | allowed | changes the output | where | help |",
            "|---|---|---|---|---|---|"]
    for o in OPTIONS.values():
        where = []
        if TOKENIZER in o.surfaces or WINDOWS in o.surfaces:
            where.append("Python")
        elif ACCESSOR in o.surfaces:
            where.append("Python accessors' `tokenize`")
        if JOB in o.surfaces and o.cli_flag:
            where.append(f"YAML, CLI `{o.flag}`")
        elif JOB in o.surfaces:
            where.append("YAML")
        if CONFIG in o.surfaces:
            where.append(f"dask.config `daskwp.{o.name}`")
        if o.env:
            where.append(f"environment `{o.env}`")
        rows.append(f"| `{o.name}` | `{o.default!r}` | {o.allowed} | "
                    f"{'yes' if o.affects_output else 'no'} | {', '.join(where)} | "
                    f"{o.help} |")
    rows += ["", "## Environment variables", "",
             "The options with an environment variable, read in Python "
             "(`daskwp.core.options.env_value`; the extension reads none): `debug` and "
             "`worker_malloc` when used, the others when `daskwp` is imported, whose "
             "limits are then passed to the extension. A value that is not allowed warns "
             "(a `RuntimeWarning` naming it) and the option's default applies.", "",
             "| variable | option | allowed |", "|---|---|---|"]
    rows += [f"| `{o.env}` | `{o.name}` | "
             f"{'1/true/yes/on or 0/false/no/off' if isinstance(o.default, bool) else o.allowed} |"
             for o in OPTIONS.values() if o.env]
    rows += ["", "daskwp also reads, and never sets, `MALLOC_TRIM_THRESHOLD_` (set by a Dask "
             "nanny; see `worker_malloc`), sets `MALLOC_ARENA_MAX` only for the workers of "
             "the clusters it starts (where it is not set; see `worker_malloc`), and the test "
             "helpers of `daskwp.testing` read `CXX` (the compiler of the emulated CUDA "
             "build)."]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m daskwp.core.options > docs/options.md
    print(options_table_markdown(), end="")
