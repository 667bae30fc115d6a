"""Where inputs and outputs live: local paths, or fsspec URLs (``s3://``, ``gs://``,
``abfs://``, ``hdfs://``, ``memory://``, ...) with their ``storage_options``.

A local path (or a ``file://`` URL, which becomes its path) keeps the plain POSIX calls of
the rest of daskwp: ``open``, ``os.replace``, ``fsync``. A URL goes through the fsspec
filesystem of its protocol, made from the URL and the storage options (credentials come from
the options or from the filesystem's usual sources: environment, config files).

Storage options reach the code that opens files in two ways: explicitly (``Folder``,
:func:`filesystem`), or for the input readers' many helpers through :func:`using`, a
context (a ``contextvars`` variable: per thread and per task) that :func:`open_input`
reads. They are never written anywhere by daskwp: they may hold secrets.

A byte range that a task has already fetched to a local file can be read from there instead:
within :func:`local_copy`'s block, :func:`open_input` of the URL opens the local file (the
positions stay those of the object). The job's count pass keeps the bytes it fetched this
way for the partition's write task (``daskwp/jobs/inputs/fetch_spool.py``).

Errors of the object store (no such bucket, an endpoint that does not answer, no
credentials, access denied) become a :class:`StorageError` (an ``OSError``) whose message is
one line naming the URL.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from typing import Callable

__all__ = ["TMP_PREFIX", "Folder", "HeadCached", "LocalCopy", "StorageError", "Uploads",
           "caching_heads", "clear_warm_filesystems", "copy_range", "current_options",
           "describe_storage_error", "set_network_wait", "waiting_on_network",
           "filesystem", "HANDOVER_MAX_WAITING_BYTES", "hand_over_uploads",
           "has_local_copy", "head_source", "is_url", "local_copy", "local_copy_place",
           "local_path",
           "object_version",
           "open_input", "pinned", "size",
           "private_folder", "remove_stale_staging", "staging_root", "storage_error", "url_info", "using",
           "warm_filesystems"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_OPTIONS: contextvars.ContextVar = contextvars.ContextVar("daskwp_storage_options",
                                                          default=None)
#: URL -> (local file, byte ranges it holds) within :func:`local_copy` blocks
_LOCAL_COPIES: contextvars.ContextVar = contextvars.ContextVar("daskwp_local_copies",
                                                               default={})
#: URL -> the object's version (:func:`object_version`) within :func:`pinned` blocks
_PINNED: contextvars.ContextVar = contextvars.ContextVar("daskwp_pinned", default={})


class StorageError(OSError):
    """An object store cannot be used for a URL; the message is one line that says why."""


def is_url(path) -> bool:
    """Whether ``path`` is a URL of another filesystem than the local one (``file://`` is
    local)."""
    if not isinstance(path, str):
        return False
    m = _URL.match(path)
    return bool(m) and m.group(1).lower() not in ("file", "local")


def local_path(path: str) -> str:
    """``file:///x`` / ``local:///x`` -> ``/x``; anything else unchanged."""
    m = _URL.match(path) if isinstance(path, str) else None
    if m and m.group(1).lower() in ("file", "local"):
        return path[m.end():] or "/"
    return path


@contextlib.contextmanager
def using(storage_options: dict | None):
    """Within the block, :func:`open_input` and :func:`filesystem` (without options of
    their own) use ``storage_options``."""
    token = _OPTIONS.set(dict(storage_options) if storage_options else None)
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def describe_storage_error(url: str, exc: BaseException) -> str:
    """One line about why ``url`` cannot be used: the cause in words, then the error."""
    name = type(exc).__name__
    text = " ".join(str(exc).split()) or name
    names = {c.__name__ for c in type(exc).__mro__}
    if "NoCredentialsError" in names or "PartialCredentialsError" in names:
        why = ("no credentials for the object store: set them in the environment (e.g. "
               "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), a config file, or "
               "storage_options")
    elif names & {"EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError",
                  "ConnectionError", "ConnectionRefusedError", "ReadTimeoutError"}:
        why = "cannot reach the object store's endpoint (check endpoint_url and the network)"
    elif isinstance(exc, FileNotFoundError) and "bucket" in text.lower():
        why = "the bucket does not exist"
    elif isinstance(exc, PermissionError) or "AccessDenied" in text or \
            "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
        why = "access denied (check the credentials and their permissions)"
    elif isinstance(exc, ImportError):
        return f"{url}: {text}"
    else:
        return f"{url}: {name}: {text}"
    return f"{url}: {why} ({name}: {text})"


def storage_error(url: str, exc: BaseException) -> StorageError:
    """``exc`` raised by the filesystem of ``url`` as a one-line StorageError."""
    if isinstance(exc, StorageError):
        return exc
    err = StorageError(describe_storage_error(url, exc))
    err.__cause__ = exc
    return err


def filesystem(url: str, storage_options: dict | None = None):
    """``(fs, path)``: the fsspec filesystem of ``url`` and the path within it.
    ``storage_options`` default to those of :func:`using`'s block. A protocol that is not
    installed or not known is a StorageError naming what to install. A filesystem that
    :func:`warm_filesystems` builds (or is building) for the same protocol, options and
    URL arguments is that one instance, whatever the thread."""
    options = _OPTIONS.get() if storage_options is None else storage_options
    if _WARM:
        warmed = _warmed(url, options)
        if warmed is not None:
            return warmed
    return _url_to_fs(url, options)


def _signed_payload_options(url: str, options) -> dict | None:
    """``options`` for an S3 URL whose endpoint is plain ``http://``: there botocore signs
    every request's body (its SHA-256 in the signature, which the store checks), and its
    default checksum of the body (CRC32, since botocore 1.36) checks the same bytes again:
    ``request_checksum_calculation`` "when_required" leaves that out (a CPU pass over each
    uploaded part). Unchanged over https (where the checksum is what checks the body),
    anonymous access, payload signing turned off, or the setting chosen already (the
    options, ``AWS_REQUEST_CHECKSUM_CALCULATION``)."""
    m = _URL.match(url) if isinstance(url, str) else None
    if not options or m is None or m.group(1).lower() not in ("s3", "s3a"):
        return options
    client_kwargs = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or client_kwargs.get("endpoint_url") or ""
    config = dict(options.get("config_kwargs") or {})
    if not str(endpoint).lower().startswith("http://") or options.get("anon") or \
            "request_checksum_calculation" in config or \
            "signature_version" in config or \
            (config.get("s3") or {}).get("payload_signing_enabled") is False or \
            os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION"):
        return options
    try:
        from botocore.config import Config
    except ImportError:
        return options
    if "request_checksum_calculation" not in getattr(Config, "OPTION_DEFAULTS", {}):
        return options    # (a botocore without the checksum: nothing to leave out)
    config["request_checksum_calculation"] = "when_required"
    return {**options, "config_kwargs": config}


