"""Every error the library raises derives from :class:`RunlaneError`.

Vendor errors (botocore) are translated into these at the adapter edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runlane_sqs.core.model import Run


class RunlaneError(Exception):
    """Root of every runlane-sqs error."""


class ConfigurationError(RunlaneError):
    """The app, a task or the environment is configured wrongly."""


class UnknownTaskError(RunlaneError):
    """A task name that is not registered with the app."""

    def __init__(self, name: str, known: list[str]) -> None:
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(f"unknown task {name!r}; registered tasks: {listed}")
        self.name = name


class InvalidPayloadError(RunlaneError):
    """A payload or result that cannot be stored as JSON, or that its task's declared type
    refuses; then ``errors`` holds each validation error's field ``path``, ``message`` and
    ``kind`` (all of them: the message names the first few)."""

    def __init__(self, message: str, errors: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(message)
        self.errors = list(errors)


class PayloadTooLarge(InvalidPayloadError):
    """A payload or result over the configured size limit."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes as JSON; the limit is {limit} bytes")
        self.size = size
        self.limit = limit


class InvalidResult(InvalidPayloadError):
    """A handler returned a value its task's declared result type refuses (the attempt
    fails; docs/typed-tasks.md)."""


class PayloadMismatch(RunlaneError):
    """A stored payload no longer validates against its task's payload type (the type
    changed while the run waited): the attempt stops before the handler is called and the
    run is parked ``payload_mismatch`` until code that reads it is deployed and an operator
    unparks it, or it is cancelled (docs/typed-tasks.md, "When the type changes").
    ``errors`` holds each validation error's field ``path``, ``message`` and ``kind``."""

    def __init__(self, task: str, errors: list[dict[str, Any]], described: str) -> None:
        super().__init__(
            f"the stored payload of task {task!r} no longer validates against its payload "
            f"type: {described}"
        )
        self.task = task
        self.errors = errors

    def details(self) -> dict[str, Any]:
        """What the park event records: the task and each validation error."""
        return {"task": self.task, "errors": list(self.errors)}


class ValueUnreadable(RunlaneError):
    """A stored value (a payload, a result, a step's or a wait's result, a token's
    value) cannot be read back: its object in the payload bucket is missing or does not
    match the size and SHA-256 its record keeps, no bucket is configured, or a codec
    that encoded it is missing or cannot decode it (another key, changed bytes).
    Reading it again cannot help, so an attempt that meets one fails without retry."""

    def __init__(self, what: str, owner: str, reference: object, reason: str) -> None:
        super().__init__(f"{what} of {owner} cannot be read: {reason}; it is kept as {reference}")
        self.owner = owner
        self.reference = reference
        self.reason = reason


class CodecError(RunlaneError):
    """A codec of the app (``Runlane(codec=...)``) could not encode a value; nothing was
    written. The message names the codec and the value."""


class InvalidKeyError(RunlaneError):
    """An idempotency or singleton key that is empty or malformed."""


class RunNotFound(RunlaneError):
    """No run with that id in this environment."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} not found")
        self.run_id = run_id


class ScheduleNotFound(RunlaneError):
    """No stored schedule with that id in this environment (and none the app defines)."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(f"schedule {schedule_id!r} not found")
        self.schedule_id = schedule_id


class OperationNotFound(RunlaneError):
    """No bulk operation with that id in this environment."""

    def __init__(self, operation_id: str) -> None:
        super().__init__(f"no bulk operation {operation_id} in this environment")
        self.operation_id = operation_id


class RunWaitTimedOut(RunlaneError):
    """``app.runs.wait`` gave up before the run finished; ``run`` is its last state."""

    def __init__(self, run: Run) -> None:
        super().__init__(f"run {run.id!r} is still {run.status.value} after the timeout")
        self.run = run


class RunNotSucceeded(RunlaneError):
    """A run's result was asked for (``task.result_of(run)``) but the run did not succeed:
    ``status`` is what it is instead."""

    def __init__(self, run_id: str, status: str) -> None:
        super().__init__(f"run {run_id!r} is {status}: it has no result")
        self.run_id = run_id
        self.status = status


