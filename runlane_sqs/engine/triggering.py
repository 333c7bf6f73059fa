"""Creating runs: validation, key claims and the eager wakeup."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TypedDict, Unpack

from runlane_sqs.core import machine, ordering
from runlane_sqs.core import telemetry as t
from runlane_sqs.core.clock import Clock, Duration, to_timedelta
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.core.errors import InvalidKeyError, OrderMoved, RunlaneError, StorageUnavailable
from runlane_sqs.core.machine import RepublishPolicy
from runlane_sqs.core.model import JSON, KeyKind, LinkKind, Run, RunEvent, RunStatus, new_run_id
from runlane_sqs.core.names import check_key, check_queue
from runlane_sqs.core.options import option_names, refuse_unknown
from runlane_sqs.core.tags import Tags, check_tags
from runlane_sqs.core.telemetry import trace_id_of
from runlane_sqs.core.values import Holder, Sealed, ValueField, ValuePlace
from runlane_sqs.engine.batching import BatchedTrigger, Batching
from runlane_sqs.engine.debouncing import DebouncedTrigger, Debouncing
from runlane_sqs.engine.gathering import check_inline
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.tasks import (
    Task,
    TaskRegistry,
    batch_key_of,
    concurrency_key_of,
    debounce_key_of,
    retention_for,
)
from runlane_sqs.engine.value_types import PLAIN_TYPES
from runlane_sqs.engine.values import Prepared, Values
from runlane_sqs.ports.keys import KeyClaim, KeyConflict
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.telemetry import Span
from runlane_sqs.ports.transport import WakeupTransport

log = logging.getLogger("runlane_sqs")

MAX_KEY_TAKEOVERS = 3
MAX_ORDER_MOVES = 50
"""Triggers of one ordered run that find the key's order record changed (by concurrent
triggers or finishing runs of the key) before the trigger gives up."""


class TriggerManyOptions(TypedDict, total=False):
    """What ``app.trigger_many`` applies to every run it creates."""

    delay: Duration | None
    """How long after the trigger the run becomes due (default: at once)."""
    queue: str | None
    """This run's queue instead of its task's: an urgent one that workers poll with a
    higher weight (docs/operations.md, "Queue weights"). Its concurrency limit, if any,
    applies to the run."""
    tags: Mapping[str, str] | None
    """Key/value labels the run can be found by (``app.runs.list(tags=...)``; at most
    four, docs/tags.md)."""


class TriggerOptions(TriggerManyOptions, total=False):
    """How ``app.trigger`` creates a run; each option may be left out."""

    idempotency_key: str | None
    """A second trigger with this key returns the first run instead of creating one, for
    the retention period (a failed run's key is released)."""
    singleton_key: str | None
    """At most one unfinished run of the task holds this key; a trigger meanwhile returns
    that run."""
    concurrency_key: str | None
    """Overrides the task's key function (tasks with a ``key_limit``)."""
    ordering_key: str | None
    """Runs with the same ordering key execute one at a time in trigger order
    (docs/ordering.md); not with ``delay``."""
    debounce_key: str | None
    """The key a debounced task's triggers collapse by (overrides its ``Debounce``'s
    key function; docs/debounce.md)."""
    batch_key: str | None
    """The key a batched task's triggers gather by (overrides its ``Batch``'s key
    function; docs/batches.md)."""


TRIGGER_MANY_OPTIONS = option_names(TriggerManyOptions)
TRIGGER_OPTIONS = option_names(TriggerOptions)


@dataclass(frozen=True)
class ValidTrigger:
    """A validated trigger: everything needed to write the run."""

    task: str
    queue: str
    payload: JSON
    prepared: Prepared
    """The payload checked and encoded for its place (kept, in S3 if it is large, when
    the run is written)."""
    run_id: str
    """The id of the run the trigger creates (its payload is sealed for that run)."""
    due_at: datetime | None
    idempotency_key: str | None
    singleton_key: str | None
    concurrency_key: str | None = None
    ordering_key: str | None = None
    debounce_key: str | None = None
    """Set for a trigger of a debounced task: the key it collapses by."""
    retention: timedelta | None = None
    """How long the run is kept once finished (:func:`retention_for`)."""
    batch_key: str | None = None
    """Set for a trigger of a batched task: the key its item gathers by."""
    trace: str | None = None
    """The trace context of the trigger's span, stored on the run."""
    tags: Tags | None = None
    """The run's tags, checked (``None``: none)."""

    @property
    def payload_json(self) -> str:
        """The payload's compact JSON text."""
        return self.prepared.text


def validate_keys(idempotency_key: object, singleton_key: object) -> tuple[str | None, str | None]:
    idem = check_key("idempotency", idempotency_key) if idempotency_key is not None else None
    single = check_key("singleton", singleton_key) if singleton_key is not None else None
    return idem, single


def holds_key(kind: KeyKind, owner: Run) -> bool:
    """Does ``owner`` still hold a key of ``kind``? (Released ones may be taken over.)"""
    if kind is KeyKind.IDEMPOTENCY:
        return owner.status is not RunStatus.FAILED
    return not owner.status.is_terminal


@dataclass(frozen=True)
class NewRun:
    """A run ready to write: the run, its first event, its payload as its record keeps it
    and the keys it claims."""

    run: Run
    event: RunEvent
    payload_text: str
    claims: Sequence[KeyClaim]


def new_run_of(
    values: Values,
    trigger: ValidTrigger,
    *,
    environment: str,
    now: datetime,
    idempotency_retention: timedelta,
    republish: RepublishPolicy | None,
) -> NewRun:
    """The run ``trigger`` creates, its payload kept (a large one's object written: a run
    is never written before the object it references)."""
    run, event = machine.new_run(
        run_id=trigger.run_id,
        environment=environment,
        task=trigger.task,
        queue=trigger.queue,
        payload=trigger.payload,
        now=now,
        due_at=trigger.due_at,
        idempotency_key=trigger.idempotency_key,
        singleton_key=trigger.singleton_key,
        republish=republish,
        retention=trigger.retention,
    )
    if trigger.concurrency_key is not None or trigger.trace is not None:
        run = run.with_changes(concurrency_key=trigger.concurrency_key, trace=trigger.trace)
    if trigger.tags:
        run = run.with_changes(tags=trigger.tags)
    prepared = trigger.prepared
    # a small payload without codecs is kept as its JSON text, with no S3 request
    plain = not prepared.offloaded and not prepared.codecs
    text = prepared.text if plain else values.keep(prepared).text
    return NewRun(run, event, text, _claims(trigger, now + idempotency_retention))


def create(
    store: RunStore,
    values: Values,
    trigger: ValidTrigger,
    *,
    environment: str,
    now: datetime,
    idempotency_retention: timedelta,
    republish: RepublishPolicy,
) -> Run:
    """Write the run (with its keys) and return it, or the run that already holds a key."""
    new = new_run_of(
        values,
        trigger,
        environment=environment,
        now=now,
        idempotency_retention=idempotency_retention,
        republish=republish,
    )
    claims = new.claims
    for _ in range(MAX_KEY_TAKEOVERS):
        try:
            return write_run(
                store, new.run, new.event, new.payload_text, claims, trigger.ordering_key
            )
        except KeyConflict as conflict:
            owner = store.get_run(conflict.owner) if conflict.owner else None
            if owner is not None and holds_key(conflict.claim.kind, owner):
                return values.open_run(owner)  # as a trigger returns its run: opened
            claims = replace_owner(claims, conflict.claim, conflict.owner)
    raise RunlaneError(f"could not take the keys of a new {trigger.task!r} run; try again")


def write_run(
    store: RunStore,
    run: Run,
    event: RunEvent,
    payload_text: str,
    claims: Sequence[KeyClaim],
    ordering_key: str | None,
) -> Run:
    """Store a new run with its key claims and, with ``ordering_key``, at the end of that
    key's line (read again while the key's order record changes under the write);
    returns the run as written. Raises :class:`KeyConflict`."""
    if ordering_key is None:
        store.create_run(run, event, payload_text, claims)
        return run
    for _ in range(MAX_ORDER_MOVES):
        head = store.orders.order_head(ordering_key)
        written, first, place = ordering.place(run, event, ordering_key, head)
        try:
            store.create_run(written, first, payload_text, claims, place)
        except OrderMoved:
            continue
        return written
    raise StorageUnavailable(
        f"the order record of ordering key {ordering_key!r} changed under "
        f"{MAX_ORDER_MOVES} writes of a new {run.task!r} run in a row; try again"
    )


def _claims(trigger: ValidTrigger, idempotency_expires_at: datetime) -> Sequence[KeyClaim]:
    claims: list[KeyClaim] = []
    if trigger.idempotency_key is not None:
        claims.append(
            KeyClaim(
                KeyKind.IDEMPOTENCY, trigger.task, trigger.idempotency_key, idempotency_expires_at
            )
        )
    if trigger.singleton_key is not None:
        claims.append(KeyClaim(KeyKind.SINGLETON, trigger.task, trigger.singleton_key))
    return claims


def replace_owner(claims: Sequence[KeyClaim], lost: KeyClaim, owner: str | None) -> list[KeyClaim]:
    return [
        KeyClaim(c.kind, c.task, c.key, c.expires_at, previous_owner=owner) if c == lost else c
        for c in claims
    ]


class Triggers:
    """Creates runs (``app.trigger``, ``trigger_many``, operator reruns) and publishes
    their first wakeups."""

    def __init__(
        self,
        *,
        store: RunStore,
        transport: WakeupTransport,
        publisher: Publisher,
        tasks: TaskRegistry,
        clock: Clock,
        config: RunlaneConfig,
        observer: Observer,
        values: Values,
    ) -> None:
        self._store = store
        self._values = values
        self._transport = transport
        self._publisher = publisher
        self._tasks = tasks
        self._clock = clock
        self._config = config
        self._observer = observer
        self._debouncing = Debouncing(
            store=store,
            values=values,
            clock=clock,
            republish=config.republish,
            inline_limit=config.inline_limit,
        )
        self._batching = Batching(
            store=store,
            values=values,
            clock=clock,
            publisher=publisher,
            republish=config.republish,
            inline_limit=config.inline_limit,
        )

    def trigger(self, task: Task | str, payload: JSON, **options: Unpack[TriggerOptions]) -> Run:
        """Create a run and publish its wakeup; a run holding a key is returned instead.
        A run waiting for its ordering key's turn is published when its turn comes."""
        if options.keys() - TRIGGER_OPTIONS:
            refuse_unknown(options, TRIGGER_OPTIONS, "trigger")
        trigger = self.validate(task, payload, **options)
        with self._span(trigger) as span:
            run = self._create(replace(trigger, trace=span.trace))
            span.set({t.RUN_ID: run.id})
            if run.tags:
                span.set(t.tag_attributes(run.tags))
            if run.created:
                self._publisher.publish_new([run])
        self._observer.triggered([run])
        return run

    def trigger_many(
        self, task: Task | str, payloads: Iterable[JSON], **options: Unpack[TriggerManyOptions]
    ) -> list[Run]:
        """Create one run per payload and publish their wakeups in batches of ten (one
        span for the batch: every run's trace starts at it)."""
        if options.keys() - TRIGGER_MANY_OPTIONS:
            refuse_unknown(options, TRIGGER_MANY_OPTIONS, "trigger_many")
        triggers = [self.validate(task, p, **options) for p in payloads]
        if not triggers:
            return []
        with self._span(triggers[0]) as span:
            span.set({t.MESSAGING_BATCH_SIZE: len(triggers)})
            if triggers[0].tags:  # every run of the batch has the same tags
                span.set(t.tag_attributes(triggers[0].tags))
            runs = [self._create(replace(r, trace=span.trace)) for r in triggers]
            self._publisher.publish_new([run for run in runs if run.created])
        self._observer.triggered(runs)
        return runs

    def new_in_transaction(
        self, task: Task | str, payload: JSON, **options: Unpack[TriggerOptions]
    ) -> NewRun:
        """A run for the caller's own transaction to create (docs/transactions.md):
        checked, its payload kept, and listed on the agenda at its due time rather than a
        lease later, so the next maintenance pass publishes it if the committing process
        stops before publishing. Not with an ordering key (its place is taken with a
        read at trigger time)."""
        if options.keys() - TRIGGER_OPTIONS:
            refuse_unknown(options, TRIGGER_OPTIONS, "trigger")
        if options.get("ordering_key") is not None:
            raise InvalidKeyError(
                "a run with an ordering_key takes its place in the key's line at its "
                "trigger: use app.trigger for it, not a transaction"
            )
        resolved = self._tasks.resolve(task)
        if resolved.debounce is not None or resolved.batch is not None:
            raise InvalidKeyError(
                "a debounced or batched task's trigger reads its key's pending run and may "
                "write that run instead of a new one: use app.trigger for it, not a "
                "transaction"
            )
        new = self._new_run(self.validate(task, payload, **options))
        if new.run.wake_at is None:  # due later than SQS can delay: maintenance publishes it
            return new
        return replace(new, run=new.run.with_changes(wake_at=new.run.due_at, review_at=None))

    def _new_run(self, trigger: ValidTrigger) -> NewRun:
        return new_run_of(
            self._values,
            trigger,
            environment=self._config.environment,
            now=self._clock.now(),
            idempotency_retention=self._config.idempotency_retention,
            republish=self._config.republish,
        )

    def _span(self, trigger: ValidTrigger) -> AbstractContextManager[Span]:
        return self._observer.trigger(trigger.task, trigger.queue)

    def validate(
        self,
        task: Task | str,
        payload: JSON,
        *,
        place: ValuePlace | None = None,
        **options: Unpack[TriggerOptions],
    ) -> ValidTrigger:
        """Validate a trigger before anything is written, its payload sealed for
        ``place``: by default the payload (or, batched, an item) of the run it creates;
        a group's item gives the group's place. A task with a payload type validates the
        payload (a model, or a value it validates into one) and stores it as JSON; its key
        functions see the validated value, as its handler will."""
        resolved = self._tasks.resolve(task)
        value = payload
        if resolved.types is not PLAIN_TYPES:
            value, payload = resolved.types.trigger_payload(payload)
        key = concurrency_key_of(resolved, value, options.get("concurrency_key"))
        idem, single = validate_keys(options.get("idempotency_key"), options.get("singleton_key"))
        given_tags = options.get("tags")
        tags = check_tags(given_tags) if given_tags is not None else None
        ordering_key, delay = options.get("ordering_key"), options.get("delay")
        order = ordering.check_ordering_key(ordering_key) if ordering_key is not None else None
        if order is not None and delay is not None:
            raise InvalidKeyError(
                "a run with an ordering key starts at its turn: it cannot also have a delay"
            )
        debounced = resolved.debounce is not None or options.get("debounce_key") is not None
        debounce = debounce_key_of(resolved, value, options) if debounced else None
        batched = resolved.batch is not None or options.get("batch_key") is not None
        batch = batch_key_of(resolved, value, options) if batched else None
        run_id = new_run_id()
        field = ValueField.ITEM if batch is not None else ValueField.PAYLOAD
        place = place or ValuePlace(Holder.RUN, run_id, field)
        prepared = self._values.prepare(payload, what="payload", place=place)
        wait = to_timedelta(delay, "delay") if delay is not None else None
        if debounce is not None:
            check_inline(prepared, "a debounced trigger's payload", self._config.inline_limit)
            assert resolved.debounce is not None
            wait = resolved.debounce.quiet_period
        if batch is not None:  # its item is checked as kept, when its run is made
            assert resolved.batch is not None
            wait = resolved.batch.age
        given = options.get("queue")
        queue = check_queue(given) if given is not None else resolved.queue
        self._transport.check_queue(queue)  # a clear error before any write
        return ValidTrigger(
            task=resolved.name,
            queue=queue,
            payload=payload,
            prepared=prepared,
            run_id=run_id,
            due_at=self._clock.now() + wait if wait else None,
            idempotency_key=idem,
            singleton_key=single,
            concurrency_key=key,
            ordering_key=order,
            debounce_key=debounce,
            batch_key=batch,
            tags=tags,
            retention=retention_for(resolved, self._config, idempotency_key=idem)
            if idem is not None or resolved.retention is not None
            else self._config.retention,  # the plain case of retention_for, without a call
        )

    def _create(self, trigger: ValidTrigger) -> Run:
        if trigger.debounce_key is not None:
            return self._debounced(trigger)
        if trigger.batch_key is not None:
            return self._batched(trigger)
        run = create(
            self._store,
            self._values,
            trigger,
            environment=self._config.environment,
            now=self._clock.now(),
            idempotency_retention=self._config.idempotency_retention,
            republish=self._config.republish,
        )
        extra: dict[str, object] = {"run_id": run.id, "task": run.task}
        if run.tags:
            extra["tags"] = run.tags
        if trigger.trace and (trace_id := trace_id_of(trigger.trace)):
            extra["trace_id"] = trace_id
        log.info(
            "triggered run %s of %s" if run.created else "trigger returned existing run %s of %s",
            run.id,
            run.task,
            extra=extra,
        )
        return run

    def _debounced(self, trigger: ValidTrigger) -> Run:
        """The run a debounced trigger goes to: its key's pending run or a new one."""
        rule, key = self._tasks.resolve(trigger.task).debounce, trigger.debounce_key
        assert rule is not None and key is not None
        new = self._gathered(trigger, "debounce_key", key)
        debounced = DebouncedTrigger(
            key, trigger.payload, new.run, new.event, new.payload_text, trigger.payload_json
        )
        return self._logged(self._debouncing.trigger(debounced, rule), "debounce", key)

    def _batched(self, trigger: ValidTrigger) -> Run:
        """The run a batched trigger's item goes to: its key's pending batch or a new one."""
        rule, key = self._tasks.resolve(trigger.task).batch, trigger.batch_key
        assert rule is not None and key is not None
        new = self._gathered(trigger, "batch_key", key)
        self._batching.check_item(trigger.prepared, new.payload_text, rule)  # as kept
        batched = BatchedTrigger(key, new.payload_text, new.run, new.event, trigger.prepared)
        return self._logged(self._batching.trigger(batched, rule), "batch", key)

    def _gathered(self, trigger: ValidTrigger, attribute: str, key: str) -> NewRun:
        """The run a debounced or batched trigger creates if its key has no pending run:
        carrying the key (``attribute``), its first event naming it."""
        new = self._new_run(trigger)
        event = replace(new.event, data={**new.event.data, attribute: key})
        return replace(new, run=new.run.with_changes(**{attribute: key}), event=event)

    @staticmethod
    def _logged(run: Run, kind: str, key: str) -> Run:
        if run.created:
            log.info(
                "triggered run %s of %s (%s key %r)",
                run.id,
                run.task,
                kind,
                key,
                extra={"run_id": run.id, "task": run.task},
            )
        return run

    def relaunch(
        self,
        source: Run,
        run_id: str,
        link: tuple[str, LinkKind, str, str],
        *,
        publish: bool = True,
    ) -> Run:
        """Create a run of ``source``'s task with its payload, linked to ``source``, and
        publish its wakeup (unless ``publish`` is false: the caller publishes a batch).

        The task's queue is the one this app registers it on, or the source's when this
        app does not register the task (an operator's app need not import the producing
        app's code)."""
        task = self._tasks.get(source.task)
        queue = task.queue if task is not None else source.queue
        payload, payload_text = self._payload_for(source, run_id)
        with self._observer.trigger(source.task, queue, source=source) as span:
            run, event = machine.new_run(
                run_id=run_id,
                environment=self._config.environment,
                task=source.task,
                queue=queue,
                payload=payload,
                now=self._clock.now(),
                republish=self._config.republish,
                source=link,
            )
            run = run.with_changes(
                concurrency_key=source.concurrency_key,
                trace=span.trace,
                retention=retention_for(task, self._config),
                tags=source.tags,
            )
            span.set({t.RUN_ID: run.id})
            run = write_run(self._store, run, event, payload_text, (), source.ordering_key)
            if publish:
                self._publisher.publish_new([run])
        self._observer.triggered([run])
        return run

    def _payload_for(self, source: Run, run_id: str) -> tuple[JSON, str]:
        """``source``'s payload for the run ``run_id`` that relaunches it, and its text
        as that run keeps it: the same reference when it is plain JSON in the bucket
        (one object for both), else opened and sealed again for the new run."""
        payload = source.payload
        if isinstance(payload, Sealed) and not payload.codecs:
            return payload, payload.text
        place = ValuePlace(Holder.RUN, run_id, ValueField.PAYLOAD)
        opened = self._values.open(payload, ValuePlace(Holder.RUN, source.id, ValueField.PAYLOAD))
        return opened, self._values.seal(opened, what="payload", place=place).text