#: The protocols whose fsspec implementation this process imported (:func:`_url_to_fs`).
_IMPORTED: set = set()


@contextlib.contextmanager
def _kept_from_collector(url: str):
    """Around the first resolution of ``url``'s protocol in this process (the import of its
    implementation: s3fs, aiobotocore, botocore, aiohttp, ...) where the process keeps
    what its imports made out of the cyclic collector (``gc.freeze``: the ``daskwp``
    command, cli.py): no collection while the modules are imported, and what they made
    frozen with the rest after. Elsewhere (nothing frozen: a library's process), or for a
    protocol resolved before, nothing changes.

    Why: a full collection ran in the middle of s3fs's import (0.04 CPU s), and the
    driver's collection at the cluster's close traversed those modules' objects again
    (0.04-0.06 s against 0.017 s for a local job): on the command's main thread."""
    import gc
    m = _URL.match(url) if isinstance(url, str) else None
    protocol = m.group(1).lower() if m else ""
    if not protocol or protocol in _IMPORTED or not gc.get_freeze_count():
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _IMPORTED.add(protocol)
        gc.freeze()
        if enabled:
            gc.enable()


#: The environment variables that give botocore a proxy (its ``ProxyConfiguration`` reads
#: them, in either case): with one, a plain ``http://`` endpoint may still be reached over
#: TLS (an ``https://`` proxy), so :func:`_plain_http_options` leaves verification alone.
_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def _plain_http_options(url: str, options) -> dict | None:
    """``options`` for an S3 URL whose endpoint is plain ``http://``, with no proxy: no TLS
    certificate is ever verified there, and aiobotocore's client otherwise loads the CA
    bundle for its first request anyway (into a TLS context, in a thread of its own: 0.03-
    0.05 CPU s per process, on the listing's way): ``client_kwargs`` ``verify=False``
    builds that context without it. Unchanged over https, where ``verify`` is chosen
    already (``client_kwargs``), or where a proxy is configured (``config_kwargs``
    ``proxies``, ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY``): a TLS proxy is
    verified with those settings."""
    m = _URL.match(url) if isinstance(url, str) else None
    if not options or m is None or m.group(1).lower() not in ("s3", "s3a"):
        return options
    client_kwargs = options.get("client_kwargs") or {}
    endpoint = options.get("endpoint_url") or client_kwargs.get("endpoint_url") or ""
    config = options.get("config_kwargs") or {}
    if not str(endpoint).lower().startswith("http://") or "verify" in client_kwargs or \
            "verify" in options or config.get("proxies") or \
            any(k.lower() in _PROXY_VARIABLES and v for k, v in os.environ.items()):
        return options
    return {**options, "client_kwargs": {**client_kwargs, "verify": False}}


def _url_to_fs(url: str, options):
    import fsspec
    try:
        with _kept_from_collector(url):
            return fsspec.core.url_to_fs(url, **(_plain_http_options(
                url, _signed_payload_options(url, options)) or {}))
    except ImportError as e:
        raise StorageError(f"{url}: {' '.join(str(e).split())}") from None
    except (ValueError, TypeError) as e:
        raise StorageError(f"{url}: cannot use this URL with the storage options given "
                           f"({type(e).__name__}: {e})") from None


#: (protocol, token of the options) -> the Future of a filesystem built ahead of need
#: (:func:`warm_filesystems`): one instance per process, shared by its threads
_WARM: dict = {}
_WARM_LOCK = threading.Lock()


def _warm_key(url: str, options) -> tuple | None:
    if not is_url(url) or "::" in url:
        return None   # (a chained URL: fsspec's own path)
    from dask.base import tokenize
    return _URL.match(url).group(1).lower(), tokenize(dict(options or {}))


def _warmed(url: str, options):
    """``(fs, path)`` of the filesystem warmed for ``url`` and ``options`` (waiting for it
    while it is being built), or None: none warmed, its build failed (the caller's own
    attempt reports the error), or ``url`` asks for other arguments (an account, a version)."""
    key = _warm_key(url, options)
    future = _WARM.get(key) if key is not None else None
    if future is None:
        return None
    try:
        fs, url_kwargs = future.result()
    except Exception:   # noqa: BLE001  the caller builds its own and reports its error
        return None
    if type(fs)._get_kwargs_from_urls(url) != url_kwargs:
        return None
    return fs, fs._strip_protocol(url)


def _build_warm(url: str, options: dict):
    fs, _ = _url_to_fs(url, options)
    if getattr(fs, "async_impl", False) and hasattr(fs, "set_session"):
        from fsspec.asyn import sync
        sync(fs.loop, fs.set_session)   # its client (s3fs: botocore's service models)
    return fs, type(fs)._get_kwargs_from_urls(url)


def warm_filesystems(urls, storage_options: dict | None) -> list:
    """Build, in a background thread, the filesystem of each URL of ``urls`` (one per
    protocol) with ``storage_options``, its client included, for :func:`filesystem` to
    return in every thread of this process: a worker's first task then waits for it
    instead of importing the filesystem's module and building its client itself. Only
    filesystems whose instances fsspec shares between threads (async ones: s3fs, gcsfs,
    ...) are shared; returns the Futures started (none for local paths). A build that
    fails is not kept: the task that needs the filesystem builds its own, which reports
    the error."""
    from concurrent.futures import Future
    options = dict(storage_options or {})
    started = []
    for url in urls:
        key = _warm_key(url, options)
        if key is None:
            continue
        with _WARM_LOCK:
            if key in _WARM:
                continue
            future: Future = Future()
            _WARM[key] = future

        def build(url=url, key=key, future=future):
            try:
                fs, url_kwargs = _build_warm(url, options)
                if not getattr(fs, "async_impl", False):
                    raise TypeError("a filesystem fsspec keeps per thread")
                future.set_result((fs, url_kwargs))
            except BaseException as e:  # noqa: BLE001  dropped: the task builds its own
                with _WARM_LOCK:
                    _WARM.pop(key, None)
                future.set_exception(e)
        threading.Thread(target=build, name="daskwp-storage-warm", daemon=True).start()
        started.append(future)
    return started


def clear_warm_filesystems() -> None:
    """Forget the filesystems :func:`warm_filesystems` built (the worker's teardown)."""
    with _WARM_LOCK:
        _WARM.clear()


