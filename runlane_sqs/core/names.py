"""Validation of every name and key that ends up inside a storage key or a message."""

from __future__ import annotations

import re
import unicodedata
from typing import Final

from runlane_sqs.core.errors import ConfigurationError, InvalidKeyError

ENVIRONMENT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
QUEUE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TASK_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
APP_VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+=/@-]{0,127}$")
MAX_KEY_CHARS = 256
"""Longest idempotency or singleton key, in characters."""


def _check(pattern: re.Pattern[str], what: str, name: object, rule: str) -> str:
    if not isinstance(name, str) or not pattern.fullmatch(name):
        raise ConfigurationError(f"{what} {name!r} must match {pattern.pattern} ({rule})")
    return name


def check_environment(name: object) -> str:
    rule = "lowercase letters, digits, '-' and '_', at most 32 characters"
    return _check(ENVIRONMENT_PATTERN, "environment", name, rule)


def check_queue(name: object) -> str:
    rule = "letters, digits, '-' and '_', at most 64 characters"
    return _check(QUEUE_PATTERN, "queue name", name, rule)


def check_app_version(name: object) -> str:
    rule = "a letter or digit, then letters, digits and '_.:+=/@-', at most 128 characters"
    return _check(APP_VERSION_PATTERN, "app_version", name, rule)


def check_task_name(name: object) -> str:
    rule = "letters, digits, '.', ':', '-' and '_', at most 128 characters"
    return _check(TASK_PATTERN, "task name", name, rule)


REFUSED_KEY_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cs": "a lone surrogate",
    "Cn": f"a code point unassigned in Unicode {unicodedata.unidata_version}",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}
"""Unicode categories a key may not contain, and what the error calls them: characters
that are invisible or break lines (so two keys that print alike would differ), cannot be
encoded as UTF-8 (lone surrogates), or have no normalization this Python can vouch for
(unassigned code points, which a later Unicode version may normalize differently)."""
KEY_NORMAL_FORM: Final = "NFC"
"""Keys are stored and looked up in this Unicode normal form: "café" typed with one code
point for "é" or with "e" and a combining accent is one key."""


def check_key(kind: str, key: object, max_chars: int = MAX_KEY_CHARS) -> str:
    """Validate an idempotency, singleton, signal, concurrency or ordering key of at most
    ``max_chars`` characters and return it in :data:`KEY_NORMAL_FORM`, the spelling it is
    stored and looked up under; ``kind`` names the key in the error."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"{kind} key must be a string, not {type(key).__name__}")
    _refuse_characters(kind, key)
    key = unicodedata.normalize(KEY_NORMAL_FORM, key)
    if not key or not key.strip():
        raise InvalidKeyError(f"{kind} key must not be empty")
    if key != key.strip():
        raise InvalidKeyError(f"{kind} key {key!r} must not start or end with whitespace")
    if len(key) > max_chars:
        raise InvalidKeyError(f"{kind} key is {len(key)} characters; the limit is {max_chars}")
    return key


def _refuse_characters(kind: str, key: str) -> None:
    """Raise on the first character of a refused category, naming it by code point (the
    raw character is never echoed: it may be a control or bidi-override character)."""
    for index, char in enumerate(key):
        what = REFUSED_KEY_CATEGORIES.get(unicodedata.category(char))
        if what is not None:
            raise InvalidKeyError(
                f"{kind} key contains U+{ord(char):04X} ({what}) at index {index}"
            )
