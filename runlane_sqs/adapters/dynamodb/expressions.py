"""The one way the adapter writes DynamoDB expressions: update, condition, key
condition, filter and projection expressions as text, names and values as numbered
placeholders.

Every request of :mod:`runlane_sqs.adapters.dynamodb` that carries an expression builds
it with :class:`Expressions`::

    x = Expressions(RunItem)
    x.set("lease_expires_at", expires_ms)            # SET #0 = :0
    x.add("collapsed", 1)                            # ADD #1 :1
    x.require(x.compare("lease_token", "=", token))  # #2 = :2
    x.require(x.either(x.absent("holders"), x.compare(x.size("holders"), "<", 3)))
    request = x.request({"TableName": table, "Key": key})

Conditions are text (:meth:`Expressions.compare`, :meth:`~Expressions.exists`,
:meth:`~Expressions.either`...) until a request uses them: :meth:`~Expressions.require`
(``ConditionExpression``), :meth:`~Expressions.key` (``KeyConditionExpression``) and
:meth:`~Expressions.filter` (``FilterExpression``) join theirs with ``AND``.

A value's wire type comes from the item model when it declares the attribute (run items
with :class:`~runlane_sqs.adapters.dynamodb.items.RunItem`, tokens, keys), else from the
Python value: ``str`` is ``S``, ``int`` ``N``, a set of text ``SS``, and a wire-format
``dict`` is sent as it is. The builder is plain string work: the run writes every
attempt sends go through it, and PynamoDB's expression objects cost about a quarter of a
millisecond per request against a few dozen microseconds here (docs/performance.md,
"Worker CPU").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pynamodb.attributes import Attribute
from pynamodb.models import Model

from runlane_sqs.adapters.dynamodb.items import RunItem

AttributePath = str | tuple[str, ...]
"""An attribute's name, or the names from an attribute down to one key of a map."""

_DECLARED: dict[type[Model], dict[str, Attribute[Any]]] = {}


def _declared(model: type[Model]) -> dict[str, Attribute[Any]]:
    attributes = _DECLARED.get(model)
    if attributes is None:
        attributes = _DECLARED[model] = model.get_attributes()
    return attributes


def wire_value(name: str, value: Any, model: type[Model] = RunItem) -> dict[str, Any]:
    """An attribute's value in the wire format the model's declared type asks for."""
    return _typed(_declared(model)[name], name, value)


def _typed(attribute: Attribute[Any], name: str, value: Any) -> dict[str, Any]:
    kind = attribute.attr_type
    if kind not in ("S", "N", "SS"):
        raise TypeError(f"attribute {name!r} ({kind}) is not written by value")
    if kind == "S" and not isinstance(value, str):
        raise TypeError(f"attribute {name!r} takes text, not {type(value).__name__}")
    return {kind: attribute.serialize(value)}