#: What a task calls before it waits on the network for long (:func:`waiting_on_network`):
#: set in a Dask worker by daskwp's worker plugin (:func:`set_network_wait`), None elsewhere.
_NETWORK_WAIT = None


def set_network_wait(hook):
    """Install ``hook`` (None: remove it) for :func:`waiting_on_network` in this process;
    returns the one it replaces. ``hook()`` either takes the calling task's thread out of
    its worker's thread pool and returns a callable to call when the wait is over, or
    returns None (it cannot, or should not)."""
    global _NETWORK_WAIT
    previous, _NETWORK_WAIT = _NETWORK_WAIT, hook
    return previous


@contextlib.contextmanager
def waiting_on_network():
    """The block waits on the network for long (a partition's bytes fetched from an object
    store): where a hook is installed (a Dask worker's task thread, :func:`set_network_wait`)
    the task's thread leaves its worker's thread pool for the rest of the task, so that the
    worker runs another task on its cores meanwhile. Elsewhere nothing changes."""
    hook = _NETWORK_WAIT
    done = hook() if hook is not None else None
    try:
        yield
    finally:
        if done is not None:
            done()


def url_info(url: str) -> dict:
    """fsspec's ``info`` of ``url`` (``size``, ``type``, ...), errors as StorageError;
    a missing object: FileNotFoundError."""
    fs, path = filesystem(url)
    try:
        return fs.info(path)
    except FileNotFoundError as e:
        if "bucket" in str(e).lower():
            raise storage_error(url, e) from None
        raise
    except Exception as e:
        raise storage_error(url, e) from None


#: Read-ahead of a URL read from start to end (a compressed object streamed).
# What a write that has not finished is named: what a rerun removes (jobs.parts)
TMP_PREFIX = ".tmp-part-"

SEQUENTIAL_BLOCK_BYTES = 8 << 20


def current_options() -> dict | None:
    """The storage options of the enclosing :func:`using` block (None outside one)."""
    return _OPTIONS.get()


def size(path: str) -> int:
    """Bytes of a local file or of a URL's object."""
    return url_info(path)["size"] if is_url(path) else os.path.getsize(local_path(path))


class _ObjectFile(io.RawIOBase):
    """A read-only, seekable binary file over bytes of an object of ``size`` bytes, read
    from the position ``_pos``."""

    size = 0
    _pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self.size}[whence]
        if base + pos < 0:
            raise ValueError(f"negative seek position {base + pos}")
        self._pos = base + pos
        return self._pos


class LocalCopy(_ObjectFile):
    """A binary, seekable, read-only file over a local file that holds byte ranges of an
    object one after the other: positions are the object's. A read stops at the end of the
    range it starts in (the end of the last range is the end of the file); a position
    outside every range is an OSError (the copy does not hold it)."""

    def __init__(self, path: str, ranges, url: str = ""):
        super().__init__()
        self._fh = open(path, "rb", buffering=0)
        self._ranges, at = [], 0
        for start, end in ranges:
            self._ranges.append((int(start), int(end), at))
            at += int(end) - int(start)
        self.size = max(e for _, e, _ in self._ranges) if self._ranges else 0
        self.name = url or path

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:    # to the end of the range the position is in
            n = max([e - self._pos for s, e, _ in self._ranges if s <= self._pos < e] or [0])
        b = bytearray(n)
        return bytes(b[:self.readinto(b)])

    def readinto(self, b) -> int:
        n = len(b)
        if n == 0 or self._pos >= self.size:
            return 0
        for start, end, at in self._ranges:
            if start <= self._pos < end:
                self._fh.seek(at + self._pos - start)
                k = self._fh.readinto(memoryview(b).cast("B")[:min(n, end - self._pos)])
                self._pos += k
                return k
        raise OSError(f"{self.name}: byte {self._pos} is not in the local copy of the "
                      f"object (ranges {[(s, e) for s, e, _ in self._ranges]})")

    def close(self) -> None:
        self._fh.close()
        super().close()


#: Within :func:`caching_heads`: the first bytes of an object fetched once and kept.
HEAD_BYTES = 1 << 20
_HEAD_CACHING: contextvars.ContextVar = contextvars.ContextVar("daskwp_head_caching",
                                                               default=False)
_HEADS: dict = {}      # (url, size, ETag...) -> the object's first bytes (recently used last)
_HEADS_KEPT = 16


def object_version(details) -> tuple | None:
    """What identifies an object's version in fsspec's ``details`` / ``info``: its size and
    ETag (or generation, version id; a store with none of them: its creation or
    modification time), as ``(size, (key, value), ...)``; None when nothing does."""
    if not isinstance(details, dict):
        return None
    keys = [k for k in ("ETag", "etag", "generation", "VersionId", "version_id")
            if details.get(k) not in (None, "")] or \
        [k for k in ("created", "LastModified", "mtime") if details.get(k) not in (None, "")]
    return (details.get("size"), *((k, str(details[k])) for k in keys)) if keys else None


