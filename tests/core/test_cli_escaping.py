"""Text the CLI prints and its text logs show control, bidi-override and unencodable
characters escaped; JSON logs stay exact (issue 13, item 5)."""

from __future__ import annotations

import json
import logging
import sys
import unicodedata
from dataclasses import replace

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runlane_sqs.cli import tables
from runlane_sqs.cli.escaping import BLOCK_KEEPS, printable
from runlane_sqs.cli.exits import fail
from runlane_sqs.cli.logs import TextFormatter, json_formatter
from runlane_sqs.cli.options import emit_json
from runlane_sqs.core.model import Failure
from runlane_sqs.testing import in_memory_app

HOSTILE = "boom \x1b[2J\x1b]0;pwned\x07 \u202e"
ESCAPED = r"boom \x1b[2J\x1b]0;pwned\x07 \u202e"
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
UNSAFE = {chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]} | set(BIDI) | {"\u2028", "\u2029"}


def _unsafe(char: str) -> bool:
    return char in UNSAFE or unicodedata.category(char) == "Cs"


@pytest.mark.parametrize(
    ("char", "shown"),
    [
        ("\x00", r"\x00"),
        ("\x07", r"\x07"),
        ("\x1b", r"\x1b"),
        ("\n", r"\n"),
        ("\r", r"\r"),
        ("\t", r"\t"),
        ("\x7f", r"\x7f"),
        ("\x85", r"\x85"),
        ("\x9b", r"\x9b"),  # CSI in one byte
        ("\u061c", r"\u061c"),
        ("\u200f", r"\u200f"),
        ("\u202a", r"\u202a"),
        ("\u202e", r"\u202e"),
        ("\u2066", r"\u2066"),
        ("\u2069", r"\u2069"),
        ("\u2028", r"\u2028"),
        ("\u2029", r"\u2029"),
        ("\ud800", r"\ud800"),  # a lone surrogate: cannot even be written as UTF-8
    ],
)
def test_each_unsafe_character_is_shown_as_an_escape(char: str, shown: str) -> None:
    assert printable(f"a{char}b") == f"a{shown}b"


@pytest.mark.parametrize(
    "text",
    [
        "card declined",
        "café, naïve, Größe, 東京, עברית, العربية",
        "family \U0001f468\u200d\U0001f469\u200d\U0001f467",  # zero-width joiners stay
        r"C:\Users\ana and a literal \x1b",
        "",
    ],
)
def test_ordinary_text_is_shown_as_it_is(text: str) -> None:
    assert printable(text) == text


def test_a_block_keeps_its_line_breaks_and_tabs_and_escapes_the_rest() -> None:
    assert printable("one\n\ttwo\r\x1b[2J\n", BLOCK_KEEPS) == "one\n\ttwo\\r\\x1b[2J\n"


@given(st.text())
def test_nothing_unsafe_is_ever_left(text: str) -> None:
    shown = printable(text)
    assert not any(_unsafe(char) for char in shown)
    if not any(_unsafe(char) for char in text):
        assert shown == text


def test_runs_list_shows_a_planted_task_and_queue_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Task and queue names are validated when triggered; a run item written to the
    table by anything else is still shown safely."""
    app = in_memory_app()
    app.task(lambda ctx, payload: None, name="t")
    run = replace(app.trigger("t"), task=HOSTILE, queue="q\u202e")

    tables.print_runs([run], cursor="c\x1bc", now=app.clock.now())

    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    assert ESCAPED in out and r"q\u202e" in out and r"more: --cursor c\x1bc" in out


def test_runs_get_shows_the_failure_and_its_traceback_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = in_memory_app()
    app.task(lambda ctx, payload: None, name="t")
    traceback = f"Traceback (most recent call last):\n\tline\nRuntimeError: {HOSTILE}\n"
    failure = Failure(type="builtins.RuntimeError", message=HOSTILE, traceback=traceback)
    run = replace(app.trigger("t", {"note": "\u202e\x85"}), failure=failure)

    tables.print_run(run)

    out = capsys.readouterr().out
    assert not any(char in out for char in "\x1b\x07\u202e\x85"), ascii(out)
    assert f"builtins.RuntimeError: {ESCAPED}" in out
    assert r'{"note":"\u202e\x85"}' in out
    assert out.endswith(
        f"Traceback (most recent call last):\n        line\nRuntimeError: {ESCAPED}\n"
    )


def test_an_error_line_shows_quoted_text_escaped_and_keeps_its_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(click.exceptions.Exit):
        fail(f"cannot import: {HOSTILE}\nits stderr ends:\nlast line", 3, hint="h\x1b")

    assert capsys.readouterr().err == (
        f"error: cannot import: {ESCAPED}\nits stderr ends:\nlast line\nhint: h\\x1b\n"
    )


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("runlane_sqs.task", logging.WARNING, __file__, 1, msg, args, None)
    for name, value in extra.items():
        setattr(record, name, value)
    return record


def test_a_text_log_line_escapes_the_message_its_arguments_and_the_extras() -> None:
    record = _record("attempt %d failed; run failed: %s", 1, HOSTILE + "\nFORGED", task="t\u202e")

    line = TextFormatter("%(levelname)s %(message)s").format(record)

    assert line == rf"WARNING attempt 1 failed; run failed: {ESCAPED}\nFORGED task=t\u202e"
    assert record.getMessage().endswith(HOSTILE + "\nFORGED")  # other handlers see it as logged


def test_a_text_log_lines_traceback_keeps_its_lines_and_escapes_the_rest() -> None:
    try:
        raise RuntimeError(HOSTILE)
    except RuntimeError:
        record = _record("handler failed")
        record.exc_info = sys.exc_info()

    lines = TextFormatter("%(message)s").format(record).splitlines()

    assert lines[0] == "handler failed"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == f"RuntimeError: {ESCAPED}"


def test_a_failed_attempts_recorded_traceback_follows_its_text_line_escaped() -> None:
    recorded = f'Traceback (most recent call last):\n  File "x.py"\nRuntimeError: {HOSTILE}\n'
    record = _record("attempt 2 failed; run failed: %s", "boom", run_id="r1", traceback=recorded)

    lines = TextFormatter("%(levelname)s %(message)s").format(record).splitlines()

    assert lines[0] == "WARNING attempt 2 failed; run failed: boom run_id=r1"
    assert lines[1:] == [
        "Traceback (most recent call last):",
        '  File "x.py"',
        f"RuntimeError: {ESCAPED}",
    ]
    json_line = json.loads(json_formatter().format(record))
    assert json_line["traceback"] == recorded  # exact, a field of its own


def test_a_json_log_line_keeps_the_text_exact_and_its_characters_escaped_by_json() -> None:
    line = json_formatter().format(_record("run failed: %s", HOSTILE, task="t\u202e"))

    assert line.isascii()
    record = json.loads(line)
    assert (record["message"], record["task"]) == (f"run failed: {HOSTILE}", "t\u202e")


def test_json_output_escapes_what_a_terminal_acts_on_and_keeps_its_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    value = {"message": "x\x9b[2J\x7f\u202e café"}

    emit_json(value)

    printed = capsys.readouterr().out
    assert not any(ch in printed for ch in "\x9b\x7f\u202e")
    assert "café" in printed
    assert json.loads(printed) == value
