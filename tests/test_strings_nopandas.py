"""A list of Python strings becomes Arrow without pyarrow's pandas import (its sequence
conversion imports pandas: ~0.2 s of CPU on a tokenizer's first call), with pyarrow's result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from daskwp.core.strings import to_arrow

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("texts", [
    ["Hello world!", "", "naïve café", "日本語", "a\x00b", "\U0001f600"],
    [],
    np.array(["x", "yz"], dtype=object),
    ("tuple", "of", "str"),
])
def test_str_lists_convert_as_pyarrow_does(texts):
    got = to_arrow(texts)
    want = pa.chunked_array([pa.array(list(texts), type=pa.large_string())],
                            type=pa.large_string())
    got.validate(full=True)
    assert got.type == pa.large_string()
    assert got.equals(want)


@pytest.mark.parametrize("texts, nulls", [(["a", None, "b"], 1), (["a", float("nan")], 1),
                                          (["a", b"raw"], 0), (["lone \ud800", "x"], 0)])
def test_other_items_keep_the_old_conversion(texts, nulls):
    got = to_arrow(texts)
    assert len(got) == len(texts) and got.null_count == nulls


def test_a_bad_item_is_still_refused():
    with pytest.raises(TypeError, match=r"texts\[1\] is a int"):
        to_arrow(["a", 3])


def test_a_tokenizer_call_on_a_list_imports_no_pandas():
    code = ("import sys\nimport daskwp\n"
            "out = daskwp.WordPieceTokenizer()(['Hello world!', 'naive'], max_length=8)\n"
            "assert out.input_ids.shape == (2, 8)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_a_longer_list_goes_to_pyarrow(monkeypatch):
    from daskwp.core import strings
    texts = ["a", "bc", "déf"]
    want = to_arrow(texts)
    monkeypatch.setattr(strings, "STR_LIST_ITEMS", 2)
    monkeypatch.setattr(strings, "_from_str_list", lambda t: pytest.fail("not pyarrow's"))
    assert to_arrow(texts).equals(want)