class HeadCached(_ObjectFile):
    """An object's file whose reads within its first :data:`HEAD_BYTES` come from one
    fetch of those bytes, kept for the next opening of the same version of the object
    (listing and planning read an object's head several times: the codec and format
    sniffed, the JSON keys sampled, the CSV header). Other reads go to the file."""

    def __init__(self, f, fs, path: str, url: str, key: tuple):
        super().__init__()
        self._f, self._fs, self._path, self._key = f, fs, path, key
        self.details = getattr(f, "details", None)
        self.size = key[1]
        self.name = url

    def _head(self) -> bytes:
        head = _HEADS.pop(self._key, None)
        if head is None:
            n = min(self.size, HEAD_BYTES)
            source = _HEAD_SOURCE.get()
            head = source(self.name, self._key[1:], n) if source is not None else None
            if head is None or len(head) != n:
                head = self._fs.cat_file(self._path, start=0, end=n)
        _HEADS[self._key] = head
        while len(_HEADS) > _HEADS_KEPT:
            del _HEADS[next(iter(_HEADS))]
        return head

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self._pos + n, self.size)
        if end <= self._pos:
            return b""
        data = b""
        if end <= HEAD_BYTES or (self._pos < HEAD_BYTES and self._key in _HEADS):
            data = self._head()[self._pos:end]   # (a read past the head: its start)
        if self._pos + len(data) < end:
            self._f.seek(self._pos + len(data))
            data += self._f.read(end - self._pos - len(data))
        self._pos += len(data)
        return data

    def readinto(self, b) -> int:
        data = self.read(len(b))
        memoryview(b).cast("B")[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._f.close()
        super().close()


#: Within :func:`head_source`'s block: what gives an object's head before a GET of it.
_HEAD_SOURCE: contextvars.ContextVar = contextvars.ContextVar("daskwp_head_source",
                                                              default=None)


@contextlib.contextmanager
def head_source(source):
    """Within the block, a :class:`HeadCached` file asks ``source(url, version, n)`` for the
    object's first ``n`` bytes before it fetches them itself (``version``: the object's
    :func:`object_version`): those bytes of that version, or None (then it fetches them).
    The job's driver fetches them as the start of its first partition's range
    (``daskwp/jobs/inputs/fetch_spool.py``, :class:`HeadStreams`)."""
    token = _HEAD_SOURCE.set(source)
    try:
        yield
    finally:
        _HEAD_SOURCE.reset(token)


@contextlib.contextmanager
def caching_heads():
    """Within the block, :func:`open_input` of an object gives a :class:`HeadCached` file:
    its first MB is fetched once for every opening of the same version (for listing and
    planning, which read each input's head several times)."""
    token = _HEAD_CACHING.set(True)
    try:
        yield
    finally:
        _HEAD_CACHING.reset(token)


@contextlib.contextmanager
def local_copy(url: str, path: str, ranges):
    """Within the block, :func:`open_input` of ``url`` reads the local file ``path``, which
    holds the object's byte ranges ``ranges`` (``[(start, end), ...]``, one after the
    other) instead of fetching them (:class:`LocalCopy`)."""
    copies = dict(_LOCAL_COPIES.get())
    copies[url] = (path, tuple(ranges))
    token = _LOCAL_COPIES.set(copies)
    try:
        yield
    finally:
        _LOCAL_COPIES.reset(token)


@contextlib.contextmanager
def pinned(versions: dict):
    """Within the block, :func:`open_input` of a URL of ``versions`` (``{url: version}``,
    :func:`object_version` as the listing saw it; a None version is left out) opens that
    version of the object without asking the store for its size and ETag again (no HEAD
    per opening): on S3 every read of it is a GET with ``If-Match`` that ETag, so an object
    replaced since is an error (s3fs's ``FileExpired``, an OSError), never the bytes of
    another version. A version without an ETag, or another filesystem than s3fs: the
    object is opened as usual."""
    versions = {u: tuple(v) for u, v in versions.items() if v is not None}
    if not versions:
        yield
        return
    token = _PINNED.set({**_PINNED.get(), **versions})
    try:
        yield
    finally:
        _PINNED.reset(token)


def _open_pinned(fs, path: str, version: tuple | None, kw: dict):
    """``fs.open(path)`` at the ``version`` pinned by :func:`pinned` without a HEAD: an
    s3fs file told its size and details, its reads sent with ``If-Match`` the ETag (or,
    where s3fs compares ETags itself, ``local_expiry_check``, compared); None where this
    cannot be done (no version, no ETag in it, another filesystem)."""
    if not version or type(fs).__module__.split(".")[0] != "s3fs" or \
            not isinstance(version[0], int):
        return None
    keys = dict(v for v in version[1:] if isinstance(v, tuple) and len(v) == 2)
    etag = keys.get("ETag")
    if not etag or keys.get("VersionId") or getattr(fs, "version_aware", False):
        return None    # (a versioned read: s3fs asks the store, as it does)
    details = {"name": path, "size": version[0], "type": "file", "ETag": etag}
    f = fs.open(path, "rb", size=version[0], **kw)
    f.details = details
    if not getattr(fs, "local_expiry_check", False):
        f.read_kw = {**(getattr(f, "read_kw", None) or {}), "IfMatch": etag}
    return f


def has_local_copy(url: str) -> bool:
    """Whether ``url`` is read from a local copy here (:func:`local_copy`)."""
    return url in _LOCAL_COPIES.get()


def local_copy_place(url: str, start: int, end: int) -> tuple[str, int] | None:
    """``(local file, offset)``: where bytes ``[start, end)`` of the object ``url`` lie, one
    after the other, in its local copy (:func:`local_copy`) from that offset, within one of
    the copy's ranges; None outside a :func:`local_copy` block of ``url`` or where no range
    of the copy holds them all (read them with :func:`open_input`, which says why)."""
    copy = _LOCAL_COPIES.get().get(url)
    if copy is None:
        return None
    path, ranges = copy
    at = 0
    for s, e in ranges:
        if s <= start and end <= e:
            return path, at + start - s
        at += e - s
    return None


def open_input(path: str, buffering: int = -1, sequential: bool = False):
    """A binary, seekable file object to read ``path``: ``open(path, "rb")`` for a local
    path; for a URL the filesystem's file without a read cache, so that each ``read`` of a
    byte range fetches that range only (no whole-object download), or, ``sequential``,
    with a read-ahead of 8 MB blocks (a stream read from start to end); within a
    :func:`local_copy` block of the URL, its local copy; within a :func:`pinned` block,
    the version pinned, opened without a HEAD; within :func:`caching_heads`, a
    :class:`HeadCached` file."""
    if not is_url(path):
        return open(local_path(path), "rb", buffering=buffering)
    copy = _LOCAL_COPIES.get().get(path)
    if copy is not None:
        return LocalCopy(copy[0], copy[1], path)
    fs, p = filesystem(path)
    try:
        kw = {"cache_type": "readahead", "block_size": SEQUENTIAL_BLOCK_BYTES} \
            if sequential else {"cache_type": "none"}
        f = _open_pinned(fs, p, _PINNED.get().get(path), kw)
        if f is None:
            f = fs.open(p, "rb", **kw)
        version = object_version(getattr(f, "details", None)) if _HEAD_CACHING.get() else None
        if version is None or not isinstance(version[0], int):
            return f
        return HeadCached(f, fs, p, path, (path, *version))
    except FileNotFoundError:
        raise
    except Exception as e:
        raise storage_error(path, e) from None


#: What :func:`copy_range` reads of a response at a time (a buffer that the allocator reuses:
#: a buffer as big as the range is fresh memory, a page fault per 4 kB).
STREAM_PIECE = 1 << 20


def copy_range(f, start: int, end: int, out) -> int | None:
    """Copy bytes ``[start, end)`` of ``f``, an object's file from :func:`open_input`, to the
    binary file ``out`` as they arrive: one ranged GET whose body is read
    :data:`STREAM_PIECE` bytes at a time, never the whole range in memory (as ``f.read``
    holds it). Returns the bytes copied: fewer than asked where the object ends or the
    response broke off (the caller goes on from there: another call, or ``f.read``, which
    retries and raises as usual), None where ``f`` has no such read (not an s3fs file: read
    it with ``f.read``). The GET is pinned to the version ``f`` opened (its ETag) as
    ``f.read``'s are: by If-Match, or, where s3fs checks the ETag itself
    (``local_expiry_check``), by comparing it (0 bytes copied when it differs)."""
    fs = getattr(f, "fs", None)
    size = getattr(f, "size", None)
    if type(f).__module__.split(".")[0] != "s3fs" or not hasattr(fs, "_call_s3") \
            or end <= start or (isinstance(size, int) and start >= size):
        return None    # (past the object's end: f.read gives b"" without a request)
    import inspect

    from fsspec.asyn import sync

    async def stream():
        bucket, key, version = fs.split_path(f.path)
        kw = dict(getattr(f, "read_kw", None) or {})
        if version or getattr(f, "version_id", None):
            kw["VersionId"] = version or f.version_id
        copied = 0
        try:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key,
                                     Range=f"bytes={start}-{end - 1}", **kw)
        except Exception:   # noqa: BLE001  f.read sends it again and raises as usual
            return 0
        body = resp["Body"]
        etag = (getattr(f, "details", None) or {}).get("ETag")
        if getattr(fs, "local_expiry_check", False) and etag and resp.get("ETag") != etag:
            # (a store without If-Match: s3fs compares the ETags itself; f.read raises)
            closed = body.close()
            if inspect.isawaitable(closed):
                await closed
            return 0
        try:
            while copied < end - start:
                try:
                    piece = await body.read(min(STREAM_PIECE, end - start - copied))
                except Exception:   # noqa: BLE001  (a broken response: f.read reads on)
                    break
                if not piece:
                    break
                out.write(piece)
                copied += len(piece)
        finally:
            closed = body.close()
            if inspect.isawaitable(closed):
                await closed
        return copied

    return sync(fs.loop, stream)


