"""Compression codecs (:mod:`runlane_sqs.ports.codecs`): gzip from the standard library,
and Zstandard from the ``zstandard`` package (the ``zstd`` extra).

Both decode as a stream, a chunk at a time, and stop once the output passes the
caller's limit: a small value that would decode to gigabytes (a decompression bomb)
costs the reader the limit and a chunk, never more. Neither authenticates anything, so
neither reads the value's binding.
"""

from __future__ import annotations

import gzip
import zlib
from typing import Any

from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.ports.codecs import Binding

DECODE_CHUNK_BYTES = 16 * 1024
"""Bytes decoded (and, for gzip, taken in) at a time."""
GZIP_WBITS = 16 + zlib.MAX_WBITS
"""zlib's window bits for one gzip member (header and trailer checked)."""
ZSTD_MIN_WINDOW_LOG = 10
ZSTD_MAX_WINDOW_LOG = 31


class Output:
    """A decoder's output, a chunk at a time, refused once it passes ``limit`` bytes:
    the chunks are kept apart until the end, so a refused value cost the limit and one
    chunk (a growing buffer would reserve an eighth more, and copy itself)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        """Keep ``chunk``; raises ``ValueError`` once the output passes the limit."""
        self.size += len(chunk)
        if self.size > self.limit:
            self.chunks.clear()
            raise ValueError(f"it decodes to more than {self.limit} bytes")
        self.chunks.append(chunk)

    def joined(self) -> bytes:
        return b"".join(self.chunks)


class Gzip:
    """DEFLATE in a gzip frame (``level`` 1 to 9): no dependency, everywhere."""

    name = "gzip"

    def __init__(self, level: int = 6) -> None:
        if not isinstance(level, int) or not 1 <= level <= 9:
            raise ConfigurationError(
                f"Gzip level must be a whole number from 1 to 9, not {level!r}"
            )
        self.level = level

    def encode(self, data: bytes, binding: Binding) -> bytes:
        return gzip.compress(data, compresslevel=self.level, mtime=0)

    def decode(self, data: bytes, binding: Binding, limit: int) -> bytes:
        """The one gzip member ``data`` holds, inflated a chunk at a time; raises
        ``ValueError`` once it passes ``limit`` bytes, for a member cut short, and for
        bytes after it."""
        inflater = zlib.decompressobj(wbits=GZIP_WBITS)
        view, at, out = memoryview(data), 0, Output(limit)
        while not inflater.eof:
            piece = view[at : at + DECODE_CHUNK_BYTES]
            chunk = inflater.decompress(piece, DECODE_CHUNK_BYTES)
            taken = len(piece) - len(inflater.unconsumed_tail)
            if not chunk and not taken:
                raise ValueError("its gzip member ends early")
            out.add(chunk)
            at += taken
        if inflater.unused_data or at < len(data):
            raise ValueError("bytes follow its gzip member")
        return out.joined()


class Zstd:
    """Zstandard (``level`` 1 to 22): faster than gzip at a better ratio; needs the
    ``zstd`` extra (``pip install 'runlane-sqs[zstd]'``)."""

    name = "zstd"

    def __init__(self, level: int = 3) -> None:
        if not isinstance(level, int) or not 1 <= level <= 22:
            raise ConfigurationError(
                f"Zstd level must be a whole number from 1 to 22, not {level!r}"
            )
        try:
            import zstandard  # noqa: PLC0415 (an optional extra)
        except ImportError:
            raise ConfigurationError(
                "the Zstd codec needs the zstandard package: pip install 'runlane-sqs[zstd]'"
            ) from None
        self.level = level
        self._module: Any = zstandard

    def encode(self, data: bytes, binding: Binding) -> bytes:
        compressed: bytes = self._module.ZstdCompressor(level=self.level).compress(data)
        return compressed

    def decode(self, data: bytes, binding: Binding, limit: int) -> bytes:
        """The first frame of ``data``, decompressed a chunk at a time; raises
        ``ValueError`` once it passes ``limit`` bytes, and for a frame that asks for a
        larger window than a value of ``limit`` bytes needs (the decoder would allocate
        it; the encoder sizes its window to its input, so only a frame made elsewhere
        asks for more)."""
        window = 1 << min(max(limit.bit_length(), ZSTD_MIN_WINDOW_LOG), ZSTD_MAX_WINDOW_LOG)
        asked = self._module.get_frame_parameters(data).window_size
        if asked > window:
            raise ValueError(
                f"its frame asks for a window of {asked} bytes; a value of at most {limit} "
                f"bytes needs {window} at most"
            )
        out = Output(limit)
        decompressor = self._module.ZstdDecompressor(max_window_size=window)
        with decompressor.stream_reader(data) as reader:
            while chunk := reader.read(DECODE_CHUNK_BYTES):
                out.add(chunk)
        return out.joined()
