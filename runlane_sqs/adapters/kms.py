"""Envelope encryption with KMS data keys (:mod:`runlane_sqs.ports.codecs`): AES-256-GCM
from the ``cryptography`` package (the ``kms`` extra), its data key made and opened by
KMS (``GenerateDataKey``, ``Decrypt``).

An encoded value is ``RLK1``, the encrypted data key's length (2 bytes) and the key, a
12-byte nonce, then the ciphertext with its 16-byte tag. A data key encrypts values for
``data_key_max_age`` or ``data_key_max_uses`` values, whichever comes first, so KMS is
called once per data key rather than once per value; opened data keys are kept in a
small cache by their encrypted form for the same age. Every decryption names the
configured key (``KeyId``): a value encrypted under another key is refused by KMS
rather than opened, and a changed byte fails the tag.
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

MAGIC = b"RLK1"
NONCE_BYTES = 12
ENCRYPTION_CONTEXT = {"purpose": "runlane-sqs value"}
"""Bound to every data key: KMS opens one only for this purpose."""
OPENED_KEYS = 256
"""Opened data keys kept for decryption, newest first."""
KMS_UNAVAILABLE = frozenset(
    {"ThrottlingException", "KMSInternalException", "DependencyTimeoutException"}
)


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
        self._current: tuple[bytes, bytes, float, int] | None = None
        """Plaintext key, encrypted key, when made (monotonic), uses left."""
        self._opened: OrderedDict[bytes, tuple[bytes, float]] = OrderedDict()

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3  # noqa: PLC0415 (only when no client was given)

            self._client = boto3.session.Session().client("kms")
        return self._client

    def encode(self, data: bytes) -> bytes:
        key, wrapped = self._data_key()
        nonce = os.urandom(NONCE_BYTES)
        sealed: bytes = self._aead(key).encrypt(nonce, data, MAGIC)
        return MAGIC + struct.pack(">H", len(wrapped)) + wrapped + nonce + sealed

    def decode(self, data: bytes) -> bytes:
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 2:
            raise ValueError("not a value KmsEncryption encrypted")
        (length,) = struct.unpack(">H", data[len(MAGIC) : len(MAGIC) + 2])
        start = len(MAGIC) + 2
        wrapped = data[start : start + length]
        nonce = data[start + length : start + length + NONCE_BYTES]
        sealed = data[start + length + NONCE_BYTES :]
        key = self._open(wrapped)
        try:
            opened: bytes = self._aead(key).decrypt(nonce, sealed, MAGIC)
        except Exception as exc:  # cryptography's InvalidTag
            raise ValueError("its ciphertext does not match its tag (changed bytes)") from exc
        return opened

    def _data_key(self) -> tuple[bytes, bytes]:
        now = time.monotonic()
        with self._lock:
            current = self._current
            if current is not None and now - current[2] < self._max_age and current[3] > 0:
                self._current = (current[0], current[1], current[2], current[3] - 1)
                return current[0], current[1]
        made = self._call(
            "GenerateDataKey",
            KeyId=self.key_id,
            KeySpec="AES_256",
            EncryptionContext=ENCRYPTION_CONTEXT,
        )
        key, wrapped = bytes(made["Plaintext"]), bytes(made["CiphertextBlob"])
        with self._lock:
            self._current = (key, wrapped, now, self._max_uses - 1)
            self._remember(wrapped, key, now)
        return key, wrapped

    def _open(self, wrapped: bytes) -> bytes:
        now = time.monotonic()
        with self._lock:
            found = self._opened.get(wrapped)
            if found is not None and now - found[1] < self._max_age:
                self._opened.move_to_end(wrapped)
                return found[0]
        opened = self._call(
            "Decrypt",
            CiphertextBlob=wrapped,
            KeyId=self.key_id,
            EncryptionContext=ENCRYPTION_CONTEXT,
        )
        key = bytes(opened["Plaintext"])
        with self._lock:
            self._remember(wrapped, key, now)
        return key

    def _remember(self, wrapped: bytes, key: bytes, now: float) -> None:
        self._opened[wrapped] = (key, now)
        self._opened.move_to_end(wrapped)
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
            raise ValueError(
                f"KMS {operation} with key {self.key_id!r} was refused: {code}"
            ) from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"cannot reach KMS for {operation}: {exc}") from exc