def staging_root() -> str:
    """This host's folder of staging folders (parts written before their upload), for this
    user: one folder per block of :meth:`Folder.staging`, named after the process's pid."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"daskwp-staging-{uid}")


def private_folder(path: str) -> bool:
    """Create the folder ``path`` (mode 0700) unless it exists; whether it is a folder of
    this user that no one else can write to (not a link): a fixed name in a shared
    temporary folder could have been made by anyone, pointing anywhere."""
    import stat
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    st = os.lstat(path)
    mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return stat.S_ISDIR(st.st_mode) and mine and not st.st_mode & 0o077


#: The name of a staging folder: the pid, then mkdtemp's 8 random characters.
_STAGING_NAME = re.compile(r"^(\d+)-[a-z0-9_]{8}$")


def _last_touched(path: str) -> float:
    """The newest mtime of the folder ``path`` and of its entries (a file being written
    changes its own mtime, not its folder's)."""
    newest = os.stat(path, follow_symlinks=False).st_mtime
    for e in os.scandir(path):
        try:
            newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
        except FileNotFoundError:
            pass
    return newest


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True     # someone else's process (or no way to tell): keep its folder
    return True


#: A staging folder whose process is gone is removed once untouched for this long (another
#: container sharing the temporary folder may number its processes differently); any
#: staging folder untouched for :data:`STAGING_MAX_AGE` is removed.
STAGING_GRACE = 600
STAGING_MAX_AGE = 24 * 3600


def remove_stale_staging(root: str, now: float | None = None) -> list[str]:
    """Remove the leftover staging folders in ``root``: a worker killed during an upload
    (``SIGKILL``, the host's power lost) leaves its part there, and nothing else would remove
    it. Leftover: its process (the pid its name starts with) is gone and it has been
    untouched for :data:`STAGING_GRACE` seconds, or it has been untouched for
    :data:`STAGING_MAX_AGE`. Returns the folders removed."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    for d in entries:
        m = _STAGING_NAME.match(d.name)
        if not m or int(m.group(1)) == os.getpid() or not d.is_dir(follow_symlinks=False):
            continue
        try:
            age = now - _last_touched(d.path)
        except FileNotFoundError:
            continue
        if age > STAGING_MAX_AGE or (age > STAGING_GRACE and not _pid_alive(int(m.group(1)))):
            shutil.rmtree(d.path, ignore_errors=True)
            removed.append(d.path)
    return removed


def object_or_folder(fs, path: str) -> tuple[dict | None, bool] | None:
    """On s3fs, from one listing of the names that start with ``path`` cut at the next "/"
    (the object itself, and ``path/`` as one common prefix where anything is below it;
    other names that start with ``path`` come too, a page at a time, up to ``path/``):
    ``(the object's info as s3fs's ``info`` gives it, or None where no object has that
    name; whether anything is below path/)``, where a HEAD and a listing were two
    requests. None on another filesystem, and for a bucket (whose listing would be every
    top-level name). Errors as s3fs raises them (a missing bucket: FileNotFoundError)."""
    if type(fs).__module__.split(".")[0] != "s3fs" or not hasattr(fs, "_call_s3"):
        return None
    bucket, key, version = fs.split_path(path)
    if not key or version:
        return None
    from fsspec.asyn import sync
    folder = key + "/"
    kw = {"Bucket": bucket, "Prefix": key, "Delimiter": "/"}
    info = None
    while True:
        page = sync(fs.loop, fs._call_s3, "list_objects_v2", **kw)
        contents = page.get("Contents") or []
        prefixes = [c.get("Prefix", "") for c in page.get("CommonPrefixes") or []]
        for c in contents:
            if c.get("Key") == key:
                info = {"ETag": c.get("ETag", ""), "LastModified": c.get("LastModified", ""),
                        "size": c.get("Size"), "name": f"{bucket}/{key}", "type": "file",
                        "StorageClass": c.get("StorageClass", "STANDARD")}
        if folder in prefixes:
            return info, True
        token = page.get("NextContinuationToken")
        # (names come in order: one past path/ means there is nothing below it)
        if not page.get("IsTruncated") or not token or \
                max([c.get("Key", "") for c in contents] + prefixes, default="") > folder:
            return info, False
        kw["ContinuationToken"] = token


class Folder:
    """A folder of output files: a local directory (POSIX: a temporary file, fsync'ed and
    renamed) or a prefix of an object store (a file appears under its name complete: one
    put of the finished bytes, or a completed multipart upload).

    Pickles with its storage options (a task argument); its ``repr`` shows only the
    location."""

    def __init__(self, location: str, storage_options: dict | None = None):
        location = local_path(os.fspath(location))
        self.remote = is_url(location)
        self.storage_options = dict(storage_options or {}) if self.remote else {}
        self.location = location.rstrip("/") if self.remote else os.path.abspath(location)

    def __repr__(self) -> str:
        return f"Folder({self.location!r})"

    def __reduce__(self):
        return (Folder, (self.location, self.storage_options))

    def _fs(self):
        fs, path = filesystem(self.location, self.storage_options)
        return fs, path.rstrip("/")

    def join(self, name: str) -> str:
        """The path or URL of ``name`` in the folder."""
        if self.remote:
            return f"{self.location}/{name}"
        return os.path.join(self.location, name)

    def _call(self, what, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except FileNotFoundError as e:
            if "bucket" in str(e).lower():
                raise storage_error(what, e) from None
            raise
        except StorageError:
            raise
        except Exception as e:
            raise storage_error(what, e) from None

    def check_writable(self, probe_prefix: str = ".tmp-probe-") -> list[str] | None:
        """Create a local folder; on an object store check that objects can be created in
        the folder: a probe object (``probe_prefix`` + a random name) put and removed. The
        bucket is never created: a missing one is an error. Raises StorageError /
        OSError. Returns the names in the folder where the check learnt them (on S3 one
        listing says both that no object has the folder's name and whether anything is
        below it: a folder found empty gives []), else None (ask :meth:`listdir`)."""
        if not self.remote:
            os.makedirs(self.location, exist_ok=True)
            return None
        fs, path = self._fs()
        is_object, holds = self._call(self.location, self._object_or_folder, fs, path)
        if is_object:
            raise NotADirectoryError(f"{self.location!r} is an object, not a folder")
        probe = f"{path}/{probe_prefix}{uuid.uuid4().hex}"
        self._call(self.location, fs.pipe_file, probe, b"")
        self._call(self.location, fs.rm_file, probe)
        return [] if holds is False else None

    @staticmethod
    def _object_or_folder(fs, path: str) -> tuple[bool, bool | None]:
        """``(whether an object is named path, whether anything is below path/)``, the
        second None where not known: on s3fs one listing (:func:`object_or_folder`), where
        a HEAD of the object and a listing of the folder were two requests; elsewhere
        fsspec's ``isfile`` (False on any error: the probe's put says what fails)."""
        known = object_or_folder(fs, path)
        if known is not None:
            return known[0] is not None, known[1]
        if type(fs).__module__.split(".")[0] == "s3fs" and not fs.split_path(path)[1]:
            return False, None    # (a bucket: no object has its name)
        return fs.isfile(path), None

    def listdir(self) -> list[str]:
        """The names in the folder ([] when it does not exist yet)."""
        if not self.remote:
            try:
                return os.listdir(self.location)
            except FileNotFoundError:
                return []
        fs, path = self._fs()
        try:
            entries = self._call(self.location, self._ls, fs, path)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries
                      if e["name"].rstrip("/") != path)

    @staticmethod
    def _ls(fs, path: str) -> list:
        """The entries (fsspec's details) of one listing of ``path``, fresh. On s3fs the
        listing of the prefix only: where it is empty, s3fs's ``ls`` lists the parent
        too (for an object of that name: none is a folder of ours), a second request,
        and on a bucket's top level a listing of every name there."""
        if type(fs).__module__.split(".")[0] == "s3fs" and hasattr(fs, "_lsdir") and \
                "/" in path:
            from fsspec.asyn import sync
            return sync(fs.loop, fs._lsdir, path, refresh=True)
        return fs.ls(path, detail=True, refresh=True)

    def sizes(self) -> dict[str, int]:
        """``{name: size in bytes}`` of the files in the folder ({} when it does not exist
        yet): one listing of an object store, as :meth:`listdir`."""
        return {name: size for name, (size, _) in self.entries().items()}

    def entries(self) -> dict[str, tuple[int, str | None]]:
        """``{name: (size in bytes, ETag)}`` of the files in the folder ({} when it does not
        exist yet; the ETag None where the store lists none, and in a local folder): one
        listing of an object store, as :meth:`listdir`."""
        if not self.remote:
            try:
                return {e.name: (e.stat().st_size, None) for e in os.scandir(self.location)
                        if e.is_file()}
            except FileNotFoundError:
                return {}
        fs, path = self._fs()
        try:
            entries = self._call(self.location, self._ls, fs, path)
        except FileNotFoundError:
            return {}
        return {e["name"].rstrip("/").rsplit("/", 1)[-1]:
                (int(e.get("size") or 0), e.get("ETag") or None)
                for e in entries
                if e["name"].rstrip("/") != path and e.get("type") != "directory"}

    def read_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of ``name`` (one ranged GET on an object store)."""
        if not self.remote:
            with open(self.join(name), "rb") as fh:
                fh.seek(start)
                return fh.read(end - start)
        fs, path = self._fs()
        return self._call(self.join(name), fs.cat_file, f"{path}/{name}", start=start,
                          end=end)

    def read_ranges(self, ranges) -> list:
        """Bytes ``start:end`` of each ``(name, start, end)`` of ``ranges``, in order; on an
        object store their ranged GETs go out together (fsspec's ``cat_ranges``: at once on
        an async filesystem such as s3fs), not one after the other. A range that cannot be
        read has its error in its place (FileNotFoundError, else a StorageError naming the
        object): the caller says which file failed."""
        if not self.remote:
            out = []
            for name, start, end in ranges:
                try:
                    out.append(self.read_range(name, start, end))
                except OSError as e:
                    out.append(e)
            return out
        ranges = list(ranges)
        if not ranges:
            return []
        fs, path = self._fs()
        got = self._call(self.location, fs.cat_ranges, [f"{path}/{n}" for n, _, _ in ranges],
                         [s for _, s, _ in ranges], [e for _, _, e in ranges],
                         on_error="return")
        return [storage_error(self.join(n), g)
                if isinstance(g, BaseException) and not isinstance(g, FileNotFoundError)
                else g for (n, _, _), g in zip(ranges, got)]

    def exists(self, name: str) -> bool:
        if not self.remote:
            return os.path.exists(self.join(name))
        fs, path = self._fs()
        return bool(self._call(self.join(name), fs.exists, f"{path}/{name}"))

    def remove(self, name: str) -> None:
        """Remove ``name`` (nothing when it is missing)."""
        if not self.remote:
            try:
                os.unlink(self.join(name))
            except FileNotFoundError:
                pass
            return
        fs, path = self._fs()
        try:
            self._call(self.join(name), fs.rm_file, f"{path}/{name}")
        except FileNotFoundError:
            pass

    def read_bytes(self, name: str) -> bytes:
        if not self.remote:
            with open(self.join(name), "rb") as fh:
                return fh.read()
        fs, path = self._fs()
        return self._call(self.join(name), fs.cat_file, f"{path}/{name}")

    def open(self, name: str):
        """``name`` opened for reading (binary, seekable)."""
        if not self.remote:
            return open(self.join(name), "rb")
        fs, path = self._fs()
        return self._call(self.join(name), fs.open, f"{path}/{name}", "rb",
                          cache_type="none")

    def write_bytes(self, name: str, data: bytes) -> None:
        """``name`` holds ``data``, atomically: a local temporary file, fsync'ed and renamed;
        on an object store one put."""
        if not self.remote:
            tmp = self.join(f"{TMP_PREFIX}{uuid.uuid4().hex}-{name}")
            try:
                with open(tmp, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.join(name))
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
            return
        fs, path = self._fs()
        self._call(self.join(name), fs.pipe_file, f"{path}/{name}", data)

    @contextlib.contextmanager
    def staging(self):
        """A local folder to write files in before :meth:`publish` moves them here: the
        folder itself when it is local (the rename is atomic), else a new folder in the
        system's temporary folder, removed at the end of the block."""
        if not self.remote:
            yield self.location
            return
        root = staging_root()
        if private_folder(root):
            remove_stale_staging(root)
            staging = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)
        else:   # someone else's, or open to others: a folder of its own, no sweeping
            staging = tempfile.mkdtemp(prefix="daskwp-staging-")
        try:
            yield staging
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    @contextlib.contextmanager
    def local_copies(self, names):
        """Local paths of ``names`` in the folder for the block: the files themselves, or
        (an object store) copies downloaded to a temporary folder."""
        if not self.remote:
            yield [self.join(n) for n in names]
            return
        fs, path = self._fs()
        with self.staging() as staging:
            paths = [os.path.join(staging, n) for n in names]
            for n, p in zip(names, paths):
                self._call(self.join(n), fs.get_file, f"{path}/{n}", p)
            yield paths

    def publish(self, local_file: str, name: str) -> None:
        """Move the finished ``local_file`` to ``name``: a rename on a local folder; on an
        object store an upload (one put, or a multipart upload that the store completes
        only with every part: a killed upload leaves no object), then the local file is
        removed."""
        if not self.remote:
            os.replace(local_file, self.join(name))
            return
        handover = _HANDOVER.get(self.location)
        if handover is not None and _hand_over(local_file, handover, name):
            return
        self._upload(local_file, name)

    def _upload(self, local_file: str, name: str) -> str | None:
        """:meth:`publish`'s upload to an object store, here, then ``local_file`` removed;
        the ETag the store gave the object, where its answer says (None: not known)."""
        fs, path = self._fs()
        etag = self._call(self.join(name), _put_streamed, fs, local_file, f"{path}/{name}")
        if etag is None:
            self._call(self.join(name), fs.put_file, local_file, f"{path}/{name}")
        os.unlink(local_file)
        return etag or None


