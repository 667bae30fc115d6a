"""``daskwp count INPUT``: documents, tokens, the ``[UNK]`` rate per file and in total, and the
distribution of document lengths in tokens (exact percentiles, a terminal histogram, and a
plot with matplotlib): what a user needs to choose ``max_length`` or a packing block size.

The input is read and partitioned as a job's (:mod:`.inputs`), each partition is counted by one
task (the tokenizer one graph key, as in a job), on a cluster or in this process; nothing is
written. Counts are of WordPiece tokens of the text, no special tokens
(:class:`daskwp.core.lengths.TokenCounts`). The row policy is a job's (``on_bad_row``): by
default a row that cannot be read is an empty document and is listed in the report
(``rejects``: file, row, reason), so that one bad row does not stop a count.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable


from ..core.lengths import PERCENTILES, LengthCounts, TokenCounts, count_tokens
from ..distributed.state import cached_tokenizer
from ..distributed.tasks import text_bytes
from ..frames import storage
from .config import LOCAL_SCHEDULERS, JobConfig
from .errors import InputError
from .inputs import list_input_files, plan_partitions, read_partition
from .parts import partition_failure, worker_device, worker_series
from .progress import Progress

__all__ = ["count_job_tokens", "format_counts", "plot_lengths", "run_count"]

#: Row lengths the report gives the share of documents that fit (with [CLS] and [SEP]).
MAX_LENGTHS = (128, 256, 512, 1024)


def count_job_tokens(spec, tokenizer, device: str = "cpu",
                     on_bad_row: str = "error") -> tuple[str, TokenCounts, list]:
    """The task of one partition: ``(its file, its TokenCounts, its rejected rows)``, the
    last ``[(row in the partition, reason)]`` under ``on_bad_row='reject'`` (each an empty
    document in the counts, as in a job). Errors name the partition."""
    try:
        bad: list | None = [] if on_bad_row == "reject" else None
        texts = read_partition(spec, bad)
        nbytes = text_bytes(texts)
        dev = worker_device(device)
        tok = cached_tokenizer(tokenizer)
        return spec.path, count_tokens(tok, worker_series(texts, dev) if dev != "cpu"
                                       else texts, nbytes), sorted(bad or ())
    except Exception as e:
        raise partition_failure(e, spec, "counting partition") from e


def _run(dsk: dict, keys: list, client, prog: Progress) -> list:
    from ..distributed.local import InProcess
    if isinstance(client, InProcess):
        wanted = set(keys)

        def done(key, result):   # the progress moves as each partition is counted
            if key in wanted:
                prog.update(1, result[1].text_bytes)

        return client.get(dsk, keys, on_result=done)
    from distributed import as_completed
    futures = client.get(dsk, keys, sync=False)
    index = {f.key: i for i, f in enumerate(futures)}
    out: list = [None] * len(keys)
    for fut, result in as_completed(futures, with_results=True):
        out[index[fut.key]] = result
        prog.update(1, result[1].text_bytes)
    return out


def run_count(cfg: JobConfig, *, client=None, log: Callable[[str], None] | None = None,
              tokenizer=None) -> dict:
    """Count the tokens of ``cfg.input`` (a job config; its output is not used) and return
    the report: ``files`` (per file, in input order), ``total``, each with ``documents``,
    ``tokens``, ``unknown_tokens``, ``unknown_token_rate``, ``text_bytes``,
    ``length_percentiles``; ``total`` also ``length_counts`` (the exact distribution),
    ``histogram`` and ``fits_max_length``; and ``vocab``, ``partitions``, ``seconds``;
    ``rejected_rows`` (per file and in total) and ``rejects`` (``{"file", "row", "reason"}``
    of each row that could not be read, ``row`` counted as logIDs count them; the row
    policy, ``cfg.on_bad_row``)."""
    from ..distributed.dask_compat import Task, TaskRef
    from ..distributed.offset_pass import tokenizer_layer
    from .driver import (build_tokenizer, close_scheduler, open_scheduler, resolve_device,
                         running_cluster_profiler_paused, start_cluster_early)

    t0 = time.perf_counter()
    if log is None:
        log = (lambda msg: None) if cfg.quiet else (
            lambda msg: print(msg, file=sys.stderr, flush=True))
    tok = tokenizer if tokenizer is not None else build_tokenizer(cfg)
    urls = [cfg.input] if isinstance(cfg.input, str) else list(cfg.input)
    # as a job's: a local cluster that will count whatever the input's size starts now,
    # while a URL input is listed and planned (closed on any error before it is used)
    started = start_cluster_early(cfg, client, urls)
    try:
        with storage.using(cfg.storage_options):   # URL inputs: their partitions carry them
            files = list_input_files(cfg.input, cfg.input_format, cfg.exclude or [],
                                     include=cfg.include)
            specs = plan_partitions(files, cfg.column, cfg.partition_size,
                                    quoting=cfg.quoting,
                                    warn=lambda w: log(f"daskwp: warning: {w}"),
                                    lenient=cfg.on_bad_row == "reject")
    except BaseException:
        if started is not None:
            started.close()
        raise
    local = cfg.scheduler_address in LOCAL_SCHEDULERS
    device = cfg.device if cfg.scheduler_address and not local else resolve_device(cfg.device)
    tok_key, dsk = tokenizer_layer(tok)
    keys = []
    for s in specs:
        key = ("daskwp-count-tokens", s.index)
        dsk[key] = Task(key, count_job_tokens, s, TaskRef(tok_key), device, cfg.on_bad_row)
        keys.append(key)
    # in-process threads, a local cluster or a running one, as a job's (driver.open_scheduler)
    runner, own, run_record = open_scheduler(cfg, device, sum(f.size for f in files), client,
                                             bool(specs), log, tasks=len(specs),
                                             started=started, urls=urls)
    try:
        prog = Progress("counting", len(specs), cfg.quiet)
        try:
            with running_cluster_profiler_paused(cfg, runner, run_record):
                results = _run(dsk, keys, runner, prog) if specs else []
        finally:
            prog.close()
    finally:
        close_scheduler(runner, own)
    per_file: dict = {f.path: [] for f in files}
    rejects: list = []
    first = dict.fromkeys(per_file, 0)      # the file's rows read so far
    rejected = dict.fromkeys(per_file, 0)
    for path, counts, bad in results:   # in input order: a file's rows follow on
        rejects += [{"file": path, "row": first[path] + int(i), "reason": why}
                    for i, why in bad]
        first[path] += counts.documents
        rejected[path] += len(bad)
        per_file[path].append(counts)
    file_counts = {p: TokenCounts.merge(c) for p, c in per_file.items()}
    total = TokenCounts.merge(file_counts.values())
    seconds = time.perf_counter() - t0
    report_total = total.to_json()
    report_total["histogram"] = [list(b) for b in total.lengths.histogram()]
    report_total["fits_max_length"] = {str(n): total.lengths.share_at_most(n - 2)
                                       for n in MAX_LENGTHS}
    files_out = []
    for p, c in file_counts.items():
        entry = c.to_json()
        entry.pop("length_counts")
        entry["rejected_rows"] = rejected[p]
        files_out.append({"path": p, **entry})
    report_total["rejected_rows"] = len(rejects)
    return {"files": files_out, "total": report_total, "partitions": len(specs),
            "rejects": rejects,
            "vocab": cfg.vocab or getattr(tok.vocab, "source", None) or "(bundled)",
            "vocabulary_hash": tok.vocab.hash, "lowercase": tok.lowercase,
            "seconds": seconds,
            "run": run_record,
            "mb_per_s": total.text_bytes / 1e6 / seconds if seconds else 0.0}


def _bar(n: int, top: int, width: int = 40) -> str:
    if top == 0 or n == 0:
        return ""
    return "#" * max(1, round(width * n / top))


def format_counts(report: dict) -> str:
    """The report as text: a table per file and the total, the length percentiles, a
    histogram of lengths (power-of-two bins) and the share of documents that fit common
    ``max_length`` values."""
    t = report["total"]
    rows = [("file", "documents", "tokens", "[UNK] %", *(f"p{q}" for q in PERCENTILES),
             "max")]

    def row(name, e):
        p = e["length_percentiles"]
        return (name, f"{e['documents']:,}", f"{e['tokens']:,}",
                f"{100 * e['unknown_token_rate']:.3f}",
                *("-" if p[f"p{q}"] is None else f"{p[f'p{q}']:,}" for q in PERCENTILES),
                "-" if p["max"] is None else f"{p['max']:,}")

    paths = [f["path"] for f in report["files"]]
    common = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0]) \
        if paths else ""
    for f in report["files"]:
        rows.append(row(os.path.relpath(f["path"], common) if common else f["path"], f))
    rows.append(row("total", t))
    widths = [max(len(r[j]) for r in rows) for j in range(len(rows[0]))]
    lines = [f"daskwp count: {t['documents']:,} documents, {t['tokens']:,} tokens, "
             f"{100 * t['unknown_token_rate']:.3f}% [UNK] ({t['text_bytes'] / 1e6:.2f} MB "
             f"of text in {len(report['files'])} file(s), {report['seconds']:.2f} s)",
             f"vocabulary {report['vocab']} (lowercase={report['lowercase']})", ""]
    for r in rows:
        lines.append("  ".join(r[0].ljust(widths[0]) if j == 0 else r[j].rjust(widths[j])
                               for j in range(len(r))))
    if report.get("rejects"):
        shown = report["rejects"][:5]
        lines += ["", f"rejected {len(report['rejects']):,} rows (counted as empty documents; "
                      f"on_bad_row: error fails instead):"]
        lines += [f"  {r['file']} row {r['row']}: {r['reason']}" for r in shown]
        if len(report["rejects"]) > len(shown):
            lines.append(f"  ... and {len(report['rejects']) - len(shown):,} more (--json "
                         f"lists them all)")
    p = t["length_percentiles"]
    if p["max"] is None:
        return "\n".join(lines + ["", "no documents"])
    lines += ["", "tokens per document: " + ", ".join(
        f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in p.items()), ""]
    hist = t["histogram"]
    top = max(c for _, _, c in hist)
    labels = [f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi, _ in hist]
    lw = max(len(x) for x in labels)
    cw = max(len(f"{c:,}") for _, _, c in hist)
    for label, (_, _, c) in zip(labels, hist):
        lines.append(f"  {label.rjust(lw)} | {f'{c:,}'.rjust(cw)} {_bar(c, top)}")
    lines.append("")
    lines.append("documents that fit in one row ([CLS] + tokens + [SEP]): " + ", ".join(
        f"max_length {n}: {100 * share:.1f}%" for n, share in t["fits_max_length"].items()))
    return "\n".join(lines)


def plot_lengths(report: dict, path: str) -> None:
    """A histogram of document lengths (log-spaced bins) with the percentiles marked, saved
    to ``path`` with matplotlib (InputError naming the package when it is missing)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError("--plot needs matplotlib: pip install matplotlib") from None
    import numpy as np
    lc = LengthCounts.from_json(report["total"]["length_counts"])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    if lc.documents:
        top = max(int(lc.values[-1]), 1)
        bins = np.unique(np.concatenate([[0, 1], np.geomspace(1, top + 1, 60).astype(int)]))
        ax.hist(lc.values, bins=bins, weights=lc.counts, color="#4c72b0")
        ax.set_xscale("symlog", linthresh=1)
        for k, v in report["total"]["length_percentiles"].items():
            if k.startswith("p") and v is not None:
                ax.axvline(v, color="#c44e52", lw=1, ls="--")
                ax.text(v, ax.get_ylim()[1] * 0.95, k, rotation=90, va="top", ha="right",
                        fontsize=8)
    ax.set_xlabel("tokens per document")
    ax.set_ylabel("documents")
    ax.set_title(f"{lc.documents:,} documents, {lc.tokens:,} tokens")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
