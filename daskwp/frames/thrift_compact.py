"""The Thrift compact protocol, both ways: what Parquet's footers and page headers are
written in (parquet.thrift's structs).

:func:`write_struct` writes a struct for daskwp's own Parquet writer
(:mod:`daskwp.frames.parquet_writer`: the footer, its schema, row groups and key-value
metadata); :func:`read_struct` reads one for the accessor's page reader
(:mod:`daskwp.accessors.parquet_pages`: a page header), into ``{field id: value}`` with no
schema: a field's wire type says how to read it. ``tests/test_thrift_compact.py`` writes
every type either side uses and reads it back.

The wire format (Apache Thrift's ``thrift-compact-protocol.md``): a field is a header byte
(the id's delta from the previous field's in the high nibble, the type in the low; a zero
delta is followed by the id as a zigzag varint), then its value; ``0`` ends the struct.
Integers (i16, i32, i64) are zigzag varints, an i8 one byte, a bool the field's type
itself (``1`` true, ``2`` false), binary a varint length and the bytes, a list a header
byte (the size in the high nibble, ``15``: a varint size follows; the element type in the
low) and its elements.
"""

from __future__ import annotations

import struct

__all__ = ["UnsupportedType", "read_struct", "read_varint", "read_zigzag_varint",
           "write_struct", "write_varint", "write_zigzag_varint"]

# The compact protocol's types (a field header's low nibble, a list's element type)
_T_TRUE, _T_FALSE, _T_I8, _T_I16, _T_I32, _T_I64, _T_DOUBLE, _T_BIN, _T_LIST, _T_SET, \
    _T_MAP, _T_STRUCT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12

#: The types :func:`write_struct` writes, by the name its fields give them.
_FIELD_TYPES = {"i8": _T_I8, "i16": _T_I16, "i32": _T_I32, "i64": _T_I64, "bin": _T_BIN,
                "list": _T_LIST, "struct": _T_STRUCT}
#: The element types of the lists it writes.
_ELEMENT_TYPES = {"i32": _T_I32, "i64": _T_I64, "bin": _T_BIN, "struct": _T_STRUCT}


class UnsupportedType(ValueError):
    """A value of a compact-protocol type :func:`read_struct` does not read (a map)."""

    def __init__(self, kind: int):
        super().__init__(f"Thrift compact type {kind} is not read (types 1-10 and 12 are)")
        self.kind = kind

    def __reduce__(self):   # rebuilt from its type, not from its message
        return type(self), (self.kind,)


# -- writing ----------------------------------------------------------------------------------

def write_varint(v: int) -> bytes:
    """An unsigned integer as a ULEB128 varint (7 bits a byte, low first)."""
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def write_zigzag_varint(v: int) -> bytes:
    """A signed 64-bit integer zigzag-encoded (0, -1, 1, -2, ... as 0, 1, 2, 3, ...), as a
    varint: the compact protocol's integers and field ids."""
    return write_varint((v << 1) ^ (v >> 63))