#: Folder location -> the local folder that :meth:`Folder.publish` in this process moves the
#: finished files of that location into, for another process (or thread) of this host to
#: upload (:func:`hand_over_uploads`, :class:`Uploads`)
_HANDOVER: dict = {}


def hand_over_uploads(location: str, handover: str | None) -> None:
    """From now on, in this process, :meth:`Folder.publish` of a file to the object-store
    folder ``location`` moves the finished file into the local folder ``handover`` (on the
    same filesystem as the staging folders: :func:`staging_root`), where the
    :class:`Uploads` of the job's driver uploads it, instead of uploading it itself: a
    local cluster's workers then never build an object store's client (its module's
    import and its service models: ~0.4 CPU s per process) and go on with their next
    partition while the part is sent. ``handover`` None: this process uploads again. A
    file that cannot be moved there (the folder is gone: the driver ended) is uploaded
    here, as without a handover."""
    location = Folder(location).location
    if handover is None:
        _HANDOVER.pop(location, None)
    else:
        _HANDOVER[location] = os.fspath(handover)


_HANDOVER_ORDER = re.compile(r"^(\d{20})-(\d+)-(.+)$")


#: A process hands a file over only while the files waiting in the handover folder hold
#: fewer bytes than this; past that it uploads the file itself (:func:`_hand_over`), so
#: that what waits on the host's disk stays bounded, and a host whose parts come faster
#: than the driver's one thread sends them uploads from every process at once, as
#: without a handover.
HANDOVER_MAX_WAITING_BYTES = 256 << 20


