"""The ``daskwp`` command: batch tokenization jobs and a benchmark.

::

    daskwp run conf/quickstart.yaml [--set key=value ...] [options]
    daskwp tokenize INPUT OUTPUT [options]
    daskwp count INPUT [--plot lengths.png] [options]
    daskwp bench FILE [--vocab PATH] [--repeat 3]

Options have the names of the config keys (``--max-length`` is ``max_length``); see
``docs/batch-jobs.md``. Exit status: 0 done, 1 the job failed, 2 a bad command line, job file
or input, 130 interrupted (rerun the same command to resume).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .backends.memory import tune_command_malloc, tune_numpy_huge_pages
from .core.options import OPTIONS, check_bool, check_opt_bool, check_truncation
from .core.options import SECURITY_KEYS, env_value
from .core.version import __version__
from .jobs import (CONFIG_KEYS, ConfigError, InputError, JobError, OutputConflictError,
                   format_summary, load_config, make_config, parse_override, remove_spool_dir,
                   run_job)


#: The values ``--truncation VALUE`` takes besides the plain flag (HF's strategy names and
#: YAML's booleans); ``--truncation`` alone is True, ``--no-truncation`` False.
_TRUNCATION_WORDS = ("longest_first", "only_first", "only_second", "do_not_truncate",
                     "true", "false")


def _truncation_value(text: str):
    """A ``--truncation`` value: a strategy name, or true / false."""
    word = text.strip().lower()
    if word in ("true", "false"):
        return word == "true"
    try:
        return check_truncation("truncation", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _truncation_argv(args: list) -> list:
    """``--truncation`` followed by anything but one of its values (another flag, a
    positional argument) is the plain flag: written ``--truncation=true``, so that it
    never takes the next argument as its value."""
    out = []
    for k, a in enumerate(args):
        if a == "--truncation" and (k + 1 >= len(args)
                                    or args[k + 1].lower() not in _TRUNCATION_WORDS):
            a = "--truncation=true"
        out.append(a)
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's exit status 2, with our prefix
        self.print_usage(sys.stderr)
        self.exit(2, f"daskwp: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(_truncation_argv(args), namespace)


#: CLI help groups, in the order --help lists them.
_GROUPS = ("tokenizer", "windows", "input and output", "cluster", "run")
#: Extra spellings of a few flags (kept for existing scripts).
_ALIASES = {"scheduler_address": ("--scheduler",), "quiet": ("-q",),
            "storage_options": ("--storage-option",), "packing": ("--pack",)}
_BOOL_CHECKS = (check_bool, check_opt_bool, check_truncation)
#: The flags of ``daskwp count``: the tokenizer, how the input is read, the cluster.
COUNT_KEYS = tuple(k for k in CONFIG_KEYS if OPTIONS[k].cli_group in ("tokenizer", "cluster")
                   or k in ("column", "input_format", "partition_size", "include", "exclude",
                            "quoting", "quiet", "storage_options", "on_bad_row"))


def _add_job_options(p: argparse.ArgumentParser, keys=None) -> None:
    """One flag per job option of the option table (``--max-length`` is ``max_length``);
    ``keys``: only these."""
    S = argparse.SUPPRESS
    groups = {g: p.add_argument_group(g) for g in _GROUPS}
    for name in CONFIG_KEYS:
        o = OPTIONS[name]
        if not o.cli_flag or (keys is not None and name not in keys):
            continue
        g = groups.get(o.cli_group) or groups.setdefault(o.cli_group,
                                                         p.add_argument_group(o.cli_group))
        flags = (*_ALIASES.get(name, ()), o.flag)
        if o.check is check_truncation:   # a flag, or a strategy name for sentence pairs
            g.add_argument(*flags, dest=name, nargs="?", const=True, type=_truncation_value,
                           default=S, metavar="STRATEGY",
                           help=o.help + " (--truncation: true; or --truncation only_second, "
                                         "only_first, longest_first)")
            g.add_argument("--no-" + o.flag[2:], dest=name, action="store_false", default=S,
                           help="no truncation (the default)")
        elif o.check in _BOOL_CHECKS:
            g.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction,
                           default=S, help=o.help)
        elif o.repeatable:
            g.add_argument(*flags, dest=name, action="append", type=o.cli_type or str,
                           default=S, metavar=o.metavar or "VALUE",
                           help=o.help + " (repeatable)")
        else:
            g.add_argument(*flags, dest=name, type=o.cli_type or str, default=S,
                           choices=o.cli_choices, metavar=o.metavar, help=o.help)
        if name == "add_special_tokens":
            g.add_argument("--no-special-tokens", dest=name, action="store_false", default=S,
                           help="same as --no-add-special-tokens")
    _add_tls_flags(groups["cluster"])
    g = groups["run"]
    g.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE",
                   help="set any config key (repeatable); the value is read as YAML. "
                        "Precedence: an explicit flag > --set > the job file > dask.config "
                        "defaults > built-in defaults")
    g.add_argument("--json", dest="print_json", action="store_true",
                   help="print the summary as JSON")


def _add_tls_flags(g) -> None:
    """``--tls-ca-file``, ``--tls-cert``, ``--tls-key``, ``--tls-require-encryption``: the
    keys of the ``security`` option (SECURITY_KEYS), each replacing that key of the job's."""
    S = argparse.SUPPRESS
    for key in SECURITY_KEYS:
        flag, dest = "--tls-" + key.replace("_", "-"), "tls_" + key
        if key == "require_encryption":
            g.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=S,
                           help="refuse a scheduler address that is not tls:// (default: "
                                "on when a TLS file is given)")
        else:
            g.add_argument(flag, dest=dest, default=S, metavar="PATH",
                           help=f"security.{key}: " + {
                               "ca_file": "the cluster's CA certificate (PEM)",
                               "cert": "this client's certificate (PEM)",
                               "key": "this client's private key (PEM; not needed when "
                                      "the certificate file holds it)"}[key])


