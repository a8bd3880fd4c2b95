"""Derived data saved whole or not at all: a kind's MAGIC, a 4-byte length and a JSON header, the
parts, and a SHA-256 trailer over all of it. A reader trusts what it reads only when the trailer
matches (a save cut short, a disk that lost a block, a file of another kind are all refused)."""

from __future__ import annotations

import hashlib
import json
import struct
from array import array
from collections.abc import Sequence
from typing import Any

_LENGTH = struct.Struct("<I")
_DIGEST_BYTES = 32


def framed(magic: bytes, header: dict[str, Any], parts: Sequence[bytes | memoryview]) -> bytes:
    """The header and parts, framed: what `unframed` reads back."""
    head = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    body = b"".join([magic, _LENGTH.pack(len(head)), head, *parts])
    return body + hashlib.sha256(body).digest()


def unframed(data: bytes, magic: bytes) -> tuple[dict[str, Any], memoryview]:
    """The header and the parts after it (a view of `data`, not a copy: a saved index is ~100 MB at
    100,000 exchanges); ValueError unless whole and of this kind."""
    whole = memoryview(data)
    body, trailer = whole[:-_DIGEST_BYTES], whole[-_DIGEST_BYTES:]
    if not data.startswith(magic) or hashlib.sha256(body).digest() != trailer:
        raise ValueError("damaged (its checksum does not match)")
    (head_length,) = _LENGTH.unpack_from(body, len(magic))
    start = len(magic) + _LENGTH.size
    header = json.loads(bytes(body[start : start + head_length]))
    if not isinstance(header, dict):
        raise ValueError("damaged (its header is not one)")
    return header, body[start + head_length :]


def copied_array(typecode: str, part: memoryview) -> array[int]:
    """A part of framed data as numbers of `typecode`, copied: a view would keep the whole data
    (a saved index is ~80 MB at 100,000 exchanges) in memory for as long as the numbers live.
    ValueError when the part is not a whole number of them."""
    numbers = array(typecode)
    numbers.frombytes(part)
    return numbers
