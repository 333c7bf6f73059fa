"""An in-memory DynamoDB: a boto3-client-shaped object that answers, from dicts under
one lock, the very requests the DynamoDB adapter sends.

The in-memory app keeps its runs here through
:class:`~runlane_sqs.adapters.dynamodb.store.DynamoRunStore`, so a storage change is
written once. Requests and responses are the low-level client's (attribute values in
wire form, ``{"S": "..."}``); refusals are ``botocore`` ``ClientError``\\s with
DynamoDB's codes, messages and fields (a failed condition's ``Item`` with
``ReturnValuesOnConditionCheckFailure=ALL_OLD``, a cancelled transaction's
``CancellationReasons``).

Why not moto in-process: its backend takes about half a millisecond per conditional
``UpdateItem`` even without botocore (it parses every expression again and deep-copies
items), where a run store in a dict takes tens of microseconds. Here each expression is
parsed once (a small recursive-descent parser), cached by its text, into a tree that
each request evaluates with its own names and values; writes copy only what they change,
so a response shares the stored values (callers must not change them).
``tests/contract/test_dynamodb_fake.py`` holds this fake to the moto server (and to
DynamoDB Local, AWS's own, where the two differ) by sending both the same requests. Its
refusals use the codes the DynamoDB store reads them by
(:mod:`runlane_sqs.adapters.dynamodb.errors`).

Supported: tables with a hash (and range) key and global secondary indexes (sparse;
``KEYS_ONLY``, ``INCLUDE`` and ``ALL`` projections) as ``CreateTable`` declares them;
``GetItem``, ``PutItem``, ``UpdateItem``, ``DeleteItem``, ``Query`` (key conditions,
``ScanIndexForward``, ``Limit`` counted before the filter, ``ExclusiveStartKey`` /
``LastEvaluatedKey``, ``Select=COUNT``), ``Scan``, ``BatchGetItem`` and
``TransactWriteItems`` (``Put``, ``Update``, ``Delete``, ``ConditionCheck``); condition,
filter, key-condition, update and projection expressions with nested map paths and list
indexes. Refused as DynamoDB refuses them: unused or undefined placeholders, keys of the
wrong shape, updates of key attributes, overlapping update paths, items over 400 KB,
transactions over 100 actions, over 4 MB or touching one item twice, consistent reads
of an index, empty sets, ``BETWEEN`` bounds the wrong way round.
Not modelled: capacity, the 1 MB page limit, TTL expiry, reserved words, numbers' 38
digits (numbers are kept as sent, as DynamoDB Local keeps them).
"""

from __future__ import annotations

import bisect
import functools
import operator
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from runlane_sqs.adapters.dynamodb.errors import (
    CANCELLED,
    CONDITION_FAILED,
    CONDITION_FAILED_REASON,
    NOT_REFUSED,
)
from runlane_sqs.core.limits import (
    MAX_ITEM_BYTES,
    MAX_TRANSACTION_ACTIONS,
    MAX_TRANSACTION_BYTES,
)

Wire = dict[str, Any]
"""One attribute value in wire form: ``{"S": "text"}``, ``{"N": "1"}``, ``{"M": {...}}``."""
WireItem = dict[str, Wire]
MAX_BATCH_GET_KEYS = 100
CONDITION_FAILED_MESSAGE = "The conditional request failed"


def _error(operation: str, code: str, message: str, **fields: Any) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": 400, "RetryAttempts": 0},
        **fields,
    }
    return ClientError(response, operation)


class _Invalid(Exception):
    """A ``ValidationException``; the operation that raised it names it."""


# --- parsing: each expression text once -------------------------------------------

_TOKENS = re.compile(
    r"\s*(?:(?P<name>#[A-Za-z0-9_]+)|(?P<value>:[A-Za-z0-9_]+)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<int>\d+)|(?P<op><>|<=|>=|[=<>(),.\[\]+\-]))"
)
_COMPARATORS = frozenset({"=", "<>", "<", "<=", ">", ">="})
Path = tuple[str | int, ...]
"""A document path: attribute names (``#placeholders`` or plain) and list indexes."""
Node = tuple[Any, ...]
"""A parsed expression: ``("and", a, b)``, ``("cmp", "=", left, right)``, ``("path", p)``..."""


