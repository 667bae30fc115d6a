"""Streams as files: standard input ``-``, named pipes, character devices and ``/proc`` files
have no size and cannot be reread by a worker, so they are copied to a spool file first (named
by a hash of their content, so that a rerun resumes) and read like any file from there. The
default spool folder is private to this process and removed at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid

from ..errors import InputError
from .specs import STDIN


def is_stdin(item: str) -> bool:
    # The job config resolves paths against a folder: "-" may arrive as "/some/dir/-".
    return item == STDIN or (os.path.basename(item) == STDIN and not os.path.lexists(item))


_SPOOL_DIR: list = []


def _default_spool_dir() -> str:
    """A private temporary folder for this process, removed when it exits."""
    if not _SPOOL_DIR or not os.path.isdir(_SPOOL_DIR[0]):
        d = tempfile.mkdtemp(prefix="daskwp-spool-")
        atexit.unregister(remove_spool_dir)  # registered once, however many folders
        atexit.register(remove_spool_dir)
        _SPOOL_DIR[:] = [d]
    return _SPOOL_DIR[0]


def remove_spool_dir() -> None:
    """Remove this process's spool folder of standard-input streams, if it made one (at
    exit; the console command calls it itself when it exits without the interpreter's
    shutdown)."""
    if _SPOOL_DIR:
        shutil.rmtree(_SPOOL_DIR.pop(), True)


def _suffixes(name: str) -> str:
    """The extensions of a file name (``.jsonl.gz``), for the format of a spooled stream."""
    base = os.path.basename(name)
    parts = base.split(".")[1:] if not base.startswith(".") else base.split(".")[2:]
    exts = []
    for p in reversed(parts):
        if not p or len(p) > 8 or not p.isalnum():
            break
        exts.insert(0, "." + p)
    return "".join(exts)


def spool_stream(source: str, spool_dir: str | None) -> str:
    """Copy a stream to ``spool_dir`` (default: a temporary folder of this process) and
    return the copy's path. The name is ``<name>-<hash of the content><extensions>``, so the
    same stream content spooled to the same folder is the same file (a rerun resumes)."""
    d = spool_dir or _default_spool_dir()
    os.makedirs(d, exist_ok=True)
    stem = "stdin" if source == STDIN or source in ("/dev/stdin", "/proc/self/fd/0") else \
        re.sub(r"[^A-Za-z0-9_-]", "_", os.path.basename(source).split(".")[0] or "input")
    tmp = os.path.join(d, f".spooling-{uuid.uuid4().hex}")
    h = hashlib.blake2b(digest_size=12)
    try:
        if source == STDIN:
            if sys.stdin is None:
                raise InputError("input '-' is standard input, and this process has none")
            src = getattr(sys.stdin, "buffer", sys.stdin)
            close = False
        else:
            src = open(source, "rb")
            close = True
        try:
            with open(tmp, "wb") as out:
                while True:
                    chunk = src.read(1 << 20)
                    if not chunk:
                        break
                    if isinstance(chunk, str):
                        chunk = chunk.encode("utf-8", "surrogateescape")
                    h.update(chunk)
                    out.write(chunk)
        finally:
            if close:
                src.close()
        final = os.path.join(d, f"{stem}-{h.hexdigest()}{_suffixes(source)}")
        if os.path.isfile(final) and os.path.getsize(final) == os.path.getsize(tmp):
            os.unlink(tmp)  # the same content, spooled before: keep it (and its mtime)
        else:
            os.replace(tmp, final)
        return final
    except OSError as e:
        raise InputError(f"cannot read input {source!r} (a stream, copied to a spool file "
                         f"in {d!r} first): {e.strerror or e}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def stream_kind(path: str, st: os.stat_result) -> str | None:
    """What kind of stream ``path`` is (it has no size and cannot be split or reread by a
    worker), or None for a regular file."""
    mode = st.st_mode
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISSOCK(mode) or stat.S_ISBLK(mode):
        what = "a socket" if stat.S_ISSOCK(mode) else "a block device"
        raise InputError(f"input {path!r} is {what}; daskwp reads files, directories, globs "
                         f"and streams (standard input '-', named pipes)")
    real = os.path.realpath(path)
    if real.startswith(("/proc/", "/sys/")):
        return "a /proc or /sys file"
    if st.st_size == 0:
        try:
            with open(path, "rb") as f:
                if f.read(1):
                    return "a file whose size is not known"  # other virtual file systems
        except OSError:
            pass
    return None
