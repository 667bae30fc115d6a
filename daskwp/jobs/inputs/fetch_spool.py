"""Fetching an object-store partition once: the job's count pass (the documents of each
partition, for the global logIDs) reads every byte of a partition, and so does its write
task. For a partition of a URL, the count task fetches the byte ranges the partition reads
(one GET per range, up to 64 MB each) into a spool file on its host's local disk and counts
from there. A text or JSON Lines range planned at cuts (``cut_at_lines``) is fetched from
the byte before its first cut to :data:`MARGIN` bytes past its last, in the same GET, which
holds the line starts the partition moves its cuts to (a GET more when the margin holds no
line end); the write task, on the same host, reads the spool file instead of fetching the
ranges again and removes it. A write task on another host (or after the spool was lost, or
was not made) fetches the ranges from the store as before: a spool is only ever a shortcut.

Spool files live in ``<system temporary folder>/daskwp-spool-<uid>/<job>-<run>/``, named by
the partition, its ranges and the object's identity (size and ETag, or what the store has
instead), so a write task never reads the bytes of another version of the object: when the
object changed since it was counted the spool is dropped and the ranges fetched again (the
write then finds the count changed and fails, as without a spool). The driver removes the
run's folder on every worker's host at the end of the run (success or failure); a count task
that starts a run on a host removes the folders of earlier runs of the same job (a killed
driver's) and any folder left for a day. The spool files of a host take at most
``spool_max_bytes`` (the option) of disk together, and never the last GiB of free space: a
partition that does not fit is counted from the store and fetched again by its write.

A local cluster's first partitions may be fetched before the cluster is up (their host is
the workers'), in a thread of the driver, into a folder of their own: the GET that brings
the first object's head for listing and planning (:class:`HeadStreams`) goes on, once the
object is planned, through partition 0 and the next partitions of that object, each into
a spool file of its own (:class:`StreamPrefetch`; at most half of ``spool_max_bytes``);
where there is no such GET, :class:`Prefetch` fetches partition 0. When the run's spool is
known (the job's tasks go out), the GET goes on, and each partition's file moves into the
run's folder under the name its count task looks for once the GET has brought its range
(:func:`fetched` takes a spool file that is there already); meanwhile a lock file in the
run's folder tells the count task to wait for it rather than fetch it. Where the GET stops
first (an error, the job's end), the partition it was in goes over with the bytes it holds
(its count task fetches the rest, one GET from there), and the later ones are fetched by
their count tasks. One GET of the object for its head and the partitions the driver
fetches, where each was a GET of its own.

A fetch waits on the network: on a Dask worker the count task leaves the worker's thread
pool for it (:func:`~daskwp.frames.storage.waiting_on_network`, installed by daskwp's worker
plugin), so the worker's thread tokenizes a partition already counted meanwhile.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import shutil
import tempfile
import threading
import time
import uuid

from ...frames import storage
from ...frames.storage import has_local_copy, is_url, local_copy
from ..errors import InputError
from .byte_ranges import changed_error
from .compression import READ_ERRORS
from .specs import PartitionSpec

#: One GET fetches at most this much (a partition's range is fetched in pieces this big;
#: the last may be MARGIN bytes bigger).
FETCH_PIECE = 64 << 20
#: A range planned at cuts is fetched this far past its last cut, where its last line ends
#: (further, a GET of this size and then bigger ones each, when a line is longer).
MARGIN = 1 << 20
#: What a copy between spool files moves at a time where the kernel does not copy.
STREAM_PIECE_BYTES = 1 << 20
#: Spooling never leaves less free disk than this.
DISK_RESERVE = 1 << 30
#: A run folder untouched for this long is a leftover (a driver killed before its cleanup).
STALE_SECONDS = 24 * 3600
_LOCK = ".lock"
_TMP = ".fetching-"


def spool_root() -> str:
    """This host's folder of spool folders (one per job run), for this user."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"daskwp-spool-{uid}")


def run_token(job_id: str, run_id: str) -> str:
    """The name of a run's spool folder."""
    return f"{job_id[:16]}-{run_id}"


def remove_run_spools(token: str) -> None:
    """Remove a run's spool folder on this host (nothing when there is none)."""
    shutil.rmtree(os.path.join(spool_root(), os.path.basename(token)), ignore_errors=True)