class _Parser:
    def __init__(self, text: str, kind: str) -> None:
        self.kind = kind
        self.tokens: list[tuple[str, str]] = []
        position, text = 0, text.rstrip()
        while position < len(text):
            match = _TOKENS.match(text, position)
            if match is None or match.end() == position:
                self.fail(f'Syntax error; token: "{text[position:].split()[0]}"')
            assert match is not None and match.lastgroup is not None
            self.tokens.append((match.lastgroup, match.group(match.lastgroup)))
            position = match.end()
        self.at = 0
        self.names: set[str] = set()
        self.values: set[str] = set()
        self.bounds: list[tuple[str, str]] = []
        """The value placeholders of each ``BETWEEN`` of two values."""

    def fail(self, message: str) -> None:
        raise _Invalid(f"Invalid {self.kind}: {message}")

    def peek(self, ahead: int = 0) -> tuple[str, str]:
        at = self.at + ahead
        return self.tokens[at] if at < len(self.tokens) else ("end", "")

    def word(self, *words: str) -> bool:
        kind, text = self.peek()
        return kind == "word" and text.upper() in words

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "end":
            self.fail("Syntax error; token: <EOF>")
        self.at += 1
        return token

    def expect(self, text: str) -> None:
        if self.take()[1] != text:
            self.fail(f'Syntax error; token: "{self.tokens[self.at - 1][1]}"')

    def done(self) -> None:
        if self.at != len(self.tokens):
            self.fail(f'Syntax error; token: "{self.peek()[1]}"')

    # conditions: OR < AND < NOT < comparisons and functions
    def condition(self) -> Node:
        node = self.conjunction()
        while self.word("OR"):
            self.take()
            node = ("or", node, self.conjunction())
        return node

    def conjunction(self) -> Node:
        node = self.negation()
        while self.word("AND"):
            self.take()
            node = ("and", node, self.negation())
        return node

    def negation(self) -> Node:
        if self.word("NOT"):
            self.take()
            return ("not", self.negation())
        if self.peek()[1] == "(":
            self.take()
            node = self.condition()
            self.expect(")")
            return node
        if self.peek()[0] == "word" and self.peek(1)[1] == "(" and not self.word("SIZE"):
            return self.function()
        return self.comparison()

    def function(self) -> Node:
        name = self.take()[1]
        arity = {
            "attribute_exists": 1,
            "attribute_not_exists": 1,
            "attribute_type": 2,
            "begins_with": 2,
            "contains": 2,
        }.get(name)
        if arity is None:
            self.fail(f"Invalid function name; function: {name}")
        self.expect("(")
        arguments = [self.path()]
        for _ in range(1, arity or 1):
            self.expect(",")
            arguments.append(self.operand())
        self.expect(")")
        return ("fn", name, *arguments)

    def comparison(self) -> Node:
        left = self.operand()
        if self.word("BETWEEN"):
            self.take()
            low = self.operand()
            if not self.word("AND"):
                self.fail("Syntax error; BETWEEN needs AND")
            self.take()
            node = ("between", left, low, self.operand())
            if low[0] == "value" and node[3][0] == "value":
                self.bounds.append((low[1], node[3][1]))
            return node
        if self.word("IN"):
            self.take()
            self.expect("(")
            choices = [self.operand()]
            while self.peek()[1] == ",":
                self.take()
                choices.append(self.operand())
            self.expect(")")
            return ("in", left, choices)
        operator = self.take()[1]
        if operator not in _COMPARATORS:
            self.fail(f'Syntax error; token: "{operator}"')
        return ("cmp", operator, left, self.operand())

    def operand(self) -> Node:
        kind, text = self.peek()
        if kind == "value":
            self.take()
            self.values.add(text)
            return ("value", text)
        if kind == "word" and text == "size" and self.peek(1)[1] == "(":
            self.take()
            self.expect("(")
            path = self.path()
            self.expect(")")
            return ("size", path)
        return self.path()

    def path(self) -> Node:
        segments: list[str | int] = [self.segment()]
        while self.peek()[1] in (".", "["):
            if self.take()[1] == ".":
                segments.append(self.segment())
            else:
                kind, text = self.take()
                if kind != "int":
                    self.fail(f'Syntax error; token: "{text}"')
                segments.append(int(text))
                self.expect("]")
        return ("path", tuple(segments))

    def segment(self) -> str:
        kind, text = self.take()
        if kind == "name":
            self.names.add(text)
        elif kind != "word":
            self.fail(f'Syntax error; token: "{text}"')
        return text

    # updates: SET, REMOVE, ADD and DELETE clauses, each once
    def update(self) -> list[Node]:
        actions: list[Node] = []
        seen: set[str] = set()
        while self.peek()[0] != "end":
            clause = self.take()[1].upper()
            if clause not in ("SET", "REMOVE", "ADD", "DELETE") or clause in seen:
                self.fail(f'Syntax error; token: "{clause}"')
            seen.add(clause)
            while True:
                actions.append(self.action(clause))
                if self.peek()[1] != ",":
                    break
                self.take()
        if not actions:
            self.fail("The expression can not be empty;")
        return actions

    def action(self, clause: str) -> Node:
        path = self.path()
        if clause == "REMOVE":
            return ("REMOVE", path)
        if clause == "SET":
            self.expect("=")
            return ("SET", path, self.set_value())
        return (clause, path, self.operand())

    def set_value(self) -> Node:
        left = self.set_operand()
        if self.peek()[1] in ("+", "-"):
            operator = self.take()[1]
            return ("arith", operator, left, self.set_operand())
        return left

    def set_operand(self) -> Node:
        kind, text = self.peek()
        if kind == "word" and self.peek(1)[1] == "(":
            self.take()
            self.expect("(")
            if text == "if_not_exists":
                node: Node = ("if_not_exists", self.path())
            elif text == "list_append":
                node = ("list_append", self.set_value())
            else:
                self.fail(f"Invalid function name; function: {text}")
            self.expect(",")
            node = (*node, self.set_value())
            self.expect(")")
            return node
        return self.operand()

    def projection(self) -> list[Node]:
        paths = [self.path()]
        while self.peek()[1] == ",":
            self.take()
            paths.append(self.path())
        return paths


Parsed = tuple[Any, frozenset[str], frozenset[str], tuple[tuple[str, str], ...]]
r"""An expression's tree, the name and value placeholders it uses, and the bounds of its
``BETWEEN``\s of two values."""


@functools.lru_cache(maxsize=4096)
def _parse(text: str, kind: str) -> Parsed:
    if not text.strip():
        raise _Invalid(f"Invalid {kind}: The expression can not be empty;")
    parser = _Parser(text, kind)
    if kind == "UpdateExpression":
        tree: Any = parser.update()
    elif kind == "ProjectionExpression":
        tree = parser.projection()
    else:
        tree = parser.condition()
    parser.done()
    return tree, frozenset(parser.names), frozenset(parser.values), tuple(parser.bounds)


# --- evaluation ---------------------------------------------------------------------


class _Scope:
    """The placeholders of one request."""

    __slots__ = ("names", "values")

    def __init__(self, names: Mapping[str, str], values: Mapping[str, Wire]) -> None:
        self.names = names
        self.values = values

    def name(self, segment: str | int) -> str | int:
        if isinstance(segment, str) and segment.startswith("#"):
            return self.names[segment]
        return segment

    def path(self, path: Path) -> tuple[str | int, ...]:
        # a placeholder is always among the names (checked first); others stay as they are
        return tuple(map(self.names.get, path, path))  # type: ignore[arg-type]


def _get(item: WireItem | None, path: tuple[str | int, ...]) -> Wire | None:
    if item is None:
        return None
    value: Any = item.get(str(path[0]))
    for segment in path[1:]:
        if value is None:
            return None
        if isinstance(segment, int):
            values = value.get("L")
            value = values[segment] if values is not None and segment < len(values) else None
        else:
            entries = value.get("M")
            value = entries.get(segment) if entries is not None else None
    return value  # type: ignore[no-any-return]


def _operand(node: Node, item: WireItem | None, scope: _Scope) -> Wire | None:
    kind = node[0]
    if kind == "value":
        return scope.values[node[1]]
    if kind == "path":
        return _get(item, scope.path(node[1]))
    found = _get(item, scope.path(node[1][1]))  # size(path)
    return None if found is None else {"N": str(_size_of(found))}


def _size_of(value: Wire) -> int:
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(inner)
    if kind == "B":
        return len(inner)
    if kind in ("SS", "NS", "BS", "L", "M"):
        return len(inner)
    raise _Invalid("Invalid ConditionExpression: Incorrect operand type for operator or function")


