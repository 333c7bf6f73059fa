"""Log output of the CLI: JSON lines (python-json-logger) or text, on stderr.

Library log lines carry their context as ``LogRecord`` attributes (logging "extras"):
``run_id``, ``task``, ``attempt``, ``worker_id``, ``reason``, ``message_id``, ``trace_id``
(tracing on), ``pass_id`` and ``report`` (a maintenance pass). JSON lines include every
extra; text lines append the known ones as ``key=value``. Payloads are
never logged.

Text lines show control characters escaped (``\\x1b``, ``\\u202e``; see
:mod:`runlane_sqs.cli.escaping`): in the message and the extras line breaks too, so one
record is one line, with only an exception's traceback on the lines after it. JSON
lines need nothing more: the JSON encoder escapes every character that is not ASCII.
A failed attempt's line carries its recorded, redacted traceback as ``traceback``.
"""

from __future__ import annotations

import copy
import logging
import sys
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from runlane_sqs.cli.escaping import BLOCK_KEEPS, printable

LOG_FORMATS = ("json", "text")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
CONTEXT_FIELDS = (
    "run_id",
    "task",
    "attempt",
    "worker_id",
    "reason",
    "message_id",
    "trace_id",
    "pass_id",
    "tags",
)
"""Extras appended to text lines, in this order (a run's tags as ``tags=k=v,k=v``)."""
TRACEBACK_FIELD = "traceback"
"""A failed attempt's recorded traceback (redacted): shown on the lines after a text line,
as an exception's would be; a field of its own in JSON lines."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
JSON_FIELDS = ("levelname", "name", "message")
JSON_RENAMES = {"levelname": "level", "name": "logger"}
QUIET_LOGGERS = ("botocore", "boto3", "urllib3", "werkzeug")


class TextFormatter(logging.Formatter):
    """``time LEVEL logger message key=value ...`` with the run context appended, and
    control characters escaped."""

    def format(self, record: logging.LogRecord) -> str:
        shown = copy.copy(record)  # other handlers still get the record as it was logged
        shown.msg, shown.args = printable(record.getMessage()), None
        line = printable(super().format(shown), BLOCK_KEEPS)  # the traceback keeps its lines
        fields = [
            f"{name}={printable(_text(getattr(record, name)))}"
            for name in CONTEXT_FIELDS
            if hasattr(record, name)
        ]
        shown_line = " ".join([line, *fields])
        recorded = getattr(record, TRACEBACK_FIELD, None)  # a failed attempt's, redacted
        if isinstance(recorded, str) and recorded:
            shown_line += "\n" + printable(recorded.rstrip("\n"), BLOCK_KEEPS)
        return shown_line


def _text(value: object) -> str:
    """An extra as a text line shows it: a mapping (a run's tags) as ``k=v,k=v``."""
    if isinstance(value, dict):
        return ",".join(f"{key}={item}" for key, item in value.items())
    return str(value)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is logged, not when the handler
    was made: while a rich progress bar is drawn on a terminal, ``sys.stderr`` is rich's
    proxy, which prints the line above the bar instead of through it."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


def json_formatter() -> JsonFormatter:
    """One JSON object per line: ``time`` (ISO-8601 UTC), ``level``, ``logger``,
    ``message``, then every extra (``run_id``, ``task``, ``attempt``, ``worker_id``, ...)
    and ``exc_info`` for exceptions."""
    return JsonFormatter(
        list(JSON_FIELDS),
        rename_fields=dict(JSON_RENAMES),
        timestamp="time",
    )


def default_format(stream: Any = None) -> str:
    """``text`` on a terminal, ``json`` otherwise (ECS, Lambda, files, pipes)."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    return "text" if isatty is not None and isatty() else "json"


def configure_logging(fmt: str | None, level: str) -> None:
    """Send every log line to stderr in ``fmt`` (``json``/``text``; None: by terminal)."""
    handler = StderrHandler()
    chosen = fmt or default_format(sys.stderr)
    handler.setFormatter(json_formatter() if chosen == "json" else TextFormatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
