"""Keeping and opening values: codecs, and claim checks for the ones too large for their
record.

Every value the library stores (a payload, a handler's result, a step's result, a
signal's payload, a token's value or metadata, a wait's result) passes through
:meth:`Values.seal` on its way in. It is checked (JSON, depth, ``payload_limit``) and
encoded by the app's codecs, if it has any (compression, encryption: the record then
keeps an envelope, never the JSON). A value over ``inline_limit`` is written to the
app's ``payload_bucket`` first and the record keeps a reference
(:mod:`runlane_sqs.core.values`): the object record pinned, then the object, then the
write that names it and counts it on the record, so a stored reference always names an
object that was written and is counted. A small value of an app without codecs costs
what it always did: no request to S3 or for an object record, no envelope.

:meth:`Values.open` reads a sealed value back, checking the object's size and SHA-256
against the reference and decoding it with the codecs its envelope names: one
``GetObject`` per read of a large value, nothing cached, so what a read costs is plain
and a damaged object is found by the first reader after the damage.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from runlane_sqs.core.clock import Clock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import (
    CodecError,
    ConfigurationError,
    ObjectUnreadable,
    PayloadTooLarge,
    StorageUnavailable,
    ValueUnreadable,
)
from runlane_sqs.core.limits import MAX_PAYLOAD_LIMIT_BYTES
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import (
    ENVELOPE_MARK,
    ObjectRecord,
    Reference,
    Sealed,
    encode_json,
    object_key,
)
from runlane_sqs.ports.codecs import Codec
from runlane_sqs.ports.objects import ObjectRecords, ObjectStore

ENVELOPE_BYTES = 64
"""About what an envelope adds to the base64 of the bytes it keeps inline."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A value checked and encoded, not yet kept: its compact JSON text, the bytes to
    keep (encoded by the app's codecs, if any), and whether they go to the object store
    (:meth:`Values.keep` then sends the requests)."""

    value: JSON
    text: str
    data: bytes
    offloaded: bool
    codecs: tuple[str, ...] = ()
    """The codecs that encoded ``data``, in order (none: it is the JSON text's bytes)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """A value as its record keeps it: ``text`` is what the record stores, ``value``
    what a :class:`~runlane_sqs.core.model.Run` holds (the value itself, or the
    :class:`~runlane_sqs.core.values.Sealed` envelope of it)."""

    value: JSON
    text: str


def is_sealed(value: object) -> bool:
    """Whether ``value`` must be opened before a handler or a reader sees it: a sealed
    value, or a batch's items among which one is sealed (items encoded by codecs)."""
    if isinstance(value, list):
        return any(isinstance(v, Sealed) for v in value)
    return isinstance(value, Sealed)


def codec_chain(codec: Codec | Sequence[Codec] | None) -> tuple[Codec, ...]:
    """``Runlane(codec=...)`` as a chain; raises :class:`ConfigurationError` for a codec
    without a name, or two with the same name."""
    if codec is None:
        return ()
    chain = tuple(codec) if isinstance(codec, Sequence) else (codec,)
    names = [getattr(c, "name", None) for c in chain]
    for c, name in zip(chain, names, strict=True):
        if not isinstance(name, str) or not name.strip() or not hasattr(c, "encode"):
            raise ConfigurationError(f"{c!r} is not a codec: it needs a name, encode and decode")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"codec names must differ within a chain: {names}")
    return chain


class Values:
    """Seals values into their stored form and opens them again, with the app's codecs
    and ``payload_bucket`` (``objects``; ``None``: every value stays in its record)."""

    def __init__(
        self,
        config: RunlaneConfig,
        objects: ObjectStore | None,
        records: ObjectRecords,
        clock: Clock,
        codecs: Sequence[Codec] = (),
    ) -> None:
        self._environment = config.environment
        self._records = records
        self._clock = clock
        self._limit = config.value_limit
        self._inline = config.inline_limit
        self.objects = objects
        self.codecs = tuple(codecs)
        self._names = tuple(c.name for c in self.codecs)
        self._by_name = {c.name: c for c in self.codecs}

    @property
    def limit(self) -> int:
        """The largest value, in bytes of compact JSON."""
        return self._limit

    # sealing -------------------------------------------------------------------------

    def prepare(self, value: JSON, *, what: str) -> Prepared:
        """Check ``value`` (raising :class:`~runlane_sqs.errors.InvalidPayloadError` or
        :class:`~runlane_sqs.errors.PayloadTooLarge`, before anything is written) and
        encode it (:class:`~runlane_sqs.errors.CodecError` when a codec fails). CPU
        only, unless a codec calls a service (KMS, once per data key)."""
        text = encode_json(value, what=what, limit_bytes=self._limit)
        if not self.codecs:  # the plain path, in one call
            data = text.encode("utf-8")
            return Prepared(
                value, text, data, self.objects is not None and len(data) > self._inline
            )
        return self._prepared(value, text, what)

    def prepare_text(self, value: JSON, text: str, *, what: str) -> Prepared:
        """:meth:`prepare` for a value checked and encoded as JSON already (``text``, its
        compact JSON: a group's item, a step's entry)."""
        return self._prepared(value, text, what)

    def _prepared(self, value: JSON, text: str, what: str) -> Prepared:
        data = text.encode("utf-8")
        if not self.codecs:
            return Prepared(
                value, text, data, self.objects is not None and len(data) > self._inline
            )
        for codec in self.codecs:
            try:
                data = codec.encode(data)
            except StorageUnavailable:
                raise
            except Exception as exc:
                raise CodecError(f"codec {codec.name!r} could not encode {what}: {exc}") from exc
        stored = len(data) * 4 // 3 + ENVELOPE_BYTES  # base64 in an envelope
        if self.objects is None and stored > MAX_PAYLOAD_LIMIT_BYTES:
            raise PayloadTooLarge(
                f"{what} as its codecs encode it", stored, MAX_PAYLOAD_LIMIT_BYTES
            )
        offloaded = self.objects is not None and stored > self._inline
        return Prepared(value, text, data, offloaded, self._names)

    def keep(self, prepared: Prepared) -> Kept:
        """``prepared`` as its record will keep it; a value over ``inline_limit`` is
        written to the object store first (its object record pinned, then the object)."""
        if not prepared.offloaded:
            return self.keep_inline(prepared)
        assert self.objects is not None
        digest, size = hashlib.sha256(prepared.data).hexdigest(), len(prepared.data)
        generation = self._records.pin(digest, size, self._clock.now())
        key = object_key(self._environment, digest, generation)
        self.objects.put(key, prepared.data)
        sealed = Sealed(Reference(self.objects.bucket, key, size, digest), codecs=prepared.codecs)
        return Kept(sealed, sealed.text)

    def keep_inline(self, prepared: Prepared) -> Kept:
        """``prepared`` as a record that holds no references keeps it (a group's item):
        encoded if the app has codecs, never in the bucket (:meth:`keep_text` moves it
        there when its run is made)."""
        if not prepared.codecs:
            return Kept(prepared.value, prepared.text)
        inline = Sealed(codecs=prepared.codecs, data=prepared.data)
        return Kept(inline, inline.text)

    def keep_text(self, value: JSON, text: str) -> Kept:
        """A value stored before as ``text`` (by :meth:`keep_inline`; ``value`` is what
        it opens to), as a run's record keeps it: in the bucket if it is large."""
        if not text.startswith(ENVELOPE_MARK):
            return self.keep(self.prepare_text(value, text, what="payload"))
        stored = Sealed.parse(text)
        large = len(text) > self._inline and stored.data is not None
        if self.objects is None or not large:
            return Kept(stored, text)
        return self.keep(Prepared(value, "", stored.data or b"", True, stored.codecs))

    def seal(self, value: JSON, *, what: str) -> Kept:
        """:meth:`prepare` then :meth:`keep`."""
        return self.keep(self.prepare(value, what=what))

    def seal_schedule(self, schedule: Schedule) -> Schedule:
        """``schedule`` as it is stored: its payload encoded when the app has codecs
        (kept in the schedule's record, never in the bucket)."""
        if not self.codecs or isinstance(schedule.payload, Sealed):
            return schedule
        prepared = self.prepare(schedule.payload, what=f"schedule {schedule.id!r} payload")
        return replace(schedule, payload=self.keep_inline(prepared).value)

    # opening -------------------------------------------------------------------------

    def open(self, value: Any, *, what: str, owner: str) -> JSON:
        """The value ``value`` stands for: itself, or a sealed value's bytes (read from
        its object and checked) decoded. Raises :class:`~runlane_sqs.errors.
        ValueUnreadable` naming ``what``, ``owner`` (``run 1f2e...``) and where it is
        kept when it cannot be read back."""
        if isinstance(value, list) and is_sealed(value):
            return [self.open(v, what=what, owner=owner) for v in value]  # a batch's items
        if not isinstance(value, Sealed):
            return value
        if value.reference is not None:
            data = self._fetch(value.reference, what, owner)
        else:
            data = value.data or b""
        for name in reversed(value.codecs):
            codec = self._by_name.get(name)
            if codec is None:
                reason = f"it was encoded by codec {name!r}, which this app does not have"
                raise ValueUnreadable(what, owner, value, reason)
            try:
                data = codec.decode(data)
            except StorageUnavailable:
                raise
            except Exception as exc:
                reason = f"codec {name!r} could not decode it ({exc})"
                raise ValueUnreadable(what, owner, value, reason) from None
        try:
            opened: JSON = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = f"its bytes are not JSON ({exc})"
            raise ValueUnreadable(what, owner, value, reason) from None
        return opened

    def open_run(self, run: Run, *, payload: bool = True) -> Run:
        """``run`` with its result and (unless ``payload=False``) its payload opened; the
        rest opens where it is read."""
        sealed_payload = payload and is_sealed(run.payload)
        if not sealed_payload and not isinstance(run.result, Sealed):
            return run
        owner = f"run {run.id}"
        return run.with_changes(
            payload=self.open(run.payload, what="payload", owner=owner)
            if sealed_payload
            else run.payload,
            result=self.open(run.result, what="result", owner=owner),
        )

    def open_token(self, token: Token) -> Token:
        """``token`` with its value and metadata opened."""
        if not isinstance(token.value, Sealed) and not isinstance(token.metadata, Sealed):
            return token
        owner = "token " + token.id[:8] + "..."  # a token id is a bearer secret
        return replace(
            token,
            value=self.open(token.value, what="value", owner=owner),
            metadata=self.open(token.metadata, what="metadata", owner=owner),
        )

    def open_schedule(self, schedule: Schedule) -> Schedule:
        """``schedule`` with its payload opened."""
        if not isinstance(schedule.payload, Sealed):
            return schedule
        owner = f"schedule {schedule.id}"
        return replace(schedule, payload=self.open(schedule.payload, what="payload", owner=owner))

    def sealed_alike(self, value: Any) -> bool:
        """Whether ``value`` is kept the way this app keeps a value now: encoded by its
        codecs, or plain when it has none."""
        if isinstance(value, Sealed):
            return value.codecs == self._names
        return not self.codecs

    def _fetch(self, reference: Reference, what: str, owner: str) -> bytes:
        if self.objects is None:
            raise ValueUnreadable(what, owner, reference, "this app has no payload_bucket")
        if reference.bucket != self.objects.bucket:
            raise ValueUnreadable(
                what,
                owner,
                reference,
                f"it is kept in bucket {reference.bucket!r}, not in this app's "
                f"payload_bucket {self.objects.bucket!r}",
            )
        try:
            data = self.objects.get(reference.key)
        except ObjectUnreadable as exc:
            raise ValueUnreadable(what, owner, reference, str(exc)) from None
        if data is None:
            raise ValueUnreadable(what, owner, reference, "its object is missing")
        if len(data) != reference.size or hashlib.sha256(data).hexdigest() != reference.sha256:
            raise ValueUnreadable(
                what,
                owner,
                reference,
                f"its object does not match the reference ({len(data)} bytes, "
                f"sha256 {hashlib.sha256(data).hexdigest()})",
            )
        return data

    # removing -------------------------------------------------------------------------

    def remove(self, record: ObjectRecord) -> bool:
        """Delete a listed object record that no record references (and no writer
        pinned), then its object; False if it is still needed."""
        if not self._records.remove(record, self._clock.now()):
            return False
        if self.objects is not None:
            key = object_key(self._environment, record.sha256, record.generation)
            self.objects.delete(key)
        return True