def _order(value: Wire) -> tuple[str, Any]:
    """A scalar's type and a Python value ordered as DynamoDB orders it."""
    kind, inner = next(iter(value.items()))
    if kind == "N":
        return kind, Decimal(inner)
    return kind, inner


_EQUAL_BY_KIND: dict[str, Callable[[Any, Any], bool]] = {
    "N": lambda a, b: Decimal(a) == Decimal(b),
    "SS": lambda a, b: set(a) == set(b),
    "BS": lambda a, b: set(a) == set(b),
    "NS": lambda a, b: {Decimal(n) for n in a} == {Decimal(n) for n in b},
    "L": lambda a, b: len(a) == len(b) and all(map(_equal, a, b)),
    "M": lambda a, b: a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a),
}
"""Equality of two values of one kind whose wire forms differ (``1`` and ``1.0``)."""


def _equal(left: Wire, right: Wire) -> bool:
    if left == right:
        return True
    (kind, a), (other, b) = next(iter(left.items())), next(iter(right.items()))
    equal = _EQUAL_BY_KIND.get(kind)
    return kind == other and equal is not None and equal(a, b)


_ORDERS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _compare(comparator: str, left: Wire | None, right: Wire | None) -> bool:
    if comparator == "=":
        return left is not None and right is not None and _equal(left, right)
    if comparator == "<>":
        return left is None or right is None or not _equal(left, right)
    if left is None or right is None:
        return False
    (kind, a), (other, b) = _order(left), _order(right)
    return kind == other and kind in ("S", "N", "B") and _ORDERS[comparator](a, b)


def _holds(node: Node, item: WireItem | None, scope: _Scope) -> bool:
    return _CONDITIONS[node[0]](node, item, scope)


def _in(node: Node, item: WireItem | None, scope: _Scope) -> bool:
    left = _operand(node[1], item, scope)
    return any(_compare("=", left, _operand(c, item, scope)) for c in node[2])


def _between(node: Node, item: WireItem | None, scope: _Scope) -> bool:
    value = _operand(node[1], item, scope)
    low, high = _operand(node[2], item, scope), _operand(node[3], item, scope)
    return _compare(">=", value, low) and _compare("<=", value, high)


def _function(node: Node, item: WireItem | None, scope: _Scope) -> bool:
    found = _operand(node[2], item, scope)
    if node[1] == "attribute_exists":
        return found is not None
    if node[1] == "attribute_not_exists":
        return found is None
    argument = _operand(node[3], item, scope)
    if found is None or argument is None:
        return False
    return _FUNCTIONS[node[1]](found, argument)


def _begins_with(found: Wire, argument: Wire) -> bool:
    (kind, value), (other, wanted) = next(iter(found.items())), next(iter(argument.items()))
    return kind == other and kind in ("S", "B") and bool(value.startswith(wanted))


def _contains(found: Wire, argument: Wire) -> bool:
    (kind, value), (other, wanted) = next(iter(found.items())), next(iter(argument.items()))
    if kind in ("S", "B"):
        return kind == other and wanted in value
    if kind in ("SS", "NS", "BS"):
        return other == kind[0] and any(_equal({other: v}, argument) for v in value)
    return kind == "L" and any(_equal(v, argument) for v in value)


_FUNCTIONS: dict[str, Callable[[Wire, Wire], bool]] = {
    "attribute_type": lambda found, wanted: next(iter(found)) == next(iter(wanted.values())),
    "begins_with": _begins_with,
    "contains": _contains,
}
_CONDITIONS: dict[str, Callable[[Node, WireItem | None, _Scope], bool]] = {
    "and": lambda n, item, scope: _holds(n[1], item, scope) and _holds(n[2], item, scope),
    "or": lambda n, item, scope: _holds(n[1], item, scope) or _holds(n[2], item, scope),
    "not": lambda n, item, scope: not _holds(n[1], item, scope),
    "cmp": lambda n, item, scope: _compare(
        n[1], _operand(n[2], item, scope), _operand(n[3], item, scope)
    ),
    "in": _in,
    "between": _between,
    "fn": _function,
}
"""How each kind of parsed condition node is evaluated."""


def _check_between(parsed: Parsed, scope: _Scope) -> None:
    """DynamoDB refuses ``BETWEEN`` of values whose bounds are the wrong way round."""
    for low, high in parsed[3]:
        if _compare(">", scope.values[low], scope.values[high]):
            raise _Invalid(
                "Invalid ConditionExpression: The BETWEEN operator requires upper bound to be "
                "greater than or equal to lower bound"
            )


# --- updates ------------------------------------------------------------------------

MISSING_ATTRIBUTE = "The provided expression refers to an attribute that does not exist in the item"
BAD_OPERAND = "An operand in the update expression has an incorrect data type"
BAD_PATH = "The document path provided in the update expression is invalid for update"


def _value_of(node: Node, item: WireItem | None, scope: _Scope) -> Wire:
    kind = node[0]
    if kind == "arith":
        left, right = _value_of(node[2], item, scope), _value_of(node[3], item, scope)
        if "N" not in left or "N" not in right:
            raise _Invalid(BAD_OPERAND)
        a, b = Decimal(left["N"]), Decimal(right["N"])
        return {"N": _number_text(a + b if node[1] == "+" else a - b)}
    if kind == "if_not_exists":
        found = _get(item, scope.path(node[1][1]))
        return found if found is not None else _value_of(node[2], item, scope)
    if kind == "list_append":
        left, right = _value_of(node[1], item, scope), _value_of(node[2], item, scope)
        if "L" not in left or "L" not in right:
            raise _Invalid(BAD_OPERAND)
        return {"L": left["L"] + right["L"]}
    if node[0] == "value":  # the caller's: copied, as the item will keep it
        return _copy(scope.values[node[1]])
    found = _operand(node, item, scope)
    if found is None:
        raise _Invalid(MISSING_ATTRIBUTE)
    return found


def _number_text(value: Decimal) -> str:
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _updated(old: WireItem | None, key: WireItem, tree: list[Node], scope: _Scope) -> WireItem:
    """The item ``tree`` (an update) makes of ``old`` (or of ``key`` alone): every value
    read from ``old``, as DynamoDB evaluates them, applied in order to a copy."""
    results = [_value_of(action[2], old, scope) if action[0] == "SET" else None for action in tree]
    new: WireItem = dict(old) if old is not None else dict(key)
    for action, result in zip(tree, results, strict=True):
        path = scope.path(action[1][1])
        if action[0] == "SET":
            _put_path(new, path, result)  # type: ignore[arg-type]
        elif action[0] == "REMOVE":
            _remove_path(new, path)
        else:
            _add_or_delete(new, action[0], path, _operand(action[2], old, scope))
    return new


