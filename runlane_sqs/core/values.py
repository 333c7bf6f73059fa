"""Values as stored: the JSON rules every stored value meets, and how a value kept
elsewhere is named in its record.

Payloads, results, step results, signal payloads and token values are stored as JSON
text. A value is refused with :class:`~runlane_sqs.errors.InvalidPayloadError` when
:mod:`json` cannot write it, when a string in it holds a lone surrogate (``"\\ud800"``
has no UTF-8 form), or when it is nested deeper than :data:`MAX_JSON_DEPTH`. The checks
walk the value with a loop, not recursion, so no value reaches Python's recursion limit.

A small value is kept in its record (the run item, the token item) as its compact JSON.
A value kept elsewhere is a *sealed* value: an envelope, ``~`` followed by compact JSON,
that no JSON text can be mistaken for (JSON text never starts with ``~``). The envelope
names the object holding the value's bytes (a claim check: bucket, key, size and
SHA-256); :mod:`runlane_sqs.engine.values` writes the object and opens it again,
checking its size and hash. Objects are addressed by their content within an
environment (``{environment}/values/{sha256}/{generation}``): a write sent again stores
the same object, and two runs with the same large payload share one, counted by an
:class:`ObjectRecord`.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, NoReturn

from runlane_sqs.core.errors import InvalidPayloadError, PayloadTooLarge
from runlane_sqs.core.model import JSON, Run

MAX_JSON_DEPTH = 64
"""Most levels of arrays and objects nested in a payload or result (``[[1]]`` has 2)."""
_SURROGATE = re.compile("[\ud800-\udfff]")
"""A surrogate code point: in a Python string it is always unpaired (a lone surrogate)."""
_HEX_64 = re.compile("[0-9a-f]{64}")
"""A SHA-256 as a reference names it: 64 lowercase hexadecimal digits."""
_SHOWN_SEGMENTS = 8
"""Segments of a location shown before the rest is cut (a too-deep value's path is long)."""


ENVELOPE_MARK = "~"
"""The first character of a sealed value's text (never the first of JSON text)."""
ENVELOPE_VERSION = 1


@dataclass(frozen=True, slots=True)
class Reference:
    """Where a sealed value's bytes are: an object, its size and its SHA-256 (hex)."""

    bucket: str
    key: str
    size: int
    sha256: str

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key} ({self.size} bytes, sha256 {self.sha256})"

    def to_json(self) -> dict[str, JSON]:
        return {"bucket": self.bucket, "key": self.key, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class Sealed:
    """A stored value not opened yet: the envelope of a value kept in the payload bucket
    (``reference``) or encoded by the app's codecs (``codecs``, with its encoded bytes
    in ``data`` when it is kept in its record), or both.

    A record read from storage carries one in place of such a value (a run's
    ``payload``, ``result``, an entry of ``steps`` or ``wait_results``; a token's
    ``value`` or ``metadata``); the engine opens it where the value is used."""

    reference: Reference | None = None
    codecs: tuple[str, ...] = ()
    """The names of the codecs that encoded the value, in the order they were applied."""
    data: bytes | None = None
    """The encoded bytes, when the record keeps them (no ``reference``)."""

    @property
    def text(self) -> str:
        """The envelope as stored."""
        body: dict[str, JSON] = {"v": ENVELOPE_VERSION}
        if self.codecs:
            body["codecs"] = list(self.codecs)
        if self.reference is not None:
            body["ref"] = self.reference.to_json()
        else:
            body["data"] = base64.b64encode(self.data or b"").decode("ascii")
        return ENVELOPE_MARK + json.dumps(body, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str) -> Sealed:
        """The sealed value ``text`` (an envelope) stores; raises ``ValueError`` for an
        envelope this version cannot read."""
        body = json.loads(text[len(ENVELOPE_MARK) :])
        if not isinstance(body, dict) or body.get("v") != ENVELOPE_VERSION:
            raise ValueError(f"not a version {ENVELOPE_VERSION} value envelope")
        codecs = tuple(str(name) for name in body.get("codecs", ()))
        ref = body.get("ref")
        if ref is None:
            return cls(codecs=codecs, data=base64.b64decode(body["data"], validate=True))
        reference = Reference(
            bucket=str(ref["bucket"]),
            key=str(ref["key"]),
            size=int(ref["size"]),
            sha256=str(ref["sha256"]),
        )
        return cls(reference=reference, codecs=codecs)

    def __str__(self) -> str:
        kept = str(self.reference) if self.reference else f"{len(self.data or b'')} bytes inline"
        return f"{kept}, encoded by {', '.join(self.codecs)}" if self.codecs else kept


# Places ------------------------------------------------------------------------------
#
# A sealed value is bound to where it belongs: an encrypting codec authenticates its
# environment, record and field with it (AES-GCM's associated data), so a value copied
# into another run, another field or another environment's record does not open there.


class Holder(StrEnum):
    """The kinds of record that keep values."""

    RUN = "run"
    TOKEN = "token"
    SCHEDULE = "schedule"
    GROUP = "group"
    """A group's item records: its children's payloads and its callback's."""


class ValueField(StrEnum):
    """Which of its record's values a value is."""

    PAYLOAD = "payload"
    """A run's or a schedule's payload."""
    RESULT = "result"
    """A run's handler's result."""
    STEP = "step"
    """A durable step's result and call site, by the step's name."""
    WAIT = "wait"
    """A wait's result, by the wait's name."""
    ITEM = "item"
    """A batch run's item (any of them), or a group's child's payload (by its index)."""
    CALLBACK = "callback"
    """A group's callback's payload."""
    VALUE = "value"
    """A token's decision."""
    METADATA = "metadata"
    """A token's metadata."""


BINDING_TAG = "runlane-sqs value"
"""The first element of every place's associated data."""


@dataclass(frozen=True, slots=True)
class ValuePlace:
    """Where a stored value belongs: ``field`` of the record ``holder``/``id`` (with
    ``name``, for a field a record has several of). Sealing binds a value to its place
    within its environment (:meth:`associated_data`); opening names it in errors
    (:attr:`what` of :attr:`owner`)."""

    holder: Holder
    id: str
    field: ValueField
    name: str = ""

    @classmethod
    def in_token(cls, token_id: str, field: ValueField) -> ValuePlace:
        """A token's ``value`` or ``metadata``."""
        return cls(Holder.TOKEN, token_id, field)

    @classmethod
    def in_schedule(cls, schedule_id: str) -> ValuePlace:
        """A schedule's payload."""
        return cls(Holder.SCHEDULE, schedule_id, ValueField.PAYLOAD)

    @classmethod
    def in_group(cls, group_id: str, field: ValueField, name: str = "") -> ValuePlace:
        """A group's child's payload (``item``, by its index) or its callback's."""
        return cls(Holder.GROUP, group_id, field, name)

    @property
    def what(self) -> str:
        """The value in words: ``payload``, ``step 'charge'``, ``item 3``."""
        return f"{self.field.value} {self.name!r}" if self.name else self.field.value

    @property
    def owner(self) -> str:
        """Whose value it is in words (a token's id is a bearer secret: its start only)."""
        if self.holder is Holder.TOKEN:
            return f"token {self.id[:8]}..."
        return f"{self.holder.value} {self.id}"

    def associated_data(self, environment: str) -> bytes:
        """What a sealed value of this place in ``environment`` is bound to: the compact
        JSON array ``["runlane-sqs value", environment, holder, id, field, name]`` in
        UTF-8 (each part a string, so no two places give the same bytes)."""
        parts = [BINDING_TAG, environment, self.holder.value, self.id, self.field.value, self.name]
        return json.dumps(parts, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def stored_text(value: Any) -> str:
    """The text a value is kept as: a sealed value's envelope, else compact JSON."""
    if isinstance(value, Sealed):
        return value.text
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def object_key(environment: str, sha256: str, generation: str) -> str:
    """The key of the object holding a value whose bytes hash to ``sha256``, in its
    object record's ``generation`` (see :class:`ObjectRecord`)."""
    return f"{environment}/values/{sha256}/{generation}"


def new_generation() -> str:
    """A fresh generation for an object record made now (random: never used again)."""
    return secrets.token_hex(8)


def generation_of(reference: Reference) -> str:
    """The generation a reference's object was written in (the key's last part)."""
    return reference.key.rsplit("/", 1)[-1]


def other_size(length: object, size: int) -> str:
    """Why an object of ``length`` bytes is not read for a reference of ``size``."""
    return f"its object holds {length} bytes, not the {size} its reference says (not read)"


_GENERATION = re.compile("[0-9a-f]+")
"""A generation as :func:`new_generation` makes them: hexadecimal digits."""


def misplaced(reference: Reference, environment: str) -> str | None:
    """Why ``reference`` cannot name a value of ``environment``, or ``None`` when it can:
    its key must be the one :func:`object_key` gives for its own SHA-256 in that
    environment (``{environment}/values/{sha256}/{generation}``). A record is only ever
    written with such a reference, so any other key (another environment's object, an
    object of the bucket that is no value) was put there by someone else."""
    prefix = f"{environment}/values/{reference.sha256}/"
    if not reference.key.startswith(prefix) or not _HEX_64.fullmatch(reference.sha256):
        return (
            f"its key is not an object of environment {environment!r} holding a value "
            f"whose SHA-256 is the reference's ({prefix}...)"
        )
    if not _GENERATION.fullmatch(reference.key[len(prefix) :]):
        return f"its key is not an object of environment {environment!r} ({prefix}<generation>)"
    if reference.size < 0:
        return "its size is negative"
    return None


# Object records -------------------------------------------------------------------
#
# Records share an object when their values are the same, so an object goes only when no
# record references it. Each object has a record in the run table counting its holders:
# every write that stores a reference adds one in the same transaction; deleting a run
# (``runs prune``) takes its references off in the same transaction and lists the record
# on the agenda. Maintenance deletes a listed record that still has no holder, then its
# object. A writer pins the record before it writes the object (a pinned record is not
# deleted), and a new record gets a new generation, so an object's key is never used by
# two records: a late delete cannot remove an object a newer record counts.

PIN_DURATION = timedelta(minutes=15)
"""How long a writer's pin keeps an object record (and so its object) from deletion:
the writer writes the object and the record that references it within it."""
RELEASE_GRACE = timedelta(hours=1)
"""How long an object whose last holder went stays, before maintenance deletes it."""


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """One object of the payload bucket as the run table counts it."""

    sha256: str
    generation: str
    holders: int
    """Records (runs, tokens) that reference the object."""
    size: int
    listed_at: datetime | None = None
    """When maintenance looks at it (after its holders went, or a writer pinned it)."""
    pinned_until: datetime | None = None

    def removable(self, now: datetime) -> bool:
        """Whether maintenance may delete it (and its object) now."""
        pinned = self.pinned_until is not None and self.pinned_until > now
        return self.holders <= 0 and not pinned


def moved_record(reference: Reference) -> str:
    """Why a write of ``reference`` was refused: its object record was removed (or made
    again) after the writer pinned it, which a writer more than
    :data:`PIN_DURATION` late meets; writing the value again succeeds."""
    return (
        f"the object record of {reference} was removed after it was pinned; write the value again"
    )


def references_in(values: Iterable[Any]) -> Counter[Reference]:
    """The references among ``values``, each counted as often as it occurs."""
    return Counter(v.reference for v in values if isinstance(v, Sealed) and v.reference is not None)


def run_references(run: Run) -> Counter[Reference]:
    """What a run item references: its payload, result, steps and wait results."""
    return references_in([run.payload, run.result, *run.steps.values(), *run.wait_results.values()])


def added_references(before: Run, after: Run) -> Counter[Reference]:
    """The references a write of ``after`` over ``before`` adds (values are only ever
    added to a run)."""
    same = after.result is before.result and after.steps is before.steps
    if same and after.wait_results is before.wait_results:
        return Counter()
    return run_references(after) - run_references(before)


def _where(path: tuple[str, ...]) -> str:
    """A JSONPath-like location: ``$.items[3]["a key"]``."""
    shown = path if len(path) <= _SHOWN_SEGMENTS else (*path[:_SHOWN_SEGMENTS], "...")
    return "$" + "".join(shown)


def _segment(key: object) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    shown = json.dumps(key) if isinstance(key, str) else repr(key)
    return f"[{shown}]"


def _check_text(text: str, what: str, path: tuple[str, ...], *, in_key: bool) -> None:
    found = _SURROGATE.search(text)
    if found is not None:
        place = f"a key of {_where(path)}" if in_key else _where(path)
        raise InvalidPayloadError(
            f"{what} contains a lone surrogate (U+{ord(found.group()):04X}) in {place}; "
            "strings must be valid Unicode"
        )


def check_json(value: object, *, what: str) -> None:
    """Raise :class:`InvalidPayloadError` if ``value`` is nested deeper than
    :data:`MAX_JSON_DEPTH` or holds a lone surrogate (in a string or an object key).

    Types :mod:`json` cannot write are left for it to refuse. A value that contains
    itself is reported as too deep."""
    pending: list[tuple[object, tuple[str, ...]]] = [(value, ())]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str):
            _check_text(item, what, path, in_key=False)
            continue
        if not isinstance(item, dict | list | tuple):
            continue
        if len(path) >= MAX_JSON_DEPTH:
            raise InvalidPayloadError(
                f"{what} is nested deeper than {MAX_JSON_DEPTH} levels of arrays and "
                f"objects (at {_where(path)})"
            )
        if isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    _check_text(key, what, path, in_key=True)
                pending.append((child, (*path, _segment(key))))
        else:
            pending.extend((child, (*path, f"[{n}]")) for n, child in enumerate(item))


def encode_json(value: JSON, *, what: str, limit_bytes: int) -> str:
    """Compact JSON text for ``value``; raises if it is not JSON, is nested too deeply,
    holds a lone surrogate or is over the limit."""
    check_json(value, what=what)
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidPayloadError(f"{what} is not JSON-serialisable: {exc}") from None
    size = len(text.encode("utf-8"))
    if size > limit_bytes:
        raise PayloadTooLarge(what, size, limit_bytes)
    return text


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str, *, what: str) -> JSON:
    """The value of JSON text given by a user (``--payload`` on the command line), held
    to the same rules as :func:`encode_json` but for size; raises
    :class:`InvalidPayloadError` saying what is wrong and where."""
    try:
        value: JSON = json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:  # JSONDecodeError, NaN or Infinity
        raise InvalidPayloadError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidPayloadError(
            f"{what} is nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
        ) from None
    check_json(value, what=what)
    return value


def decode_json(text: str | None) -> JSON:
    """A stored value read back: the JSON value :func:`encode_json` wrote, or the
    :class:`~runlane_sqs.core.values.Sealed` reference an envelope holds."""
    if text is None:
        return None
    if text.startswith(ENVELOPE_MARK):
        return Sealed.parse(text)
    try:
        value: JSON = json.loads(text)
    except RecursionError:
        raise InvalidPayloadError(
            f"a stored value is nested deeper than {MAX_JSON_DEPTH} levels"
        ) from None
    return value
