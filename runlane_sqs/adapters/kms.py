"""Envelope encryption with KMS data keys (:mod:`runlane_sqs.ports.codecs`): AES-256-GCM
from the ``cryptography`` package (the ``kms`` extra), its data key made and opened by
KMS (``GenerateDataKey``, ``Decrypt``).

An encoded value is ``RLK2``, the encrypted data key's length (2 bytes) and the key, a
12-byte nonce, then the ciphertext with its 16-byte tag. A data key encrypts values for
``data_key_max_age`` or ``data_key_max_uses`` values, whichever comes first, so KMS is
called once per data key rather than once per value; opened data keys are kept in a
small cache by their encrypted form and environment for the same age. Every decryption
names the configured key (``KeyId``): a value encrypted under another key is refused by
KMS rather than opened, and a changed byte fails the tag.

A value is bound to where it belongs twice over: each data key's encryption context
names the value's environment (``{"purpose": "runlane-sqs value", "environment": ...}``,
so KMS opens another environment's data key for no one but that environment), and the
AES-GCM associated data is ``RLK2`` followed by the value's binding (environment,
record, field: :attr:`~runlane_sqs.ports.codecs.Binding.associated_data`), so the tag
fails for a value copied to another run, another field or another environment. The
record is not in the encryption context because a data key seals many values.

Values of the format before (``RLK1``: the context ``{"purpose": ...}`` alone, the
associated data ``RLK1``) open only for a binding that allows legacy values
(``Runlane(open_legacy_values=True)``).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections import OrderedDict
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.core.clock import Duration, to_timedelta
from runlane_sqs.core.errors import ConfigurationError, StorageUnavailable
from runlane_sqs.ports.codecs import Binding

MAGIC = b"RLK2"
"""The start of a value sealed for its binding."""
LEGACY_MAGIC = b"RLK1"
"""The start of a value sealed before values were bound (readable only as legacy)."""
NONCE_BYTES = 12
PURPOSE = "runlane-sqs value"
LEGACY_CONTEXT = (("purpose", PURPOSE),)
"""The encryption context of a legacy value's data key."""
OPENED_KEYS = 256
"""Opened data keys kept for decryption, newest first."""
KMS_UNAVAILABLE = frozenset(
    {"ThrottlingException", "KMSInternalException", "DependencyTimeoutException"}
)

Context = tuple[tuple[str, str], ...]
"""An encryption context, as a key of the caches."""


def context_of(environment: str) -> Context:
    """The encryption context of a data key sealing values of ``environment``."""
    return (("purpose", PURPOSE), ("environment", environment))


