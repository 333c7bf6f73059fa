"""The console's web app: server-rendered pages over the operator API (``app.runs``,
``app.health``, ``app.schedules``, ...), the same path to storage the CLI takes
(docs/console.md).

Pages read through the API's index queries only. Every request needs the access token
(:mod:`runlane_sqs.console.security`); every form its CSRF token; with ``read_only`` no
action is offered or accepted. An error the API raises (a run not found, an action the
run's status does not allow) is shown in words with its HTTP status, never as a stack
trace.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from runlane_sqs.api.app import Runlane
from runlane_sqs.console import charts, views
from runlane_sqs.console.bulk import BulkPages
from runlane_sqs.console.overview import OverviewPages
from runlane_sqs.console.security import COOKIE, CSRF_FIELD, Guard
from runlane_sqs.console.tasks import TaskPages
from runlane_sqs.console.tokens import TokenPages
from runlane_sqs.console.views import Problem
from runlane_sqs.core.errors import (
    IllegalTransition,
    InvalidCursor,
    RunlaneError,
    RunNotFound,
    ValueUnreadable,
)
from runlane_sqs.core.health import Activity
from runlane_sqs.core.model import Run, RunStatus
from runlane_sqs.core.replay import Divergence
from runlane_sqs.core.values import Holder, ValueField, ValuePlace

CHILDREN_PER_PAGE = 50
"""Children a parent's run page lists at once (the next page has a link)."""
log = logging.getLogger("runlane_sqs.console")
HERE = Path(__file__).resolve().parent
ACTOR_COOKIE = "runlane_console_actor"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make posts say Origin: null
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class ConsoleSettings:
    """How one console process serves its app."""

    token: str
    read_only: bool = False
    hide_payloads: bool = False
    refresh_seconds: int = 10


def console_app(app: Runlane, settings: ConsoleSettings) -> Starlette:
    """The console's ASGI app over ``app``'s operator API."""
    guard = Guard(settings.token)
    environment = jinja2.Environment(  # every value printed is escaped
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True
    )
    templates = Jinja2Templates(env=environment)
    pages = Pages(app, settings, guard, templates)
    token_pages = TokenPages(pages)
    overview = OverviewPages(pages)
    bulk = BulkPages(pages)
    task_pages = TaskPages(pages)
    routes = [
        Route("/", lambda request: RedirectResponse("/runs", status_code=303)),
        Route("/runs", pages.runs),
        Route("/runs/{run_id}", pages.run),
        Route("/runs/{run_id}/{action}", pages.act, methods=["POST"]),
        Route("/tasks", task_pages.tasks),
        Route("/tasks/{name}", task_pages.task),
        Route("/tasks/{name}", task_pages.trigger, methods=["POST"]),
        Route("/tokens", token_pages.tokens),
        Route("/tokens", token_pages.token, methods=["POST"]),
        Route("/signals", token_pages.signal, methods=["POST"]),
        Route("/health", overview.health),
        Route("/schedules", overview.schedules),
        Route("/versions", overview.versions),
        Route("/schedules/{schedule_id}/{action}", overview.change, methods=["POST"]),
        Route("/bulk", bulk.operations),
        Route("/bulk", bulk.start, methods=["POST"]),
        Route("/bulk/count", bulk.count),
        Route("/bulk/{operation_id}", bulk.operation),
        Route("/bulk/{operation_id}/stop", bulk.stop, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(BaseHTTPMiddleware, dispatch=_Gate(guard, templates))]
    handlers = {Problem: pages.problem}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=handlers)


class _Gate:
    """Lets in requests that carry the access token; trades a ``?token=`` for a cookie."""

    def __init__(self, guard: Guard, templates: Jinja2Templates) -> None:
        self.guard = guard
        self.templates = templates

    async def __call__(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if request.url.path.startswith("/static/"):
            return _secured(await call_next(request))
        offered = request.query_params.get("token")
        if offered is not None and request.method == "GET":
            if not self.guard.allows(offered):
                return _secured(self._refused(request))
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, offered, httponly=True, samesite="strict")
            return _secured(response)
        if not self.guard.allows(self.guard.presented(request.cookies, request.headers)):
            return _secured(self._refused(request))
        return _secured(await call_next(request))

    def _refused(self, request: Request) -> Response:
        return self.templates.TemplateResponse(
            request,
            "problem.html",
            {"title": "Access token needed", "message": _NEEDS_TOKEN, "read_only": True},
            status_code=401,
        )


_NEEDS_TOKEN = (
    "Open the URL the console printed when it started (it carries the access token), "
    "or send the token as 'Authorization: Bearer <token>'."
)


