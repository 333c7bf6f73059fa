"""Keyword options checked by name: every entry point that takes ``**options`` refuses
one it does not know, naming it and the closest known one, before anything is written
(a misspelt ``idempotency_key`` would otherwise create a second run on a retry)."""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any


def option_names(options: Any) -> frozenset[str]:
    """The names a ``TypedDict`` of options declares."""
    names: frozenset[str] = options.__required_keys__ | options.__optional_keys__
    return names


def refuse_unknown(given: Mapping[str, object], known: Collection[str], call: str) -> None:
    """Raise :class:`TypeError` for the first option of ``given`` that ``call`` does not
    take, naming the closest one it does (or every one, when none is close)."""
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = (
                f"; did you mean {close[0]!r}?"
                if close
                else f" (it takes {', '.join(sorted(known))})"
            )
            raise TypeError(f"{call}() got an unknown option {name!r}{hint}")