def _tls_values(ns: argparse.Namespace) -> dict | None:
    """The ``security`` keys given by --tls-* flags, or None."""
    values = {k: getattr(ns, "tls_" + k) for k in SECURITY_KEYS if hasattr(ns, "tls_" + k)}
    return values or None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="daskwp", description="Dask-distributed BERT WordPiece tokenization: "
                "HuggingFace-exact ids, strided windows, global logIDs, Parquet output.")
    p.add_argument("--version", action="version", version=f"daskwp {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="run a job file (conf/*.yaml)",
                       description="Run a job described by a YAML file. Relative paths in "
                       "the file resolve against the file's folder; options and --set "
                       "values override the file (their paths resolve against the current "
                       "directory). Rerunning a job resumes it.")
    r.add_argument("job", metavar="JOB.yaml")
    _add_job_options(r)

    t = sub.add_parser("tokenize", help="tokenize INPUT into a Parquet dataset OUTPUT",
                       description="Tokenize a file, glob or directory (Parquet, CSV, TSV, "
                       "JSON Lines, or text with one document per line) into a Parquet "
                       "dataset. Rerunning the same command resumes it.")
    t.add_argument("input", metavar="INPUT")
    t.add_argument("output", metavar="OUTPUT")
    _add_job_options(t)

    c = sub.add_parser("count", help="documents, tokens, [UNK] rate and length percentiles "
                       "of INPUT", description="Count the WordPiece tokens of a file, glob or "
                       "directory (any input format; special tokens not counted): documents, "
                       "tokens and the [UNK] rate per file and in total, the percentiles and "
                       "a histogram of document lengths in tokens, and the share of documents "
                       "that fit common max_length values. Nothing is written.")
    c.add_argument("input", metavar="INPUT", nargs="+")
    _add_job_options(c, COUNT_KEYS)
    c.add_argument("--plot", metavar="PNG", default=None,
                   help="also save a histogram of the lengths (needs matplotlib)")

    b = sub.add_parser("bench", help="throughput against HuggingFace tokenizers on a file",
                       description="Tokenize FILE (any input format) in this process with "
                       "daskwp and, when installed, HuggingFace tokenizers, and print "
                       "throughput, the ratio and whether the ids agree.")
    b.add_argument("file", metavar="FILE")
    b.add_argument("--vocab", default=None, metavar="PATH")
    b.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None)
    b.add_argument("--column", default="text")
    b.add_argument("--input-format", dest="input_format", default="auto",
                   choices=OPTIONS["input_format"].cli_choices)
    b.add_argument("--repeat", type=int, default=3, help="best of N runs (default 3)")
    b.add_argument("--threads", type=int, default=0, help="daskwp threads (0: all cores)")
    return p


def _job_values(ns: argparse.Namespace) -> dict:
    """--set values, then the explicit flags over them (a flag beats --set)."""
    values = dict(parse_override(item) for item in ns.overrides)
    if ns.command == "tokenize":
        for key in ("input", "output"):
            if key in values:
                raise ConfigError(f"--set {key}=... conflicts with the {key.upper()} argument "
                                  f"of 'daskwp tokenize'; give it once")
    values.update({k: getattr(ns, k) for k in CONFIG_KEYS
                   if OPTIONS[k].cli_flag and hasattr(ns, k)})
    tls = _tls_values(ns)
    if tls is not None:  # over --set security={...}, key by key
        given = values.get("security")
        values["security"] = {**given, **tls} if isinstance(given, dict) else tls
    return values


def _print_result(summary: dict, ns, quiet: bool) -> None:
    if ns.print_json:
        print(json.dumps(summary, indent=1))
    elif not quiet:
        print(format_summary(summary))


class _QuietLog:
    """Quiet mode's standard error: while a job runs, file descriptor 2 of this process
    (and so of the worker processes it starts) goes to a log file in the temporary folder,
    so that distributed's ``Compute Failed`` blocks, tracebacks and warnings stay out of
    the terminal. The job's one error line names the file (``log_note``); a job that ends
    without one, or whose log stayed empty (an error found in this process: the line says
    it all), removes it."""

    def __init__(self):
        import tempfile
        fd, self.path = tempfile.mkstemp(prefix="daskwp-", suffix=".log")
        sys.stderr.flush()
        self._saved = os.dup(2)
        os.dup2(fd, 2)
        os.close(fd)

    def written(self) -> bool:
        """Whether anything was written to the log so far."""
        sys.stderr.flush()
        return os.path.getsize(self.path) > 0

    def close(self, keep: bool) -> str:
        """Give fd 2 back; the note naming the log ('' when it is empty or not kept)."""
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        try:
            if keep and os.path.getsize(self.path):
                return f" (details: {self.path})"
            os.unlink(self.path)
        except OSError:
            pass
        return ""


def _cmd_job(ns) -> int:
    values = _job_values(ns)
    if ns.command == "run":
        cfg = load_config(ns.job, values)
    else:
        values.update(input=ns.input, output=ns.output)
        cfg = make_config(values, source="command line")
    summary = _quietly(cfg, run_job)
    _print_result(summary, ns, cfg.quiet)
    return 0


def _quietly(cfg, run):
    """``run(cfg)``; in quiet mode with standard error in a :class:`_QuietLog` (a job, a
    count), so that a failure prints only its one error line."""
    quiet_log = None
    if cfg.quiet and not env_value("debug"):
        try:
            quiet_log = _QuietLog()
        except OSError:   # no temporary folder to log to: standard error as it is
            pass
    try:
        return run(cfg)
    except BaseException as e:
        if quiet_log is not None:
            if quiet_log.written():   # workers reported: the traceback joins the details
                import traceback
                traceback.print_exception(e)
            e.log_note = quiet_log.close(keep=True)
            quiet_log = None
        raise
    finally:
        if quiet_log is not None:
            quiet_log.close(keep=False)


def _cmd_count(ns) -> int:
    from .jobs.count import format_counts, plot_lengths, run_count
    values = _job_values(ns)
    values.update(input=ns.input if len(ns.input) > 1 else ns.input[0], output=".")
    cfg = make_config(values, source="command line")
    report = _quietly(cfg, run_count)
    if ns.plot:
        plot_lengths(report, ns.plot)
    if ns.print_json:
        print(json.dumps(report, indent=1))
    elif not cfg.quiet:
        print(format_counts(report))
    return 0


def _cmd_bench(ns) -> int:
    import numpy as np

    from .jobs import (build_tokenizer, list_input_files, plan_partitions, read_partition)
    import pyarrow as pa

    values = {"input": ns.file, "output": ".", "column": ns.column,
              "input_format": ns.input_format}
    if ns.vocab is not None:
        values["vocab"] = ns.vocab
    if ns.lowercase is not None:
        values["lowercase"] = ns.lowercase
    cfg = make_config(values, source="command line")
    tok = build_tokenizer(cfg)
    files = list_input_files(cfg.input, cfg.input_format)
    parts = [read_partition(s) for s in plan_partitions(files, cfg.column, 1 << 62)]
    texts = pa.chunked_array(parts, type=parts[0].type) if parts else \
        pa.chunked_array([], type=pa.large_string())
    texts = texts.combine_chunks() if texts.num_chunks > 1 else texts
    n_docs = len(texts)
    import pyarrow.compute as pc
    nbytes = int(pc.sum(pc.binary_length(texts)).as_py() or 0) if n_docs else 0
    mb = nbytes / 1e6
    if nbytes == 0:
        raise InputError(f"{ns.file}: no text to measure ({n_docs:,} documents, 0 bytes)")

    def best(fn):
        times = []
        res = None
        for _ in range(max(1, ns.repeat)):
            t0 = time.perf_counter()
            res = fn()
            times.append(time.perf_counter() - t0)
        return min(times), res

    t_dwp, enc = best(lambda: tok.encode(texts, num_threads=ns.threads))
    print(f"file        {ns.file}: {n_docs:,} documents, {mb:.2f} MB of text")
    print(f"vocabulary  {tok.vocab.source} (lowercase={tok.lowercase})")
    print(f"daskwp      {t_dwp:8.3f} s  {mb / t_dwp if t_dwp else 0:9.2f} MB/s  "
          f"{len(enc.token_ids):,} tokens")
    try:
        hf = _hf_tokenizer(tok)
    except ImportError:
        print("huggingface tokenizers is not installed: pip install tokenizers")
        return 0
    strs = [b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")
            for b in texts.to_pylist()]
    t_hf, hf_out = best(lambda: hf.encode_batch(strs, add_special_tokens=False))
    print(f"HF          {t_hf:8.3f} s  {mb / t_hf if t_hf else 0:9.2f} MB/s")
    print(f"ratio       daskwp is {t_hf / t_dwp if t_dwp else float('inf'):.2f}x HF")
    same = sum(1 for i, e in enumerate(hf_out) if np.array_equal(enc[i], e.ids))
    print(f"ids         identical for {same:,} of {n_docs:,} documents")
    return 0


def _hf_tokenizer(tok):
    """HuggingFace's tokenizer with the same vocabulary and settings."""
    from tokenizers import BertWordPieceTokenizer, Tokenizer
    src = str(tok.vocab.source)
    if os.path.isdir(src):
        for name in ("vocab.txt", "tokenizer.json"):
            if os.path.exists(os.path.join(src, name)):
                src = os.path.join(src, name)
                break
    if src.endswith(".json"):
        hf = Tokenizer.from_file(src)
        hf.no_truncation()
        hf.no_padding()
        return hf
    return BertWordPieceTokenizer(src, lowercase=tok.lowercase,
                                  strip_accents=tok.strip_accents, clean_text=tok.clean_text,
                                  handle_chinese_chars=tok.handle_chinese_chars)


def main(argv=None) -> int:
    """Entry point of the ``daskwp`` console script; returns the exit status.

    0 done; 2 a bad command line, job file, parameter, input or output directory; 1 the job
    failed while running; 130 interrupted by SIGINT (Ctrl-C) or SIGTERM.
    """
    import signal

    class Terminated(KeyboardInterrupt):
        """SIGTERM, raised in the main thread as an interrupt: a job stops as on Ctrl-C
        (temporary parts removed, a cluster started here closed)."""

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one does not cut the
        raise Terminated()                             # clean-up short

    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.command is None:
        parser.print_help()
        return 2
    tune_numpy_huge_pages()   # this process is daskwp's (backends/memory.py)
    tune_command_malloc()     # (its jobs' temporaries reused from the heap)
    # what the imports made (numpy, pyarrow, dask, daskwp: ~10^5 objects) out of the
    # collector's reach while the command runs: each full collection during a job
    # traversed all of it again (gc_collect_main and its visits: 1.2% of a Megatron job's
    # CPU samples on 1 GB, 0.5% frozen); given back to it after (main called in a process
    # that goes on: a test)
    import gc
    gc.freeze()
    try:
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        previous = None
    try:
        if ns.command == "bench":
            return _cmd_bench(ns)
        if ns.command == "count":
            return _cmd_count(ns)
        return _cmd_job(ns)
    except JobError as e:
        if env_value("debug"):
            raise
        print(f"daskwp: error: {e}{getattr(e, 'log_note', '')}", file=sys.stderr)
        return 2 if isinstance(e, (ConfigError, InputError, OutputConflictError)) else 1
    except KeyboardInterrupt as e:
        how = " by SIGTERM" if isinstance(e, Terminated) else ""
        print(f"daskwp: interrupted{how}; run the same command again to resume"
              f"{getattr(e, 'log_note', '')}", file=sys.stderr)
        return 130
    finally:
        gc.unfreeze()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def console_main() -> None:
    """The ``daskwp`` console script and ``python -m daskwp``: :func:`main`, then exit.

    After an interrupt the job has already cleaned up (temporary parts removed, a cluster it
    started closed) and printed its message; the process then exits at once with 130. A
    signal can land while another thread's pool holds a lock that the interpreter's shutdown
    waits for, and such a process would print the message and never exit.
    """
    rc = main()
    if rc == 130:
        remove_spool_dir()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    # the process ends: the interpreter's shutdown collections would traverse the whole
    # heap (~0.2 s of CPU and of the command's time; distributed/plugin.py,
    # freeze_heap_at_exit), and find nothing the exit needs
    import gc
    gc.freeze()
    sys.exit(rc)


if __name__ == "__main__":  # pragma: no cover
    console_main()