def _check_paths(tree: list[Node], scope: _Scope, keys: Sequence[str | int]) -> None:
    """Refuse an update of a key attribute, or of two overlapping paths."""
    paths = [scope.path(action[1][1]) for action in tree]
    _check_overlaps(paths)
    for path in paths:
        if path[0] in keys:
            raise _Invalid(
                "One or more parameter values were invalid: Cannot update attribute "
                f"{path[0]}. This attribute is part of the key"
            )


def _check_overlaps(paths: list[tuple[str | int, ...]]) -> None:
    whole: dict[tuple[str | int, ...], tuple[str | int, ...]] = {}
    parts: dict[tuple[str | int, ...], tuple[str | int, ...]] = {}
    """The paths so far, and their proper prefixes (each with the path it came from)."""
    for path in paths:
        other = whole.get(path) or parts.get(path)
        if other is None and len(path) > 1:
            other = next((whole[path[:n]] for n in range(1, len(path)) if path[:n] in whole), None)
        if other is not None:
            raise _Invalid(
                "Invalid UpdateExpression: Two document paths overlap with each other; must "
                "remove or rewrite one of these paths; path one: "
                f"[{_path_text(other)}], path two: [{_path_text(path)}]"
            )
        whole[path] = path
        for n in range(1, len(path)):
            parts.setdefault(path[:n], path)


def _path_text(path: tuple[str | int, ...]) -> str:
    return ", ".join(f"[{s}]" if isinstance(s, int) else s for s in path)


def _parent(item: WireItem, path: tuple[str | int, ...]) -> Any:
    """The container of ``path``'s last segment in ``item``, copied along the way so no
    stored value changes in place (``None``: no such container)."""
    container: Any = item
    for segment in path[:-1]:
        found = container.get(segment) if isinstance(container, dict) else None
        if isinstance(segment, int):
            found = container[segment] if segment < len(container) else None
        if found is None:
            return None
        copied: Wire
        if "M" in found:
            copied = {"M": dict(found["M"])}
        elif "L" in found:
            copied = {"L": list(found["L"])}
        else:
            return None
        container[segment] = copied
        container = next(iter(copied.values()))
    return container


def _put_path(item: WireItem, path: tuple[str | int, ...], value: Wire) -> None:
    container = _parent(item, path)
    last = path[-1]
    if container is None or isinstance(last, int) != isinstance(container, list):
        raise _Invalid(BAD_PATH)
    if isinstance(last, int) and last >= len(container):
        container.append(value)
    else:
        container[last] = value


def _remove_path(item: WireItem, path: tuple[str | int, ...]) -> None:
    container = _parent(item, path)
    last = path[-1]
    if container is None or isinstance(last, int) != isinstance(container, list):
        if len(path) > 1:
            raise _Invalid(BAD_PATH)
        return
    if isinstance(last, int):
        if last < len(container):
            del container[last]
    else:
        container.pop(last, None)


def _add_or_delete(
    item: WireItem, clause: str, path: tuple[str | int, ...], value: Wire | None
) -> None:
    assert value is not None
    name = path[0]
    if len(path) > 1 or not isinstance(name, str):
        raise _Invalid(BAD_PATH)
    kind, given = next(iter(value.items()))
    found = item.get(name)
    if clause == "ADD" and kind == "N":
        if found is not None and "N" not in found:
            raise _Invalid(BAD_OPERAND)
        total = Decimal(given) + (Decimal(found["N"]) if found is not None else 0)
        item[name] = {"N": _number_text(total)}
        return
    if kind not in ("SS", "NS", "BS") or (found is not None and kind not in found):
        raise _Invalid(BAD_OPERAND)
    members = list(found[kind]) if found is not None else []
    if clause == "ADD":
        members += [m for m in given if m not in members]
    else:
        members = [m for m in members if m not in given]
    if members:
        item[name] = {kind: members}
    else:
        item.pop(name, None)


# --- values -------------------------------------------------------------------------


def _copy(value: Wire) -> Wire:
    """A wire value that shares nothing mutable with ``value``."""
    if "M" in value:
        return {"M": {k: _copy(v) for k, v in value["M"].items()}}
    if "L" in value:
        return {"L": [_copy(v) for v in value["L"]]}
    kind, inner = next(iter(value.items()))
    return {kind: list(inner)} if isinstance(inner, list) else {kind: inner}


def _copy_item(item: WireItem) -> WireItem:
    return {name: _copy(value) for name, value in item.items()}


def _shared(item: WireItem) -> WireItem:
    """``item`` as a response gives it: a dict of its own whose values it shares with the
    stored item. Stored values are never changed in place (every write copies what it
    changes), so the response keeps what was read; a caller must not change them."""
    return dict(item)


def _text_bytes(member: str | bytes) -> int:
    return len(member.encode()) if isinstance(member, str) else len(member)


def _number_bytes(text: str) -> int:
    return len(text) // 2 + 1


_BYTES_BY_KIND: dict[str, Callable[[Any], int]] = {
    "S": _text_bytes,
    "B": _text_bytes,
    "N": _number_bytes,
    "SS": lambda members: sum(map(_text_bytes, members)),
    "BS": lambda members: sum(map(_text_bytes, members)),
    "NS": lambda members: sum(map(_number_bytes, members)),
    "L": lambda values: 3 + sum(1 + _bytes_of(v) for v in values),
    "M": lambda entries: 3 + sum(1 + _text_bytes(k) + _bytes_of(v) for k, v in entries.items()),
}


def _bytes_of(value: Wire) -> int:
    """DynamoDB's size of a value (approximate for numbers)."""
    kind, inner = next(iter(value.items()))
    size = _BYTES_BY_KIND.get(kind)
    return size(inner) if size is not None else 1


def _item_bytes(item: WireItem) -> int:
    return sum(len(name.encode()) + _bytes_of(value) for name, value in item.items())


def _project(item: WireItem, paths: list[tuple[str | int, ...]]) -> WireItem:
    projected: WireItem = {}
    for path in paths:
        found = _get(item, path)
        if found is None:
            continue
        if len(path) == 1:
            projected[path[0]] = found  # type: ignore[index]
            continue
        container: Any = projected
        for segment in path[:-1]:
            container = container.setdefault(segment, {"M": {}})["M"]
        container[path[-1]] = found
    return projected


# --- tables -------------------------------------------------------------------------

