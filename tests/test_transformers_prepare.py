"""transformers 4's ``truncate_sequences`` and ``prepare_for_model`` on the drop-in (issue 38
item 6; docs/design.md §3.6).

transformers 5 (this project's oracle for the rest of the drop-in) has neither, so the
oracle is transformers 4.57 (the last 4.x release), installed at test time from the package
registry into a cache folder (``pip install --no-deps --target``) and run in a subprocess
(tests/transformers4_oracle.py): a seeded grid of calls on ids of the shared corpus lines,
for every shared vocabulary, compared result by result (keys and their order, values,
types, dtypes, shapes), error by error (the exception's class) and log message by log
message. The fast tests check hand-worked values.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import VOCAB_CONFIGS, cache_root, corpus_files, read_documents, vocab_path
from transformers4_oracle import captured_logs, run_call

import daskwp

try:
    import torch
except ImportError:           # the grid then draws no return_tensors="pt" calls
    torch = None

HERE = Path(__file__).resolve().parent
MODEL_MAX = 512
#: transformers 4.57 with what its import-time check needs that this environment's newer
#: packages do not give (huggingface_hub < 1.0, tokenizers <= 0.23.0); the rest is reused.
ORACLE_PINS = ("transformers==4.57.6", "huggingface_hub==0.36.2", "tokenizers==0.22.2")
CALLS_PER_VOCAB = 1500


@pytest.fixture(scope="module")
def dt():
    tok = daskwp.WordPieceTokenizer(str(vocab_path("bert-base-uncased")), lowercase=True)
    return tok.as_transformers(model_max_length=MODEL_MAX)


# -- fast: hand-worked values -------------------------------------------------------------

def test_truncate_sequences_values(dt):
    ids, pair = [1, 2, 3, 4, 5], [7, 8]
    dt.truncation_side = "right"
    assert dt.truncate_sequences(ids, num_tokens_to_remove=2, truncation_strategy="only_first",
                                 stride=1) == ([1, 2, 3], None, [3, 4, 5])
    assert dt.truncate_sequences(ids, pair, 1, "only_second", 5) == (ids, [7], [7, 8])
    # no pair: longest_first cuts the one sequence, with its overflow
    assert dt.truncate_sequences(ids, None, 3) == ([1, 2], None, [3, 4, 5])
    dt.truncation_side = "left"
    try:
        assert dt.truncate_sequences(ids, None, 2, "only_first", 1) == ([3, 4, 5], None,
                                                                       [1, 2, 3])
        # longest_first on a pair: the longer down to the other's length, then half each
        with captured_logs() as logs:
            got = dt.truncate_sequences([1, 2, 3, 4, 5, 6], [7, 8, 9], 5)
        assert got == ([5, 6], [8, 9], [])
        assert logs and logs[0][0] == "WARNING" and "overflowing tokens are not returned" \
            in logs[0][1]
    finally:
        dt.truncation_side = "right"
    assert dt.truncate_sequences([1, 2, 3, 4, 5, 6], [7, 8, 9], 5) == ([1, 2], [7, 8], [])
    # nothing to remove, only_second without a pair, do_not_truncate: unchanged, same objects
    for args in ((ids, pair, 0), (ids, None, 2, "only_second"), (ids, pair, 2,
                                                                   "do_not_truncate")):
        out = dt.truncate_sequences(*args)
        assert out[0] is ids and out[2] == []


def test_truncate_sequences_impossible_requests(dt):
    with captured_logs() as logs:
        assert dt.truncate_sequences([1, 2], None, 2, "only_first") == ([1, 2], None, [])
        assert dt.truncate_sequences([1, 2], [3], 1, "only_second") == ([1, 2], [3], [])
    assert [level for level, _ in logs] == ["ERROR", "ERROR"]
    assert logs[0][1] == ("We need to remove 2 to truncate the input but the first sequence "
                          "has a length 2. Please select another truncation strategy than "
                          "TruncationStrategy.ONLY_FIRST, for instance 'longest_first' or "
                          "'only_second'.")
    assert "second sequence has a length 1" in logs[1][1]
    with pytest.raises(ValueError, match="not a valid TruncationStrategy"):
        dt.truncate_sequences([1, 2], None, 1, "middle")
    with pytest.raises(ValueError, match="stride"):
        dt.truncate_sequences([1, 2], None, 1, "only_first", -1)


def test_prepare_for_model_values(dt):
    enc = dt.prepare_for_model([1000, 1001, 1002], [2000, 2001, 2002], max_length=8,
                               truncation="only_second", stride=1, padding="max_length",
                               return_overflowing_tokens=True, return_special_tokens_mask=True)
    assert list(enc.keys()) == ["overflowing_tokens", "num_truncated_tokens", "input_ids",
                                "token_type_ids", "special_tokens_mask", "attention_mask"]
    assert enc["overflowing_tokens"] == [2001, 2002] and enc["num_truncated_tokens"] == 1
    assert enc["input_ids"] == [101, 1000, 1001, 1002, 102, 2000, 2001, 102]
    assert enc.token_type_ids == [0, 0, 0, 0, 0, 1, 1, 1]
    assert enc["special_tokens_mask"] == [1, 0, 0, 0, 1, 0, 0, 1]
    assert enc["attention_mask"] == [1] * 8
    enc = dt.prepare_for_model([5, 6], add_special_tokens=False, padding="longest",
                               pad_to_multiple_of=4, padding_side="left", return_length=True)
    assert dict(enc) == {"input_ids": [0, 0, 5, 6], "token_type_ids": [0, 0, 0, 0],
                         "attention_mask": [0, 0, 1, 1], "length": 4}
    enc = dt.prepare_for_model(np.array([5, 6]), [7], return_tensors="np",
                               prepend_batch_axis=True, return_attention_mask=False)
    assert enc["input_ids"].dtype == np.int64 and enc["input_ids"].tolist() == \
        [[101, 5, 6, 102, 7, 102]]
    assert list(enc) == ["input_ids", "token_type_ids"]
    assert pickle.loads(pickle.dumps(enc))["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1]]
    # empty values are int64 (transformers 4's rule), with the batch axis too
    enc = dt.prepare_for_model([], add_special_tokens=False, return_tensors="np",
                               prepend_batch_axis=True)
    assert enc["input_ids"].dtype == np.int64 and enc["input_ids"].shape == (1, 0)


def test_prepare_for_model_errors_and_warnings(dt):
    with pytest.raises(ValueError, match="token_type_ids"):
        dt.prepare_for_model([5], add_special_tokens=False, return_token_type_ids=True)
    with pytest.raises(ValueError, match="longest_first"):
        dt.prepare_for_model([5], [6], truncation=True, max_length=4,
                             return_overflowing_tokens=True)
    with pytest.raises(NotImplementedError, match="return_offsets_mapping"):
        dt.prepare_for_model([5], return_offsets_mapping=True)
    with pytest.raises(TypeError, match="max_length"):
        dt.prepare_for_model([5], return_overflowing_tokens=True)
    with pytest.raises(ValueError, match="num_truncated_tokens"):   # a number: no tensor
        dt.prepare_for_model([5], max_length=4, return_overflowing_tokens=True,
                             return_tensors="np")
    with pytest.raises(TypeError, match="token ids"):
        dt.prepare_for_model(["a"])
    with pytest.raises(TypeError, match="unexpected keyword"):
        dt.prepare_for_model([5], no_such_option=True)
    dt.deprecation_warnings = {}
    with captured_logs() as logs:
        dt.prepare_for_model(list(range(1000, 1600)))
        dt.prepare_for_model(list(range(1000, 1600)))          # once per tokenizer
        enc = dt.prepare_for_model([1, 2, 3, 4], max_length=3)  # max_length alone truncates
    assert enc["input_ids"] == [101, 1, 102]
    assert [m[:40] for _, m in logs] == [
        "Token indices sequence length is longer ",
        "Truncation was not explicitly activated "]
    assert "(602 > 512)" in logs[0][1]


# -- slow: transformers 4.57 as the oracle ----------------------------------------------------

def registry_reachable() -> bool:
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "transformers"],
                       capture_output=True, text=True, timeout=300)
    return r.returncode == 0


def oracle_folder() -> Path:
    """A folder holding transformers 4.57 (cached under ``cache_root()``); the test skips
    only when the package registry cannot be reached."""
    folder = cache_root() / ("oracle-" + "-".join(p.replace("==", "") for p in ORACLE_PINS))
    if (folder / ".complete").is_file():
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--disable-pip-version-check", "--target", str(partial),
                        *ORACLE_PINS], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        if not registry_reachable():
            pytest.skip(f"the package registry cannot be reached to install the transformers "
                        f"4.x oracle ({' '.join(ORACLE_PINS)}): {r.stderr.strip()[-300:]}")
        pytest.fail(f"installing the transformers 4.x oracle failed:\n{r.stderr[-2000:]}")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    (folder / ".complete").touch()
    return folder


def id_pool(tok, n_lines: int, seed: int) -> list:
    """Ids (no special tokens) of shared corpus lines, some cut short, some long."""
    lines = [d for f in corpus_files() for d in read_documents(f) if d.strip()]
    rng = random.Random(seed)
    picked = rng.sample(lines, min(n_lines, len(lines)))
    return tok(picked, add_special_tokens=False)["input_ids"]


def draw_calls(rng: random.Random, pool: list, n: int) -> list:
    def ids():
        row = rng.choice(pool)
        r = rng.random()
        if r < 0.4:
            return row[:rng.choice([0, 1, 2, 3, 5, 8, 13, 20])]
        if r < 0.5 and len(row) < 520:                 # over model_max_length
            return (row * (1 + 600 // max(1, len(row))))[:rng.choice([513, 530, 700])]
        return row[:rng.randrange(0, 90)] if r < 0.9 else row

    def maybe(options, p=0.7):
        return rng.random() < p, rng.choice(options)

    calls = []
    for _ in range(n):
        a = ids()
        b = ids() if rng.random() < 0.5 else None
        sides = {"truncation_side": rng.choice(["right", "left"]),
                 "padding_side": rng.choice(["right", "left"])}
        if rng.random() < 0.3:
            kwargs = {"pair_ids": b}
            total = len(a) + (len(b) if b is not None else 0)
            kwargs["num_tokens_to_remove"] = rng.choice(
                [-1, 0, 1, 2, 3, len(a), max(0, len(a) - 1), total, total + 2,
                 rng.randrange(0, total + 3)])
            for key, options in (("truncation_strategy",
                                  ["longest_first", "only_first", "only_second",
                                   "do_not_truncate", "middle"]),
                                 ("stride", [0, 1, 2, 4, 50])):
                use, value = maybe(options, 0.8)
                if use:
                    kwargs[key] = value
            calls.append({"method": "truncate_sequences", "args": [a], "kwargs": kwargs,
                          **sides})
            continue
        kwargs = {"pair_ids": b} if b is not None or rng.random() < 0.3 else {}
        options = {
            "add_special_tokens": [True, True, True, False],
            "padding": [False, True, "longest", "max_length", "do_not_pad"],
            "truncation": [None, False, True, "longest_first", "only_first", "only_second",
                           "do_not_truncate"],
            "max_length": [None, 0, 1, 2, 3, 4, 5, 6, 8, 9, 16, 24, 33, 64, 600],
            "stride": [0, 0, 1, 2, 3, 10],
            "pad_to_multiple_of": [None, 3, 8, 16],
            "padding_side": [None, "left", "right"],
            "return_tensors": [None, None, "np"] + (["pt"] if torch is not None else []),
            "return_token_type_ids": [None, True, False],
            "return_attention_mask": [None, True, False],
            "return_overflowing_tokens": [False, True],
            "return_special_tokens_mask": [False, True],
            "return_length": [False, True],
            "verbose": [True, True, False],
            "prepend_batch_axis": [False, True],
        }
        for key, values in options.items():
            use, value = maybe(values, 0.6)
            if use:
                kwargs[key] = value
        calls.append({"method": "prepare_for_model", "args": [a], "kwargs": kwargs, **sides})
    return calls


@pytest.mark.slow
def test_grid_equals_transformers_4(tmp_path):
    folder = oracle_folder()
    vocabularies, mine = [], []
    for k, (name, lower) in enumerate(VOCAB_CONFIGS):
        tok = daskwp.WordPieceTokenizer(str(vocab_path(name)), lowercase=lower) \
            .as_transformers(model_max_length=MODEL_MAX)
        calls = draw_calls(random.Random(38 + k), id_pool(tok, 300, k), CALLS_PER_VOCAB)
        vocabularies.append({"vocab": str(vocab_path(name)), "lower": lower, "calls": calls})
        mine.append((name, tok, calls))
    request, answer = tmp_path / "request.json", tmp_path / "answer.json"
    request.write_text(json.dumps({"model_max_length": MODEL_MAX,
                                   "vocabularies": vocabularies}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(folder),
           "TRANSFORMERS_VERBOSITY": "warning", "TOKENIZERS_PARALLELISM": "false",
           # 4.x's fast tokenizers advise, once, that __call__ beats encoding then pad()
           # (prepare_for_model pads): an advisory notice the drop-in does not give
           "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
    r = subprocess.run([sys.executable, str(HERE / "transformers4_oracle.py"), str(request),
                        str(answer)], capture_output=True, text=True, env=env, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    answers = json.loads(answer.read_text(encoding="utf-8"))
    assert answers["version"].startswith("4.57."), answers["version"]
    problems, kinds = [], {"ok": 0, "error": 0, "slow": 0, "logged": 0}
    for (name, tok, calls), want in zip(mine, answers["vocabularies"]):
        assert len(want) == len(calls)
        for call, w in zip(calls, want):
            got = run_call(tok, call)
            kinds["ok" if "ok" in w else "error"] += 1
            kinds["slow"] += bool(w.get("slow"))
            kinds["logged"] += bool(w["logs"])
            same = (got.get("ok") == w.get("ok") and got.get("error") == w.get("error")
                    and got["logs"] == w["logs"])
            if not same:
                problems.append(f"{name} {call['method']}({call['args'][0][:6]}..., "
                                f"{json.dumps(call['kwargs'])[:300]}, sides "
                                f"{call['truncation_side']}/{call['padding_side']}):\n"
                                f"  daskwp       {json.dumps({**got})[:600]}\n"
                                f"  transformers {json.dumps({**w})[:600]}")
    print(f"\ntransformers {answers['version']} oracle: {kinds}")
    # every kind of answer is on the grid: results, errors, the slow tokenizer's mask, logs
    assert all(kinds.values()), kinds
    assert not problems, f"{len(problems)} calls differ:\n" + "\n".join(problems[:8])
