"""The console's bulk pages (``app.bulk``; docs/console.md, "Bulk operations"): the
operations with their progress, a form that counts the runs a filter selects and shows
the count before the button that acts on them, one operation's page, and its stop.

A started operation is carried out on a thread of the console's process, at its rate.
If that process stops, the operation stays resumable (``runlane-sqs runs bulk resume``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runlane_sqs.api.bulk import BulkCount
from runlane_sqs.console import views
from runlane_sqs.console.tokens import PageTools
from runlane_sqs.console.views import Problem, checked_actor, shown
from runlane_sqs.core.bulk import DEFAULT_RATE, MAX_BULK_RATE, BulkAction, BulkFilter
from runlane_sqs.core.errors import (
    ConfigurationError,
    IllegalTransition,
    InvalidKeyError,
    OperationNotFound,
    RunlaneError,
)

log = logging.getLogger("runlane_sqs.console")
LISTED = 20
"""Operations the bulk page lists."""
REFRESH_SECONDS = 5
"""How often an operation's page reloads itself, when asked to."""


@dataclass
class BulkForm:
    """A bulk form's action, filter and rate, as checked; ``errors`` says what was
    refused."""

    action: BulkAction | None = None
    selection: BulkFilter = field(default_factory=BulkFilter)
    rate: float = DEFAULT_RATE
    errors: list[str] = field(default_factory=list)

    def fields(self) -> list[tuple[str, str]]:
        """The form as the hidden fields (and query) that send it again."""
        selection = self.selection
        pairs = [("action", self.action.value if self.action else ""), ("rate", f"{self.rate:g}")]
        pairs += [("status", s.value) for s in selection.statuses]
        for name in ("task", "queue", "schedule", "group", "failure_type"):
            value = getattr(selection, name)
            if value:
                pairs.append((name, value))
        for name in ("created_after", "created_before"):
            moment = getattr(selection, name)
            if moment is not None:
                pairs.append((name, moment.isoformat()))
        pairs += [("tag", f"{key}={value}") for key, value in selection.tags]
        return pairs


def parse_bulk(
    params: Mapping[str, str], statuses: list[str], tags: Sequence[str] = ()
) -> BulkForm:
    """The bulk form of a query string or a posted form (``status`` and ``tag`` may
    repeat)."""
    wanted = BulkForm()
    filters = views.parse_filters(params, statuses, tags)
    wanted.errors.extend(filters.errors)
    try:
        wanted.action = BulkAction(params.get("action", ""))
    except ValueError:
        wanted.errors.append(f"choose an action: {', '.join(a.value for a in BulkAction)}")
    extra: dict[str, str | None] = {}
    for name in ("group", "failure_type"):
        text = params.get(name, "").strip()
        if len(text) > views.MAX_FILTER_CHARS:
            wanted.errors.append(f"{name} {shown(text)!r} is too long")
        extra[name] = text or None
    try:
        wanted.rate = float(params.get("rate") or DEFAULT_RATE)
    except ValueError:
        wanted.errors.append(f"rate {shown(params.get('rate', ''))!r} is not a number")
    if not 0 < wanted.rate <= MAX_BULK_RATE:
        wanted.errors.append(f"rate must be above 0 and at most {MAX_BULK_RATE:g} runs a second")
    wanted.selection = BulkFilter(
        statuses=tuple(filters.statuses),
        task=filters.task,
        queue=filters.queue,
        schedule=filters.schedule,
        created_after=filters.created_after,
        created_before=filters.created_before,
        group=extra["group"],
        failure_type=extra["failure_type"],
        tags=tuple(filters.tags.items()),
    )
    if wanted.action is not None and not wanted.errors:
        try:
            wanted.selection = wanted.selection.checked(wanted.action)
        except (ConfigurationError, InvalidKeyError) as exc:
            wanted.errors.append(str(exc))
    return wanted


