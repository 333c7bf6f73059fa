"""The codec port: what encodes every stored value's bytes on the way in (compression,
encryption) and decodes them on the way out.

Adapters: :class:`runlane_sqs.adapters.codecs.Gzip`, :class:`~runlane_sqs.adapters.
codecs.Zstd` and :class:`runlane_sqs.adapters.kms.KmsEncryption`; an app may bring its
own. ``Runlane(codec=...)`` takes one or a chain (applied in order; decoded in reverse).
Each envelope names the codecs that encoded it; a reader opens only an envelope that
names its own chain (docs/payloads.md, "Codecs"). Every call says what the value is
sealed for (:class:`Binding`): an encrypting codec authenticates it with the value, so
the value opens only where it was sealed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runlane_sqs.core.values import ValuePlace


@dataclass(frozen=True, slots=True)
class Binding:
    """What a value is sealed for: its place (record and field) in its environment."""

    environment: str
    place: ValuePlace
    legacy: bool = False
    """Whether a value sealed before values were bound to their place may open too (only
    with ``Runlane(open_legacy_values=True)``, while such values are migrated): an
    encrypting codec then also opens its earlier, unbound format."""

    @property
    def associated_data(self) -> bytes:
        """The bytes an encrypting codec authenticates with the value (AES-GCM's
        associated data): :meth:`~runlane_sqs.core.values.ValuePlace.associated_data`."""
        return self.place.associated_data(self.environment)


class Codec(Protocol):
    """Bytes in, bytes out, and back."""

    @property
    def name(self) -> str:
        """Recorded in every value it encodes: short, stable, and unique in a chain."""
        ...

    def encode(self, data: bytes, binding: Binding) -> bytes:
        """``data`` encoded for ``binding`` (an encrypting codec authenticates it; others
        may ignore it). Raise :class:`~runlane_sqs.errors.StorageUnavailable` for a
        failure that may pass (a throttled key service); any other error is the value's
        :class:`~runlane_sqs.errors.CodecError`."""
        ...

    def decode(self, data: bytes, binding: Binding, limit: int) -> bytes:
        """What :meth:`encode` was given for the same ``binding``; raise for bytes it did
        not make (damaged, encrypted under another key, or sealed for another binding),
        and for bytes that decode to more than ``limit``. A codec whose output may be
        larger than its input (a decompressor) decodes as a stream and stops once it
        passes ``limit``, so a small forged value never costs the reader more memory
        than the limit (a decompression bomb)."""
        ...