Position = tuple[Any, ...]
"""Where an item sorts in a partition: its range key's value, then its table key."""


class _Partition:
    """The items of one hash key (of the table or one index), sorted when read."""

    __slots__ = ("entries", "ordered")

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, Any], Position] = {}
        self.ordered: list[tuple[Position, tuple[Any, Any]]] | None = None

    def put(self, key: tuple[Any, Any], position: Position) -> None:
        if self.entries.get(key) != position:
            self.entries[key] = position
            self.ordered = None

    def drop(self, key: tuple[Any, Any]) -> None:
        if self.entries.pop(key, None) is not None:
            self.ordered = None

    def sorted(self) -> list[tuple[Position, tuple[Any, Any]]]:
        if self.ordered is None:
            self.ordered = sorted((p, k) for k, p in self.entries.items())
        return self.ordered


class _Keys:
    """A hash and an optional range key (of a table or an index) and their types."""

    def __init__(self, schema: list[Mapping[str, str]], types: Mapping[str, str]) -> None:
        by_type = {k["KeyType"]: k["AttributeName"] for k in schema}
        self.hash: str = by_type["HASH"]
        self.range: str | None = by_type.get("RANGE")
        self.names = (self.hash,) if self.range is None else (self.hash, self.range)
        self.types = {name: types[name] for name in self.names}

    def of(self, item: Mapping[str, Wire]) -> tuple[Any, Any] | None:
        """The item's key as sortable values (``None``: it lacks one, or of another type)."""
        found = []
        for name in self.names:
            value = item.get(name)
            kind = self.types[name]
            if value is None or kind not in value:
                return None
            found.append(Decimal(value["N"]) if kind == "N" else value[kind])
        return (found[0], found[1] if self.range is not None else None)


class _Index:
    def __init__(self, spec: Mapping[str, Any], types: Mapping[str, str], table: _Keys) -> None:
        self.name: str = spec["IndexName"]
        self.keys = _Keys(spec["KeySchema"], types)
        projection = spec.get("Projection", {"ProjectionType": "ALL"})
        self.projection: str = projection["ProjectionType"]
        self.carried = {*table.names, *self.keys.names, *projection.get("NonKeyAttributes", ())}
        self.partitions: dict[Any, _Partition] = {}

    def project(self, item: WireItem) -> WireItem:
        if self.projection == "ALL":
            return item
        return {name: value for name, value in item.items() if name in self.carried}


class _Table:
    def __init__(self, request: Mapping[str, Any]) -> None:
        self.name: str = request["TableName"]
        types = {d["AttributeName"]: d["AttributeType"] for d in request["AttributeDefinitions"]}
        self.keys = _Keys(request["KeySchema"], types)
        self.indexes = {
            spec["IndexName"]: _Index(spec, types, self.keys)
            for spec in request.get("GlobalSecondaryIndexes", ())
        }
        self.items: dict[tuple[Any, Any], WireItem] = {}
        self.partitions: dict[Any, _Partition] = {}
        self.description = {
            "TableName": self.name,
            "TableStatus": "ACTIVE",
            "KeySchema": request["KeySchema"],
            "AttributeDefinitions": request["AttributeDefinitions"],
            "GlobalSecondaryIndexes": [
                {**spec, "IndexStatus": "ACTIVE"}
                for spec in request.get("GlobalSecondaryIndexes", ())
            ],
        }

    def key_of(self, key: Mapping[str, Wire]) -> tuple[Any, Any]:
        """The table key ``key`` (a request's ``Key``) names; refused unless it is exactly
        the key schema's attributes, of their types."""
        found = self.keys.of(key)
        if found is None or len(key) != len(self.keys.names):
            raise _Invalid("The provided key element does not match the schema")
        return found

    def write(self, key: tuple[Any, Any], item: WireItem | None) -> None:
        """Store ``item`` under ``key`` (``None``: delete), indexes kept in step."""
        old = self.items.pop(key, None)
        if item is None:
            if old is not None:
                self._partition(self.partitions, key[0]).drop(key)
        else:
            self.items[key] = item
            self._partition(self.partitions, key[0]).put(key, (key[1], key))
        for index in self.indexes.values():
            before = index.keys.of(old) if old is not None else None
            after = index.keys.of(item) if item is not None else None
            if before is not None and before[0] != (after[0] if after else None):
                self._partition(index.partitions, before[0]).drop(key)
            if after is not None:
                self._partition(index.partitions, after[0]).put(key, (after[1], key))

    @staticmethod
    def _partition(partitions: dict[Any, _Partition], hash_value: Any) -> _Partition:
        partition = partitions.get(hash_value)
        if partition is None:
            partition = partitions[hash_value] = _Partition()
        return partition

    def check_item(self, item: WireItem) -> None:
        """Refuse an item DynamoDB would not store."""
        for name in self.keys.names:
            value = item.get(name)
            if value is None:
                raise _Invalid(
                    f"One or more parameter values were invalid: Missing the key {name} in the item"
                )
            kind = self.keys.types[name]
            if kind not in value:
                raise _Invalid(
                    "One or more parameter values were invalid: Type mismatch for key "
                    f"{name} expected: {kind} actual: {next(iter(value))}"
                )
            if value[kind] in ("", b""):
                raise _Invalid(
                    "One or more parameter values are not valid. The AttributeValue for a key "
                    f"attribute cannot contain an empty string value. Key: {name}"
                )
        for index in self.indexes.values():
            for name in index.keys.names:
                self._check_index_key(index, name, item.get(name))

    @staticmethod
    def _check_index_key(index: _Index, name: str, value: Wire | None) -> None:
        kind = index.keys.types[name]
        if value is not None and kind not in value:
            raise _Invalid(
                "One or more parameter values were invalid: Type mismatch for Index "
                f"Key {name} Expected: {kind} Actual: {next(iter(value))} "
                f"IndexName: {index.name}"
            )
        if value is not None and value[kind] in ("", b""):
            raise _Invalid(
                "One or more parameter values are not valid. A value specified for a "
                "secondary index key is not supported. The AttributeValue for a key attribute "
                f"cannot contain an empty string value. IndexName: {index.name}, IndexKey: {name}"
            )


# --- the client ---------------------------------------------------------------------


