"""The run writes every attempt sends (the claim, the outcome, heartbeats), with their
update and condition expressions written as text.

Other requests build their expressions with PynamoDB's expression language
(:func:`runlane_sqs.adapters.dynamodb.requests.expressions`). These three are sent
once or twice per run by every worker, and PynamoDB builds, copies and serialises an
operand object per attribute: about a quarter of a millisecond per request against a
few dozen microseconds here (docs/performance.md, "Worker CPU"). Attribute types still
come from the model in :mod:`.items`; tests/contract holds both ways of writing to the
same behaviour.
"""

from __future__ import annotations

from typing import Any

from runlane_sqs.adapters.dynamodb.items import RunItem

ATTRIBUTES = RunItem.get_attributes()
"""The run item's attributes as the model declares them: type and serialisation."""


def wire_value(name: str, value: Any) -> dict[str, Any]:
    """A run attribute's value in the wire format its declared type asks for."""
    attribute = ATTRIBUTES[name]
    kind = attribute.attr_type
    if kind not in ("S", "N"):
        raise TypeError(f"run attribute {name!r} ({kind}) is not written by value")
    if kind == "S" and not isinstance(value, str):
        raise TypeError(f"run attribute {name!r} takes text, not {type(value).__name__}")
    return {kind: attribute.serialize(value)}


class RunWrite:
    """One ``UpdateItem`` of a run item: what it sets, removes and appends, and the
    conditions it is made on. Names and values become numbered placeholders."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self._sets: list[str] = []
        self._removes: list[str] = []
        self._conditions: list[str] = []

    def _name(self, name: str) -> str:
        placeholder = self._names.get(name)
        if placeholder is None:
            placeholder = self._names[name] = f"#{len(self._names)}"
        return placeholder

    def _value(self, wire: dict[str, Any]) -> str:
        placeholder = f":{len(self._values)}"
        self._values[placeholder] = wire
        return placeholder

    def set(self, name: str, value: Any) -> None:
        """Set ``name`` to ``value``, or remove it when ``value`` is ``None``."""
        if value is None:
            self._removes.append(self._name(name))
        else:
            self._sets.append(f"{self._name(name)} = {self._value(wire_value(name, value))}")

    def set_map_key(self, map_name: str, key: str, text: str) -> None:
        """Set one key of a map of text (the key already path-safe)."""
        path = f"{self._name(map_name)}.{self._name(key)}"
        self._sets.append(f"{path} = {self._value({'S': text})}")

    def append(self, list_name: str, entries: list[dict[str, Any]]) -> None:
        """Append wire-format ``entries`` to a list attribute."""
        name = self._name(list_name)
        self._sets.append(f"{name} = list_append({name}, {self._value({'L': entries})})")

    def require(self, name: str, operator: str, value: Any) -> None:
        """Written only if ``name <operator> value`` holds (``=``, ``<=``...)."""
        placeholder = self._value(wire_value(name, value))
        self._conditions.append(f"{self._name(name)} {operator} {placeholder}")

    def require_absent(self, name: str) -> None:
        """Written only if the item has no attribute ``name``."""
        self._conditions.append(f"attribute_not_exists({self._name(name)})")

    def require_equal_or_absent(self, name: str, value: Any) -> None:
        """Written only if ``name`` is ``value``, or absent when ``value`` is ``None``."""
        if value is None:
            self.require_absent(name)
        else:
            self.require(name, "=", value)

    def require_in(self, name: str, values: list[str]) -> None:
        placeholders = ", ".join(self._value(wire_value(name, v)) for v in values)
        self._conditions.append(f"{self._name(name)} IN ({placeholders})")

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` (a :data:`~runlane_sqs.adapters.dynamodb.requests.Request`, which
        this module cannot import: requests.py imports it) with this write's expressions
        added."""
        update = []
        if self._sets:
            update.append("SET " + ", ".join(self._sets))
        if self._removes:
            update.append("REMOVE " + ", ".join(self._removes))
        if update:
            request["UpdateExpression"] = " ".join(update)
        if self._conditions:
            request["ConditionExpression"] = " AND ".join(self._conditions)
        request["ExpressionAttributeNames"] = {ph: name for name, ph in self._names.items()}
        if self._values:
            request["ExpressionAttributeValues"] = self._values
        return request