def regions(spec: PartitionSpec) -> list | None:
    """The byte ranges of its object that reading ``spec`` reads, in order, or None when
    the partition is not spooled (a local file, a Parquet partition, no spool for the job,
    an empty range)."""
    if spec.spool is None or not is_url(spec.path) or spec.format == "parquet":
        return None
    if spec.cut_at_lines and not spec.compression:
        # from the byte before the first cut to past the last: the cuts' line starts
        ranges = [(max(spec.byte_start - 1, 0), spec.byte_end + MARGIN)]
    elif spec.compression or spec.format == "json":
        ranges = [(0, spec.byte_end)]     # the whole object
    elif spec.format in ("csv", "tsv") and spec.header_end and \
            spec.byte_start > spec.header_end:
        ranges = [(0, spec.header_end), (spec.byte_start, spec.byte_end)]
    elif spec.format in ("csv", "tsv"):
        ranges = [(0, spec.byte_end)]     # the whole file, or the first piece with its header
    else:
        ranges = [(spec.byte_start, spec.byte_end)]
    return ranges if sum(e - s for s, e in ranges) > 0 else None


def _identity(info: dict | None) -> str:
    """The spool's name for a version of an object (:func:`~daskwp.frames.storage.
    object_version`; its size alone where nothing else identifies it)."""
    return repr(storage.object_version(info) or ((info or {}).get("size"),))


def _name(spec: PartitionSpec, ranges: list, identity: str) -> str:
    h = hashlib.blake2b(repr((spec.path, ranges, identity)).encode(), digest_size=12)
    return f"{spec.index:06d}-{h.hexdigest()}.bin"


def _folder(spec: PartitionSpec) -> str:
    return os.path.join(spool_root(), os.path.basename(spec.spool[0]))


