"""The wakeup format: strict parsing, and nothing but MalformedWakeup on bad input."""

from __future__ import annotations

import contextlib
import json
import string
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlane_sqs.core.clock import from_epoch_ms
from runlane_sqs.core.wakeup import (
    MAX_HINT_NUMBER,
    MAX_TRACE_CHARS,
    MAX_WAKEUP_BYTES,
    ClaimHint,
    MalformedWakeup,
    Wakeup,
    held_until,
    parse_wakeup,
)

FAST = settings(database=None, deadline=None, max_examples=200)
RUN_ID = "0123456789abcdef0123456789abcdef"
AT = datetime(2030, 1, 1, 12, 30, 15, 250_000, tzinfo=UTC)

environments = st.from_regex(r"\A[a-z0-9][a-z0-9_-]{0,31}\Z")
run_ids = st.from_regex(r"\A[0-9a-f]{32}\Z")
queues = st.from_regex(r"\A[A-Za-z0-9_-]{1,64}\Z")
offsets = st.builds(
    timezone,
    st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23)),
)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=offsets
)
traces = st.none() | st.text(
    alphabet=string.ascii_letters + string.digits + "-=;,:/_. ", max_size=MAX_TRACE_CHARS
)
hints = st.none() | st.builds(
    ClaimHint,
    seq=st.integers(min_value=1, max_value=MAX_HINT_NUMBER),
    attempt=st.integers(min_value=0, max_value=MAX_HINT_NUMBER),
    task=st.from_regex(r"\A[A-Za-z0-9_.:-]{1,128}\Z"),
)
wakeups = st.builds(
    Wakeup,
    environment=environments,
    run_id=run_ids,
    queue=queues,
    requested_at=times,
    trace=traces,
    hint=hints,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def valid_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "version": 1,
        "environment": "prod",
        "run_id": RUN_ID,
        "queue": "default",
        "requested_at": AT.isoformat(),
        "trace": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }
    body.update(changes)
    return body


def rejects(body: str | bytes | dict[str, Any], match: str | None = None) -> None:
    text = json.dumps(body) if isinstance(body, dict) else body
    with pytest.raises(MalformedWakeup, match=match):
        parse_wakeup(text)


# round trip ----------------------------------------------------------------------------


@FAST
@given(wakeups)
def test_every_valid_wakeup_round_trips(wakeup: Wakeup) -> None:
    body = wakeup.to_json()
    parsed = parse_wakeup(body)
    assert parsed == wakeup
    assert parsed.requested_at.utcoffset() == timedelta(0)
    assert parse_wakeup(body.encode("utf-8")) == wakeup