def plain_wire(value: Any) -> dict[str, Any]:
    """A value no model declares, in the wire format its Python type says."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, int) and not isinstance(value, bool):
        return {"N": str(value)}
    if isinstance(value, set | frozenset) and all(isinstance(v, str) for v in value):
        return {"SS": sorted(value)}
    raise TypeError(f"no wire type for {type(value).__name__} values")


class Operand(str):
    """Expression text built by :class:`Expressions` (a placeholder, a path, a function
    call): used as it is where a value would be typed and given a placeholder."""

    __slots__ = ()


class Expressions:
    """The expressions of one request and their placeholders."""

    def __init__(self, model: type[Model] | None = None) -> None:
        self._declared = _declared(model) if model is not None else {}
        self._names: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self._sets: list[str] = []
        self._removes: list[str] = []
        self._adds: list[str] = []
        self._deletes: list[str] = []
        self._conditions: list[str] = []
        self._keys: list[str] = []
        self._filters: list[str] = []
        self._projection: list[str] = []

    # operands ------------------------------------------------------------------------

    def name(self, path: AttributePath) -> Operand:
        """The placeholder of an attribute, or of a map key (``("lanes", "3")``)."""
        return Operand(self._path(path))

    def _path(self, path: AttributePath) -> str:
        if isinstance(path, tuple):
            return ".".join(self._name(part) for part in path)
        return self._name(path)

    def _name(self, name: str) -> str:
        placeholder = self._names.get(name)
        if placeholder is None:
            placeholder = self._names[name] = f"#{len(self._names)}"
        return placeholder

    def value(self, value: Any, path: AttributePath | None = None) -> Operand:
        """The placeholder of ``value``, typed as the model declares ``path`` (or as its
        Python type says); an :class:`Operand` is used as it is."""
        return value if isinstance(value, Operand) else Operand(self._value(value, path))

    def _value(self, value: Any, path: AttributePath | None = None) -> str:
        if isinstance(value, Operand):
            return value
        attribute = self._declared.get(path) if isinstance(path, str) else None
        if attribute is not None and isinstance(path, str) and not isinstance(value, dict):
            wire = _typed(attribute, path, value)
        else:
            wire = plain_wire(value)
        placeholder = f":{len(self._values)}"
        self._values[placeholder] = wire
        return placeholder

    def _operand(self, operand: AttributePath | Operand) -> str:
        return operand if isinstance(operand, Operand) else self._path(operand)

    def if_not_exists(self, path: AttributePath, value: Any) -> Operand:
        """``path``'s value, or ``value`` where the item has none."""
        return Operand(f"if_not_exists({self._path(path)}, {self._value(value, path)})")

    def plus(self, left: AttributePath | Operand, right: Any) -> Operand:
        return Operand(f"{self._operand(left)} + {self._value(right)}")

    def minus(self, left: AttributePath | Operand, right: Any) -> Operand:
        return Operand(f"{self._operand(left)} - {self._value(right)}")

    def size(self, path: AttributePath) -> Operand:
        return Operand(f"size({self._path(path)})")

    # updates -------------------------------------------------------------------------

    def set(self, path: AttributePath, value: Any) -> None:
        """Set ``path`` to ``value`` (an :class:`Operand` or a value), or remove it when
        ``value`` is ``None``."""
        if value is None:
            self._removes.append(self._path(path))
        else:
            self._sets.append(f"{self._path(path)} = {self._value(value, path)}")

    def append(self, path: AttributePath, entries: list[dict[str, Any]]) -> None:
        """Append wire-format ``entries`` to a list attribute."""
        name = self._path(path)
        self._sets.append(f"{name} = list_append({name}, {self._value({'L': entries})})")

    def remove(self, *paths: AttributePath) -> None:
        self._removes.extend(self._path(path) for path in paths)

    def add(self, path: AttributePath, value: Any) -> None:
        """Add a number to ``path`` (from 0 where it is absent), or text to a set."""
        self._adds.append(f"{self._path(path)} {self._value(value, path)}")

    def delete(self, path: AttributePath, value: Any) -> None:
        """Take the members of ``value`` (a set) out of the set ``path``."""
        self._deletes.append(f"{self._path(path)} {self._value(value, path)}")

    # conditions ----------------------------------------------------------------------

    def compare(self, left: AttributePath | Operand, operator: str, right: Any) -> str:
        """``left <operator> right`` (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``), the
        right side typed as the model declares ``left``."""
        typed_by = left if not isinstance(left, Operand) else None
        return f"{self._operand(left)} {operator} {self._value(right, typed_by)}"

    def exists(self, path: AttributePath) -> str:
        return f"attribute_exists({self._path(path)})"

    def absent(self, path: AttributePath) -> str:
        return f"attribute_not_exists({self._path(path)})"

    def equal_or_absent(self, path: AttributePath, value: Any) -> str:
        """``path`` is ``value``, or absent when ``value`` is ``None``."""
        return self.absent(path) if value is None else self.compare(path, "=", value)

    def is_in(self, path: AttributePath, values: Iterable[Any]) -> str:
        placeholders = ", ".join(self._value(v, path) for v in values)
        return f"{self._path(path)} IN ({placeholders})"

    def between(self, path: AttributePath, low: Any, high: Any) -> str:
        """``low <= path <= high`` (both bounds included)."""
        return f"{self._path(path)} BETWEEN {self._value(low, path)} AND {self._value(high, path)}"

    def begins_with(self, path: AttributePath, prefix: str) -> str:
        return f"begins_with({self._path(path)}, {self._value(prefix)})"

    def contains(self, path: AttributePath, member: Any) -> str:
        return f"contains({self._path(path)}, {self._value(member)})"

    def either(self, *conditions: str) -> str:
        """One of ``conditions`` holds."""
        return " OR ".join(f"({c})" if " AND " in c else c for c in conditions)

    def require(self, *conditions: str) -> None:
        """The request is made only if every condition holds (``ConditionExpression``)."""
        self._conditions.extend(conditions)

    def key(self, *conditions: str) -> None:
        """A query's key condition: the partition key, and maybe the sort key."""
        self._keys.extend(conditions)

    def filter(self, *conditions: str) -> None:
        """The items a query reads but does not return (``FilterExpression``)."""
        self._filters.extend(conditions)

    def project(self, *paths: AttributePath) -> None:
        """Read only ``paths`` (``ProjectionExpression``)."""
        self._projection.extend(self._path(path) for path in paths)

    # the request ---------------------------------------------------------------------

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        """``request`` (the keyword arguments of one client call, or one action of a
        transaction) with these expressions and their placeholders added."""
        clauses = (
            ("SET", self._sets),
            ("REMOVE", self._removes),
            ("ADD", self._adds),
            ("DELETE", self._deletes),
        )
        update = " ".join(f"{clause} {', '.join(parts)}" for clause, parts in clauses if parts)
        if update:
            request["UpdateExpression"] = update
        for field, conditions in (
            ("ConditionExpression", self._conditions),
            ("KeyConditionExpression", self._keys),
            ("FilterExpression", self._filters),
        ):
            if conditions:
                request[field] = _all_of(conditions)
        if self._projection:
            request["ProjectionExpression"] = ", ".join(self._projection)
        if self._names:
            request["ExpressionAttributeNames"] = {ph: name for name, ph in self._names.items()}
        if self._values:
            request["ExpressionAttributeValues"] = self._values
        return request


def _all_of(conditions: list[str]) -> str:
    if len(conditions) == 1:
        return conditions[0]
    return " AND ".join(f"({c})" if " OR " in c else c for c in conditions)