@contextlib.contextmanager
def _locked(root: str):
    """The host's spool lock (one count task at a time reserves its space)."""
    try:
        import fcntl
    except ImportError:     # no flock: the limit is then checked without a lock
        yield
        return
    with open(os.path.join(root, _LOCK), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _used_bytes(root: str) -> int:
    total = 0
    for d in os.scandir(root):
        if d.is_dir(follow_symlinks=False):
            for f in os.scandir(d.path):
                try:
                    total += f.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    pass
    return total


def _start_run(root: str, folder: str) -> None:
    """Create the run's folder; the first time on this host, remove the folders of earlier
    runs of the same job and those untouched for a day."""
    if os.path.isdir(folder):
        return
    os.makedirs(folder, exist_ok=True)
    job = os.path.basename(folder).split("-")[0]
    now = time.time()
    for d in os.scandir(root):
        if not d.is_dir(follow_symlinks=False) or d.path == folder:
            continue
        try:
            stale = now - d.stat(follow_symlinks=False).st_mtime > STALE_SECONDS
        except FileNotFoundError:
            continue
        if d.name.split("-")[0] == job or stale:
            shutil.rmtree(d.path, ignore_errors=True)


def _reserve(spec: PartitionSpec, need: int) -> str | None:
    """A new temporary file of ``need`` bytes in the run's folder, or None when it does not
    fit within ``spool_max_bytes`` and the free disk."""
    return _reserve_in(spec.spool[0], int(spec.spool[1]), need)


def _reserve_in(token: str, limit: int, need: int) -> str | None:
    """:func:`_reserve` in the spool folder ``token`` within ``limit`` bytes."""
    root = spool_root()
    if need > limit:
        return None
    os.makedirs(root, mode=0o700, exist_ok=True)
    folder = os.path.join(root, os.path.basename(token))
    with _locked(root):
        _start_run(root, folder)
        if _used_bytes(root) + need > limit or \
                shutil.disk_usage(root).free - need < DISK_RESERVE:
            return None
        tmp = os.path.join(folder, f"{_TMP}{uuid.uuid4().hex}")
        with open(tmp, "wb") as fh:
            fh.truncate(need)    # counted by the next task's _used_bytes
    return tmp


def _copy(src, out, pos: int, end: int, what: str, to_eof: bool = False) -> int:
    """Copy bytes ``[pos, end)`` of ``src`` to ``out`` in GETs of at most
    :data:`FETCH_PIECE` (+ :data:`MARGIN`), each streamed to ``out`` where the filesystem
    can (:func:`~daskwp.frames.storage.copy_range`: no buffer of the GET's size); the
    position reached, less than ``end`` only where ``to_eof`` and the object ends there."""
    while pos < end:
        n = end - pos if end - pos <= FETCH_PIECE + MARGIN else FETCH_PIECE
        copied = storage.copy_range(src, pos, pos + n, out)
        if copied:
            pos += copied
            continue
        src.seek(pos)    # (the object's end, a broken response, or no streamed read)
        data = src.read(n)
        if not data:
            if to_eof:
                return pos
            raise changed_error(what)
        out.write(data)
        pos += len(data)
    return pos


def _fetch_cut(spec: PartitionSpec, src, out, start: int, end: int, have: int = 0) -> int:
    """Fetch a range planned at cuts (:func:`regions`) into ``out``: ``[start, end)``,
    less where the object ends, more until it holds the line end at or after the last cut
    (or the object's end); ``out`` is cut to the bytes fetched, and where they end
    returned. ``out`` holds the first ``have`` bytes already (fetched with the object's
    head: :class:`HeadStreams`)."""
    last = spec.byte_end - 1      # the line end the partition's end moves to: at or after
    what = spec.describe()
    out.seek(have)
    pos = _copy(src, out, start + have, end, what, to_eof=True)
    if pos <= last:
        raise changed_error(what)
    look, piece = last, MARGIN    # look for a b"\n" in [look, pos)
    while True:
        out.seek(look - start)
        if out.read(pos - look).find(b"\n") >= 0:
            break
        out.seek(pos - start)
        got = _copy(src, out, pos, pos + piece, what, to_eof=True)
        if got == pos:
            break    # the object's end: the last line ends there
        look, pos, piece = pos, got, min(piece * 4, FETCH_PIECE)
    out.truncate(pos - start)
    return pos


def _fetch(spec: PartitionSpec, ranges: list) -> tuple | None:
    """Fetch ``ranges`` of the partition's object into a spool file: ``(its path, the
    ranges it holds)``, or None when there is no room for it."""
    need = sum(e - s for s, e in ranges)
    try:
        tmp = _reserve(spec, need)
    except OSError:
        return None     # no usable local disk: read from the store
    if tmp is None:
        return None
    try:
        with storage.waiting_on_network():
            return _fetch_into(spec, ranges, tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _fetch_into(spec: PartitionSpec, ranges: list, tmp: str, have: int = 0) -> tuple:
    """:func:`_fetch`'s GETs, into the reserved file ``tmp``, renamed to the spool's name
    (``have``: the bytes ``tmp`` holds already, from the start of a range planned at
    cuts)."""
    try:
        with storage.using(spec.storage_options), storage.open_input(spec.path) as src, \
                open(tmp, "r+b") as out:
            details = getattr(src, "details", None)
            identity = _identity(details if details is not None else
                                 storage.url_info(spec.path))
            if spec.cut_at_lines:
                (start, end), = ranges
                held = [(start, _fetch_cut(spec, src, out, start, end, have))]
            else:
                held = ranges
                for start, end in ranges:
                    _copy(src, out, start, end, spec.describe())
        final = os.path.join(_folder(spec), _name(spec, ranges, identity))
        os.replace(tmp, final)
        return final, held
    except READ_ERRORS as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"cannot read {spec.describe()}: {e}") from None


def _spooled_already(spec: PartitionSpec, ranges: list) -> tuple | None:
    """``(path, ranges it holds)`` of the spool file of ``spec``'s ``ranges`` in the run's
    folder on this host (a :class:`Prefetch` adopted), or None when there is none (or
    the partition has no version to name it by)."""
    if spec.object_version is None:
        return None
    path = os.path.join(_folder(spec), _name(spec, ranges, repr(tuple(spec.object_version))))
    try:
        size = os.path.getsize(path)
    except OSError:
        return None
    if spec.cut_at_lines:    # from the byte before the first cut, as far as it was fetched
        return path, [(ranges[0][0], ranges[0][0] + size)]
    return path, ranges


@contextlib.contextmanager
def fetched(spec: PartitionSpec):
    """The count side: within the block, the partition's object is read from a spool file
    holding its ranges, fetched now, or before (:class:`Prefetch`), and left for the
    write task; or from the store as usual when the partition is not spooled or there is
    no room."""
    ranges = regions(spec)
    got = None
    if ranges and not has_local_copy(spec.path):
        got = _spooled_already(spec, ranges) or _after_stream(spec, ranges) or \
            _adopted_part(spec, ranges) or _fetch(spec, ranges)
    if got is None:
        yield
        return
    with local_copy(spec.path, *got):
        yield


@contextlib.contextmanager
def spooled(spec: PartitionSpec):
    """The write side: within the block, the partition's object is read from the spool
    file its count task left on this host, when there is one for this version of the
    object (the spool file is removed at the end of the block); else from the store."""
    ranges = regions(spec)
    folder = _folder(spec) if ranges and not has_local_copy(spec.path) else None
    prefix = f"{spec.index:06d}-"
    try:
        found = [n for n in os.listdir(folder) if n.startswith(prefix)] if folder else []
    except OSError:
        found = []
    if not found:
        yield
        return
    if spec.object_version is not None:   # what the count fetched too: no HEAD
        identity = repr(tuple(spec.object_version))
    else:
        with storage.using(spec.storage_options):
            try:
                identity = _identity(storage.url_info(spec.path))
            except (OSError, ValueError):
                identity = None
    name = _name(spec, ranges, identity) if identity is not None else None
    for n in found:
        if n != name:    # another version of the object: never read
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, n))
    path = os.path.join(folder, name) if name in found else None
    if path is None:
        yield
        return
    if spec.cut_at_lines:    # from the byte before the first cut, as far as it was fetched
        try:
            ranges = [(ranges[0][0], ranges[0][0] + os.path.getsize(path))]
        except OSError:
            yield
            return
    try:
        with local_copy(spec.path, path, ranges):
            yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