def write_struct(fields) -> bytes:
    """A struct of ``(field id, type, value)`` in increasing id order; None values are
    left out (optional fields). Types: ``"bool"``, ``"i8"``, ``"i16"``, ``"i32"``,
    ``"i64"``, ``"bin"`` (bytes, or str written as UTF-8), ``"struct"`` (the bytes
    :func:`write_struct` returned for it) and ``"list"``, whose value is ``(element type,
    [values])`` with an element type of ``"i32"``, ``"i64"``, ``"bin"`` or ``"struct"``."""
    out = bytearray()
    last = 0
    for fid, kind, value in fields:
        if value is None:
            continue
        if kind == "bool":
            t = _T_TRUE if value else _T_FALSE
        else:
            t = _FIELD_TYPES[kind]
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | t)
        else:
            out.append(t)
            out += write_zigzag_varint(fid)
        last = fid
        if kind == "bool":
            pass
        elif kind == "i8":
            out += struct.pack("<b", value)
        elif kind in ("i16", "i32", "i64"):
            out += write_zigzag_varint(int(value))
        elif kind == "bin":
            b = value.encode() if isinstance(value, str) else bytes(value)
            out += write_varint(len(b)) + b
        elif kind == "struct":
            out += value
        else:  # ("list", (element kind, [values]))
            ekind, items = value
            et = _ELEMENT_TYPES[ekind]
            n = len(items)
            out.append((n << 4) | et if n < 15 else 0xF0 | et)
            if n >= 15:
                out += write_varint(n)
            for item in items:
                if ekind in ("i32", "i64"):
                    out += write_zigzag_varint(int(item))
                elif ekind == "bin":
                    b = item.encode() if isinstance(item, str) else bytes(item)
                    out += write_varint(len(b)) + b
                else:
                    out += item
    out.append(0)
    return bytes(out)


# -- reading ----------------------------------------------------------------------------------

def read_varint(buf, i: int) -> tuple:
    """An unsigned ULEB128 varint at ``buf[i:]`` (bytes, a memoryview or a uint8 array):
    ``(value, end)``. Past the end of ``buf``: IndexError."""
    r = s = 0
    while True:
        x = int(buf[i])
        i += 1
        r |= (x & 0x7F) << s
        s += 7
        if not x & 0x80:
            return r, i


def read_zigzag_varint(buf, i: int) -> tuple:
    """A zigzag-encoded signed integer (0, -1, 1, -2, ... as 0, 1, 2, 3, ...) as a varint
    at ``buf[i:]``: ``(value, end)``."""
    v, i = read_varint(buf, i)
    return (v >> 1) ^ -(v & 1), i


def read_struct(b, i: int) -> tuple:
    """A compact-protocol struct at ``b[i:]`` (bytes or a memoryview): ``({field id:
    value}, end)``. Values: bool, int (i8 to i64), float (double), binary as a slice of
    ``b`` (a memoryview's slice is a view: valid while its bytes are), a list or set as a
    list, a struct as a dict. A struct running past ``b``'s end raises IndexError (the
    caller may retry with more bytes); a map, :class:`UnsupportedType`."""
    out, fid = {}, 0
    while True:
        h = b[i]
        i += 1
        if h == 0:
            return out, i
        kind, delta = h & 0x0F, h >> 4
        if delta:
            fid += delta
        else:
            fid, i = read_zigzag_varint(b, i)
        out[fid], i = _read_value(b, i, kind)


def _read_value(b, i: int, kind: int) -> tuple:
    if kind in (_T_TRUE, _T_FALSE):   # a field's bool: its type
        return kind == _T_TRUE, i
    if kind == _T_I8:
        v = b[i]
        return (v - 256 if v > 127 else v), i + 1
    if kind in (_T_I16, _T_I32, _T_I64):
        return read_zigzag_varint(b, i)
    if kind == _T_DOUBLE:
        if i + 8 > len(b):
            raise IndexError("a double past the end of the bytes")
        return struct.unpack_from("<d", b, i)[0], i + 8
    if kind == _T_BIN:
        n, i = read_varint(b, i)
        if i + n > len(b):
            raise IndexError("a binary value past the end of the bytes")
        return b[i:i + n], i + n
    if kind in (_T_LIST, _T_SET):
        h = b[i]
        i += 1
        n, elem = h >> 4, h & 0x0F
        if n == 15:
            n, i = read_varint(b, i)
        items = []
        for _ in range(n):
            if elem in (_T_TRUE, _T_FALSE):   # an element's bool: a byte of its own
                v, i = b[i] == _T_TRUE, i + 1
            else:
                v, i = _read_value(b, i, elem)
            items.append(v)
        return items, i
    if kind == _T_STRUCT:
        return read_struct(b, i)
    raise UnsupportedType(kind)
