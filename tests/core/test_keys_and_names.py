"""Storage key formats and the validation of every name that ends up inside one."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.keys import (
    agenda_partitions,
    agenda_pk,
    status_partitions,
    status_pk,
)
from runlane_sqs.core.errors import ConfigurationError, InvalidKeyError
from runlane_sqs.core.indexes import AGENDA_SHARDS, FEW_SHARDS, SHARDS, AgendaKind
from runlane_sqs.core.model import RunStatus, is_run_id, new_lease_token, new_run_id
from runlane_sqs.core.names import (
    MAX_KEY_CHARS,
    check_environment,
    check_key,
    check_queue,
    check_task_name,
)

FAST = settings(database=None, deadline=None, max_examples=200)
RUN_ID = "0123456789abcdef0123456789abcdef"
run_ids = st.from_regex(r"\A[0-9a-f]{32}\Z")


# key formats -------------------------------------------------------------------------


def test_run_key() -> None:
    assert keys.run_pk("prod", RUN_ID) == f"RUN#prod#{RUN_ID}"
    assert keys.run_key("prod", RUN_ID) == {
        "pk": {"S": f"RUN#prod#{RUN_ID}"},
        "sk": {"S": "RUN"},
    }


def test_run_keys_are_scoped_by_environment() -> None:
    assert keys.run_pk("prod", RUN_ID) != keys.run_pk("staging", RUN_ID)


def test_idempotency_and_singleton_keys_are_scoped_by_kind_environment_and_task() -> None:
    assert keys.idempotency_pk("prod", "send", "order#1") == "IDEM#prod#send#order#1"
    assert keys.singleton_pk("prod", "send", "order#1") == "SINGLETON#prod#send#order#1"
    pks = {
        keys.idempotency_pk("prod", "send", "k"),
        keys.singleton_pk("prod", "send", "k"),
        keys.idempotency_pk("staging", "send", "k"),
        keys.idempotency_pk("prod", "charge", "k"),
        keys.idempotency_pk("prod", "send", "k2"),
    }
    assert len(pks) == 5
    assert keys.key_item_key("IDEM#prod#send#k") == {
        "pk": {"S": "IDEM#prod#send#k"},
        "sk": {"S": "KEY"},
    }


def test_unfinished_runs_share_a_status_group_and_finished_ones_have_their_own() -> None:
    # shard 0x0123 % 32 = 3
    for status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.RELEASED):
        assert status_pk("prod", status, RUN_ID) == "prod#active#3"
    for status in (RunStatus.PARKED, RunStatus.SUCCEEDED, RunStatus.FAILED):
        assert status_pk("prod", status, RUN_ID) == f"prod#{status.value}#3"
    # 0x0123 % 32 = 3, % 16 = 3, % 4 = 3; 0x0031 % 32 = 17, % 16 = 1, % 4 = 1
    other = "0031" + "0" * 28
    assert status_pk("prod", RunStatus.RUNNING, other) == "prod#active#17"
    assert status_pk("prod", RunStatus.FAILED, other) == "prod#failed#1"
    assert status_pk("prod", RunStatus.PARKED, other) == "prod#parked#1"


def test_status_partitions_cover_every_shard_of_each_group_once() -> None:
    partitions = status_partitions("prod", [RunStatus.QUEUED, RunStatus.RETRYING])
    assert partitions == [f"prod#active#{shard}" for shard in range(SHARDS)]


def test_records_few_runs_write_have_few_shards() -> None:
    # parked runs and tokens: 4 partitions each, so a pass reads few empty ones
    parked = status_partitions("prod", [RunStatus.PARKED])
    assert parked == [f"prod#parked#{shard}" for shard in range(FEW_SHARDS)]
    assert len(agenda_partitions("prod", "token")) == FEW_SHARDS
    assert status_pk("prod", RunStatus.PARKED, "0021" + "0" * 28) == "prod#parked#1"
    assert status_pk("prod", RunStatus.QUEUED, "0021" + "0" * 28) == "prod#active#1"
    assert status_pk("prod", RunStatus.QUEUED, "0023" + "0" * 28) == "prod#active#3"
    assert status_pk("prod", RunStatus.PARKED, "0027" + "0" * 28) == "prod#parked#3"


def test_agenda_shard_is_taken_from_the_run_id() -> None:
    shards = [agenda_pk("prod", "run", f"{n:04x}" + "0" * 28) for n in (0, 1, 31, 32, 33)]
    assert shards == ["prod#run#0", "prod#run#1", "prod#run#31", "prod#run#0", "prod#run#1"]


def test_agenda_partitions_are_scoped_by_environment_and_kind() -> None:
    assert agenda_pk("prod", AgendaKind.RUN, RUN_ID) == "prod#run#3"
    assert agenda_pk("prod", AgendaKind.TOKEN, RUN_ID) == "prod#token#3"
    assert not set(agenda_partitions("prod", "run")) & set(agenda_partitions("prod", "token"))
    assert not set(agenda_partitions("prod", "run")) & set(agenda_partitions("staging", "run"))


@FAST
@given(run_ids, st.sampled_from(list(AgendaKind)))
def test_agenda_shard_is_in_range_and_stable(run_id: str, kind: AgendaKind) -> None:
    pk = agenda_pk("prod", kind, run_id)
    assert pk == agenda_pk("prod", kind, run_id)
    assert pk in agenda_partitions("prod", kind)
    assert 0 <= int(pk.rsplit("#", 1)[1]) < AGENDA_SHARDS


def test_agenda_partitions_cover_every_shard() -> None:
    partitions = agenda_partitions("prod", "run")
    assert len(partitions) == len(set(partitions)) == AGENDA_SHARDS
    hits = Counter(agenda_pk("prod", "run", new_run_id()) for _ in range(2000))
    assert set(hits) == set(partitions)


def test_created_sort_key_is_zero_padded() -> None:
    assert keys.created_sk(5, RUN_ID) == f"0000000000005#{RUN_ID}"
    assert keys.created_sk(1_893_456_000_000, RUN_ID) == f"1893456000000#{RUN_ID}"


@FAST
@given(st.lists(st.tuples(st.integers(0, 10**13 - 1), run_ids), min_size=2, max_size=20))
def test_created_sort_keys_sort_by_time(entries: list[tuple[int, str]]) -> None:
    by_key = sorted(entries, key=lambda e: keys.created_sk(*e))
    assert [ms for ms, _ in by_key] == sorted(ms for ms, _ in entries)


# run ids and tokens ------------------------------------------------------------------


def test_new_run_ids_are_valid_and_unique() -> None:
    ids = {new_run_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(is_run_id(run_id) for run_id in ids)


def test_lease_tokens_are_unique() -> None:
    assert len({new_lease_token() for _ in range(1000)}) == 1000


@pytest.mark.parametrize("value", ["", RUN_ID.upper(), RUN_ID[:-1], RUN_ID + "a", None, 12])
def test_is_run_id_rejects(value: object) -> None:
    assert not is_run_id(value)


# check_key ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "order-42",
        "order#42",
        "#",
        "tenant:7/invoice 2030-01",
        "ключ-🔑",
        "注文",
        "a" * MAX_KEY_CHARS,
        "x",
    ],
)
def test_check_key_accepts(key: str) -> None:
    assert check_key("idempotency", key) == key


@pytest.mark.parametrize(
    "key",
    [
        "",
        " ",
        "   ",
        "\t",
        "\n",
        "\u3000",
        " order",
        "order ",
        "order\n",
        "\torder",
        "a" * (MAX_KEY_CHARS + 1),
        "or\x00der",
        "or\x1fder",
        "or\x7fder",
        "or\nder",
        "or\tder",
        "or\rder",
    ],
    ids=repr,
)
def test_check_key_rejects(key: str) -> None:
    with pytest.raises(InvalidKeyError):
        check_key("idempotency", key)


@pytest.mark.parametrize("key", ["or\x80der", "or\x85der", "or\x9fder"], ids=repr)
def test_check_key_rejects_c1_control_characters(key: str) -> None:
    # U+0080..U+009F are control characters (Unicode category Cc) like U+0000..U+001F.
    with pytest.raises(InvalidKeyError, match="control"):
        check_key("idempotency", key)


@pytest.mark.parametrize("key", [None, 42, b"order", ["order"], 1.5])
def test_check_key_rejects_non_strings(key: object) -> None:
    with pytest.raises(InvalidKeyError, match="string"):
        check_key("singleton", key)


def test_check_key_names_the_kind_in_its_error() -> None:
    with pytest.raises(InvalidKeyError, match="singleton"):
        check_key("singleton", "")


# names -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["prod", "a", "0", "dev-1", "eu_west", "a" * 32])
def test_check_environment_accepts(name: str) -> None:
    assert check_environment(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "Prod", "-prod", "_prod", "pr od", "prod#1", "prod.eu", "a" * 33, "prod\n", None, 1],
    ids=repr,
)
def test_check_environment_rejects(name: object) -> None:
    with pytest.raises(ConfigurationError):
        check_environment(name)


@pytest.mark.parametrize("name", ["default", "Emails", "high-priority", "q_1", "q" * 64])
def test_check_queue_accepts(name: str) -> None:
    assert check_queue(name) == name


@pytest.mark.parametrize(
    "name", ["", "a.b", "q#1", "q 1", "q/1", "q" * 65, "default\n", None, 3], ids=repr
)
def test_check_queue_rejects(name: object) -> None:
    with pytest.raises(ConfigurationError):
        check_queue(name)


@pytest.mark.parametrize(
    "name", ["send", "app.tasks.send_mail", "billing:charge-card", "T1", "t" * 128]
)
def test_check_task_name_accepts(name: str) -> None:
    assert check_task_name(name) == name


@pytest.mark.parametrize(
    "name", ["", "send mail", "send#1", "send/mail", "é", "t" * 129, "send\n", None, 1], ids=repr
)
def test_check_task_name_rejects(name: object) -> None:
    with pytest.raises(ConfigurationError):
        check_task_name(name)
