"""Validation of every name and key that ends up inside a storage key or a message."""

from __future__ import annotations

import re
import uuid

from runlane_sqs.errors import ConfigurationError, InvalidKeyError

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


def check_environment(name: object) -> str:
    if not isinstance(name, str) or not ENVIRONMENT_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"environment {name!r} must match {ENVIRONMENT_PATTERN.pattern} "
            "(lowercase letters, digits, '-' and '_', at most 32 characters)"
        )
    return name


def check_queue(name: object) -> str:
    if not isinstance(name, str) or not QUEUE_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"queue name {name!r} must match {QUEUE_PATTERN.pattern} "
            "(letters, digits, '-' and '_', at most 64 characters)"
        )
    return name


def check_task_name(name: object) -> str:
    if not isinstance(name, str) or not TASK_PATTERN.fullmatch(name):
        raise ConfigurationError(
            f"task name {name!r} must match {TASK_PATTERN.pattern} "
            "(letters, digits, '.', ':', '-' and '_', at most 128 characters)"
        )
    return name


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
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in key):
        raise InvalidKeyError(f"{kind} key {key!r} must not contain control characters")
    return key