class Prefetch:
    """Partition ``spec``'s ranges fetched into a spool folder of this host now, in a
    thread (the driver's, while its local cluster starts), for the run's count task of
    that partition: :meth:`adopt` gives the file the name that task looks for in the run's
    folder; :meth:`discard` removes what was not adopted. ``spool_max_bytes``: the job's
    option (a partition that does not fit is not fetched). A fetch that fails is dropped
    (the count task fetches the partition, and reports what is wrong). Where the listing's
    GET of the object's head goes on into partition 0 and the next partitions,
    :class:`StreamPrefetch` does this instead."""

    def __init__(self, spec: PartitionSpec, spool_max_bytes: int):
        self.token = run_token(uuid.uuid4().hex, "prefetch")
        self.spec = dataclasses.replace(spec, spool=(self.token, int(spool_max_bytes)))
        self.ranges = regions(self.spec)
        self.got: tuple | None = None
        self._thread = threading.Thread(target=contextvars.copy_context().run,
                                        args=(self._fetch,), name="daskwp-prefetch",
                                        daemon=True)
        self._thread.start()

    def _fetch(self) -> None:
        try:
            with storage.pinned({self.spec.path: self.spec.object_version}):
                self.got = _fetch(self.spec, self.ranges)
        except Exception:   # noqa: BLE001  (the count task fetches it, and raises)
            self.got = None

    def adopt(self, specs) -> bool:
        """Wait for the fetch; move its file into the run's folder of the partition of
        ``specs`` (the run's, with their spool) that it was fetched for. Whether it was."""
        self._thread.join()
        try:
            if self.got is None:
                return False
            target = _target(specs, self.spec, self.ranges)
            if target is None:
                return False
            folder = _run_folder(target)
            os.replace(self.got[0], os.path.join(folder, _name(
                target, self.ranges, repr(tuple(target.object_version)))))
            return True
        except OSError:
            return False
        finally:
            self.discard()

    def covers(self, indices) -> bool:
        """Whether the partitions ``indices`` are all this prefetch's (partition 0 only)."""
        return set(indices) <= {self.spec.index}

    def discard(self) -> None:
        """Wait for the fetch and remove what it left (nothing once adopted)."""
        self._thread.join()
        remove_run_spools(self.token)


def _target(specs, spec: PartitionSpec, ranges: list) -> PartitionSpec | None:
    """The partition of ``specs`` (the run's, with their spool) that ``spec``'s ``ranges``
    were fetched for, or None (not in the run, not spooled, other ranges, no version)."""
    target = next((s for s in specs if s.index == spec.index and s.spool is not None and
                   s.path == spec.path and regions(s) == ranges), None)
    if target is None or target.object_version is None or \
            tuple(target.object_version) != tuple(spec.object_version or ()):
        return None
    return target


def _run_folder(spec: PartitionSpec) -> str:
    """The run's spool folder of ``spec`` on this host, made (:func:`_start_run`)."""
    folder = _folder(spec)
    root = spool_root()
    with _locked(root):
        _start_run(root, folder)
    return folder


#: The name of a spool file that a :class:`StreamPrefetch` handed over with its first
#: bytes only: the spool file's name, this, and how many bytes it holds; the count task
#: fetches the rest (:func:`_adopted_part`).
_PARTIAL = ".held-"


