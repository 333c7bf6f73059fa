"""The operator APIs an app hands out (``app.runs``, ``app.bulk``, ``app.idempotency``,
``app.schedules``, ``app.queues``, ``app.health``, ``app.dead_letters``): built on first
use, over the engine of the time. A task on Lambda seldom uses them, so the function does
not import them at its start."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from runlane_sqs.engine.engine import Engine

if TYPE_CHECKING:
    from runlane_sqs.api.bulk import BulkApi
    from runlane_sqs.api.dead_letters import DeadLettersApi
    from runlane_sqs.api.health import HealthApi
    from runlane_sqs.api.queues import QueuesApi
    from runlane_sqs.api.runs import IdempotencyApi, RunsApi
    from runlane_sqs.api.schedules import SchedulesApi

OPERATOR_APIS = ("runs", "bulk", "idempotency", "schedules", "queues", "health", "dead_letters")
"""The names :meth:`OperatorApis.forget_apis` drops (built again on next use)."""


class OperatorApis:
    """The operator APIs of whatever carries ``engine`` (the app)."""

    engine: Engine

    def forget_apis(self) -> None:
        """Build the operator APIs again, over the current engine, on their next use."""
        for name in OPERATOR_APIS:
            vars(self).pop(name, None)

    @cached_property
    def runs(self) -> RunsApi:
        """Look up, list, wait for, cancel, retry, rerun and prune runs."""
        from runlane_sqs.api.runs import RunsApi  # noqa: PLC0415 (see the module doc)

        return RunsApi(self.engine)

    @cached_property
    def bulk(self) -> BulkApi:
        """Retry, cancel or rerun every run a filter selects, as one durable operation:
        count first, act at a rate, resume after a crash (docs/operations.md, "Bulk
        recovery")."""
        from runlane_sqs.api.bulk import BulkApi  # noqa: PLC0415 (see the module doc)

        return BulkApi(self.engine, self.runs)

    @cached_property
    def idempotency(self) -> IdempotencyApi:
        """Reset idempotency keys, so the next trigger with one creates a new run."""
        from runlane_sqs.api.runs import IdempotencyApi  # noqa: PLC0415 (see the module doc)

        return IdempotencyApi(self.engine)

    @cached_property
    def schedules(self) -> SchedulesApi:
        """The stored schedules: list, get, pause, resume, trigger now."""
        from runlane_sqs.api.schedules import SchedulesApi  # noqa: PLC0415 (see the module doc)

        return SchedulesApi(self.engine)

    @cached_property
    def queues(self) -> QueuesApi:
        """The queues' concurrency limits: slots held, runs waiting."""
        from runlane_sqs.api.queues import QueuesApi  # noqa: PLC0415 (see the module doc)

        return QueuesApi(self.engine)

    @cached_property
    def health(self) -> HealthApi:
        """Runs by status and outcomes per minute, the last maintenance pass, the queues."""
        from runlane_sqs.api.health import HealthApi  # noqa: PLC0415 (see the module doc)

        return HealthApi(self.engine)

    @cached_property
    def dead_letters(self) -> DeadLettersApi:
        """Each queue's dead letters: the runs they name, what they need, and redrive."""
        from runlane_sqs.api.dead_letters import DeadLettersApi  # noqa: PLC0415 (see the module doc)

        return DeadLettersApi(self.engine)
