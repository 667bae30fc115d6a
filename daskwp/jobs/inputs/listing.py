"""Listing the input: paths, globs, directories, object URLs and streams expanded into
:class:`InputFile` records, in input order. Hidden names (``.``/``_``, Spark and Dask metadata)
are skipped unless a pattern names them; ``include``/``exclude`` patterns select a
directory's files; each file's codec and content format are found from its name and first
bytes. :func:`input_fingerprint` identifies a listed input for resuming a job.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob as _glob
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Sequence

from ...frames import storage
from ...frames.storage import is_url, open_input
from ..errors import InputError
from .compression import READ_ERRORS, compression_of, read_head, sniff_archive
from .specs import InputFile, STDIN
from .spool import is_stdin, spool_stream, stream_kind


_EXTENSION_FORMATS = {
    ".parquet": "parquet", ".pq": "parquet", ".parq": "parquet",
    ".csv": "csv", ".tsv": "tsv",
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl",
}


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith((".crc", "~"))


def _named_explicitly(name: str, segments: Sequence[str]) -> bool:
    """Whether a hidden ``name`` is matched by a pattern segment that is itself hidden
    (``_*.txt``, ``.cache``): a wildcard never matches a leading ``.`` or ``_``."""
    return any(_is_hidden(s) and fnmatch.fnmatchcase(name, s) for s in segments)


def _file_format(path: str, input_format: str) -> str:
    if input_format != "auto":
        return input_format
    return _EXTENSION_FORMATS.get(os.path.splitext(path)[1].lower(), "text")


def _pattern_regex(pattern: str) -> re.Pattern:
    """A glob pattern over ``/``-separated paths: ``**`` spans any folders (none too), ``*``
    and ``?`` stay within one name, ``[...]`` is a character class (``[!...]`` negated)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1:j]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return re.compile("".join(out))


class _Patterns:
    """include/exclude patterns. A path matches when a pattern matches it whole, or one of
    its folders (so a folder's pattern takes in everything below it), where a pattern
    without ``/`` is matched against the last name only (``*.jsonl`` at any depth)."""

    def __init__(self, patterns: Sequence[str]):
        self.patterns = [p.strip("/") if not os.path.isabs(p) else p for p in patterns]
        self.rx = [(_pattern_regex(p), "/" in p) for p in self.patterns]
        self.segments = [s for p in self.patterns for s in p.split("/")]

    def __bool__(self):
        return bool(self.rx)

    def match(self, rel: str) -> bool:
        parts = rel.split("/")
        for k in range(len(parts), 0, -1):
            prefix = "/".join(parts[:k])
            for rx, has_slash in self.rx:
                if rx.fullmatch(prefix if has_slash else parts[k - 1]):
                    return True
        return False


class _Excluded:
    """What ``exclude`` leaves out. An absolute path is a file or folder to leave out of
    every input (the driver passes the output directory when it lies inside an input
    directory); an absolute pattern is matched against absolute paths; any other pattern
    is matched against paths relative to a directory input."""

    def __init__(self, exclude: Sequence[str]):
        self.folders: tuple = ()
        #: URL prefixes left out of URL inputs (an output folder inside an input's)
        self.url_folders: tuple = ()
        abs_patterns, rel_patterns = [], []
        for e in exclude or ():
            e = os.fspath(e)
            if is_url(e):
                self.url_folders += (e.rstrip("/") + "/",)
            elif os.path.isabs(e) and not _glob.has_magic(e):
                self.folders += (os.path.join(os.path.realpath(e), ""),)
            elif os.path.isabs(e):
                abs_patterns.append(Path(os.path.abspath(e)).as_posix())
            else:
                rel_patterns.append(e)
        self.absolute = _Patterns(abs_patterns)
        self.relative = _Patterns(rel_patterns)

    def path(self, p: str) -> bool:
        """Whether ``p`` (a file or folder of any input) is left out."""
        if self.folders and os.path.join(os.path.realpath(p), "").startswith(self.folders):
            return True
        return bool(self.absolute) and self.absolute.match(Path(os.path.abspath(p)).as_posix())


def _glob_files(pattern: str, excluded: _Excluded) -> list[str]:
    """The files a glob matches, sorted, by the same rule as a directory walk: a name that
    starts with ``.`` or ``_`` (or ends with ``.crc``, ``~``) is not matched by a wildcard,
    only by a pattern segment that names it (``data/_meta/*``, ``_*.txt``)."""
    pat_parts = pattern.split(os.sep)
    fixed = 0
    while fixed < len(pat_parts) and not _glob.has_magic(pat_parts[fixed]):
        fixed += 1
    segments = pat_parts[fixed:]
    found = []
    for p in _glob.glob(pattern, recursive=True):
        if not os.path.isfile(p) or excluded.path(p):
            continue
        rest = p.split(os.sep)[fixed:]
        if any(_is_hidden(c) and not _named_explicitly(c, segments) for c in rest):
            continue
        found.append(p)
    return sorted(found)


