"""AWS service limits and the library's defaults, with units in their names."""

from __future__ import annotations

# SQS
MAX_DELAY_SECONDS = 900
"""Longest ``DelaySeconds`` SQS accepts; longer waits live in DynamoDB."""
MAX_RECEIVE_BATCH = 10
"""Most messages one ``ReceiveMessage`` returns."""
MAX_SEND_BATCH = 10
"""Most entries in one ``SendMessageBatch`` / ``DeleteMessageBatch``."""
MAX_WAIT_TIME_SECONDS = 20
"""Longest long poll."""
MAX_QUEUE_NAME_CHARS = 80
"""Longest SQS queue name (a FIFO queue's ``.fifo`` suffix included)."""

# DynamoDB
MAX_ITEM_BYTES = 400 * 1024
"""Largest DynamoDB item; a run's payload, result and inline history share it."""
MAX_TRANSACTION_ACTIONS = 100
"""Most actions in one ``TransactWriteItems``."""
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
"""The largest aggregate size of a ``TransactWriteItems``' items."""

# Defaults
DEFAULT_PAYLOAD_LIMIT_BYTES = 64 * 1024
"""Largest payload (and result) as compact JSON unless the app sets ``payload_limit``."""
MAX_PAYLOAD_LIMIT_BYTES = 128 * 1024
"""The highest ``payload_limit`` of an app without a ``payload_bucket`` (and the highest
``inline_limit``): payload and result together stay well inside the 400 KB item,
leaving room for history."""
DEFAULT_BUCKET_PAYLOAD_LIMIT_BYTES = 100 * 1024 * 1024
"""Largest value (payload, result, ...) of an app with a ``payload_bucket`` unless it
sets ``payload_limit``."""
MAX_BUCKET_PAYLOAD_LIMIT_BYTES = 5 * 1024**3
"""The highest ``payload_limit`` with a ``payload_bucket``: S3's largest single PUT."""
DEFAULT_INLINE_LIMIT_BYTES = 32 * 1024
"""Largest value kept in its run's item when the app has a ``payload_bucket``; a larger
one is kept in the bucket and the item holds a reference."""
DEFAULT_LEASE_SECONDS = 60
DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 60
DEFAULT_IDEMPOTENCY_RETENTION_DAYS = 30
DEFAULT_RETENTION_DAYS = 30
"""How long a finished run is kept before DynamoDB's TTL deletes it, unless set."""
DEFAULT_MAX_RECEIVE_COUNT = 5
"""Deliveries before SQS moves a wakeup to the dead-letter queue."""
MAX_TRACEBACK_CHARS = 2000
"""A failure's recorded traceback is cut to its last characters."""
