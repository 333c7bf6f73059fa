"""Compression codecs (:mod:`runlane_sqs.ports.codecs`): gzip from the standard library,
and Zstandard from the ``zstandard`` package (the ``zstd`` extra)."""

from __future__ import annotations

import gzip
from typing import Any

from runlane_sqs.core.errors import ConfigurationError


class Gzip:
    """DEFLATE in a gzip frame (``level`` 1 to 9): no dependency, everywhere."""

    name = "gzip"

    def __init__(self, level: int = 6) -> None:
        if not isinstance(level, int) or not 1 <= level <= 9:
            raise ConfigurationError(
                f"Gzip level must be a whole number from 1 to 9, not {level!r}"
            )
        self.level = level

    def encode(self, data: bytes) -> bytes:
        return gzip.compress(data, compresslevel=self.level, mtime=0)

    def decode(self, data: bytes) -> bytes:
        return gzip.decompress(data)


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

    def encode(self, data: bytes) -> bytes:
        compressed: bytes = self._module.ZstdCompressor(level=self.level).compress(data)
        return compressed

    def decode(self, data: bytes) -> bytes:
        decompressed: bytes = self._module.ZstdDecompressor().decompress(data)
        return decompressed