def _waiting(handover: str) -> list:
    """``(order, pid, name)`` of the files waiting in the handover folder (OSError: the
    folder is gone)."""
    return [(int(m.group(1)), int(m.group(2)), m.group(3))
            for m in map(_HANDOVER_ORDER.match, os.listdir(handover)) if m]


def _waiting_bytes(handover: str, waiting: list) -> int:
    total = 0
    for order, pid, name in waiting:
        with contextlib.suppress(FileNotFoundError):   # (sent meanwhile)
            total += os.path.getsize(os.path.join(handover, f"{order:020d}-{pid}-{name}"))
    return total


def _hand_over(local_file: str, handover: str, name: str) -> bool:
    """Move ``local_file`` into the folder ``handover`` under a name that says the file's
    place in this process's order of publishing and its name in the output folder;
    whether it was moved (False: it is where it was, to upload here). Where the files
    waiting hold :data:`HANDOVER_MAX_WAITING_BYTES` already, it is not moved: once this
    process's own files handed over earlier are sent (their order: a part's record after
    its files), the caller uploads it."""
    pid = os.getpid()
    try:
        waiting = _waiting(handover)
        if _waiting_bytes(handover, waiting) < HANDOVER_MAX_WAITING_BYTES:
            os.replace(local_file, os.path.join(
                handover, f"{time.monotonic_ns():020d}-{pid}-{name}"))
            return True
        while any(p == pid for _, p, _ in waiting):
            time.sleep(Uploads.POLL_SECONDS)
            waiting = _waiting(handover)
    except OSError:
        pass   # (the folder is gone: the driver's uploads ended, or failed)
    return False


