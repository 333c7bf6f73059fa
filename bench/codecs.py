"""Codecs: the CPU each one spends per megabyte of JSON, encoding and decoding, and the
size it leaves (docs/payloads.md, "Codecs").

The value is a JSON document of records as an application would send (ids, names,
amounts, timestamps, free text), about 1 MB as compact JSON; each codec encodes and
decodes it ``rounds`` times on this process's CPU (``time.process_time``). The KMS
envelope asks the emulator's KMS for one data key and then encrypts locally, as it does
for every value within a data key's age, so its figure is AES-256-GCM's plus the
framing; the one ``GenerateDataKey`` and ``Decrypt`` are made before timing.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from bench.backends import Backend
from runlane_sqs.codecs import Codec, Gzip, KmsEncryption, Zstd
from runlane_sqs.core.values import Holder, ValueField, ValuePlace
from runlane_sqs.engine.values import encoded_limit
from runlane_sqs.ports.codecs import Binding

MB = 1_000_000
BINDING = Binding("bench", ValuePlace(Holder.RUN, "0" * 32, ValueField.PAYLOAD))
"""The place every measured value is sealed for (a run's payload)."""


def document(size: int) -> bytes:
    """About ``size`` bytes of compact JSON records."""
    records, total, n = [], 2, 0
    while total < size:
        record = {
            "id": f"ord_{n:08d}",
            "customer": f"customer-{n % 997:04d}",
            "amount_cents": (n * 7919) % 100_000,
            "currency": "EUR" if n % 3 else "USD",
            "created_at": f"2026-11-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00Z",
            "note": f"order {n} of batch {n // 100}: {'gift wrap, ' if n % 5 == 0 else ''}ship",
        }
        records.append(record)
        total += len(json.dumps(record, separators=(",", ":"))) + 1
        n += 1
    return json.dumps(records, separators=(",", ":")).encode()


@dataclass
class CodecResult:
    codec: str
    encode_ms_per_mb: float
    decode_ms_per_mb: float
    ratio: float
    """Encoded size over the JSON's."""

    def to_json(self) -> dict[str, Any]:
        return {
            "codec": self.codec,
            "encode_ms_per_mb": self.encode_ms_per_mb,
            "decode_ms_per_mb": self.decode_ms_per_mb,
            "ratio": self.ratio,
        }


def _cpu_ms(fn: Any, data: bytes, rounds: int) -> tuple[float, bytes]:
    out = fn(data)  # warm
    started = time.process_time()
    for _ in range(rounds):
        out = fn(data)
    return (time.process_time() - started) * 1000 / rounds, out


def measure_codec(name: str, codec: Codec, data: bytes, rounds: int) -> CodecResult:
    megabytes = len(data) / MB
    encode_ms, encoded = _cpu_ms(lambda plain: codec.encode(plain, BINDING), data, rounds)
    decode_ms, decoded = _cpu_ms(
        lambda sealed: codec.decode(sealed, BINDING, len(data)), encoded, rounds
    )
    if decoded != data:
        raise RuntimeError(f"codec {name} did not give the document back")
    return CodecResult(name, encode_ms / megabytes, decode_ms / megabytes, len(encoded) / len(data))


def measure_codecs(backend: Backend, size: int, rounds: int) -> list[CodecResult]:
    """Gzip, Zstd, the KMS envelope and Zstd then KMS, on a ``size``-byte document."""
    data = document(size)
    kms = backend.client("kms")
    try:
        key = kms.create_key(Description="runlane bench codecs")["KeyMetadata"]["Arn"]
        encryption = KmsEncryption(key, client=kms)
        chain: list[Codec] = [Zstd(), encryption]
        chained = _Chain(chain)
        return [
            measure_codec("gzip (level 6)", Gzip(), data, rounds),
            measure_codec("zstd (level 3)", Zstd(), data, rounds),
            measure_codec("kms (AES-256-GCM)", encryption, data, rounds),
            measure_codec("zstd, then kms", chained, data, rounds),
        ]
    finally:
        kms.close()


class _Chain:
    """Codecs applied in order, as ``Runlane(codec=[...])`` applies them."""

    name = "chain"

    def __init__(self, codecs: list[Codec]) -> None:
        self.codecs = codecs

    def encode(self, data: bytes, binding: Binding) -> bytes:
        for codec in self.codecs:
            data = codec.encode(data, binding)
        return data

    def decode(self, data: bytes, binding: Binding, limit: int) -> bytes:
        for codec in reversed(self.codecs):
            data = codec.decode(data, binding, encoded_limit(limit))
        return data