class KmsEncryption:
    """Encrypts every value under data keys of the KMS key ``key_id`` (an ARN, a key id
    or an alias). ``client`` is a boto3 KMS client (default: one from a default boto3
    session, made at first use)."""

    name = "kms"

    def __init__(
        self,
        key_id: str,
        *,
        client: Any = None,
        data_key_max_age: Duration = timedelta(minutes=5),
        data_key_max_uses: int = 10_000,
    ) -> None:
        if not isinstance(key_id, str) or not key_id.strip():
            raise ConfigurationError("KmsEncryption needs a KMS key id, ARN or alias")
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415
        except ImportError:
            raise ConfigurationError(
                "the KmsEncryption codec needs the cryptography package: "
                "pip install 'runlane-sqs[kms]'"
            ) from None
        if not isinstance(data_key_max_uses, int) or data_key_max_uses < 1:
            raise ConfigurationError("data_key_max_uses must be a whole number of at least 1")
        self.key_id = key_id
        self._aead: Any = AESGCM
        self._client = client
        self._max_age = to_timedelta(data_key_max_age, "data_key_max_age").total_seconds()
        self._max_uses = data_key_max_uses
        self._lock = threading.Lock()
        self._current: dict[Context, tuple[bytes, bytes, float, int]] = {}
        """By encryption context: plaintext key, encrypted key, when made (monotonic),
        uses left."""
        self._opened: OrderedDict[tuple[Context, bytes], tuple[bytes, float]] = OrderedDict()

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3  # noqa: PLC0415 (only when no client was given)

            self._client = boto3.session.Session().client("kms")
        return self._client

    def encode(self, data: bytes, binding: Binding) -> bytes:
        """``data`` sealed for ``binding``: under a data key of its environment's
        context, its associated data the binding's."""
        key, wrapped = self._data_key(context_of(binding.environment))
        nonce = os.urandom(NONCE_BYTES)
        sealed: bytes = self._aead(key).encrypt(nonce, data, MAGIC + binding.associated_data)
        return MAGIC + struct.pack(">H", len(wrapped)) + wrapped + nonce + sealed

    def decode(self, data: bytes, binding: Binding, limit: int) -> bytes:
        """The plaintext of ``data`` if it was sealed for ``binding`` (never longer than
        ``data``: ``limit`` holds)."""
        context, associated = _sealed_how(data, binding)
        wrapped, nonce, sealed = _parts(data)
        key = self._open(wrapped, context)
        try:
            opened: bytes = self._aead(key).decrypt(nonce, sealed, associated)
        except Exception as exc:  # cryptography's InvalidTag
            raise ValueError(
                "its tag does not match: changed bytes, or a value sealed for another "
                f"place than {binding.place.what} of {binding.place.owner} (it does not "
                "open here)"
            ) from exc
        return opened

    def _data_key(self, context: Context) -> tuple[bytes, bytes]:
        now = time.monotonic()
        with self._lock:
            current = self._current.get(context)
            if current is not None and now - current[2] < self._max_age and current[3] > 0:
                self._current[context] = (current[0], current[1], current[2], current[3] - 1)
                return current[0], current[1]
        made = self._call(
            "GenerateDataKey",
            KeyId=self.key_id,
            KeySpec="AES_256",
            EncryptionContext=dict(context),
        )
        key, wrapped = bytes(made["Plaintext"]), bytes(made["CiphertextBlob"])
        with self._lock:
            self._current[context] = (key, wrapped, now, self._max_uses - 1)
            self._remember((context, wrapped), key, now)
        return key, wrapped

    def _open(self, wrapped: bytes, context: Context) -> bytes:
        """The data key ``wrapped`` is, opened by KMS under ``context`` (or cached from an
        opening under the same context: another context asks KMS, which refuses)."""
        now, cached = time.monotonic(), (context, wrapped)
        with self._lock:
            found = self._opened.get(cached)
            if found is not None and now - found[1] < self._max_age:
                self._opened.move_to_end(cached)
                return found[0]
        opened = self._call(
            "Decrypt",
            CiphertextBlob=wrapped,
            KeyId=self.key_id,
            EncryptionContext=dict(context),
        )
        key = bytes(opened["Plaintext"])
        with self._lock:
            self._remember(cached, key, now)
        return key

    def _remember(self, cached: tuple[Context, bytes], key: bytes, now: float) -> None:
        self._opened[cached] = (key, now)
        self._opened.move_to_end(cached)
        while len(self._opened) > OPENED_KEYS:
            self._opened.popitem(last=False)

    def _call(self, operation: str, **request: Any) -> Any:
        method = getattr(
            self.client, "generate_data_key" if operation == "GenerateDataKey" else "decrypt"
        )
        try:
            return method(**request)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in KMS_UNAVAILABLE:
                raise StorageUnavailable(f"KMS {operation} failed: {code}") from exc
            if code == "InvalidCiphertextException":
                raise ValueError(
                    f"KMS would not open its data key ({code}): it was made for another "
                    f"environment, or under another key than {self.key_id!r}"
                ) from exc
            raise ValueError(
                f"KMS {operation} with key {self.key_id!r} was refused: {code}"
            ) from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"cannot reach KMS for {operation}: {exc}") from exc


def _sealed_how(data: bytes, binding: Binding) -> tuple[Context, bytes]:
    """The encryption context of ``data``'s data key and its associated data, by its
    format: bound to ``binding``, or (when the binding allows it) the legacy format."""
    magic = data[: len(MAGIC)]
    if magic == MAGIC:
        return context_of(binding.environment), MAGIC + binding.associated_data
    if magic == LEGACY_MAGIC and binding.legacy:
        return LEGACY_CONTEXT, LEGACY_MAGIC
    if magic == LEGACY_MAGIC:
        raise ValueError(
            "it was encrypted before values were bound to their place (RLK1); "
            "open_legacy_values=True reads such values while they are migrated"
        )
    raise ValueError("not a value KmsEncryption encrypted")


def _parts(data: bytes) -> tuple[bytes, bytes, bytes]:
    """An encoded value's encrypted data key, nonce and ciphertext (with its tag)."""
    start = len(MAGIC) + 2
    if len(data) < start:
        raise ValueError("not a value KmsEncryption encrypted")
    (length,) = struct.unpack(">H", data[len(MAGIC) : start])
    wrapped = data[start : start + length]
    nonce = data[start + length : start + length + NONCE_BYTES]
    return wrapped, nonce, data[start + length + NONCE_BYTES :]
