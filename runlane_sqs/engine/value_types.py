"""A task's declared types: the payload its handler takes and the result it returns, read
from the handler's annotations (or given on ``app.task``), validated and converted by
pydantic's ``TypeAdapter`` (docs/typed-tasks.md).

A plain JSON annotation declares nothing: none at all, ``Any``, ``object``,
:data:`~runlane_sqs.core.model.JSON`, or one built from ``dict``, ``list``, ``str``,
``int``, ``float``, ``bool`` and ``None`` (``dict[str, Any]``, ``list[int] | None``). Its
values are taken and stored as they are, and pydantic is never imported. Anything else
(a pydantic model, a dataclass, a ``TypedDict``, an enum, a union of them) is validated
when a run is triggered, before anything is written; converted to that type when a
worker calls the handler; and converted back to JSON when the handler's result is
stored. A stored payload that no longer validates (the type changed while the run
waited) stops the run with a :class:`PayloadMismatch`: it is parked, as a run whose
history diverged is, until code that reads it is deployed.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from runlane_sqs.core.errors import (
    ConfigurationError,
    InvalidPayloadError,
    InvalidResult,
    PayloadMismatch,
)
from runlane_sqs.core.model import JSON

PLAIN = (dict, list, str, int, float, bool, type(None))
"""The types a plain JSON annotation is built from."""
PLAIN_ORIGINS = (
    dict,
    list,
    collections.abc.Mapping,
    collections.abc.MutableMapping,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
)
"""Containers whose parameters decide whether an annotation is plain."""
UNDECLARED: Any = inspect.Parameter.empty
SHOWN_ERRORS = 5
"""Validation errors an error message lists (the rest are counted)."""
PYDANTIC = "pydantic>=2.7,<3"


def is_plain(annotation: Any) -> bool:
    """Whether ``annotation`` declares plain JSON (nothing to validate or convert)."""
    if annotation is UNDECLARED or annotation is Any or annotation is object:
        return True
    if annotation is None or annotation in PLAIN:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType or origin in PLAIN_ORIGINS:
        return all(arg is Ellipsis or is_plain(arg) for arg in typing.get_args(annotation))
    return False


def type_name(annotation: Any) -> str:
    """A declared type's name: a class's own, or the annotation as written."""
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def describe(errors: list[dict[str, JSON]]) -> str:
    """Validation errors in words: ``field.path: message`` for each of the first few."""
    shown = [f"{e['path'] or '(the value)'}: {e['message']}" for e in errors[:SHOWN_ERRORS]]
    more = len(errors) - SHOWN_ERRORS
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True, eq=False)
class ValueType:
    """One declared type and its ``TypeAdapter`` (made when the task is registered)."""

    annotation: Any
    owner: str
    """Whose value it is, in errors: ``payload of task 'ship'``."""

    @cached_property
    def adapter(self) -> Any:
        try:
            from pydantic import TypeAdapter  # noqa: PLC0415 (only for a declared type)
        except ImportError as exc:
            raise ConfigurationError(
                f"the {self.owner} is declared as {self.annotation!r}: validating it needs "
                f"pydantic (pip install 'runlane-sqs[pydantic]', or {PYDANTIC!r})"
            ) from exc
        try:
            return TypeAdapter(self.annotation)
        except Exception as exc:  # pydantic's errors for a type it cannot validate
            raise ConfigurationError(
                f"the {self.owner} is declared as {self.annotation!r}, which pydantic cannot "
                "validate: declare a type it validates, or give app.task payload_type= or "
                f"result_type= (Any takes the value as plain JSON). pydantic said: {exc}"
            ) from exc

    def check(self, value: object) -> tuple[Any, list[dict[str, JSON]] | None]:
        """``value`` as the declared type (a dict validated into a model, a stored JSON
        value converted back) and ``None``; or ``None`` and why it does not validate
        (each error's field ``path``, ``message`` and ``kind``)."""
        from pydantic import ValidationError  # noqa: PLC0415 (loaded with the adapter)

        try:
            return self.adapter.validate_python(value), None
        except ValidationError as exc:
            return None, [
                {
                    "path": ".".join(str(part) for part in error["loc"]),
                    "message": error["msg"],
                    "kind": error["type"],
                }
                for error in exc.errors(include_url=False, include_input=False)
            ]

    def validate(self, value: object) -> Any:
        """``value`` as the declared type; raises :class:`InvalidPayloadError` naming each
        field that is wrong."""
        checked, errors = self.check(value)
        if errors is not None:
            raise InvalidPayloadError(f"the {self.owner} is invalid: {describe(errors)}", errors)
        return checked

    def to_json(self, value: object) -> JSON:
        """A value of the declared type as JSON (a model's fields, dates as ISO text)."""
        return self.adapter.dump_python(value, mode="json")

    def json_schema(self) -> dict[str, JSON]:
        """The type's JSON Schema; raises :class:`ConfigurationError` naming the type when
        it has none (a field of a class pydantic validates with ``isinstance`` only, a
        callable): its values are validated all the same."""
        from pydantic.errors import PydanticInvalidForJsonSchema  # noqa: PLC0415 (as adapter)

        try:
            schema: dict[str, JSON] = self.adapter.json_schema()
        except PydanticInvalidForJsonSchema as exc:
            raise ConfigurationError(
                f"the {self.owner} is declared as {type_name(self.annotation)}, which has no "
                f"JSON Schema (pydantic: {exc.message}); its values are validated all the same"
            ) from None
        return schema


@dataclass(frozen=True)
class TaskTypes:
    """A task's payload and result types (``None``: plain JSON)."""

    task: str = ""
    payload: ValueType | None = None
    result: ValueType | None = None
    item: ValueType | None = None
    """A batched task's item: a trigger's payload is one item of the list the handler
    takes."""

    def trigger_payload(self, payload: object) -> tuple[Any, JSON]:
        """A trigger's payload: (as the task's key functions see it, as stored); raises
        :class:`InvalidPayloadError` before anything is written."""
        declared = self.item or self.payload
        if declared is None:
            return payload, payload
        value = declared.validate(payload)
        return value, declared.to_json(value)

    def handler_payload(self, payload: JSON) -> Any:
        """The stored payload as the handler takes it; raises :class:`PayloadMismatch`
        when it no longer validates."""
        if self.payload is None:
            return payload
        value, errors = self.payload.check(payload)
        if errors is not None:
            raise PayloadMismatch(self.task, errors, describe(errors))
        return value

    def stored_result(self, result: object) -> JSON:
        """What the handler returned, as stored; raises :class:`InvalidResult`."""
        if self.result is None:
            return result
        value, errors = self.result.check(result)
        if errors is not None:
            raise InvalidResult(f"the {self.result.owner} is invalid: {describe(errors)}", errors)
        return self.result.to_json(value)

    def schemas(self) -> dict[str, JSON]:
        """The JSON Schema of the payload (of one item, for a batched task) and of the
        result; ``None`` for plain JSON (any value)."""
        payload = self.item or self.payload
        return {
            "payload": payload.json_schema() if payload is not None else None,
            "result": self.result.json_schema() if self.result is not None else None,
        }

    def names(self) -> dict[str, str]:
        """The payload's and the result's type as code names them (``JSON`` for plain)."""
        payload = self.item or self.payload
        return {
            "payload": type_name(payload.annotation) if payload is not None else "JSON",
            "result": type_name(self.result.annotation) if self.result is not None else "JSON",
        }

    def result_value(self, result: JSON) -> Any:
        """A stored result as the declared type."""
        return result if self.result is None else self.result.validate(result)


PLAIN_TYPES = TaskTypes()
"""A task that declares nothing."""


def declared_types(
    fn: Callable[..., Any],
    task: str,
    *,
    payload_type: Any = UNDECLARED,
    result_type: Any = UNDECLARED,
    batched: bool = False,
) -> TaskTypes:
    """The types ``fn`` declares for its payload (its second parameter) and its result,
    each unless given; raises :class:`ConfigurationError` when they cannot be read."""
    payload, result = payload_type, result_type
    if payload is UNDECLARED or result is UNDECLARED:
        read_payload, read_result = _annotations(fn, task)
        payload = read_payload if payload is UNDECLARED else payload
        result = read_result if result is UNDECLARED else result
    if is_plain(payload) and is_plain(result):
        return PLAIN_TYPES
    item = None
    if batched and not is_plain(payload):
        if typing.get_origin(payload) not in (list, collections.abc.Sequence):
            raise ConfigurationError(
                f"task {task!r} is batched: its handler takes the list of items, so its "
                f"payload type must be list[...], not {payload!r}"
            )
        (item_type,) = typing.get_args(payload)
        item = None if is_plain(item_type) else ValueType(item_type, f"item of task {task!r}")
    types = TaskTypes(
        task=task,
        payload=None if is_plain(payload) else ValueType(payload, f"payload of task {task!r}"),
        result=None if is_plain(result) else ValueType(result, f"result of task {task!r}"),
        item=item,
    )
    for declared in (types.payload, types.result, types.item):
        if declared is not None:
            _ = declared.adapter  # a type pydantic cannot validate is refused now
    return types


def _annotations(fn: Callable[..., Any], task: str) -> tuple[Any, Any]:
    """The annotations of ``fn``'s payload parameter (its second: a callable object's or a
    bound method's own first is left out) and of its return, resolved;
    :data:`UNDECLARED` for each it leaves out."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or a C callable: nothing declared
        return UNDECLARED, UNDECLARED
    parameters = list(signature.parameters.values())
    payload = parameters[1].annotation if len(parameters) > 1 else UNDECLARED
    if payload is UNDECLARED and signature.return_annotation is UNDECLARED:
        return UNDECLARED, UNDECLARED
    try:  # annotations kept as text (``from __future__ import annotations``) are evaluated
        resolved = inspect.signature(fn, eval_str=True)
    except Exception as exc:  # a name the annotations use is not defined
        raise ConfigurationError(
            f"task {task!r}: its handler's annotations cannot be resolved ({exc}); define "
            "the types before the handler is registered, or give payload_type= and "
            "result_type= to app.task"
        ) from exc
    parameters = list(resolved.parameters.values())
    payload = parameters[1].annotation if len(parameters) > 1 else UNDECLARED
    return payload, resolved.return_annotation
