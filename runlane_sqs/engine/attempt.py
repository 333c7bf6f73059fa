"""What one attempt's context may do with storage: record steps, read tokens, watch runs,
open groups."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from runlane_sqs.core import machine, waits
from runlane_sqs.core.clock import Clock
from runlane_sqs.core.errors import ConflictError, LeaseLost
from runlane_sqs.core.groups import Group, group_id_for, group_root
from runlane_sqs.core.model import JSON, Run
from runlane_sqs.core.tokens import Token
from runlane_sqs.engine.context import Child, GroupOptions
from runlane_sqs.engine.groups import Groups
from runlane_sqs.engine.leases import LeaseBook
from runlane_sqs.engine.values import Values
from runlane_sqs.ports.store import RunStore


class AttemptRuntime:
    """The :class:`~runlane_sqs.engine.context.AttemptServices` a worker gives each context."""

    def __init__(
        self,
        store: RunStore,
        groups: Groups,
        clock: Clock,
        values: Values,
        leases: LeaseBook,
        run: Run,
        token: str,
    ) -> None:
        self._store = store
        self._groups = groups
        self._joined: dict[str, Group] = {}
        self._clock = clock
        self._leases = leases
        self._run = run
        self._token = token
        self.values = values

    def now(self) -> datetime:
        return self._clock.now()

    def run(self) -> Run:
        return self._leases.current(self._run.id) or self._run

    def record_step(self, name: str, value: JSON) -> None:
        """Write the step under this attempt's lease; a concurrent change that keeps the
        lease (a cancel request) is decided again, a lost lease raises :class:`LeaseLost`."""
        current = self.run()
        for _ in range(machine.MAX_REDECISIONS):
            transition = waits.record_step(
                current, token=self._token, name=name, value=value, now=self.now()
            )
            try:
                stored = self._store.apply(transition)
            except ConflictError as conflict:
                if conflict.current is None:
                    break
                current = conflict.current
                continue
            self._run = stored
            self._leases.update(stored)
            return
        raise LeaseLost(self._run.id)

    def get_token(self, token_id: str) -> Token | None:
        token = self._store.tokens.get_token(token_id)
        return self.values.open_token(token) if token is not None else None

    def watch_run(self, run_id: str) -> Run | None:
        run = self._store.watch_run(run_id)
        return self.values.open_run(run, payload=False) if run is not None else None

    def open_group(self, wait_name: str, children: Iterable[Child], options: GroupOptions) -> Group:
        """Open the run's group at ``wait_name``, fenced on this attempt's lease, and
        start its first children. The group an earlier attempt opened is taken as it is:
        ``children`` is not read again (a generator paging an API is read once)."""
        group_id = group_id_for(group_root(self._run), wait_name)
        stored = self._store.groups.get_group(group_id)
        if stored is not None:
            return self._groups.opened(stored)
        items = self._groups.items(children)
        group, chunks = self._groups.new_group(
            items, group_id=group_id, parent=self._run, options=options
        )
        return self._groups.open(group, chunks, (self._run.id, self._token))

    def get_group(self, group_id: str) -> Group | None:
        return self._store.groups.get_group(group_id)

    def group_children(self, group_id: str, start: int, limit: int) -> list[Run | None]:
        """A page of a joined group's children; the group record (which names them) is
        read once per attempt, not once per page."""
        group = self._joined.get(group_id)
        if group is None:
            group = self._store.groups.get_group(group_id)
            if group is None:
                return []
            self._joined[group_id] = group
        return [
            self.values.open_run(child, payload=False) if child is not None else None
            for child in self._store.groups.children(group, start, limit)
        ]