class Uploads:
    """The uploader of a job's driver for the files that the processes of its host hand
    over (:func:`hand_over_uploads`) on their way to ``folder`` (an object store's): a
    thread uploads each file of the handover folder :attr:`path` as it comes (one put, or
    a multipart upload, as :meth:`Folder.publish`), in the order they were published in
    their process (a part's record after its files), with the driver's client of the
    store. Upload errors are kept and raised by :meth:`check` and :meth:`finish` (a
    one-line StorageError naming the object); a file not uploaded never reaches the
    store (a rerun writes its part again).

    The handover folder is a staging folder of this process (:func:`staging_root`):
    a killed driver's is removed by a later job (:func:`remove_stale_staging`). Raises
    OSError when the host's staging root is not this user's own (then nothing is handed
    over)."""

    #: How often the thread looks for new files (and at each :meth:`poke`).
    POLL_SECONDS = 0.05
    #: The ends kept (:meth:`stored_ends`) hold at most this many bytes together.
    KEPT_ENDS_MAX_BYTES = 16 << 20

    def __init__(self, folder: Folder, keep_end: Callable[[str], int] | None = None):
        if not folder.remote:
            raise ValueError(f"{folder!r}: uploads are for an object store's folder")
        root = staging_root()
        if not private_folder(root):
            raise OSError(f"{root}: not a private folder of this user")
        remove_stale_staging(root)
        self.folder = folder
        self.path = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)
        self.uploaded = 0
        #: ``time.perf_counter()`` when the last upload ended (the start, before any)
        self.finished_at = time.perf_counter()
        self.error: BaseException | None = None
        self._keep_end = keep_end
        self._ends: dict = {}    # name -> (size, ETag, its last bytes)
        self._ends_bytes = 0
        self._wake = threading.Event()
        self._stopping = self._abort = False
        self._thread = threading.Thread(target=contextvars.copy_context().run,
                                        args=(self._run,), name="daskwp-uploads",
                                        daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Look for new files now (a task that may have handed some over has ended)."""
        self._wake.set()

    def check(self) -> None:
        """Raise the error of an upload that failed, if one did."""
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        while True:
            self._wake.wait(self.POLL_SECONDS)
            self._wake.clear()
            last = self._stopping
            try:
                self._upload_waiting()
            except BaseException as e:  # noqa: BLE001  raised in the driver (check, finish)
                self.error = e if isinstance(e, StorageError) else \
                    storage_error(self.folder.location, e)
                # the files not sent are dropped: a process waiting for its own to be
                # sent (_hand_over) uploads its next one itself
                shutil.rmtree(self.path, ignore_errors=True)
                return
            if last or self._abort:
                return

    def _upload_waiting(self) -> None:
        for order, pid, name in sorted(_waiting(self.path)):
            if self._abort:
                return
            local_file = os.path.join(self.path, f"{order:020d}-{pid}-{name}")
            self._ends.pop(name, None)   # (an earlier upload of the name: replaced)
            try:
                end = self._end_of(local_file, name)
                etag = self.folder._upload(local_file, name)
            except Exception as e:
                raise storage_error(self.folder.join(name), e) from None
            if end is not None and etag and \
                    self._ends_bytes + len(end[1]) <= self.KEPT_ENDS_MAX_BYTES:
                self._ends[name] = (end[0], etag, end[1])
                self._ends_bytes += len(end[1])
            self.uploaded += 1
            self.finished_at = time.perf_counter()

    def _end_of(self, local_file: str, name: str) -> tuple[int, bytes] | None:
        """``(size, its last bytes)`` of the file to upload as ``name``, as many as
        ``keep_end(name)`` says (None: none asked for)."""
        n = self._keep_end(name) if self._keep_end is not None else 0
        if n <= 0:
            return None
        with open(local_file, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - n))
            return size, fh.read()

    def stored_ends(self, entries: dict) -> dict[str, bytes]:
        """``{name: its last bytes}`` of the files uploaded (those ``keep_end`` asked to keep,
        while they fit :data:`KEPT_ENDS_MAX_BYTES`) that the store holds as they were sent:
        ``entries`` (:meth:`Folder.entries`, listed after :meth:`finish`) gives each the
        size and ETag of that upload's answer (an object put since by another process, or
        a broken one, has another ETag: not given, the caller reads it back)."""
        return {name: end for name, (size, etag, end) in self._ends.items()
                if entries.get(name) == (size, etag)}

    def _stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join()

    def finish(self) -> None:
        """Upload every file handed over (each task that hands files over has ended), then
        remove the handover folder; raises the first upload's error."""
        self._stop()
        self.close()
        self.check()

    def close(self) -> None:
        """Stop (after the upload under way; the files not sent are dropped) and remove
        the handover folder; this process hands nothing over to it any more."""
        self._abort = True
        self._stop()
        if _HANDOVER.get(self.folder.location) == self.path:
            _HANDOVER.pop(self.folder.location, None)
        shutil.rmtree(self.path, ignore_errors=True)


#: s3fs uploads a file of this size or more in a multipart upload (twice its 50 MiB chunk).
S3_MULTIPART_BYTES = 100 << 20


def _put_streamed(fs, local_file: str, path: str) -> str | None:
    """Upload ``local_file`` to ``path`` of the s3fs filesystem ``fs`` in one PUT whose body
    is read from the file as it is sent, where s3fs's ``put_file`` reads the file whole into
    memory first (fresh memory of the part's size: a page fault per 4 kB): for a file
    smaller than :data:`S3_MULTIPART_BYTES` (the same single PUT, content type and
    ``s3_additional_kwargs``). Returns the object's ETag from the store's answer ("" where
    it gives none); None (nothing sent) for another filesystem or a bigger file:
    ``put_file`` uploads it."""
    size = os.path.getsize(local_file)
    if type(fs).__module__.split(".")[0] != "s3fs" or size >= S3_MULTIPART_BYTES:
        return None
    try:    # s3fs's retry loop and kwargs (a version without them: put_file uploads it)
        from s3fs.core import _error_wrapper
    except ImportError:
        return None
    if not all(hasattr(fs, a) for a in ("set_session", "get_s3", "_get_s3_method_kwargs")):
        return None
    import mimetypes

    from fsspec.asyn import sync
    bucket, key, _ = fs.split_path(path)
    kw = {"Bucket": bucket, "Key": key, "ContentLength": size}
    content_type, _ = mimetypes.guess_type(local_file)
    if content_type is not None:
        kw["ContentType"] = content_type

    async def put():
        await fs.set_session()
        s3 = await fs.get_s3(bucket)
        with open(local_file, "rb") as body:
            async def attempt(**call_kw):
                # every try sends the whole file: s3fs repeats the same call (the same open
                # file) after errors botocore gave up on, and botocore takes the body's
                # length and checksum from where the file stands - at its end, after a
                # failed try: an empty object, stored as the part (ContentLength makes a
                # short body fail rather than store)
                body.seek(0)
                return await s3.put_object(**call_kw)
            return await _error_wrapper(attempt, kwargs=fs._get_s3_method_kwargs(
                s3.put_object, Body=body, **kw), retries=fs.retries)
    answer = sync(fs.loop, put)
    while path:    # (as put_file: the listings of the object's folders are stale)
        fs.invalidate_cache(path)
        path = fs._parent(path)
    etag = answer.get("ETag") if isinstance(answer, dict) else None
    return etag if isinstance(etag, str) else ""
