"""Validation of every name and key that ends up inside a storage key or a message."""

from __future__ import annotations

import re
import unicodedata
import uuid

from runlane_sqs.core.errors import ConfigurationError, InvalidKeyError

ENVIRONMENT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
QUEUE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
TASK_PATTERN = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
RUN_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")
MAX_KEY_CHARS = 256
"""Longest idempotency or singleton key, in characters."""


def new_run_id() -> str:
    """A random, unguessable run id (128 bits, lowercase hex)."""
    return uuid.uuid4().hex


def new_lease_token() -> str:
    """A fresh fencing token for one attempt."""
    return uuid.uuid4().hex


def is_run_id(value: object) -> bool:
    return isinstance(value, str) and RUN_ID_PATTERN.fullmatch(value) is not None


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


def check_task_name(name: object) -> str:
    rule = "letters, digits, '.', ':', '-' and '_', at most 128 characters"
    return _check(TASK_PATTERN, "task name", name, rule)


def check_key(kind: str, key: object) -> str:
    """Validate an idempotency or singleton key; ``kind`` names it in the error."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"{kind} key must be a string, not {type(key).__name__}")
    if not key or not key.strip():
        raise InvalidKeyError(f"{kind} key must not be empty")
    if key != key.strip():
        raise InvalidKeyError(f"{kind} key {key!r} must not start or end with whitespace")
    if len(key) > MAX_KEY_CHARS:
        raise InvalidKeyError(f"{kind} key is {len(key)} characters; the limit is {MAX_KEY_CHARS}")
    if any(unicodedata.category(ch) == "Cc" for ch in key):
        raise InvalidKeyError(f"{kind} key {key!r} must not contain control characters")
    return key