def _adopted_part(spec: PartitionSpec, ranges: list) -> tuple | None:
    """The count side of a spool file handed over with the first bytes of ``spec``'s
    range only (:class:`StreamPrefetch`): taken (renamed, so only one task takes it) and
    completed from where it stops (a GET of the rest); ``(its path, the ranges it
    holds)`` as :func:`_fetch` gives them, or None when there is none."""
    if spec.object_version is None or not spec.cut_at_lines:
        return None
    folder = _folder(spec)
    prefix = _name(spec, ranges, repr(tuple(spec.object_version))) + _PARTIAL
    try:
        held = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return None
    for n in held:
        tmp = os.path.join(folder, f"{_TMP}{uuid.uuid4().hex}")
        try:
            os.replace(os.path.join(folder, n), tmp)
        except OSError:
            continue    # (another task took it)
        try:
            with storage.waiting_on_network():
                return _fetch_into(spec, ranges, tmp, int(n[len(prefix):]))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return None


def start_prefetch(specs, spool_max_bytes: int, heads: HeadStreams | None = None):
    """A prefetch of the first partitions of ``specs`` when the first is one to spool (a
    byte range of an uncompressed text or JSON Lines object, with a version), else None:
    a :class:`StreamPrefetch` of partition 0 and the partitions after it in the same
    object, where ``heads`` fetched the object's head for the listing
    (:meth:`HeadStreams.claim`: its GET goes on into them), else a :class:`Prefetch` of
    partition 0."""
    if not specs or not spool_max_bytes:
        return None
    first = specs[0]
    limit = int(spool_max_bytes)
    probe = dataclasses.replace(first, spool=("", limit))
    if not first.cut_at_lines or first.object_version is None or not regions(probe):
        return None
    if heads is not None:
        parts = []
        for s in specs:
            ranges = regions(dataclasses.replace(s, spool=("", limit)))
            if s.path != first.path or s.object_version != first.object_version or \
                    not s.cut_at_lines or s.compression or not ranges or len(ranges) != 1:
                break
            parts.append((s, ranges))
        claimed = heads.claim(parts)
        if claimed is not None:
            return StreamPrefetch(*claimed)
    return Prefetch(first, limit)


class _Stopped(Exception):
    """A head stream's GET stops here (:class:`_Counted`)."""


def _copy_file(path: str, offset: int, n: int, fd: int) -> None:
    """Copy ``n`` bytes of the file ``path`` from ``offset`` to the start of the file
    ``fd`` (in the kernel where it can)."""
    src = os.open(path, os.O_RDONLY)
    try:
        at = 0
        while at < n:
            try:
                k = os.copy_file_range(src, fd, n - at, offset + at, at)
            except (AttributeError, OSError):
                k = 0
            if not k:    # (no copy_file_range here, or not between these files)
                data = os.pread(src, min(n - at, STREAM_PIECE_BYTES), offset + at)
                if not data:
                    raise OSError(f"{path}: ends before byte {offset + n}")
                _pwrite(fd, data, at)
                k = len(data)
            at += k
    finally:
        os.close(src)


