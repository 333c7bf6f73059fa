"""The console's health, schedules and versions pages: the last maintenance pass, the
runs maintenance has to act on, each queue's messages, dead letters and concurrency
slots (``app.health``, ``app.queues``); the stored schedules with their next
occurrences, paused and resumed from the page (``app.schedules``); the unfinished runs
per app version and task (``app.runs.versions``)."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runlane_sqs.console.tokens import PageTools
from runlane_sqs.console.views import Problem, checked_actor, shown
from runlane_sqs.core.errors import IllegalTransition, RunlaneError, ScheduleNotFound

log = logging.getLogger("runlane_sqs.console")
SCHEDULE_ACTIONS = ("pause", "resume")
DONE = frozenset(f"{action}d" for action in SCHEDULE_ACTIONS)
UPCOMING = 3


class OverviewPages:
    """Health, schedules and versions pages over ``pages``' app."""

    def __init__(self, pages: PageTools) -> None:
        self.pages = pages

    def health(self, request: Request) -> Response:
        app = self.pages.app
        problems: list[str] = []
        checked = occupancy = None
        try:
            checked = app.health.check()
        except RunlaneError as exc:
            problems.append(f"Health could not be read: {exc}")
        try:
            occupancy = app.queues.list()
        except RunlaneError as exc:
            problems.append(f"Concurrency slots could not be read: {exc}")
        rates = None
        try:
            rates = app.queues.rates()
        except RunlaneError as exc:
            problems.append(f"Rate limits could not be read: {exc}")
        return self.pages.render(
            request,
            "health.html",
            health=checked,
            occupancy=occupancy,
            rates=rates,
            problems=problems,
            period=app.config.maintenance_period,
        )

    def schedules(self, request: Request) -> Response:
        try:
            states = self.pages.app.schedules.list()
        except RunlaneError as exc:
            raise Problem(503, f"Schedules could not be read: {exc}") from None
        # what the redirect after a change says, shown only for a listed schedule
        done, done_id = request.query_params.get("done"), request.query_params.get("id")
        if done not in DONE or done_id not in {state.id for state in states}:
            done = done_id = None
        return self.pages.render(
            request,
            "schedules.html",
            schedules=states,
            upcoming=UPCOMING,
            done=done,
            done_id=done_id,
        )

    def versions(self, request: Request) -> Response:
        try:
            report = self.pages.app.runs.versions()
        except RunlaneError as exc:
            raise Problem(503, f"Runs could not be read: {exc}") from None
        return self.pages.render(request, "versions.html", report=report)

    async def change(self, request: Request) -> Response:
        """Pause or resume one schedule, with the actor's name and a reason (logged)."""
        form = await self.pages.checked_form(request, action=True)
        action, schedule_id = request.path_params["action"], request.path_params["schedule_id"]
        if action not in SCHEDULE_ACTIONS:
            raise Problem(404, f"There is no schedule action {shown(action)!r}.")
        actor, reason = checked_actor(form)
        schedules = self.pages.app.schedules
        try:
            (schedules.pause if action == "pause" else schedules.resume)(schedule_id)
        except ScheduleNotFound as exc:
            raise Problem(404, str(exc)) from None
        except IllegalTransition as exc:
            raise Problem(409, f"Not allowed now: {exc}") from None
        except RunlaneError as exc:
            raise Problem(400, str(exc)) from None
        log.info(
            "console: %s of schedule %s by %s: %r",
            action,
            schedule_id,
            actor,
            reason,
            extra={"schedule": schedule_id},
        )
        done = urlencode({"done": f"{action}d", "id": schedule_id})
        return RedirectResponse(f"/schedules?{done}", status_code=303)
