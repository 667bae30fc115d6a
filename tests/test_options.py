"""One option table (daskwp/core/options.py): every surface is derived from it, with one name
per option from Python to YAML to the CLI, and one precedence for batch jobs."""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import dask
import pytest
import yaml

import daskwp
from daskwp import jobs
from daskwp.backends.tokenizer import TOKENIZER_OPTIONS
from daskwp.cli import build_parser, main
from daskwp.core import options as opt
from daskwp.core.windows import WINDOW_OPTIONS

REPO = Path(__file__).resolve().parent.parent


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings if s.startswith("--")}


def test_docs_options_md_is_generated_from_the_table():
    doc = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    assert doc == opt.options_table_markdown(), \
        "docs/options.md is stale: python -m daskwp.core.options > docs/options.md"
    for name in opt.OPTIONS:
        assert f"| `{name}` |" in doc


def test_job_config_fields_are_the_job_options():
    fields = list(jobs.JobConfig.__dataclass_fields__)
    assert sorted(fields) == sorted(opt.names(opt.JOB))
    assert tuple(jobs.CONFIG_KEYS) == opt.names(opt.JOB)
    assert set(jobs.JOB_KEYS) == {n for n in opt.names(opt.JOB) if opt.OPTIONS[n].affects_output}


@pytest.mark.parametrize("command", ["run", "tokenize"])
def test_cli_flags_are_the_job_options(command):
    flags = _flags(_subparser(command))
    expected = {opt.OPTIONS[n].flag for n in opt.names(opt.JOB) if opt.OPTIONS[n].cli_flag}
    assert expected <= flags
    extra = flags - expected
    # the flags that are not options: help, --set, --json, and the kept spellings
    # ... and the keys of the security option (--tls-cert is security.cert)
    tls = {"--tls-" + k.replace("_", "-") for k in opt.SECURITY_KEYS}
    assert extra <= {"--help", "--set", "--json", "--scheduler", "--no-special-tokens",
                     "--storage-option", "--pack"} | {
        "--no-" + f[2:] for f in expected} | tls | {"--no-tls-require-encryption"}, extra


def test_cli_choices_come_from_the_table():
    actions = {a.dest: a for a in _subparser("tokenize")._actions}
    for name in opt.names(opt.JOB):
        o = opt.OPTIONS[name]
        if o.cli_choices is not None:
            assert tuple(actions[name].choices) == tuple(o.cli_choices), name


def test_dask_config_defaults_are_the_config_options():
    assert set(dask.config.get("daskwp")) >= set(opt.names(opt.CONFIG))
    for name in opt.names(opt.CONFIG):
        assert dask.config.get(f"daskwp.{name}") == opt.OPTIONS[name].default


def test_python_signatures_use_the_table_names():
    init = set(inspect.signature(daskwp.WordPieceTokenizer.__init__).parameters) - {"self"}
    assert init == set(opt.names(opt.TOKENIZER))
    call = set(inspect.signature(daskwp.WordPieceTokenizer.__call__).parameters) - {
        "self", "texts"}
    assert call == set(opt.names(opt.WINDOWS))
    assert set(WINDOW_OPTIONS) <= set(opt.names(opt.WINDOWS))
    assert set(TOKENIZER_OPTIONS) <= set(opt.names(opt.TOKENIZER))
    for acc in (daskwp.accessors.eager.WordPieceAccessor,
                daskwp.accessors.lazy.DaskWordPieceAccessor):
        params = set(inspect.signature(acc.tokenize).parameters) - {"self",
                                                                    "tokenizer_options"}
        assert params == {"vocab", "lowercase", "text_pair", "return_overflowing_tokens",
                          *WINDOW_OPTIONS, *opt.names(opt.ACCESSOR)}, acc


