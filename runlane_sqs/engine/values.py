"""Keeping and opening values: codecs, and claim checks for the ones too large for their
record.

Every value the library stores (a payload, a handler's result, a step's result, a
signal's payload, a token's value or metadata, a wait's result) passes through
:meth:`Values.seal` on its way in. It is checked (JSON, depth, ``payload_limit``) and
encoded by the app's codecs, if it has any (compression, encryption: the record then
keeps an envelope, never the JSON), for its place (:class:`~runlane_sqs.core.values.
ValuePlace`: an encrypting codec binds the value to its environment, record and field,
so a value moved to another place is sealed again for it). A value over
``inline_limit`` is written to the
app's ``payload_bucket`` first and the record keeps a reference
(:mod:`runlane_sqs.core.values`): the object record pinned, then the object, then the
write that names it and counts it on the record, so a stored reference always names an
object that was written and is counted. A small value of an app without codecs costs
what it always did: no request to S3 or for an object record, no envelope.

:meth:`Values.open` reads a value back at the place it is read from: a reference only
to an object of its environment's values (its length checked before its bytes, its
SHA-256 after), an envelope only if it names the app's chain (with an app that has
codecs, never plain JSON, unless ``open_legacy_values``), each codec stopping at the
limit: one ``GetObject`` per read of a large value, nothing cached, so what a read costs
is plain and a damaged object is found by the first reader after the damage.
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
from runlane_sqs.core.machine import WAIT_TIMED_OUT_RESULT
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.core.schedules import Schedule
from runlane_sqs.core.tokens import Token
from runlane_sqs.core.values import (
    ENVELOPE_MARK,
    Holder,
    ObjectRecord,
    Reference,
    Sealed,
    ValueField,
    ValuePlace,
    encode_json,
    misplaced,
    object_key,
)
from runlane_sqs.ports.codecs import Binding, Codec
from runlane_sqs.ports.objects import ObjectRecords, ObjectStore

ENVELOPE_BYTES = 64
"""About what an envelope adds to the base64 of the bytes it keeps inline."""
ENCODING_SLACK_BYTES = 64 * 1024
"""What a value's bytes may grow by beyond its compact JSON on their way through the
app's codecs, besides a thousandth of it (:func:`encoded_limit`)."""