def _walk_files(root: str, include: _Patterns, excluded: _Excluded) -> list[str]:
    """The regular files below ``root``, sorted by their ``/``-separated relative path;
    hidden names skipped (unless an include pattern names them), include/exclude applied."""
    found = []
    for dirpath, dirs, names in os.walk(root):
        rel_dir = Path(os.path.relpath(dirpath, root)).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        keep = []
        for d in dirs:
            if _is_hidden(d) and not _named_explicitly(d, include.segments):
                continue
            if excluded.path(os.path.join(dirpath, d)) or excluded.relative.match(rel_dir + d):
                continue
            keep.append(d)
        dirs[:] = keep
        for n in names:
            full, rel = os.path.join(dirpath, n), rel_dir + n
            if _is_hidden(n) and not _named_explicitly(n, include.segments):
                continue
            if os.path.exists(full) and not os.path.isfile(full):
                continue  # a named pipe or socket inside a folder is not an input file
            if excluded.path(full) or excluded.relative.match(rel):
                continue
            if include and not include.match(rel):
                continue
            found.append(full)
    found.sort(key=lambda p: Path(os.path.relpath(p, root)).as_posix())
    return found


def _url_error(url: str, e: BaseException) -> InputError:
    return InputError(f"cannot read input {storage.describe_storage_error(url, e)}")


def _url_files(item: str, include: _Patterns, excluded: _Excluded,
               infos: dict | None = None) -> list[str]:
    """The objects an fsspec URL names (an object, a glob, or a folder: every object
    below it), as URLs, by the rules of local inputs: sorted, hidden names skipped unless a
    pattern names them, include/exclude relative to a folder input. ``infos`` gets the
    ``info`` of a URL that names one object (on S3 from the one listing that says too
    whether the URL is a folder, else its HEAD: not sent again)."""
    fs, path = storage.filesystem(item)
    path = path.rstrip("/") or path

    def url(p):
        return fs.unstrip_protocol(p)

    def left_out(u):
        return u.startswith(excluded.url_folders) or any(
            u.rstrip("/") + "/" == f for f in excluded.url_folders)
    try:
        if _glob.has_magic(path):
            parts = path.split("/")
            fixed = 0
            while fixed < len(parts) and not _glob.has_magic(parts[fixed]):
                fixed += 1
            found = []
            for p, info in fs.glob(path, detail=True).items():
                rest = p.split("/")[fixed:]
                if info.get("type") != "file" or left_out(url(p)) or any(
                        _is_hidden(c) and not _named_explicitly(c, parts[fixed:])
                        for c in rest):
                    continue
                found.append(url(p))
            if not found:
                raise InputError(f"no input file matches {item!r}")
            return sorted(found)
        try:   # on S3 one listing: the object's info and whether path/ holds anything
            known = storage.object_or_folder(fs, path)
        except FileNotFoundError:    # (a missing bucket: nothing of that name)
            known = (None, False)
        if (known[1] if known is not None else fs.isdir(path)):
            found = []
            for p, info in fs.find(path, detail=True).items():
                rel = p[len(path):].lstrip("/")
                comps = rel.split("/")
                if info.get("type") != "file" or not rel or left_out(url(p)):
                    continue
                if any(_is_hidden(c) and not _named_explicitly(c, include.segments)
                       for c in comps):
                    continue
                if any(excluded.relative.match("/".join(comps[:k]))
                       for k in range(1, len(comps) + 1)):
                    continue
                if include and not include.match(rel):
                    continue
                found.append((rel, url(p)))
            if not found:
                what = " that include/exclude select" if include or excluded.relative else ""
                raise InputError(f"input directory {item!r} holds no files{what}")
            return [u for _, u in sorted(found)]
        if known is not None:
            info = known[0]
        else:
            try:
                info = fs.info(path)
            except FileNotFoundError:
                info = None
        if info is not None and info.get("type") == "file":
            if infos is not None:
                infos[item] = info
            return [item]
    except InputError:
        raise
    except storage.StorageError as e:
        raise InputError(f"cannot read input {e}") from None
    except Exception as e:
        raise _url_error(item, e) from None
    raise InputError(f"input not found: {item!r}")


@storage.caching_heads()   # its head read for the codec, the format, then by planning
def _url_input_file(url: str, input_format: str, info: dict | None = None) -> InputFile:
    """An InputFile of an object: its size and modification time from the store (``info``:
    fsspec's, when the listing has it), its compression and format as for a local file."""
    try:
        info = storage.url_info(url) if info is None else info
        version = storage.object_version(info)
        with storage.pinned({url: version}), open_input(url) as f:
            head = f.read(512)
    except FileNotFoundError:
        raise InputError(f"input not found: {url!r}") from None
    except storage.StorageError as e:
        raise InputError(f"cannot read input {e}") from None
    except Exception as e:
        raise _url_error(url, e) from None
    mtime = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
    if hasattr(mtime, "timestamp"):
        mtime = mtime.timestamp()
    try:
        mtime_ns = int(float(mtime) * 1e9)
    except (TypeError, ValueError):
        mtime_ns = 0
    with storage.pinned({url: version}):   # (its head read again: no HEAD)
        f = _described_file(url, url, int(info.get("size") or 0), mtime_ns, head,
                            input_format, None)
    return dataclasses.replace(f, version=version)


