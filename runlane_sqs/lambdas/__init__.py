"""Lambda entry points: the SQS consumer and the maintenance schedule handler."""