def encoded_limit(limit: int) -> int:
    """The most bytes a value of at most ``limit`` bytes of compact JSON takes once the
    app's codecs encoded it: an encryption's header and tag, a compressor's framing of
    bytes it cannot shrink (gzip's and zstd's are under a ten-thousandth). A value whose
    encoding is larger is refused when it is sealed; a stored one is refused unread, and
    no codec's output is decoded past it."""
    return limit + limit // 1024 + ENCODING_SLACK_BYTES


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
    and ``payload_bucket`` (``objects``; ``None``: every value stays in its record).

    Every value is sealed for its place (:class:`~runlane_sqs.core.values.ValuePlace`:
    its record and field) and opened at the place it is read from: the app's codecs get
    the place and the environment with every call (:class:`~runlane_sqs.ports.codecs.
    Binding`), so an encrypted value opens only where it was sealed. An app with codecs
    opens only values its whole chain sealed, unless ``open_legacy_values`` is set."""

    def __init__(
        self,
        config: RunlaneConfig,
        objects: ObjectStore | None,
        records: ObjectRecords,
        clock: Clock,
        codecs: Sequence[Codec] = (),
    ) -> None:
        self._environment = config.environment
        self._legacy = config.open_legacy_values
        self._records = records
        self._clock = clock
        self._limit = config.value_limit
        self._stored_limit = encoded_limit(self._limit)
        self._inline = config.inline_limit
        self.objects = objects
        self.codecs = tuple(codecs)
        self._names = tuple(c.name for c in self.codecs)
        self._by_name = {c.name: c for c in self.codecs}

    @property
    def limit(self) -> int:
        """The largest value, in bytes of compact JSON."""
        return self._limit

    def binding(self, place: ValuePlace) -> Binding:
        """What a value of ``place`` is sealed for, in this app's environment."""
        return Binding(self._environment, place, self._legacy)

    # sealing -------------------------------------------------------------------------

    def check(self, value: JSON, *, what: str) -> str:
        """``value``'s compact JSON once it is checked (raising :class:`~runlane_sqs.
        errors.InvalidPayloadError` or :class:`~runlane_sqs.errors.PayloadTooLarge`):
        for a value refused before any write and sealed later, at each of its places."""
        return encode_json(value, what=what, limit_bytes=self._limit)

    def prepare(self, value: JSON, *, what: str, place: ValuePlace) -> Prepared:
        """Check ``value`` (raising :class:`~runlane_sqs.errors.InvalidPayloadError` or
        :class:`~runlane_sqs.errors.PayloadTooLarge`, before anything is written) and
        encode it for ``place`` (:class:`~runlane_sqs.errors.CodecError` when a codec
        fails). CPU only, unless a codec calls a service (KMS, once per data key)."""
        text = encode_json(value, what=what, limit_bytes=self._limit)
        if not self.codecs:  # the plain path, in one call
            data = text.encode("utf-8")
            return Prepared(
                value, text, data, self.objects is not None and len(data) > self._inline
            )
        return self._prepared(value, text, what, place)

    def prepare_text(self, value: JSON, text: str, *, what: str, place: ValuePlace) -> Prepared:
        """:meth:`prepare` for a value checked and encoded as JSON already (``text``, its
        compact JSON: a group's item, a step's entry)."""
        return self._prepared(value, text, what, place)

    def _prepared(self, value: JSON, text: str, what: str, place: ValuePlace) -> Prepared:
        data = text.encode("utf-8")
        if not self.codecs:
            return Prepared(
                value, text, data, self.objects is not None and len(data) > self._inline
            )
        binding = self.binding(place)
        for codec in self.codecs:
            try:
                data = codec.encode(data, binding)
            except StorageUnavailable:
                raise
            except Exception as exc:
                raise CodecError(f"codec {codec.name!r} could not encode {what}: {exc}") from exc
        if len(data) > self._stored_limit:
            raise PayloadTooLarge(f"{what} as its codecs encode it", len(data), self._stored_limit)
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
        """``prepared`` as a record that holds no references keeps it (a group's item, a
        batch's): encoded if the app has codecs, never in the bucket (a group's child
        moves a large one there when its run is made: :meth:`reseal`)."""
        if not prepared.codecs:
            return Kept(prepared.value, prepared.text)
        inline = Sealed(codecs=prepared.codecs, data=prepared.data)
        return Kept(inline, inline.text)

    def reseal(self, value: JSON, text: str, *, place: ValuePlace) -> Kept:
        """A value stored at another place as ``text`` (``value``: what it opens to), as
        ``place`` keeps it: encoded again for ``place`` if the app has codecs (a sealed
        value opens only where it was sealed), in the bucket if it is large."""
        if text.startswith(ENVELOPE_MARK):  # encoded for its former place
            text = encode_json(value, what=place.what, limit_bytes=self._limit)
        return self.keep(self.prepare_text(value, text, what=place.what, place=place))

    def seal(self, value: JSON, *, what: str, place: ValuePlace) -> Kept:
        """:meth:`prepare` then :meth:`keep`."""
        return self.keep(self.prepare(value, what=what, place=place))

    def seal_unbound(self, value: JSON, *, what: str) -> Kept | None:
        """``value`` kept once for any number of places when the app has no codecs (a
        plain value is bound to no place: a large one is one object for them all);
        ``None`` when it has codecs, after checking it: it is sealed for each place."""
        text = self.check(value, what=what)
        if self.codecs:
            return None
        data = text.encode("utf-8")
        offloaded = self.objects is not None and len(data) > self._inline
        return self.keep(Prepared(value, text, data, offloaded))

    def seal_schedule(self, schedule: Schedule) -> Schedule:
        """``schedule`` as it is stored: its payload encoded when the app has codecs
        (kept in the schedule's record, never in the bucket)."""
        if not self.codecs or isinstance(schedule.payload, Sealed):
            return schedule
        what, place = f"schedule {schedule.id!r} payload", ValuePlace.in_schedule(schedule.id)
        prepared = self.prepare(schedule.payload, what=what, place=place)
        return replace(schedule, payload=self.keep_inline(prepared).value)

    # opening -------------------------------------------------------------------------

    def open(self, value: Any, place: ValuePlace) -> JSON:
        """The value ``value`` (read from ``place``) stands for: itself, or a sealed
        value's bytes (read from its object and checked) decoded by the app's chain for
        ``place``, no further than ``payload_limit``. Raises :class:`~runlane_sqs.errors.
        ValueUnreadable` naming the value, whose it is and where it is kept when it
        cannot be read back."""
        if isinstance(value, list) and is_sealed(value):  # a batch's items
            item = replace(place, field=ValueField.ITEM)
            return [self.open(v, item) for v in value]
        if not isinstance(value, Sealed):
            return self._plain(value, place)
        chain = self._chain_of(value, place)
        if value.reference is not None:
            data = self._fetch(value.reference, place)
        else:
            data = value.data or b""
        data = self._decoded(data, chain, value, place)
        try:
            opened: JSON = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            reason = f"its bytes are not JSON ({exc})"
            raise ValueUnreadable(place.what, place.owner, value, reason) from None
        return opened

    def _plain(self, value: JSON, place: ValuePlace) -> JSON:
        """A value its record keeps as JSON: opened by an app without codecs; by one
        with codecs only if it is no value (``None``), the timed-out mark the library
        writes at a wait, or a legacy value (``open_legacy_values``)."""
        if value is None or not self.codecs or self._legacy:
            return value
        if place.field is ValueField.WAIT and value == WAIT_TIMED_OUT_RESULT:
            return value
        reason = f"it is plain JSON, not sealed by this app's codecs ({', '.join(self._names)})"
        raise ValueUnreadable(place.what, place.owner, "JSON in its record", reason)

    def _chain_of(self, value: Sealed, place: ValuePlace) -> tuple[Codec, ...]:
        """The codecs that decode ``value``, in the order they encoded it: the app's
        chain, or (``open_legacy_values``) part of it in its order. Raises for a codec
        the app lacks, or other codecs (in another order, or one twice: each decoding
        may multiply a value's size)."""
        for name in value.codecs:
            if name not in self._by_name:
                reason = f"it was encoded by codec {name!r}, which this app does not have"
                raise ValueUnreadable(place.what, place.owner, value, reason)
        if value.codecs != self._names and not (self._legacy and self._in_order(value.codecs)):
            named = ", ".join(value.codecs) or "none"
            reason = f"its codecs ({named}) are not this app's chain ({', '.join(self._names)})"
            raise ValueUnreadable(place.what, place.owner, value, reason)
        return tuple(self._by_name[name] for name in value.codecs)

    def _in_order(self, names: tuple[str, ...]) -> bool:
        """Whether ``names`` is part of the app's chain, in its order, each at most once."""
        chain = iter(self._names)
        return all(name in chain for name in names)

    def _decoded(
        self, data: bytes, chain: tuple[Codec, ...], value: Sealed, place: ValuePlace
    ) -> bytes:
        """``data`` decoded by ``chain`` in reverse for ``place``: the JSON at most
        ``payload_limit`` bytes, the stages between the codecs at most
        :func:`encoded_limit` (each codec stops at its limit and one byte)."""
        binding = self.binding(place)
        for position in reversed(range(len(chain))):
            codec = chain[position]
            limit = self._stored_limit if position else self._limit
            try:
                data = codec.decode(data, binding, limit)
            except StorageUnavailable:
                raise
            except Exception as exc:
                reason = f"codec {codec.name!r} could not decode it ({exc})"
                raise ValueUnreadable(place.what, place.owner, value, reason) from None
            if len(data) > limit:
                reason = f"codec {codec.name!r} decoded it to more than {limit} bytes"
                raise ValueUnreadable(place.what, place.owner, value, reason)
        if len(data) > self._limit:
            reason = (
                f"it is over this app's payload_limit ({len(data)} bytes, at most {self._limit})"
            )
            raise ValueUnreadable(place.what, place.owner, value, reason)
        return data

    def open_run(self, run: Run, *, payload: bool = True) -> Run:
        """``run`` with its result and (unless ``payload=False``) its payload opened; the
        rest opens where it is read."""
        sealed_payload = payload and self.sealed(run.payload)
        if not sealed_payload and not self.sealed(run.result):
            return run
        return run.with_changes(
            payload=self.open(run.payload, ValuePlace(Holder.RUN, run.id, ValueField.PAYLOAD))
            if sealed_payload
            else run.payload,
            result=self.open(run.result, ValuePlace(Holder.RUN, run.id, ValueField.RESULT)),
        )

    def open_token(self, token: Token) -> Token:
        """``token`` with its value and metadata opened."""
        if not self.sealed(token.value) and not self.sealed(token.metadata):
            return token
        return replace(
            token,
            value=self.open(token.value, ValuePlace.in_token(token.id, ValueField.VALUE)),
            metadata=self.open(token.metadata, ValuePlace.in_token(token.id, ValueField.METADATA)),
        )

    def open_schedule(self, schedule: Schedule) -> Schedule:
        """``schedule`` with its payload opened."""
        if not self.sealed(schedule.payload):
            return schedule
        return replace(
            schedule, payload=self.open(schedule.payload, ValuePlace.in_schedule(schedule.id))
        )

    def sealed(self, value: object) -> bool:
        """Whether ``value`` must go through :meth:`open` before it is used: a sealed
        value (or a batch's items), or, in an app with codecs, any value (plain JSON is
        refused there, unless it is legacy)."""
        return is_sealed(value) or (bool(self.codecs) and value is not None)

    def sealed_alike(self, value: Any) -> bool:
        """Whether ``value`` is kept the way this app keeps a value now: encoded by its
        codecs, or plain when it has none."""
        if isinstance(value, Sealed):
            return value.codecs == self._names
        return not self.codecs

    def _fetch(self, reference: Reference, place: ValuePlace) -> bytes:
        refused = self._refusal(reference)
        if refused is not None:
            raise ValueUnreadable(place.what, place.owner, reference, refused)
        assert self.objects is not None
        try:
            data = self.objects.get(reference.key, reference.size)
        except ObjectUnreadable as exc:
            raise ValueUnreadable(place.what, place.owner, reference, str(exc)) from None
        if data is None:
            raise ValueUnreadable(place.what, place.owner, reference, "its object is missing")
        digest = hashlib.sha256(data).hexdigest()
        if len(data) != reference.size or digest != reference.sha256:
            reason = f"its object does not match the reference ({len(data)} bytes, sha256 {digest})"
            raise ValueUnreadable(place.what, place.owner, reference, reason)
        return data

    def _refusal(self, reference: Reference) -> str | None:
        """Why ``reference`` is not read at all: no bucket, another bucket, a key that is
        no value of this environment with the reference's hash, or a size no value of
        this app's ``payload_limit`` has."""
        if self.objects is None:
            return "this app has no payload_bucket"
        if reference.bucket != self.objects.bucket:
            return (
                f"it is kept in bucket {reference.bucket!r}, not in this app's "
                f"payload_bucket {self.objects.bucket!r}"
            )
        if reference.size > self._stored_limit:
            return (
                f"its size is over the {self._stored_limit} bytes a value within this "
                "app's payload_limit is kept in"
            )
        return misplaced(reference, self._environment)

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
