"""transformers 4.x's answers to ``truncate_sequences`` / ``prepare_for_model`` calls, for
the drop-in's oracle test (tests/test_transformers_prepare.py; issue 38, docs/design.md §3.6).

transformers 5 dropped both methods, and this process has transformers 5 imported, so the
oracle runs as a script in a subprocess whose ``PYTHONPATH`` starts with a folder holding
transformers 4.57 (installed there by the test)::

    python tests/transformers4_oracle.py request.json answers.json

The request lists, per vocabulary, its ``vocab.txt``, lowercasing and calls; each call's
answer is its result (:func:`encoded`: types, dtypes, shapes and values), or the name and
text of the exception it raised, and the messages logged on transformers' logger. 4.x's
``BertTokenizerFast`` answers; where it fails its ``assert`` in ``get_special_tokens_mask``
(``return_special_tokens_mask=True`` with special tokens), 4.x's slow ``BertTokenizer``
answers (its ``prepare_for_model`` is the same method; the drop-in gives its mask). The test
imports :func:`run_call` and :func:`encoded` from here for the drop-in's side, so both sides
are described by the same code.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import warnings
from collections.abc import Mapping

import numpy as np


def encoded(value):
    """A JSON description of a result, types included (lists and tuples, NumPy arrays and
    torch tensors with dtype and shape, mappings with their key order)."""
    if type(value).__module__.startswith("torch"):
        return ["pt", str(value.dtype).replace("torch.", ""), list(value.shape),
                value.tolist()]
    if isinstance(value, np.ndarray):
        return ["np", str(value.dtype), list(value.shape), value.tolist()]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [encoded(v) for v in value]]
    if isinstance(value, Mapping):
        return ["map", [[k, encoded(v)] for k, v in value.items()]]
    if value is None:
        return ["None"]
    return [type(value).__name__, value]


@contextlib.contextmanager
def captured_logs():
    """The (level, message) pairs logged on transformers' loggers meanwhile."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append([record.levelname, record.getMessage()])

    root = logging.getLogger("transformers")
    handler, level = Keep(), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def run_call(tok, call: dict) -> dict:
    """One call on ``tok``: ``{"ok": encoded result}`` or ``{"error": name, "message":
    text}``, with ``"logs"``. The tokenizer's sides are set and its once-only warnings
    forgotten first, so each call stands alone."""
    tok.truncation_side = call["truncation_side"]
    tok.padding_side = call["padding_side"]
    tok.deprecation_warnings = {}
    with captured_logs() as logs, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = {"ok": encoded(getattr(tok, call["method"])(*call["args"],
                                                              **call["kwargs"]))}
        except Exception as e:  # noqa: BLE001 - the oracle reports what was raised
            out = {"error": type(e).__name__, "message": str(e)[:400]}
    out["logs"] = logs
    return out


def main(request_path: str, answer_path: str) -> None:
    import transformers
    from transformers import BertTokenizer, BertTokenizerFast

    request = json.loads(open(request_path, encoding="utf-8").read())
    answers = {"version": transformers.__version__, "vocabularies": []}
    for vocab in request["vocabularies"]:
        kw = {"vocab_file": vocab["vocab"], "do_lower_case": vocab["lower"],
              "model_max_length": request["model_max_length"]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast, slow = BertTokenizerFast(**kw), BertTokenizer(**kw)
        results = []
        for call in vocab["calls"]:
            r = run_call(fast, call)
            if r.get("error") == "AssertionError":
                r = run_call(slow, call)
                r["slow"] = True
            results.append(r)
        answers["vocabularies"].append(results)
    with open(answer_path, "w", encoding="utf-8") as f:
        json.dump(answers, f)


if __name__ == "__main__":
    main(*sys.argv[1:3])
