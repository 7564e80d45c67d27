"""Byte ranges of a text file (plain, gzip, bzip2 or xz), cut at line starts.

A range ``[start, stop)`` owns every line whose first byte lies in it, so P
ranges that tile ``[0, size)`` yield every line exactly once, in order.
Offsets are in the decompressed stream; a compressed file is read (and the
bytes before ``start`` discarded) from its beginning, since it cannot seek.
"""

import bz2
import gzip
import lzma
import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mpisgd.errors import MpisgdError

CHUNK_BYTES = 1 << 24  # 16 MiB of text per parser call

_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"))


def compression_of(path):
    """'gzip', 'bzip2', 'xz' (by magic bytes) or None for plain text."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError as exc:
        raise MpisgdError(f"{path}: cannot open input ({exc.strerror})") from None
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def _open(path, kind):
    if kind == "gzip":
        return gzip.open(path, "rb")
    if kind == "bzip2":
        return bz2.open(path, "rb")
    if kind == "xz":
        return lzma.open(path, "rb")
    return open(path, "rb", buffering=0)


def text_size(path):
    """Size in bytes of the (decompressed) text; reads a compressed file once."""
    kind = compression_of(path)
    if kind is None:
        return os.path.getsize(path)
    total = 0
    buf = bytearray(CHUNK_BYTES)
    with _guard(path, kind), _open(path, kind) as f:
        while True:
            got = f.readinto(buf)
            if not got:
                return total
            total += got


class _guard:
    """Turn the decompressors' errors into MpisgdError naming the file."""

    def __init__(self, path, kind):
        self.path, self.kind = path, kind

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if etype is not None and issubclass(
            etype, (EOFError, OSError, lzma.LZMAError, zlib.error)
        ) and not issubclass(etype, FileNotFoundError):
            raise MpisgdError(
                f"{self.path}: truncated or corrupt {self.kind or 'text'} file ({exc})"
            ) from None
        return False


def iter_line_chunks(path, start=0, stop=None, chunk_bytes=CHUNK_BYTES):
    """Yield ``(buf, n)``: ``buf[:n]`` (uint8) holds whole lines of the range.

    The last line of the file may lack its newline. ``buf`` is reused: copy
    what must outlive the next iteration."""
    kind = compression_of(path)
    with _guard(path, kind), _open(path, kind) as f:
        yield from _chunks(f, kind, start, stop, chunk_bytes)


def _skip(f, kind, count):
    """Advance ``count`` bytes (seek for plain files, read otherwise)."""
    if kind is None:
        f.seek(count)
        return
    scratch = bytearray(min(count, CHUNK_BYTES) or 1)
    while count > 0:
        got = f.readinto(memoryview(scratch)[: min(count, len(scratch))])
        if not got:
            return
        count -= got


def _chunks(f, kind, start, stop, chunk_bytes):
    pos = 0  # absolute offset of buf[0]
    if start > 0:
        _skip(f, kind, start - 1)
        prev = f.read(1)
        pos = start
        if prev != b"\n" and prev:
            # Skip the rest of a line that began in the previous range.
            buf = bytearray(chunk_bytes)
            while True:
                got = f.readinto(buf)
                if not got:
                    return
                k = buf.find(b"\n", 0, got)
                if k >= 0:
                    pos += k + 1
                    carry = bytes(buf[k + 1 : got])
                    break
                pos += got
        else:
            carry = b""
    else:
        carry = b""
    if stop is not None and pos >= stop:
        return
    buf = bytearray(max(chunk_bytes, 2 * len(carry)))
    buf[: len(carry)] = carry
    fill, eof = _fill(f, buf, len(carry))
    spare = bytearray(len(buf))  # the next chunk, read while the caller parses this one
    # Reading (a copy from the page cache, or decompression) overlaps the caller's
    # work on the previous chunk; leaving the block waits for a read under way.
    with ThreadPoolExecutor(1, thread_name_prefix="read-ahead") as pool:
        while fill:
            end = fill if eof else buf.rfind(b"\n", 0, fill) + 1
            if end == 0:  # one line longer than the buffer: grow it
                buf = buf + bytearray(len(buf))
                fill, eof = _fill(f, buf, fill)
                continue
            arr = np.frombuffer(buf, dtype=np.uint8)
            if stop is not None and pos + end > stop:
                # Keep the lines that begin before ``stop``.
                k = buf.find(b"\n", max(stop - 1 - pos, 0), end)
                yield arr, end if k < 0 else k + 1
                return
            if eof and end == fill:
                yield arr, end
                return
            if len(spare) < len(buf):
                spare = bytearray(len(buf))
            spare[: fill - end] = buf[end:fill]  # the last line's start, carried over
            ahead = pool.submit(_fill, f, spare, fill - end)
            yield arr, end
            buf, spare = spare, buf
            pos += end
            fill, eof = ahead.result()


def _fill(f, buf, fill):
    """Read into ``buf[fill:]`` until it is full or the stream ends: (fill, eof)."""
    view = memoryview(buf)
    while fill < len(buf):
        got = f.readinto(view[fill:])
        if not got:
            return fill, True
        fill += got
    return fill, False
