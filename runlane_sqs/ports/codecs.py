"""The codec port: what encodes every stored value's bytes on the way in (compression,
encryption) and decodes them on the way out.

Adapters: :class:`runlane_sqs.adapters.codecs.Gzip`, :class:`~runlane_sqs.adapters.
codecs.Zstd` and :class:`runlane_sqs.adapters.kms.KmsEncryption`; an app may bring its
own. ``Runlane(codec=...)`` takes one or a chain (applied in order; decoded in reverse).
Each envelope names the codecs that encoded it, so a reader needs codecs of the same
names (docs/payloads.md, "Codecs").
"""

from __future__ import annotations

from typing import Protocol


class Codec(Protocol):
    """Bytes in, bytes out, and back."""

    @property
    def name(self) -> str:
        """Recorded in every value it encodes: short, stable, and unique in a chain."""
        ...

    def encode(self, data: bytes) -> bytes:
        """``data`` encoded. Raise :class:`~runlane_sqs.errors.StorageUnavailable` for
        a failure that may pass (a throttled key service); any other error is the
        value's :class:`~runlane_sqs.errors.CodecError`."""
        ...

    def decode(self, data: bytes) -> bytes:
        """What :meth:`encode` was given; raise for bytes it did not make (damaged,
        or encrypted under another key)."""
        ...