def _scope(request: Mapping[str, Any], parsed: Iterable[Parsed]) -> _Scope:
    """The request's placeholders, refused (as DynamoDB does) when one is used and not
    given, or given and not used."""
    names: Mapping[str, str] = request.get("ExpressionAttributeNames") or {}
    values: Mapping[str, Wire] = request.get("ExpressionAttributeValues") or {}
    used_names: set[str] = set()
    used_values: set[str] = set()
    for _, named, valued, _ in parsed:
        used_names |= named
        used_values |= valued
    for used, given, what in (
        (used_names, names, "name"),
        (used_values, values, "value"),
    ):
        missing = used - given.keys()
        if missing:
            raise _Invalid(
                f"An expression attribute {what} used in expression is not defined; attribute "
                f"{what}: {min(missing)}"
            )
        unused = given.keys() - used
        if unused:
            kind = "ExpressionAttributeNames" if what == "name" else "ExpressionAttributeValues"
            raise _Invalid(
                f"Value provided in {kind} unused in expressions: keys: "
                f"{{{', '.join(sorted(unused))}}}"
            )
    for placeholder, value in values.items():
        if not next(iter(value.values()), True) and next(iter(value)) in ("SS", "NS", "BS"):
            raise _Invalid(
                "ExpressionAttributeValues contains invalid value: One or more parameter "
                f"values were invalid: An {next(iter(value))} may not be empty for key "
                f"{placeholder}"
            )
    return _Scope(names, values)


def _parsed(request: Mapping[str, Any], *kinds: str) -> list[Parsed]:
    return [_parse(request[kind], kind) for kind in kinds if request.get(kind) is not None]


