"""Codecs for ``Runlane(codec=...)``: what encodes every stored value (docs/payloads.md,
"Codecs").

``Gzip`` and ``Zstd`` compress (``Zstd`` needs the ``zstd`` extra); ``KmsEncryption``
encrypts under KMS data keys (the ``kms`` extra). A chain is applied in order and
decoded in reverse: compress first, then encrypt. ``Codec`` is the protocol an app's own
codec follows.
"""

from runlane_sqs.adapters.codecs import Gzip, Zstd
from runlane_sqs.adapters.kms import KmsEncryption
from runlane_sqs.ports.codecs import Codec

__all__ = ["Codec", "Gzip", "KmsEncryption", "Zstd"]