def test_a_valid_body_parses_to_its_fields() -> None:
    wakeup = parse_wakeup(json.dumps(valid_body()))
    assert wakeup == Wakeup(
        environment="prod",
        run_id=RUN_ID,
        queue="default",
        requested_at=AT,
        trace="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )


def test_trace_is_optional() -> None:
    body = valid_body()
    del body["trace"]
    assert parse_wakeup(json.dumps(body)).trace is None
    assert parse_wakeup(json.dumps(valid_body(trace=None))).trace is None


def test_wakeup_json_is_small_and_carries_no_payload() -> None:
    body = json.loads(Wakeup("prod", RUN_ID, "default", AT).to_json())
    assert body == {
        "version": 1,
        "environment": "prod",
        "run_id": RUN_ID,
        "queue": "default",
        "requested_at": AT.isoformat(),
    }


# nothing but MalformedWakeup -------------------------------------------------------------


def _parse_or_malformed(body: str | bytes) -> None:
    with contextlib.suppress(MalformedWakeup):
        parse_wakeup(body)


@FAST
@given(st.text(max_size=MAX_WAKEUP_BYTES + 100))
def test_arbitrary_text_raises_nothing_but_malformed(body: str) -> None:
    _parse_or_malformed(body)


@FAST
@given(st.binary(max_size=MAX_WAKEUP_BYTES + 100))
def test_arbitrary_bytes_raise_nothing_but_malformed(body: bytes) -> None:
    _parse_or_malformed(body)


@FAST
@given(json_values)
def test_arbitrary_json_raises_nothing_but_malformed(value: Any) -> None:
    _parse_or_malformed(json.dumps(value))


@FAST
@given(
    field=st.sampled_from(
        ["version", "environment", "run_id", "queue", "requested_at", "trace", "hint"]
    ),
    value=json_values,
)
def test_any_value_in_any_field_raises_nothing_but_malformed(field: str, value: Any) -> None:
    _parse_or_malformed(json.dumps(valid_body(**{field: value})))


@FAST
@given(requested_at=st.text(max_size=60))
def test_any_requested_at_text_raises_nothing_but_malformed(requested_at: str) -> None:
    _parse_or_malformed(json.dumps(valid_body(requested_at=requested_at)))


@pytest.mark.parametrize("depth", [100, 1_000, 2_000])
def test_deeply_nested_json_is_malformed(depth: int) -> None:
    # Fits in the size limit; the JSON decoder's recursion limit must not escape as a crash.
    rejects("[" * depth + "]" * depth)
    rejects('{"a":' * depth + "1" + "}" * depth)


# specific rejections -------------------------------------------------------------------


def test_body_at_the_size_limit_is_read_and_one_byte_more_is_not() -> None:
    text = json.dumps(valid_body())
    at_limit = text + " " * (MAX_WAKEUP_BYTES - len(text))
    assert parse_wakeup(at_limit).run_id == RUN_ID
    rejects(at_limit + " ", match="bytes")


def test_size_limit_counts_utf8_bytes_not_characters() -> None:
    body = json.dumps(valid_body(trace="é" * 1000), ensure_ascii=False)
    body += " " * (MAX_WAKEUP_BYTES - len(body))  # fewer than 4096 characters
    assert len(body) <= MAX_WAKEUP_BYTES < len(body.encode("utf-8"))
    rejects(body, match="bytes")


@pytest.mark.parametrize("body", ["", "   ", "garbage", "{", "{'version': 1}", "\x00"])
def test_not_json_is_malformed(body: str) -> None:
    rejects(body, match="not JSON")


@pytest.mark.parametrize("value", [[], [valid_body()], "wakeup", 1, None, True])
def test_a_json_value_that_is_not_an_object_is_malformed(value: Any) -> None:
    rejects(json.dumps(value), match="not a JSON object")


@pytest.mark.parametrize("field", ["version", "environment", "run_id", "queue", "requested_at"])
def test_a_missing_field_is_malformed(field: str) -> None:
    body = valid_body()
    del body[field]
    rejects(body, match="missing")


@pytest.mark.parametrize("field", ["payload", "status", "Version", "run"])
def test_an_unknown_field_is_malformed(field: str) -> None:
    rejects(valid_body(**{field: 1}), match="unknown")


@pytest.mark.parametrize("version", [0, 2, True, 1.0, "1", None, [1]])
def test_anything_but_version_1_is_malformed(version: Any) -> None:
    rejects(valid_body(version=version), match="version")


@pytest.mark.parametrize(
    "run_id",
    [
        "",
        RUN_ID[:-1],
        RUN_ID + "0",
        RUN_ID.upper(),
        RUN_ID[:-1] + "g",
        RUN_ID + "\n",
        "../" + RUN_ID[3:],
        int(RUN_ID[:8], 16),
        None,
    ],
    ids=repr,
)
def test_a_bad_run_id_is_malformed(run_id: Any) -> None:
    rejects(valid_body(run_id=run_id), match="run_id")


@pytest.mark.parametrize(
    "environment", ["", "Prod", "-prod", "pr od", "prod#x", "a" * 33, "prod\n", 7, None], ids=repr
)
def test_a_bad_environment_is_malformed(environment: Any) -> None:
    rejects(valid_body(environment=environment), match="environment")


@pytest.mark.parametrize(
    "queue", ["", "a.b", "q#1", "q 1", "q" * 65, "default\n", 1, None, ["default"]], ids=repr
)
def test_a_bad_queue_is_malformed(queue: Any) -> None:
    rejects(valid_body(queue=queue), match="queue")


@pytest.mark.parametrize(
    "requested_at",
    [
        "2030-01-01T12:00:00",  # naive
        "2030-01-01",
        "yesterday",
        "",
        "2030-13-01T00:00:00+00:00",
        "2030-01-01T00:00:00+00:00" + " " * 40,
        1_893_456_000,
        None,
    ],
    ids=repr,
)
def test_a_bad_or_naive_requested_at_is_malformed(requested_at: Any) -> None:
    rejects(valid_body(requested_at=requested_at), match="requested_at")


def test_requested_at_with_another_offset_is_accepted() -> None:
    wakeup = parse_wakeup(json.dumps(valid_body(requested_at="2030-01-01T14:30:15.25+02:00")))
    assert wakeup.requested_at == AT


@pytest.mark.parametrize("trace", ["x" * (MAX_TRACE_CHARS + 1), 1, ["t"], {"t": 1}, True])
def test_a_bad_trace_is_malformed(trace: Any) -> None:
    rejects(valid_body(trace=trace), match="trace")


def test_trace_at_its_limit_is_accepted() -> None:
    trace = "t" * MAX_TRACE_CHARS
    assert parse_wakeup(json.dumps(valid_body(trace=trace))).trace == trace


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe{}",
        json.dumps(valid_body()).encode()[:-2] + b"\xc3\x28}",
        b'{"version": 1, "environment": "\xed\xa0\x80"}',
    ],
    ids=["not-utf8", "bad-sequence", "encoded-surrogate"],
)
def test_invalid_utf8_bytes_are_malformed(body: bytes) -> None:
    rejects(body)