class InMemoryDynamoDB:
    """DynamoDB in memory: call it as a boto3 DynamoDB client (``put_item(**request)``).

    Create tables with :meth:`create_table` (the project's own with
    ``create_table(**table_definition(name))``). Every request is atomic (one lock), and
    the same requests give the same answers: nothing here reads a clock or random numbers.
    """

    def __init__(self) -> None:
        self._tables: dict[str, _Table] = {}
        self._lock = threading.Lock()

    # tables

    def create_table(self, **request: Any) -> dict[str, Any]:
        with self._lock:
            if request["TableName"] in self._tables:
                raise _error(
                    "CreateTable",
                    "ResourceInUseException",
                    f"Table already exists: {request['TableName']}",
                )
            table = self._tables[request["TableName"]] = _Table(request)
            return {"TableDescription": dict(table.description)}

    def describe_table(self, *, TableName: str) -> dict[str, Any]:  # noqa: N803
        with self._lock:
            return {"Table": dict(self._table(TableName, "DescribeTable").description)}

    def delete_table(self, *, TableName: str) -> dict[str, Any]:  # noqa: N803
        with self._lock:
            table = self._table(TableName, "DeleteTable")
            del self._tables[TableName]
            return {"TableDescription": {**table.description, "TableStatus": "DELETING"}}

    def update_time_to_live(self, **request: Any) -> dict[str, Any]:
        """Accepted and not acted on: items never expire here."""
        with self._lock:
            self._table(request["TableName"], "UpdateTimeToLive")
            return {"TimeToLiveSpecification": request["TimeToLiveSpecification"]}

    def _table(self, name: str, operation: str) -> _Table:
        table = self._tables.get(name)
        if table is None:
            raise _error(
                operation,
                "ResourceNotFoundException",
                "Cannot do operations on a non-existent table",
            )
        return table

    # items

    def get_item(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("GetItem"):
            table = self._table(request["TableName"], "GetItem")
            key = table.key_of(request["Key"])
            parsed = _parsed(request, "ProjectionExpression")
            scope = _scope(request, parsed)
            item = table.items.get(key)
            if item is None:
                return _response()
            return _response(Item=self._read(item, parsed, scope))

    def put_item(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("PutItem"):
            table = self._table(request["TableName"], "PutItem")
            item = _copy_item(request["Item"])
            table.check_item(item)
            self._check_size(item, "Item size has exceeded the maximum allowed size")
            key = table.keys.of(item)
            assert key is not None
            old = table.items.get(key)
            self._check(request, old, "PutItem")
            table.write(key, item)
            return self._returned(request, old, item)

    def update_item(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("UpdateItem"):
            table = self._table(request["TableName"], "UpdateItem")
            key = table.key_of(request["Key"])
            scope = self._update_scope(table, request)
            old = table.items.get(key)
            self._check(request, old, "UpdateItem")
            new = self._update(table, request, scope, old)
            if new is not None:
                table.write(key, new)
            return self._returned(request, old, new if new is not None else old)

    def delete_item(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("DeleteItem"):
            table = self._table(request["TableName"], "DeleteItem")
            key = table.key_of(request["Key"])
            old = table.items.get(key)
            self._check(request, old, "DeleteItem")
            table.write(key, None)
            return self._returned(request, old, None)

    @staticmethod
    def _update_scope(table: _Table, request: Mapping[str, Any]) -> _Scope:
        """An ``Update``'s placeholders, refused as DynamoDB refuses them before reading
        the item (with its paths)."""
        parsed = _parsed(request, "UpdateExpression", "ConditionExpression")
        scope = _scope(request, parsed)
        if request.get("ConditionExpression") is not None:
            _check_between(parsed[-1], scope)
        if request.get("UpdateExpression") is not None:
            _check_paths(parsed[0][0], scope, table.keys.names)
        return scope

    def _update(
        self, table: _Table, request: Mapping[str, Any], scope: _Scope, old: WireItem | None
    ) -> WireItem | None:
        """The item an ``Update`` whose condition held makes (``None``: no update
        expression and an item already there: nothing to write)."""
        key_item = {name: _copy(request["Key"][name]) for name in table.keys.names}
        text = request.get("UpdateExpression")
        if text is None:
            return None if old is not None else key_item
        new = _updated(old, key_item, _parse(text, "UpdateExpression")[0], scope)
        table.check_item(new)
        self._check_size(new, "Item size to update has exceeded the maximum allowed size")
        return new

    @staticmethod
    def _check_size(item: WireItem, message: str) -> None:
        # Each character of an item's repr (C-fast) stands for at most 4 bytes: most
        # items are far enough below the limit to skip the exact count.
        if 4 * len(repr(item)) > MAX_ITEM_BYTES and _item_bytes(item) > MAX_ITEM_BYTES:
            raise _Invalid(message)

    @staticmethod
    def _check(request: Mapping[str, Any], old: WireItem | None, operation: str) -> None:
        """Raise a failed condition's error unless the request's condition holds
        on ``old`` (the stored item or ``None``)."""
        if not _condition_holds(request, old):
            fields: dict[str, Any] = {}
            if old is not None and request.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
                fields["Item"] = _shared(old)
            raise _error(operation, CONDITION_FAILED, CONDITION_FAILED_MESSAGE, **fields)

    @staticmethod
    def _returned(
        request: Mapping[str, Any], old: WireItem | None, new: WireItem | None
    ) -> dict[str, Any]:
        returns = request.get("ReturnValues", "NONE")
        if returns == "ALL_OLD" and old is not None:
            return _response(Attributes=_shared(old))
        if returns == "ALL_NEW" and new is not None:
            return _response(Attributes=_shared(new))
        if returns in ("UPDATED_OLD", "UPDATED_NEW"):
            source = (old if returns == "UPDATED_OLD" else new) or {}
            changed = {name: source[name] for name in _updated_names(request) if name in source}
            return _response(Attributes=changed) if changed else _response()
        return _response()

    @staticmethod
    def _read(item: WireItem, parsed: list[Parsed], scope: _Scope) -> WireItem:
        if not parsed:
            return _shared(item)
        return _project(item, [scope.path(p[1]) for p in parsed[0][0]])

    # reads of many items

    def batch_get_item(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("BatchGetItem"):
            asked = request["RequestItems"]
            if sum(len(spec["Keys"]) for spec in asked.values()) > MAX_BATCH_GET_KEYS:
                raise _Invalid("Too many items requested for the BatchGetItem call")
            responses: dict[str, list[WireItem]] = {}
            for name, spec in asked.items():
                table = self._table(name, "BatchGetItem")
                keys = [table.key_of(key) for key in spec["Keys"]]
                if len(set(keys)) != len(keys):
                    raise _Invalid("Provided list of item keys contains duplicates")
                parsed = _parsed(spec, "ProjectionExpression")
                scope = _scope(spec, parsed)
                responses[name] = [
                    self._read(table.items[key], parsed, scope)
                    for key in keys
                    if key in table.items
                ]
            return _response(Responses=responses, UnprocessedKeys={})

    def query(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("Query"):
            table = self._table(request["TableName"], "Query")
            index = self._index(table, request)
            keys = index.keys if index is not None else table.keys
            parsed = _parsed(request, "KeyConditionExpression")
            filtered = _parsed(request, "FilterExpression")
            projected = _parsed(request, "ProjectionExpression")
            scope = _scope(request, parsed + filtered + projected)
            if not parsed:
                raise _Invalid("KeyConditionExpression must be specified in the request")
            for checked in parsed + filtered:
                _check_between(checked, scope)
            condition = parsed[0][0]
            hash_value = _hash_of(condition, keys, scope)
            partitions = index.partitions if index is not None else table.partitions
            partition = partitions.get(hash_value)
            ordered = partition.sorted() if partition is not None else []
            forward = request.get("ScanIndexForward", True)
            start = request.get("ExclusiveStartKey")
            if start is not None:
                after = _start_position(table, keys, start)
                if forward:
                    ordered = ordered[bisect.bisect_right(ordered, after, key=_first) :]
                else:
                    ordered = ordered[: bisect.bisect_left(ordered, after, key=_first)]
            if not forward:
                ordered = ordered[::-1]
            matching = (key for _, key in ordered if _holds(condition, table.items[key], scope))
            return self._page(table, index, request, filtered, projected, scope, matching)

    def scan(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("Scan"):
            table = self._table(request["TableName"], "Scan")
            index = self._index(table, request)
            filtered = _parsed(request, "FilterExpression")
            projected = _parsed(request, "ProjectionExpression")
            scope = _scope(request, filtered + projected)
            if index is None:
                ordered = sorted(table.items)
            else:
                ordered = sorted(key for p in index.partitions.values() for key in p.entries)
            start = request.get("ExclusiveStartKey")
            if start is not None:
                after = _start_position(table, index.keys if index else table.keys, start)[1]
                ordered = [key for key in ordered if key > after]
            return self._page(table, index, request, filtered, projected, scope, ordered)

    def _index(self, table: _Table, request: Mapping[str, Any]) -> _Index | None:
        name = request.get("IndexName")
        if name is None:
            return None
        index = table.indexes.get(name)
        if index is None:
            raise _Invalid(f"The table does not have the specified index: {name}")
        if request.get("ConsistentRead"):
            raise _Invalid("Consistent reads are not supported on global secondary indexes")
        return index

    def _page(
        self,
        table: _Table,
        index: _Index | None,
        request: Mapping[str, Any],
        filtered: list[Parsed],
        projected: list[Parsed],
        scope: _Scope,
        keys: Iterable[tuple[Any, Any]],
    ) -> dict[str, Any]:
        """One page of ``keys`` (in order, after the start key): at most ``Limit``
        evaluated, then filtered; with ``LastEvaluatedKey`` when the page holds ``Limit``
        (as DynamoDB Local does even when no item is left: moto does not)."""
        limit = request.get("Limit")
        found: list[WireItem] = []
        evaluated = 0
        last: tuple[Any, Any] | None = None
        for key in keys:
            if limit is not None and evaluated == limit:
                break
            evaluated += 1
            last = key
            item = table.items[key]
            shown = index.project(item) if index is not None else item
            if not filtered or _holds(filtered[0][0], shown, scope):
                found.append(shown)
        response: dict[str, Any] = {"Count": len(found), "ScannedCount": evaluated}
        if request.get("Select") != "COUNT":
            paths = [scope.path(p[1]) for p in projected[0][0]] if projected else None
            response["Items"] = [
                _project(item, paths) if paths else _shared(item) for item in found
            ]
        if last is not None and evaluated == limit:
            item = table.items[last]
            names = {*table.keys.names, *(index.keys.names if index else ())}
            response["LastEvaluatedKey"] = {n: item[n] for n in sorted(names)}
        return _response(**response)

    # transactions

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        with self._lock, _validating("TransactWriteItems"):
            actions = request["TransactItems"]
            if len(actions) > MAX_TRANSACTION_ACTIONS:
                raise _Invalid(
                    "1 validation error detected: Value at 'transactItems' failed to satisfy "
                    f"constraint: Member must have length less than or equal to "
                    f"{MAX_TRANSACTION_ACTIONS}"
                )
            planned = [self._plan(action) for action in actions]
            _check_payload(planned)
            touched = [(id(table), key) for table, key, *_ in planned]
            if len(set(touched)) != len(touched):
                raise _Invalid("Transaction request cannot include multiple operations on one item")
            reasons = [self._reason(body, table.items.get(key)) for table, key, body, _ in planned]
            if any(reason["Code"] != NOT_REFUSED for reason in reasons):
                codes = ", ".join(reason["Code"] for reason in reasons)
                message = (
                    "Transaction cancelled, please refer cancellation reasons for specific "
                    f"reasons [{codes}]"
                )
                raise _error(
                    "TransactWriteItems",
                    CANCELLED,
                    message,
                    Message=message,
                    CancellationReasons=reasons,
                )
            for table, key, _, new in planned:
                if new is not False:
                    table.write(key, new)
            return _response()

    def _plan(self, action: Mapping[str, Any]) -> tuple[_Table, tuple[Any, Any], Any, Any]:
        """An action's table, key, body and what it writes there (an item, ``None`` to
        delete, ``False`` for nothing), checked as the single-item request would be."""
        if len(action) != 1:
            raise _Invalid("TransactItems can only contain one of Check, Put, Update or Delete")
        kind, body = next(iter(action.items()))
        table = self._table(body["TableName"], "TransactWriteItems")
        if kind == "Put":
            item = _copy_item(body["Item"])
            table.check_item(item)
            self._check_size(item, "Item size has exceeded the maximum allowed size")
            key = table.keys.of(item)
            assert key is not None
            _scope(body, _parsed(body, "ConditionExpression"))
            return table, key, body, item
        key = table.key_of(body["Key"])
        if kind == "Update":
            scope = self._update_scope(table, body)
            old = table.items.get(key)
            new = self._update(table, body, scope, old) if _condition_holds(body, old) else None
            return table, key, body, new if new is not None else False
        _scope(body, _parsed(body, "ConditionExpression"))
        if kind == "Delete":
            return table, key, body, None
        if kind != "ConditionCheck" or "ConditionExpression" not in body:
            raise _Invalid(f"Invalid transaction action: {kind}")
        return table, key, body, False

    @staticmethod
    def _reason(body: Mapping[str, Any], old: WireItem | None) -> dict[str, Any]:
        if _condition_holds(body, old):
            return {"Code": NOT_REFUSED}
        reason: dict[str, Any] = {
            "Code": CONDITION_FAILED_REASON,
            "Message": f"{CONDITION_FAILED_MESSAGE}.",
        }
        if old is not None and body.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD":
            reason["Item"] = _shared(old)
        return reason

    # inspection, for tests

    def table_names(self) -> list[str]:
        with self._lock:
            return sorted(self._tables)

    def items(self, table: str) -> list[WireItem]:
        """Every item of ``table``, in key order (copies)."""
        with self._lock:
            found = self._table(table, "Scan")
            return [_copy_item(found.items[key]) for key in sorted(found.items)]


def _check_payload(planned: list[tuple[_Table, tuple[Any, Any], Any, Any]]) -> None:
    """Refuse a transaction whose items come to more than 4 MB."""
    items = [body["Item"] for _, _, body, _ in planned if "Item" in body]
    if 4 * len(repr(items)) <= MAX_TRANSACTION_BYTES:
        return  # far enough below (see ``_check_size``)
    size = sum(_item_bytes(item) for item in items)
    if size > MAX_TRANSACTION_BYTES:
        raise _Invalid(f"Transaction payload size cannot exceed 4MB. Payload Size: {size}")


def _updated_names(request: Mapping[str, Any]) -> list[str]:
    """The attributes an update expression writes (their top-level names)."""
    tree = _parse(request["UpdateExpression"], "UpdateExpression")[0]
    names: Mapping[str, str] = request.get("ExpressionAttributeNames") or {}
    return [str(names.get(a[1][1][0], a[1][1][0])) for a in tree]


def _condition_holds(request: Mapping[str, Any], old: WireItem | None) -> bool:
    text = request.get("ConditionExpression")
    if text is None:
        return True
    parsed = _parse(text, "ConditionExpression")
    scope = _Scope(
        request.get("ExpressionAttributeNames") or {},
        request.get("ExpressionAttributeValues") or {},
    )
    return _holds(parsed[0], old, scope)


def _hash_of(condition: Node, keys: _Keys, scope: _Scope) -> Any:
    """The hash key value a key condition asks for; refused unless the condition is
    ``hash = :value``, and at most one condition on the range key, joined by ``AND``."""
    terms = [condition]
    while any(t[0] == "and" for t in terms):
        terms = [part for t in terms for part in (t[1:] if t[0] == "and" else (t,))]
    hash_value = None
    for term in terms:
        named = _term_attribute(term, scope)
        if named == keys.hash and term[0] == "cmp" and term[1] == "=" and term[3][0] == "value":
            value = scope.values[term[3][1]]
            kind = keys.types[keys.hash]
            if kind not in value:
                raise _Invalid(
                    "One or more parameter values were invalid: Condition parameter type does "
                    "not match schema type"
                )
            hash_value = Decimal(value["N"]) if kind == "N" else value[kind]
        elif named is None or named != keys.range or term[0] in ("or", "not", "in"):
            raise _Invalid("Query key condition not supported")
    if hash_value is None or len(terms) > 2:
        raise _Invalid(f"Query condition missed key schema element: {keys.hash}")
    return hash_value


def _term_attribute(term: Node, scope: _Scope) -> str | None:
    subject = term[2] if term[0] in ("cmp", "fn") else term[1]
    if not isinstance(subject, tuple) or subject[0] != "path" or len(subject[1]) != 1:
        return None
    named = scope.name(subject[1][0])
    return named if isinstance(named, str) else None


def _start_position(table: _Table, keys: _Keys, start: Mapping[str, Wire]) -> Position:
    """Where ``ExclusiveStartKey`` points: refused unless it holds the table's key and the
    index's, of their types."""
    wanted = {*table.keys.names, *keys.names}
    table_key = table.keys.of(start)
    order = keys.of(start)
    if set(start) != wanted or table_key is None or order is None:
        raise _Invalid(
            "The provided starting key is invalid: The provided key element does not match "
            "the schema"
        )
    return (order[1], table_key)


def _first(entry: tuple[Position, Any]) -> Position:
    return entry[0]


class _validating:  # noqa: N801
    """Turn a refusal found while answering into the operation's ``ValidationException``."""

    def __init__(self, operation: str) -> None:
        self.operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        if isinstance(exc, _Invalid):
            raise _error(self.operation, "ValidationException", str(exc)) from None


def _response(**fields: Any) -> dict[str, Any]:
    return {**fields, "ResponseMetadata": {"HTTPStatusCode": 200, "RetryAttempts": 0}}