class StepError(RunlaneError):
    """A step name used twice in one attempt, or from another place in the code."""


class InvalidCursor(RunlaneError):
    """A cursor that this library did not produce (or that was damaged)."""


class IllegalTransition(RunlaneError):
    """The run's (or schedule's) current status does not allow the requested change."""


class StorageError(RunlaneError):
    """DynamoDB failed in a way the caller cannot fix by retrying the same write."""


class StorageUnavailable(StorageError):
    """DynamoDB could not be reached or throttled us; retrying later may succeed."""


class ObjectUnreadable(StorageError):
    """The payload bucket refused to read an object (``AccessDenied``): without
    ``s3:ListBucket`` S3 answers so for a key that does not exist, as for one the role
    may not read. Readers report it as :class:`ValueUnreadable`."""


class InvalidTransaction(RunlaneError):
    """A transaction DynamoDB would refuse as a whole (more than 100 actions, over 4 MB,
    two actions on one item, a malformed action), found before anything is sent, or
    refused by DynamoDB itself. Nothing of it was written."""


class TransactionCancelled(RunlaneError):
    """DynamoDB cancelled a transaction (a condition failed, a key is held, another
    transaction was writing an item): nothing of it was written, neither the caller's
    writes nor its runs.

    ``reasons`` says why in words, one line per action that failed, naming the action
    (``action 0, Put into 'orders'``); ``codes`` has DynamoDB's code for every action in
    the request's order (``"None"`` for the ones that did not fail); ``held_by`` is the
    run that holds an idempotency or singleton key when that cancelled it."""

    def __init__(
        self, reasons: Sequence[str], codes: Sequence[str], held_by: str | None = None
    ) -> None:
        super().__init__("the transaction was cancelled: " + "; ".join(reasons))
        self.reasons = tuple(reasons)
        self.codes = tuple(codes)
        self.held_by = held_by


class MissingResourceError(ConfigurationError):
    """The table or a queue does not exist."""


class TransportError(RunlaneError):
    """SQS failed."""


class ConflictError(RunlaneError):
    """A conditional write lost: the stored run is not in the state the write expected.

    ``current`` is the run as stored when the write was refused (``None`` when it is gone),
    taken from the refused write itself rather than a second read.
    """

    def __init__(self, run_id: str, current: Run | None) -> None:
        super().__init__(f"run {run_id!r} changed before the write")
        self.run_id = run_id
        self.current = current


class LeaseLost(RunlaneError):
    """The attempt no longer holds the run's lease; nothing it writes is recorded."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"lease on run {run_id!r} was lost; the write was refused")
        self.run_id = run_id


# Users import these from ``runlane_sqs.errors`` (and failures record their qualified
# names, e.g. ``runlane_sqs.errors.PayloadTooLarge``), so that is the module they name.
for _error in (
    RunlaneError,
    ConfigurationError,
    UnknownTaskError,
    InvalidPayloadError,
    PayloadTooLarge,
    InvalidKeyError,
    RunNotFound,
    RunWaitTimedOut,
    ScheduleNotFound,
    OperationNotFound,
    StepError,
    InvalidCursor,
    IllegalTransition,
    StorageError,
    StorageUnavailable,
    MissingResourceError,
    TransportError,
    ConflictError,
    LeaseLost,
    ValueUnreadable,
    CodecError,
    InvalidTransaction,
    TransactionCancelled,
    InvalidResult,
    PayloadMismatch,
    RunNotSucceeded,
):
    _error.__module__ = "runlane_sqs.errors"


class NoFreeSlot(RunlaneError):
    """A claim found every slot of a concurrency limit's scope held: nothing was
    written, and the run is as the claim read it."""

    def __init__(self, run_id: str, scope: str, holders: int, limit: int) -> None:
        super().__init__(f"run {run_id!r}: all {limit} slot(s) of {scope!r} are held")
        self.run_id = run_id
        self.scope = scope
        self.holders = holders
        self.limit = limit


class OrderMoved(RunlaneError):
    """A trigger's write found its ordering key's order record changed since it was read
    (another trigger took the place, or a run of the key finished): nothing was written;
    read the record again and retry."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the order record of ordering key {key!r} changed; try again")
        self.key = key
