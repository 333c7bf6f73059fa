"""Local development: the embedded moto server (``MotoServer``) and ``make demo``."""

from runlane_sqs.local.moto import (
    LOCAL_CREDENTIALS,
    LOCAL_REGION,
    LocalServerError,
    MotoServer,
    free_port,
)

__all__ = ["LOCAL_CREDENTIALS", "LOCAL_REGION", "LocalServerError", "MotoServer", "free_port"]