class BulkPages:
    """The bulk pages over ``pages``' app."""

    def __init__(self, pages: PageTools) -> None:
        self.pages = pages

    def operations(self, request: Request) -> Response:
        """The latest operations, and the form that counts before it acts."""
        try:
            listed = self.pages.app.bulk.list(limit=LISTED).operations
        except RunlaneError as exc:
            raise Problem(503, f"Bulk operations could not be read: {exc}") from None
        return self.pages.render(
            request,
            "bulk.html",
            operations=listed,
            actions=[a.value for a in BulkAction],
            wanted=None,
            counted=None,
        )

    def count(self, request: Request) -> Response:
        """A dry run of the form's operation: the count, then the button that acts."""
        params = request.query_params
        wanted = parse_bulk(params, params.getlist("status"), params.getlist("tag"))
        counted: BulkCount | None = None
        if not wanted.errors and wanted.action is not None:
            try:
                counted = self.pages.app.bulk.count(wanted.action, wanted.selection)
            except RunlaneError as exc:
                wanted.errors.append(str(exc))
        return self.pages.render(
            request,
            "bulk.html",
            400 if wanted.errors else 200,
            operations=[],
            actions=[a.value for a in BulkAction],
            wanted=wanted,
            counted=counted,
        )

    async def start(self, request: Request) -> Response:
        """Start the confirmed operation and carry it out on a thread of this process."""
        form = await self.pages.checked_form(request, action=True)
        posted = await request.form()
        wanted = parse_bulk(
            form,
            [str(s) for s in posted.getlist("status")],
            [str(t) for t in posted.getlist("tag")],
        )
        if wanted.errors or wanted.action is None:
            raise Problem(400, "; ".join(wanted.errors) or "Choose an action.")
        actor, reason = checked_actor(form)
        try:  # it counts the runs again: off the event loop
            operation = await run_in_threadpool(
                self.pages.app.bulk.start,
                wanted.action,
                wanted.selection,
                actor=f"console:{actor}",
                reason=reason,
                rate=wanted.rate,
            )
        except RunlaneError as exc:
            raise Problem(400, str(exc)) from None
        threading.Thread(
            target=self._carry_out, args=(operation.id,), name=f"bulk-{operation.id}", daemon=True
        ).start()
        log.info(
            "console: bulk %s %s started by %s: %r",
            wanted.action.value,
            operation.id,
            actor,
            reason,
            extra={"operation": operation.id},
        )
        return RedirectResponse(f"/bulk/{operation.id}", status_code=303)

    def operation(self, request: Request) -> Response:
        operation_id = request.path_params["operation_id"]
        try:
            operation = self.pages.app.bulk.get(operation_id)
        except InvalidKeyError as exc:
            raise Problem(400, str(exc)) from None
        except OperationNotFound as exc:
            raise Problem(404, str(exc)) from None
        return self.pages.render(
            request,
            "bulk_operation.html",
            operation=operation,
            stopped=request.query_params.get("done") == "stopped",
            refresh=REFRESH_SECONDS,
        )

    async def stop(self, request: Request) -> Response:
        await self.pages.checked_form(request, action=True)
        operation_id = request.path_params["operation_id"]
        try:
            self.pages.app.bulk.stop(operation_id)
        except InvalidKeyError as exc:
            raise Problem(400, str(exc)) from None
        except OperationNotFound as exc:
            raise Problem(404, str(exc)) from None
        except IllegalTransition as exc:
            raise Problem(409, f"Not allowed now: {exc}") from None
        done = urlencode({"done": "stopped"})
        return RedirectResponse(f"/bulk/{operation_id}?{done}", status_code=303)

    def _carry_out(self, operation_id: str) -> None:
        try:
            self.pages.app.bulk.run(operation_id)
        except RunlaneError as exc:
            log.warning(
                "console: bulk operation %s stopped on an error: %s (runs bulk resume %s "
                "carries it on)",
                operation_id,
                exc,
                operation_id,
                extra={"operation": operation_id},
            )
