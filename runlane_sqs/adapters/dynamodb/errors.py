"""What DynamoDB's errors mean: botocore errors translated into runlane errors at the
adapter edge, and the refusals of conditional writes and transactions, which the store
interprets itself. The store's sender (:class:`~.store.Sender`) enters this module only
when a request fails."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    MissingParametersError,
    ParamValidationError,
    ValidationError,
)

from runlane_sqs.adapters.dynamodb.requests import Request
from runlane_sqs.core.errors import MissingResourceError, StorageError, StorageUnavailable
from runlane_sqs.ports.transactions import RefusalReason

TRANSIENT_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
    }
)

MALFORMED_CODES = frozenset({"ValidationException", "SerializationException"})
"""DynamoDB refused the request itself: sending it again cannot succeed."""
PARAMETER_ERRORS = (ParamValidationError, ValidationError, MissingParametersError)
"""botocore refused the request before sending it: permanent, not a network failure."""


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


CANCELLED = "TransactionCanceledException"
"""DynamoDB's code for a transaction it cancelled (each action's reason comes with it)."""
NOT_REFUSED = "None"
"""DynamoDB's reason for an action of a cancelled transaction that was not refused."""
CONDITION_FAILED_REASON = "ConditionalCheckFailed"
"""DynamoDB's reason for an action of a cancelled transaction whose condition failed."""
REASONS = {
    NOT_REFUSED: RefusalReason.NONE,
    CONDITION_FAILED_REASON: RefusalReason.CONDITION_FAILED,
    "TransactionConflict": RefusalReason.CONFLICT,
}
"""DynamoDB's reasons for an action of a cancelled transaction, as the library reads them
(any other is :attr:`RefusalReason.OTHER`)."""


@dataclass(frozen=True, slots=True)
class ActionRefused:
    """One action's part in a cancelled transaction."""

    reason: RefusalReason
    item: dict[str, Any] | None
    """The item as the refusal found it, when the action asked for it
    (``ReturnValuesOnConditionCheckFailure=ALL_OLD``) and there was one."""
    code: str
    """DynamoDB's own code, for messages."""
    message: str

    @property
    def condition_failed(self) -> bool:
        return self.reason is RefusalReason.CONDITION_FAILED


def refused_action(reason: Mapping[str, Any]) -> ActionRefused:
    """One of DynamoDB's ``CancellationReasons``, read."""
    code = str(reason.get("Code") or "None")
    return ActionRefused(
        REASONS.get(code, RefusalReason.OTHER),
        reason.get("Item"),
        code,
        str(reason.get("Message") or ""),
    )


def cancellation_reasons(exc: ClientError) -> list[ActionRefused]:
    """Why DynamoDB cancelled a transaction: one reason per action, in the actions' order
    (empty for any other error)."""
    if error_code(exc) != CANCELLED:
        return []
    reasons: list[dict[str, Any]] = exc.response.get("CancellationReasons") or []  # type: ignore[assignment]
    return [refused_action(reason) for reason in reasons]


def conflicted(reasons: list[ActionRefused]) -> bool:
    """Whether another transaction was writing one of the items at the same moment."""
    return any(r.reason is RefusalReason.CONFLICT for r in reasons)


def translate(exc: Exception, *, table: str, endpoint: str | None) -> NoReturn:
    """Raise the runlane error for a botocore error; a refusal the store interprets itself
    (:data:`CONDITION_CODES`) is raised as it came."""
    where = endpoint or "the default AWS endpoint"
    if isinstance(exc, ClientError):
        code = error_code(exc)
        if code in CONDITION_CODES:
            raise exc
        if code == "ResourceNotFoundException":
            raise MissingResourceError(
                f"DynamoDB table {table!r} does not exist at {where}; create it with "
                "app.provision() (local use) or your CloudFormation stack (AWS)"
            ) from exc
        if code in TRANSIENT_CODES:
            raise StorageUnavailable(f"DynamoDB at {where} is unavailable: {code}") from exc
        raise StorageError(f"DynamoDB request failed: {exc}") from exc
    if isinstance(exc, PARAMETER_ERRORS):
        raise StorageError(f"DynamoDB request is malformed: {exc}") from exc
    if isinstance(exc, BotoCoreError):
        raise StorageUnavailable(f"cannot reach DynamoDB at {where}: {exc}") from exc
    raise exc


def refused_as_malformed(exc: BaseException) -> bool:
    """Whether ``exc``, raised by :func:`translate`, says the request itself was malformed
    (a ``ValidationException``, or botocore's parameter validation): a permanent
    :class:`StorageError`, never :class:`StorageUnavailable`."""
    cause = exc.__cause__
    if isinstance(cause, ClientError):
        return error_code(cause) in MALFORMED_CODES
    return isinstance(cause, PARAMETER_ERRORS)


CONDITION_FAILED = "ConditionalCheckFailedException"
"""DynamoDB's code for a single write whose condition did not hold."""
CONDITION_CODES = frozenset({CONDITION_FAILED, CANCELLED})
"""Refusals the store itself interprets (a conflict, a key held), not translated here."""


@dataclass(frozen=True, slots=True)
class Refused:
    """DynamoDB refused a conditional write on its condition: nothing was written."""

    item: dict[str, Any] | None
    """The item as the refusal found it (the write that won), when the request asked
    for it (``ReturnValuesOnConditionCheckFailure=ALL_OLD``) and there was one."""


def refusal_of(exc: ClientError) -> Refused:
    """The refusal ``exc`` reports; ``exc`` itself is raised again unless its condition
    failed."""
    if error_code(exc) != CONDITION_FAILED:
        raise exc
    return Refused(exc.response.get("Item"))  # type: ignore[arg-type]


class Send(Protocol):
    """How the run store and its parts send a request (:class:`~.store.Sender`)."""

    def __call__(self, operation: str, request: Request) -> Any:
        """The response to ``operation`` (``"update_item"``) sent with ``request``; a
        botocore error raised as :func:`translate` says (a refusal as it came)."""

    def conditional(self, operation: str, request: Request) -> dict[str, Any] | Refused:
        """Send a conditional write: its response, or :class:`Refused` when its condition
        failed (one request either way; other errors are raised)."""


class AsyncSend(Protocol):
    """:class:`Send` for the async run store (:class:`~.aio.AsyncSender`)."""

    async def __call__(self, operation: str, request: Request) -> Any: ...

    async def conditional(self, operation: str, request: Request) -> dict[str, Any] | Refused: ...