def _is_json_array(path: str, compression: str | None) -> bool:
    """Whether the first byte after whitespace (and a BOM) is ``[``: a JSON array file."""
    try:
        head = read_head(path, compression, 1 << 16)
    except READ_ERRORS as e:
        raise InputError(f"cannot read input {path!r}"
                         f"{f' as {compression}' if compression else ''}: {e}") from None
    return head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1] == b"["


def _input_file(item: str, input_format: str, spool_dir: str | None) -> InputFile:
    source = None
    if is_stdin(item):
        path, source = spool_stream(STDIN, spool_dir), STDIN
    else:
        try:
            st = os.stat(item)
        except OSError as e:
            raise InputError(f"cannot read input {item!r}: {e.strerror or e}") from None
        if stream_kind(item, st):
            path, source = spool_stream(item, spool_dir), item
        elif item.startswith("/dev/"):
            path = os.path.realpath(item)  # /dev/stdin redirected from a file: that file
        else:
            path = os.path.abspath(item)
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as e:
        raise InputError(f"cannot read input {item!r}: {e.strerror or e}") from None
    return _described_file(item, path, st.st_size, st.st_mtime_ns, head, input_format, source)


def _described_file(item: str, path: str, size: int, mtime_ns: int, head: bytes,
                    input_format: str, source: str | None) -> InputFile:
    """The InputFile of ``path`` (named ``item`` by the user) from its first bytes: its
    compression, and the format of its content."""
    compression, base = compression_of(path, head)
    fmt = _file_format(base, input_format)
    if compression:
        try:
            inner = read_head(path, compression, 512)
        except READ_ERRORS as e:
            raise InputError(f"cannot read input {item!r} as {compression}: {e}") from None
        if sniff_archive(inner):
            raise InputError(f"input {item!r} is a compressed {sniff_archive(inner)} "
                             f"archive; extract it first")
    if fmt == "parquet" and compression:
        raise InputError(f"input {item!r} is a compressed Parquet file ({compression}); Parquet "
                         f"compresses its own pages: decompress the file")
    if fmt == "jsonl" and size and _is_json_array(path, compression):
        fmt = "json"
    return InputFile(path=path, format=fmt, size=size, mtime_ns=mtime_ns,
                     compression=compression, source=source)


def list_input_files(inputs, input_format: str = "auto", exclude: Sequence[str] = (), *,
                     include: Sequence[str] | None = None,
                     spool_dir: str | None = None) -> list[InputFile]:
    """Expand paths, globs, directories and streams into files.

    A directory is walked recursively; names starting with ``.`` or ``_`` (Spark/Dask
    metadata files) are skipped there and in glob matches alike, unless a pattern segment
    names them (``_*.txt``). ``include`` (patterns) keeps only the files of a directory
    whose path relative to it matches one; ``exclude`` leaves out the files and folders
    matching a pattern (relative, for directory inputs), and everything inside an absolute
    folder path (the driver's output directory when it lies inside an input). Each path or
    pattern contributes its files in sorted order; list items keep their order.

    ``-`` is standard input; it, named pipes, character devices and ``/proc`` files are
    copied to ``spool_dir`` (default: a temporary folder of this process, removed when it
    exits; with a remote cluster, a folder every worker sees) and read from there.
    Compressed files are recognised by suffix and by magic bytes; the format is the one of
    the name under the compression suffix (``x.csv.gz`` is CSV).
    """
    items = [os.fspath(inputs)] if isinstance(inputs, (str, os.PathLike)) else \
        [os.fspath(i) for i in inputs]
    include_p = _Patterns(include or ())
    excluded = _Excluded(exclude)
    files: list[str] = []
    infos: dict = {}    # a URL's info the listing got (no second HEAD)
    for item in items:
        if is_url(item):
            files.extend(_url_files(item, include_p, excluded, infos))
        elif is_stdin(item):
            files.append(STDIN)
        elif _glob.has_magic(item) and not os.path.lexists(item):
            found = _glob_files(item, excluded)
            if not found:
                raise InputError(f"no input file matches {item!r}")
            files.extend(found)
        elif os.path.isdir(item):
            found = _walk_files(item, include_p, excluded)
            if not found:
                what = " that include/exclude select" if include_p or excluded.relative else ""
                raise InputError(f"input directory {item!r} holds no files{what}")
            files.extend(found)
        elif os.path.lexists(item):
            files.append(item)
        else:
            raise InputError(f"input not found: {item!r}")
    return [_url_input_file(p, input_format, infos.get(p)) if is_url(p) else
            _input_file(p, input_format, spool_dir) for p in files]


def input_fingerprint(files: Sequence[InputFile]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for f in files:
        key = [f.path, f.format, f.size, f.mtime_ns]
        if f.compression or f.source:
            key += [f.compression, f.source]
        h.update(json.dumps(key).encode())
    return h.hexdigest()