def _secured(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class Pages:
    """The pages of one console: rendering, form checks and the run pages."""

    def __init__(
        self, app: Runlane, settings: ConsoleSettings, guard: Guard, templates: Jinja2Templates
    ) -> None:
        self.app = app
        self.settings = settings
        self.guard = guard
        self.templates = templates

    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        base = {
            "csrf": self.guard.csrf,
            "csrf_field": CSRF_FIELD,
            "read_only": self.settings.read_only,
            "environment": self.app.config.environment,
            "statuses": [s.value for s in RunStatus],
        }
        return self.templates.TemplateResponse(
            request, name, {**base, **context}, status_code=status
        )

    def problem(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Problem)
        return self.render(
            request, "problem.html", exc.status, title="Not done", message=exc.message
        )

    async def checked_form(self, request: Request, *, action: bool) -> dict[str, str]:
        """A posted form whose CSRF token and origin hold; ``action``: it changes
        something, so a read-only console refuses it."""
        form = {k: str(v) for k, v in (await request.form()).items()}
        origin, host = request.headers.get("origin"), request.headers.get("host")
        if not self.guard.form_allowed(form.get(CSRF_FIELD), origin, host):
            raise Problem(403, "This form is stale or came from another site; reload the page.")
        if action:
            self.require_writable()
        return form

    def require_writable(self) -> None:
        if self.settings.read_only:
            raise Problem(403, "The console runs read-only (--read-only): no action is taken.")

    def runs(self, request: Request) -> Response:
        query = request.query_params
        filters = views.parse_filters(query, query.getlist("status"), query.getlist("tag"))
        runs: list[Any] = []
        cursor: str | None = None
        if not filters.errors:
            try:
                page = self.app.runs.list(**filters.query())  # type: ignore[arg-type]
            except RunlaneError as exc:
                filters.errors.append(str(exc))
            else:
                runs, cursor = page.runs, page.cursor
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
        activity: Activity | None = None
        unread: str | None = None
        try:
            activity = self.app.health.activity()
        except RunlaneError as exc:
            log.warning("console: the runs' activity could not be read: %s", exc)
            unread = f"The counts by status could not be read: {exc}"
        tiles = charts.tiles(activity) if activity else None
        chart = charts.outcomes_chart(activity) if activity else None
        return self.render(
            request,
            "runs.html",
            400 if filters.errors else 200,
            runs=runs,
            filters=filters,
            activity=activity,
            unread=unread,
            tiles=tiles,
            chart=chart,
            next_url=f"/runs?{urlencode([*kept, ('cursor', cursor)])}" if cursor else None,
            refresh=self.settings.refresh_seconds,
        )

    def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            history = self.app.runs.history(run_id, opened=False)  # opened below, if shown
        except RunNotFound as exc:
            raise Problem(404, str(exc)) from None
        run, events, attempts = history.run, history.events, history.attempts
        bars, marks = views.timeline(run, attempts, events, self.app.clock.now())
        hide = self.settings.hide_payloads
        groups = self.app.runs.groups_of(history.run)
        children = None
        if groups:
            try:
                children = self.app.runs.children(
                    run_id, limit=CHILDREN_PER_PAGE, cursor=request.query_params.get("children")
                )
            except InvalidCursor as exc:
                raise Problem(400, str(exc)) from None
        member = self.app.store.groups.get_group(run.group_id) if run.group_id else None
        return self.render(
            request,
            "run.html",
            run=run,
            events=events,
            attempts=attempts,
            bars=bars,
            marks=marks,
            payload=self.shown(run, "payload", hide),
            state=views.pretty(run.state, hide) if run.state is not None else None,
            live=views.live_seconds(run, groups),
            result=self.shown(run, "result", hide) if run.status is RunStatus.SUCCEEDED else None,
            trace_id=views.trace_of(run),
            divergence=Divergence.of(events) if run.status is RunStatus.PARKED else None,
            actions=views.actions_for(run, self.settings.read_only, bool(groups)),
            groups=groups,
            children=children,
            member=member,
            actor=unquote(request.cookies.get(ACTOR_COOKIE, "")),
            done=views.done_message(request.query_params.get("done")),
        )

    def shown(self, run: Run, what: str, hide: bool) -> str:
        """The run's payload or result as the page shows it: hidden (never read, with
        ``--hide-payloads``), indented JSON, or why a large one cannot be read back."""
        if hide:
            return views.HIDDEN
        try:
            place = ValuePlace(Holder.RUN, run.id, ValueField(what))
            value = self.app.engine.values.open(getattr(run, what), place)
        except ValueUnreadable as exc:
            return f"(cannot be shown: {exc})"
        return views.pretty(value, hide=False)

    async def act(self, request: Request) -> Response:
        form = await self.checked_form(request, action=True)
        target, actor = self._act(request, form)
        action = request.path_params["action"]
        response = RedirectResponse(
            f"/runs/{target}?{urlencode({'done': action})}", status_code=303
        )
        response.set_cookie(ACTOR_COOKIE, quote(actor), httponly=True, samesite="strict")
        return response

    def _act(self, request: Request, form: dict[str, str]) -> tuple[str, str]:
        """Check and perform one action; returns the run to show next and the actor."""
        action, run_id = request.path_params["action"], request.path_params["run_id"]
        if action not in views.ACTION_STATUSES:
            raise Problem(404, f"There is no action {views.shown(action)!r}.")
        actor, reason = views.checked_actor(form)
        perform: Callable[..., Any] = {
            "cancel": self.app.runs.cancel,
            "retry": self.app.runs.retry,
            "rerun": self.app.runs.rerun,
            "retry-failed": self.app.runs.retry_failed,
            "unpark": self.app.runs.unpark,
        }[action]
        try:
            done = perform(run_id, reason=reason, actor=f"console:{actor}")
        except RunNotFound as exc:
            raise Problem(404, str(exc)) from None
        except IllegalTransition as exc:
            raise Problem(409, f"Not allowed now: {exc}") from None
        except RunlaneError as exc:
            log.warning("console %s of run %s failed: %s", action, run_id, exc)
            raise Problem(503, f"Storage did not take the {action}: {exc}") from None
        log.info(
            "console: %s of run %s by %s: %r",
            action,
            run_id,
            actor,
            reason,
            extra={"run_id": run_id},
        )
        return (done.id if isinstance(done, Run) else run_id), actor
