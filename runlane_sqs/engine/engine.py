"""The engine: every service of one app, wired over one store and one transport.

Each service takes only the collaborators it uses (store, transport, clock, config,
publisher, ...); this module is where they meet. The :class:`~runlane_sqs.Runlane`
facade builds one engine, and workers, the Lambda consumer and the operator API run on
it. Maintenance, with the parking and scheduling it drives, is built (and its modules
imported) on first use: the per-message path of a worker or a Lambda consumer does not
use it (docs/deploy-lambda.md, "Cold start").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from runlane_sqs.core.clock import Clock, ManualClock
from runlane_sqs.core.config import RunlaneConfig
from runlane_sqs.engine.driver import EngineCall
from runlane_sqs.engine.finishing import Finish, Finisher
from runlane_sqs.engine.groups import Groups
from runlane_sqs.engine.hooks import AttemptHooks
from runlane_sqs.engine.observing import Observer
from runlane_sqs.engine.ordering import Turns
from runlane_sqs.engine.publishing import Publisher
from runlane_sqs.engine.rates import Reservation, reserve
from runlane_sqs.engine.resuming import Recheck, Resumer
from runlane_sqs.engine.signals import SignalsApi
from runlane_sqs.engine.slots import PassSlotsOn, RecheckSlot, SlotWaker, WakeWaiters
from runlane_sqs.engine.tasks import TaskRegistry
from runlane_sqs.engine.tokens import TokensApi
from runlane_sqs.engine.triggering import Triggers
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.codecs import Codec
from runlane_sqs.ports.objects import ObjectStore
from runlane_sqs.ports.store import RunStore
from runlane_sqs.ports.transport import BacklogProbe, WakeupTransport

if TYPE_CHECKING:
    from runlane_sqs.engine.maintenance import BulkCarrier, Maintenance
    from runlane_sqs.engine.parking import Parking
    from runlane_sqs.engine.scheduling import Scheduler


class Engine:
    """The services of one app: triggering, publishing, resuming, finishing, tokens,
    signals, schedules and maintenance, over ``store`` and ``transport``."""

    def __init__(
        self,
        *,
        config: RunlaneConfig,
        clock: Clock,
        tasks: TaskRegistry,
        store: RunStore,
        transport: WakeupTransport,
        objects: ObjectStore | None = None,
        codecs: Sequence[Codec] = (),
        observer: Observer | None = None,
        hooks: AttemptHooks | None = None,
    ) -> None:
        self.config = config
        self.hooks = hooks or AttemptHooks()
        """The app's code around each attempt (docs/hooks.md): its drivers call them."""
        self.observer = observer or Observer(redact=config.redact)
        """Where spans and metrics go (nothing is recorded by default)."""
        self.clock = clock
        self.pause: Callable[[float], object] = (
            clock.advance if isinstance(clock, ManualClock) else time.sleep
        )
        """How a worker waits a moment (seconds): time moved by hand moves it too."""
        self.tasks = tasks
        self.store = store
        self.transport = transport
        self.values = Values(config, objects, store.object_records, clock, codecs)
        """Seals values into their stored form and opens them (docs/payloads.md)."""
        self.publisher = Publisher(store, transport, clock)
        self.resumer = Resumer(store, self.publisher, self.values, clock, config)
        self.turns = Turns(store, self.publisher, clock, config)
        self.triggers = Triggers(
            store=store,
            transport=transport,
            publisher=self.publisher,
            tasks=tasks,
            clock=clock,
            config=config,
            observer=self.observer,
            values=self.values,
        )
        self.groups = Groups(
            store, self.publisher, self.resumer, self.triggers, self.values, tasks, clock, config
        )
        self.finisher = Finisher(store.keys, self.resumer, self.turns, self.groups)
        self.slot_waker = SlotWaker(store, self.publisher, clock, config, tasks)
        self.tokens = TokensApi(
            store.tokens, self.resumer, self.values, clock, config.environment, self.observer
        )
        self.signals = SignalsApi(self.resumer, self.values, self.observer)
        self.bulk_carrier: Callable[[], BulkCarrier] | None = None
        """What maintenance hands a bulk operation whose process died to (the app's
        ``app.bulk``, set by the app before maintenance is built; ``None``: maintenance
        leaves them)."""

    def serve(self, call: EngineCall) -> Any:
        """Perform a call of the per-message path to one of these services
        (:class:`~runlane_sqs.engine.driver.EngineCall`)."""
        return self._served[type(call)](call)

    @cached_property
    def _served(self) -> dict[type, Callable[[Any], Any]]:
        """The service call of each kind of :class:`~runlane_sqs.engine.driver.EngineCall`."""
        return {
            Finish: lambda call: self.finisher.after_finished(call.run),
            Recheck: lambda call: self.resumer.recheck(call.run),
            WakeWaiters: lambda call: self.slot_waker.wake(call.scopes),
            RecheckSlot: lambda call: self.slot_waker.recheck(call.run, call.slot),
            PassSlotsOn: lambda call: self.slot_waker.pass_on(call.run),
            Reservation: lambda call: reserve(self.store.rates, call),
        }

    @cached_property
    def app_version(self) -> str | None:
        """The version recorded on the attempts this process runs: the configured
        ``app_version``, else the installed distribution's its handlers come from (read
        once, when the first worker path is made: after the tasks are registered)."""
        return self.config.app_version or self.tasks.installed_version()

    @cached_property
    def parking(self) -> Parking:
        """Unparks parked runs (a worker at start-up, maintenance, the operator API)."""
        from runlane_sqs.engine.parking import Parking  # noqa: PLC0415 (see the module doc)

        return Parking(
            store=self.store,
            publisher=self.publisher,
            tasks=self.tasks,
            clock=self.clock,
            config=self.config,
        )

    @cached_property
    def scheduler(self) -> Scheduler:
        """Stores the app's schedules and turns their due occurrences into runs."""
        from runlane_sqs.engine.scheduling import Scheduler  # noqa: PLC0415 (see the module doc)

        return Scheduler(
            store=self.store,
            tasks=self.tasks,
            clock=self.clock,
            config=self.config,
            observer=self.observer,
            values=self.values,
        )

    @cached_property
    def maintenance(self) -> Maintenance:
        """Maintenance passes over this engine's services."""
        from runlane_sqs.engine.maintenance import Maintenance  # noqa: PLC0415 (see the module doc)

        return Maintenance(
            store=self.store,
            publisher=self.publisher,
            resumer=self.resumer,
            finisher=self.finisher,
            tokens=self.tokens,
            parking=self.parking,
            scheduler=self.scheduler,
            slot_waker=self.slot_waker,
            turns=self.turns,
            groups=self.groups,
            values=self.values,
            tasks=self.tasks,
            observer=self.observer,
            clock=self.clock,
            config=self.config,
            backlog=self.transport if isinstance(self.transport, BacklogProbe) else None,
            bulk=self.bulk_carrier,
        )


class HasEngine(Protocol):
    """Anything that carries an engine (the ``Runlane`` app does)."""

    @property
    def engine(self) -> Engine: ...