def test_a_lone_surrogate_in_text_is_malformed() -> None:
    rejects('{"version": 1, "environment": "\ud800"}')


# the claim hint ------------------------------------------------------------------------

HINT = {"seq": 3, "attempt": 1, "task": "billing.charge"}


def test_a_hint_parses_to_what_the_claim_is_conditioned_on() -> None:
    wakeup = parse_wakeup(json.dumps(valid_body(hint=HINT)))

    assert wakeup.hint == ClaimHint(seq=3, attempt=1, task="billing.charge")


def test_a_hint_names_the_reserved_start_of_a_run_sleeping_for_its_rate_limits() -> None:
    start_ms = 1_796_515_200_123
    body = json.dumps(valid_body(hint={**HINT, "start": start_ms}))

    assert held_until(body) == parse_wakeup(body).hint.start == from_epoch_ms(start_ms)  # type: ignore[union-attr]
    assert held_until(json.dumps(valid_body(hint=HINT))) is None
    assert held_until('{"start": "not a wakeup"}') is None  # the path rejects it, unheld


@pytest.mark.parametrize(
    ("hint", "match"),
    [
        ([3, 1, "t"], "hint must be an object"),
        ({"seq": 3, "attempt": 1}, "hint must be an object"),
        ({**HINT, "status": "queued"}, "hint must be an object"),
        ({**HINT, "seq": 0}, "seq must be at least 1"),
        ({**HINT, "seq": -1}, "seq must be a whole number"),
        ({**HINT, "seq": 2.0}, "seq must be a whole number"),
        ({**HINT, "attempt": True}, "attempt must be a whole number"),
        ({**HINT, "attempt": MAX_HINT_NUMBER + 1}, "attempt must be a whole number"),
        ({**HINT, "task": ""}, "bad hint task"),
        ({**HINT, "task": "a#b"}, "bad hint task"),
        ({**HINT, "task": "\u202e"}, "bad hint task"),
        ({**HINT, "task": None}, "bad hint task"),
        ({**HINT, "start": "2026-12-05T00:00:00Z"}, "start must be a time in epoch milliseconds"),
        ({**HINT, "start": -1}, "start must be a time in epoch milliseconds"),
        ({**HINT, "start": 1.5}, "start must be a time in epoch milliseconds"),
    ],
)
def test_a_malformed_hint_makes_the_wakeup_malformed(hint: Any, match: str) -> None:
    rejects(valid_body(hint=hint), match=match)


@FAST
@given(value=json_values)
def test_any_hint_value_raises_nothing_but_malformed(value: Any) -> None:
    _parse_or_malformed(json.dumps(valid_body(hint=value)))
