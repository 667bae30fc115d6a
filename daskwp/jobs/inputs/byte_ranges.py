"""Byte ranges of an input file: the next line start after a position (where text and JSON
Lines partitions are cut), and reading a planned range back, checking that the file did not
shrink since planning (a whole compressed file is read decompressed instead).
"""

from __future__ import annotations

from ...frames.storage import open_input
from ..errors import InputError
from .compression import read_all
from .specs import PartitionSpec


def next_line_start(f, pos: int, size: int, chunk: int = 1 << 20) -> int:
    """The position just after the first b"\\n" at or after ``pos - 1`` (or ``size``)."""
    f.seek(pos - 1)
    while True:
        buf = f.read(chunk)
        if not buf:
            return size
        i = buf.find(b"\n")
        if i >= 0:
            return f.tell() - len(buf) + i + 1


def read_range(path: str, start: int, end: int, what: str) -> bytes:
    with open_input(path) as fh:
        fh.seek(start)
        data = fh.read(end - start)
    if len(data) != end - start:
        raise InputError(f"{what}: the file is shorter than when the job was planned (it "
                         f"changed during the job)")
    return data


def read_bytes(spec: PartitionSpec) -> bytes:
    """The partition's bytes (decompressed for a compressed file)."""
    if spec.compression:
        return read_all(spec.path, spec.compression)
    return read_range(spec.path, spec.byte_start, spec.byte_end, spec.describe())
