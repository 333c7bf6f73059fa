"""The console's task pages (docs/console.md, "Tasks"): the tasks the app registers with
their queues and the types of their payloads and results, one task's JSON Schemas and
links to its runs, and a form that triggers a run of it with a JSON payload.

The form's payload goes through ``app.trigger`` as any trigger's does: a payload the
task's type refuses is shown field by field on the task's page and nothing is written. The
tasks are those of the app's code: a console started with an app that registers none
lists none."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from runlane_sqs.console.tokens import PageTools, parse_value
from runlane_sqs.console.views import Problem, shown
from runlane_sqs.core.errors import (
    InvalidKeyError,
    InvalidPayloadError,
    RunlaneError,
    UnknownTaskError,
)
from runlane_sqs.core.model import JSON
from runlane_sqs.engine.tasks import Task

log = logging.getLogger("runlane_sqs.console")
ANY_JSON = "any JSON value"
"""What a plain JSON type's schema shows in place of one."""


def schema_text(schema: JSON) -> str:
    """A JSON Schema as the task page shows it: indented, in pydantic's order of fields
    (escaped by the template)."""
    if schema is None:
        return ANY_JSON
    return visible(json.dumps(schema, indent=2, ensure_ascii=False))


def visible(text: str) -> str:
    """Text to show as it is written (a type's name, a schema, what was typed in the
    form): a character that does not print (a terminal escape, a direction override)
    shows as U+FFFD; markup is escaped by the template."""
    return "".join(c if c.isprintable() or c in "\n\r\t" else "\ufffd" for c in text)


def type_names(task: Task) -> dict[str, str]:
    """The names of the task's payload and result types, as the pages show them."""
    return {part: visible(name) for part, name in task.types.names().items()}


@dataclass
class TriggerForm:
    """The trigger form as posted, kept to be shown again with what it got wrong."""

    payload: str = ""
    idempotency_key: str = ""
    problems: list[str] = field(default_factory=list)
    """Why the trigger was refused: the payload is not JSON, a key is invalid, ..."""
    fields: list[dict[str, Any]] = field(default_factory=list)
    """Each field the task's type refuses: its ``path``, ``message`` and ``kind``."""

    def shown(self) -> TriggerForm:
        """The form as its page shows it again: every text printable (a field's path may
        be a key of the payload)."""
        return TriggerForm(
            visible(self.payload),
            visible(self.idempotency_key),
            [visible(problem) for problem in self.problems],
            [{k: visible(str(v)) for k, v in error.items()} for error in self.fields],
        )


class TaskPages:
    """The tasks page, each task's page and its trigger form over ``pages``' app."""

    def __init__(self, pages: PageTools) -> None:
        self.pages = pages

    def tasks(self, request: Request) -> Response:
        registry = self.pages.app.tasks
        listed = [registry.resolve(name) for name in registry.names()]
        return self.pages.render(
            request, "tasks.html", tasks=[(task, type_names(task)) for task in listed]
        )

    def task(self, request: Request) -> Response:
        return self._task_page(request, self._task(request), TriggerForm())

    async def trigger(self, request: Request) -> Response:
        """Trigger a run of the task with the form's JSON payload and open its page; a
        refused payload or key is shown on the task's page, and nothing is written."""
        form = await self.pages.checked_form(request, action=True)
        task = self._task(request)
        wanted = TriggerForm(form.get("payload", ""), form.get("idempotency_key", "").strip())
        try:
            payload = parse_value(wanted.payload, "payload")
            run = self.pages.app.trigger(
                task.name, payload, idempotency_key=wanted.idempotency_key or None
            )
        except Problem as exc:
            wanted.problems.append(exc.message)
        except InvalidPayloadError as exc:  # field by field when the task's type said why
            wanted.fields = exc.errors
            wanted.problems += [] if exc.errors else [str(exc)]
        except InvalidKeyError as exc:
            wanted.problems.append(str(exc))
        except RunlaneError as exc:
            log.warning("console: a trigger of task %s failed: %s", task.name, exc)
            raise Problem(503, f"Storage did not take the trigger: {exc}") from None
        else:
            log.info(
                "console: run %s of task %s triggered (new: %s)",
                run.id,
                task.name,
                run.created,
                extra={"run_id": run.id},
            )
            done = urlencode({"done": "triggered" if run.created else "joined"})
            return RedirectResponse(f"/runs/{run.id}?{done}", status_code=303)
        return self._task_page(request, task, wanted.shown(), status=400)

    def _task(self, request: Request) -> Task:
        name = request.path_params["name"]
        try:
            return self.pages.app.tasks.resolve(name)
        except UnknownTaskError:
            raise Problem(404, f"This app registers no task {shown(name)!r}.") from None

    def _task_page(
        self, request: Request, task: Task, wanted: TriggerForm, status: int = 200
    ) -> Response:
        names = type_names(task)
        try:
            schemas = {part: schema_text(s) for part, s in task.types.schemas().items()}
        except Exception as exc:  # pydantic's error for a type that has no JSON Schema
            schemas = {part: visible(f"(no JSON Schema: {exc})") for part in names}
        return self.pages.render(
            request,
            "task.html",
            status,
            task=task,
            names=names,
            schemas=schemas,
            runs_url=f"/runs?{urlencode({'task': task.name})}",
            failed_url=f"/runs?{urlencode({'task': task.name, 'status': 'failed'})}",
            wanted=wanted,
        )
