"""What the parity section compares: window options that together take every value of every
window option, tokenizer settings that change the normalization blob or the word limit,
chunk sizes, and the option-table options that these cover.
"""

from __future__ import annotations


# Window options: together they take every value of every window option at least once.
WINDOW_CASES = [
    ("ml128", dict(max_length=128)),
    ("ml128-s32-longest", dict(max_length=128, stride=32, padding="longest")),
    ("ml64-s13-ragged-logid", dict(max_length=64, stride=13, padding="do_not_pad",
                                   logid_offset=1000)),
    ("ml128-s32-bucket-auto", dict(max_length=128, stride=32, padding="bucket")),
    ("ml128-bucket-16-32-64", dict(max_length=128, padding="bucket",
                                   bucket_widths=(16, 32, 64))),
    ("ml32-trunc-int8", dict(max_length=32, truncation=True, mask_dtype="int8")),
    ("ml16-s5-nospecial-ragged-int8", dict(max_length=16, stride=5, add_special_tokens=False,
                                           padding=False, mask_dtype="int8")),
    ("ml9-s6-nospecial-padTrue", dict(max_length=9, stride=6, add_special_tokens=False,
                                      padding=True)),
    ("ml512-s128-trunc-longest", dict(max_length=512, stride=128, truncation=True,
                                      padding="longest")),
]


# Tokenizer settings beyond each vocabulary's own lowercase flag (they change the
# normalization blob or the word limit the kernel reads).
TOKENIZER_CASES = [
    ("uncased-no-strip", "bert-base-uncased", dict(lowercase=True, strip_accents=False)),
    ("cased-strip", "bert-base-multilingual-cased", dict(lowercase=False, strip_accents=True)),
    ("no-clean-text", "bert-base-multilingual-cased", dict(lowercase=False, clean_text=False)),
    ("no-chinese-chars", "bert-base-multilingual-cased",
     dict(lowercase=False, handle_chinese_chars=False)),
    ("word-limit-5", "bert-base-uncased", dict(lowercase=True, max_input_chars_per_word=5)),
]


CHUNK_CASES = [1, 7, 64, 4096]


#: Options the parity section covers (the rest of the option table's output-changing
#: tokenizer and window options are listed as "not covered").
COVERED_OPTIONS = {"vocab", "lowercase", "strip_accents", "clean_text", "handle_chinese_chars",
                   "max_input_chars_per_word", "max_length", "stride", "truncation",
                   "add_special_tokens", "padding", "bucket_widths", "mask_dtype",
                   "return_tensors", "logid_offset"}
