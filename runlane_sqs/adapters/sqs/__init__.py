"""The SQS wakeup transport, sync and async."""