def test_conf_yaml_keys_are_job_options():
    for path in sorted((REPO / "conf").glob("*.yaml")):
        keys = set(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
        assert keys <= set(opt.names(opt.JOB)), (path.name, keys - set(opt.names(opt.JOB)))


def test_one_device_vocabulary():
    assert opt.normalize_device("cuda") == "gpu"
    for d in opt.DEVICES:
        assert opt.normalize_device(d) == d
        assert daskwp.WordPieceTokenizer(device=d).device == d
    assert daskwp.WordPieceTokenizer(device="cuda").device == "gpu"
    with pytest.raises(ValueError, match="device must be one of 'auto', 'cpu', 'gpu'; got 'tpu'"):
        daskwp.WordPieceTokenizer(device="tpu")
    with pytest.raises(jobs.ConfigError, match="got 'tpu'"):
        jobs.make_config({"input": "x", "output": "y", "device": "tpu"})


def test_padding_none_means_the_configured_default_everywhere():
    tok = daskwp.WordPieceTokenizer()
    with dask.config.set({"daskwp.padding": "do_not_pad", "daskwp.max_length": 16}):
        out = tok(["a b c"], padding=None)
        assert isinstance(out.input_ids, daskwp.RaggedRows)
        import pandas as pd
        res = pd.Series(["a b c"]).wordpiece.tokenize(padding=None)
        assert res.options["padding"] == "do_not_pad" and res.options["max_length"] == 16
        cfg = jobs.make_config({"input": "x", "output": "y", "padding": None})
        assert cfg.padding == "do_not_pad" and cfg.max_length == 16
    assert tok(["a"], padding=None).input_ids.shape == (1, 128)


def test_job_precedence_flag_over_set_over_yaml_over_config(tmp_path, capsys):
    inp = tmp_path / "in.txt"
    inp.write_text("a b c\n", encoding="utf-8")
    job = tmp_path / "job.yaml"
    job.write_text(f"input: {inp}\noutput: {tmp_path / 'out'}\nmax_length: 64\n",
                   encoding="utf-8")

    def cfg_of(*args):
        ns = build_parser().parse_args(["run", str(job), *args])
        from daskwp.cli import _job_values
        return jobs.load_config(ns.job, _job_values(ns))

    assert cfg_of().max_length == 64                                  # the job file
    assert cfg_of("--set", "max_length=32").max_length == 32          # --set over the file
    assert cfg_of("--set", "max_length=32", "--max-length", "16").max_length == 16  # flag
    assert cfg_of("--max-length", "16", "--set", "max_length=32").max_length == 16
    job.write_text(f"input: {inp}\noutput: {tmp_path / 'out'}\n", encoding="utf-8")
    with dask.config.set({"daskwp.max_length": 48}):
        assert cfg_of().max_length == 48                              # dask.config
    assert cfg_of().max_length == 128                                 # the table's default


def test_tokenize_refuses_set_input_beside_the_argument(tmp_path, capsys):
    inp = tmp_path / "in.txt"
    inp.write_text("a\n", encoding="utf-8")
    rc = main(["tokenize", str(inp), str(tmp_path / "out"), "--scheduler", "synchronous",
               "--set", f"input={inp}", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and "--set input" in err and "INPUT" in err
    assert not (tmp_path / "out").exists()


def test_validators_name_the_option_the_value_and_what_is_allowed():
    for name, bad in (("max_input_chars_per_word", 0), ("partition_size", "-1MB"),
                      ("input_format", "xml"), ("padding", "max"), ("compression", "zip"),
                      ("n_workers", 0), ("num_threads", -1), ("mask_dtype", "float32")):
        with pytest.raises(ValueError) as e:
            opt.check(name, bad)
        assert name in str(e.value) and repr(bad).strip("'") in str(e.value), str(e.value)
    # a value of the wrong type is both a TypeError and a ValueError
    with pytest.raises(TypeError):
        opt.check("max_input_chars_per_word", 1.5)
    with pytest.raises(ValueError):
        opt.check("max_input_chars_per_word", 1.5)


def test_set_takes_lists_for_list_valued_keys_only():
    from daskwp.jobs import parse_override
    assert parse_override('include=["*.txt", "logs/**"]') == ("include", ["*.txt", "logs/**"])
    assert parse_override("bucket_widths=[16, 32]") == ("bucket_widths", [16, 32])
    assert parse_override("column=[x]") == ("column", "[x]")    # not a list-valued key
    cfg = jobs.make_config(dict([parse_override("input=a.txt"), parse_override("output=o"),
                                 parse_override('exclude=["_*", "tmp/**"]')]))
    assert cfg.exclude == ["_*", "tmp/**"]