def _pwrite(fd: int, data, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class _Counted:
    """The files of a :class:`_HeadStream`: each piece of its GET written at its place in
    every file whose range holds it, up to where the stream is to stop."""

    def __init__(self, stream: _HeadStream):
        self._stream = stream

    def write(self, data) -> int:
        st = self._stream
        with st.wlock:
            with st.cond:
                room = 0 if st.stopped else st.stop_at - st.written
                pos = st.written
            if room <= 0:
                raise _Stopped
            view = memoryview(data).cast("B")[:room]
            for start, end, fd in st.files:
                a, b = max(pos, start), min(pos + len(view), end)
                if a < b:
                    _pwrite(fd, view[a - pos:b - pos], a - start)
            with st.cond:
                st.written += len(view)
                st.cond.notify_all()
        if len(view) < len(data):
            raise _Stopped
        return len(view)


class _HeadStream:
    """One GET of an object (the version ``version``) from its start, in a thread (in
    ``context``: the job's storage options), into spool files of a new spool folder of
    its own: first the head file (:meth:`head` reads the object's first bytes from it once
    they are in), up to :data:`FETCH_PIECE` + :data:`MARGIN` bytes (or the object's end),
    where the stream waits; :meth:`claim` gives it partition 0's range (the head file's)
    and the next partitions' ranges (a file each), and it goes on until the last one's end
    or :meth:`stop` (the job's tasks go out); :meth:`cancel` stops it and removes the
    folder. A GET stopped before the stream's end (waiting to be claimed, a broken
    response) is followed by another from where it stopped. ``limit``: the job's
    ``spool_max_bytes``; the stream's files take at most half of it."""

    def __init__(self, url: str, version: tuple, limit: int, context):
        self.url, self.version, self.size = url, version, int(version[0])
        self.end = min(self.size, FETCH_PIECE + MARGIN)
        self.token = run_token(uuid.uuid4().hex, "head")
        self.path: str | None = None
        self.written = 0
        self.stop_at = self.end
        self.done = self.claimed = self.stopped = self.cancelled = False
        self.cond = threading.Condition()
        self.wlock = threading.Lock()     # a piece's writes; the files claim adds
        self.files: list = []             # (start, end, fd): where the bytes go
        self.budget = max(int(limit) // 2, self.end)
        self._limit = limit
        self._thread = threading.Thread(target=context.copy().run, args=(self._run,),
                                        name="daskwp-head-stream", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            path = _reserve_in(self.token, self._limit, self.end)   # None: no room
            if path is not None:
                with self.wlock:
                    self.files.append((0, self.end, os.open(path, os.O_RDWR)))
            with self.cond:
                self.path = path
                self.cond.notify_all()
            if path is not None:
                with storage.pinned({self.url: self.version}), \
                        storage.open_input(self.url) as src:
                    self._stream(src)
        except Exception:  # noqa: BLE001  the head is fetched as usual, the rest by counts
            pass
        finally:
            with self.wlock:
                for _, _, fd in self.files:
                    os.close(fd)
                self.files = []
                with self.cond:
                    self.done = True
                    cancelled = self.cancelled
                    self.cond.notify_all()
            if cancelled:
                remove_run_spools(self.token)

    def _stream(self, src) -> None:
        while True:
            with self.cond:
                while self.written >= self.stop_at and not (self.claimed or self.stopped):
                    self.cond.wait()     # (at the head file's end, until claimed)
                if self.stopped or self.written >= self.stop_at:
                    return
                pos = self.written
                # the GET's range: to the budget's end (the partitions the claim may give)
                reach = min(self.size, max(self.budget, self.stop_at))
            try:
                storage.copy_range(src, pos, reach, _Counted(self))
            except _Stopped:
                pass
            with self.cond:
                if self.written == pos:
                    return    # (nothing came: an error, or no streamed read)

    def head(self, n: int) -> bytes | None:
        """The object's first ``n`` bytes, once the GET has brought them (None: it
        stopped before, or could not start)."""
        with self.cond:
            while self.written < n and not self.done:
                self.cond.wait()
            if self.written < n or self.path is None:
                return None
        with open(self.path, "rb") as fh:
            data = fh.read(n)
        return data if len(data) == n else None

    def claim(self, parts: list) -> list:
        """Give the stream the partitions ``parts`` (``[(spec, ranges)]``: partition 0 of
        the object, its range from the start, then the next ones): partition 0's bytes go
        to the head file, each next partition's (while they fit in the budget and the
        spool) to a file of its own, reserved now, with the bytes the stream holds
        already; the stream goes on to the last one's end. Returns ``[(spec, ranges,
        file)]`` of those it took ([] when it cannot take partition 0: the stream is
        then left as it was, for :meth:`cancel`)."""
        with self.cond:
            while self.path is None and not self.done:
                self.cond.wait()
            if self.path is None or self.stopped:
                return []
        (spec0, ranges0), *rest = parts
        taken = [(spec0, ranges0, self.path)]
        used = max(self.end, min(ranges0[0][1], self.size))
        with self.wlock:     # (no piece is written meanwhile)
            with self.cond:
                have, done = self.written, self.done
            files = [(0, min(ranges0[0][1], self.size), self.files[0][2])] \
                if self.files else []
            for spec, ranges in rest:
                (start, end), = ranges
                end = min(end, self.size)
                if (done and have < end) or used + end - start > self.budget:
                    break
                try:
                    path = _reserve_in(self.token, self._limit, end - start)
                except OSError:
                    path = None
                if path is None:
                    break
                fd = os.open(path, os.O_RDWR)
                if have > start:   # (the bytes in the head file already)
                    _copy_file(self.path, start, min(have, end) - start, fd)
                if done:
                    os.close(fd)
                else:
                    files.append((start, end, fd))
                taken.append((spec, ranges, path))
                used += end - start
            if not done:
                self.files = files
            with self.cond:
                self.stop_at = min(taken[-1][1][0][1], self.size)
                self.claimed = True
                self.cond.notify_all()
        return taken

    def held(self, ranges: list) -> int:
        """The bytes of ``ranges`` (one range) the stream has brought, from its start."""
        (start, end), = ranges
        return max(0, min(self.written, end, self.size) - start)

    def complete(self, ranges: list) -> bool:
        """Whether the stream brought all of ``ranges`` (one range, to the object's end
        where it goes past it)."""
        (start, end), = ranges
        return self.written >= min(end, self.size)

    def stop(self) -> None:
        """Stop the GET (at its next piece) and wait for its thread."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        self._thread.join()

    def cancel(self) -> None:
        """Stop the GET (at its next piece) and remove what it fetched (its thread does,
        where it still runs)."""
        with self.cond:
            self.stopped = self.cancelled = True
            done = self.done
            self.cond.notify_all()
        if done:
            remove_run_spools(self.token)


class StreamPrefetch:
    """The partitions a :class:`_HeadStream` was given (:meth:`_HeadStream.claim`):
    partition 0 and the next ones of its object, fetched by the listing's GET while the
    cluster starts. :meth:`adopt` (the job's tasks go out) hands each partition to the
    run: a lock file in the run's folder (:data:`_STREAMING`), held until the partition's
    file is there, tells its count task to wait for it (:func:`_after_stream`) rather than
    fetch it; the GET goes on, and as each partition's range comes whole its file moves
    into the run's folder under the name its count task looks for (its line ends checked:
    :func:`_fetch_into`, no GET unless its last line goes on past the range), and its lock
    is let go. Where the GET stops before (an error, :meth:`discard`), the partition it
    was in goes over under a name that says how much it holds (:func:`_adopted_part`: its
    count task fetches the rest), and the later ones' locks are let go (their counts fetch
    them). :meth:`discard` stops the GET and removes what was not adopted. Without
    ``fcntl`` (no lock to wait on), :meth:`adopt` stops the GET first."""

    def __init__(self, stream: _HeadStream, taken: list):
        self.stream, self.taken = stream, taken
        self._finisher: threading.Thread | None = None
        self._discarded = False

    def adopt(self, specs) -> bool:
        """Hand the partitions of ``specs`` (the run's, with their spool) that the stream
        was given to the run (their lock files made and held now; their files moved into
        the run's folder as they come, in a thread). Whether any was."""
        try:
            import fcntl
        except ImportError:
            fcntl = None
        st = self.stream
        if fcntl is None:
            st.stop()
        parts, locks = [], []
        try:
            for spec, ranges, path in self.taken:
                target = _target(specs, spec, ranges)
                if target is None or (fcntl is None and not st.held(ranges)):
                    continue
                parts.append((target, ranges, path))
                folder = _run_folder(target)
                if fcntl is not None:
                    lock = os.path.join(folder, _name(
                        target, ranges, repr(tuple(target.object_version))) + _STREAMING)
                    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
                    locks.append((lock, fd))
                    fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            _release(locks)
            self.discard()
            return False
        if not parts:
            self.discard()
            return False
        self._finisher = threading.Thread(
            target=contextvars.copy_context().run, args=(self._finish, parts, locks),
            name="daskwp-stream-finish", daemon=True)
        self._finisher.start()
        if fcntl is None:
            self._finisher.join()
        return True

    def _finish(self, parts: list, locks: list) -> None:
        """Each partition of ``parts`` into the run's folder once the stream has brought
        it (or stopped), in order; its lock (of ``locks``) let go after."""
        st = self.stream
        try:
            with storage.pinned({st.url: st.version}):
                for i, (target, ranges, path) in enumerate(parts):
                    with st.cond:
                        while not st.complete(ranges) and not st.done:
                            st.cond.wait()
                    if self._discarded:
                        break     # (the run's folder is being removed: nothing more in it)
                    have = st.held(ranges)
                    try:
                        if st.complete(ranges):
                            _fetch_into(target, ranges, path, have)
                        elif have:
                            os.replace(path, os.path.join(_folder(target), _name(
                                target, ranges, repr(tuple(target.object_version)))
                                + f"{_PARTIAL}{have}"))
                    except Exception:  # noqa: BLE001  (its count fetches it, and raises)
                        pass
                    finally:
                        if locks:
                            _release(locks, [i])
        finally:
            _release(locks)

    def keep(self, indices) -> None:
        """Only the partitions ``indices`` are to be fetched (the others' documents are
        known: a resumed job's): the stream stops at the end of the last of them it was
        given, or at once where it was given none of them."""
        want = set(indices)
        kept = [ranges for spec, ranges, _ in self.taken if spec.index in want]
        st = self.stream
        with st.cond:
            if kept:
                st.stop_at = min(st.stop_at, kept[-1][0][1], st.size)
            else:
                st.stopped = True
            st.cond.notify_all()

    def covers(self, indices) -> bool:
        """Whether the partitions ``indices`` are all among those the stream was given
        (where it stops early, their counts fetch the rest themselves)."""
        return set(indices) <= {spec.index for spec, _, _ in self.taken}

    def wait(self, timeout: float | None = None) -> None:
        """Wait until every partition adopted is in the run's folder, or let go."""
        if self._finisher is not None:
            self._finisher.join(timeout)

    def discard(self) -> None:
        """Stop the stream and remove what it left (nothing once adopted); no partition
        goes into the run's folder after this returns (the job removes that folder next,
        where it failed)."""
        self._discarded = True
        self.stream.stop()
        if self._finisher is not None:
            self._finisher.join()
        remove_run_spools(self.stream.token)


#: The lock file of a partition that the driver's stream brings (:class:`StreamPrefetch`):
#: the spool file's name and this, in the run's folder, locked until the file is there.
_STREAMING = ".streaming"


def _release(locks: list, which=None) -> None:
    """Let go of the lock files ``locks`` (``[(path, fd)]``; those at the indices
    ``which``, default all), each once (its place set to None): removed, then unlocked
    (a count task that opened one before sees the unlock)."""
    for i in range(len(locks)) if which is None else which:
        if locks[i] is not None:
            path, fd = locks[i]
            locks[i] = None
            with contextlib.suppress(OSError):
                os.unlink(path)
            with contextlib.suppress(OSError):
                os.close(fd)


def _after_stream(spec: PartitionSpec, ranges: list) -> tuple | None:
    """The count side of a partition the driver's stream brings (:class:`StreamPrefetch`):
    where its lock file is in the run's folder, wait (out of the worker's thread pool)
    until it is let go; then the spool file, as :func:`_spooled_already` (None: the stream
    stopped before it)."""
    if spec.object_version is None or not spec.cut_at_lines:
        return None
    try:
        import fcntl
    except ImportError:
        return None
    lock = os.path.join(_folder(spec), _name(spec, ranges, repr(tuple(spec.object_version)))
                        + _STREAMING)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:     # none, or let go meanwhile
        return _spooled_already(spec, ranges)
    try:
        with storage.waiting_on_network():
            fcntl.flock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)
    return _spooled_already(spec, ranges)


class HeadStreams:
    """The object heads that listing and planning read (an object's first MB: its codec,
    format, JSON keys), for a job whose driver prefetches the first partitions
    (:func:`start_prefetch`): as :func:`~daskwp.frames.storage.head_source`, the first
    object asked for is fetched by one GET from its start (:class:`_HeadStream`), in a
    thread, and its head is read from that spool file once its first bytes are in; the
    prefetch takes the stream over (:meth:`claim`) for partition 0 and the partitions
    after it: one GET of the object for the head and the partitions the driver fetches
    while its cluster starts, where the head was a GET of its own, and each partition
    another. :meth:`close` (after the prefetch started) stops a GET that nothing took
    (partition 0 of another object, or not spooled) and removes its file. Other objects'
    heads are fetched as usual. Made within the job's storage options: the GET's thread
    uses them."""

    def __init__(self, spool_max_bytes: int):
        self._limit = int(spool_max_bytes)
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()
        self.stream: _HeadStream | None = None
        self._closed = False

    def __call__(self, url: str, version: tuple, n: int) -> bytes | None:
        version = tuple(version or ())
        with self._lock:
            if self.stream is None and not self._closed and version and \
                    isinstance(version[0], int) and version[0] > 0:
                self.stream = _HeadStream(url, version, self._limit, self._context)
            stream = self.stream
        if stream is None or stream.url != url or stream.version != version:
            return None
        return stream.head(n)

    def claim(self, parts: list) -> tuple | None:
        """``(stream, what it took)`` (:meth:`_HeadStream.claim`), for
        :class:`StreamPrefetch`, when the stream is the object's of ``parts``
        (``[(spec, ranges)]``: partition 0, one range from the object's start, planned at
        cuts, then the next partitions of the object) and takes partition 0; else None.
        No stream starts after this."""
        with self._lock:
            self._closed = True
            st = self.stream
            if not parts:
                return None
            spec, ranges = parts[0]
            if st is None or st.claimed or st.url != spec.path or \
                    spec.object_version is None or \
                    st.version != tuple(spec.object_version) or not spec.cut_at_lines or \
                    spec.compression or len(ranges) != 1 or ranges[0][0] != 0:
                return None
        taken = st.claim(parts)
        return (st, taken) if taken else None

    def close(self) -> None:
        """Stop and remove a stream that :meth:`claim` did not give out."""
        with self._lock:
            self._closed = True
            st = self.stream
        if st is not None and not st.claimed:
            st.cancel()
