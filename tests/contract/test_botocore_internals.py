"""The lean clients' contract with botocore and aiobotocore
(runlane_sqs/adapters/lean/botocore_internals.py): every internal its :data:`READS`
lists is still there on the installed releases, with the shape the lean clients rely
on, checked on real clients and credentials built offline; the shim uses no internal
its list leaves out; and the installed botocore and boto3 are inside the range
``pyproject.toml`` pins. A botocore release that moves an internal fails here, naming
it, before a lean request does."""

from __future__ import annotations

import ast
import asyncio
import datetime
import importlib
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any

import aioboto3
import boto3
import pytest
from aiobotocore.credentials import AioRefreshableCredentials
from botocore.credentials import RefreshableCredentials
from packaging.requirements import Requirement

from runlane_sqs.adapters.aws import default_botocore_config
from runlane_sqs.adapters.lean.botocore_internals import (
    AIO_CLIENT,
    AIO_CREDENTIALS,
    AIO_EMITTER,
    AIOHTTP_SESSION,
    CLIENT,
    CREDENTIALS,
    EMITTER,
    EVENTS,
    READS,
    URLLIB3_SESSION,
    Read,
    client_http_session,
    frozen_credentials,
    handlers_of,
    mandatory_refresh,
    pool_size,
    refresh_lock,
    refreshes,
    session_timeout,
)

ROOT = Path(__file__).parents[2]
SHIM = "runlane_sqs/adapters/lean/botocore_internals.py"
FAR = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
ENDPOINT = "http://127.0.0.1:9"  # nothing is sent: the clients are only built


def _metadata() -> dict[str, str]:
    return {
        "access_key": "test",
        "secret_key": "test",
        "token": "token",
        "expiry_time": FAR.isoformat(),
    }


def _client_kwargs() -> dict[str, Any]:
    return {
        "region_name": "us-east-1",
        "endpoint_url": ENDPOINT,
        "config": default_botocore_config({}),
    }


async def _aio_client_samples() -> dict[str, Any]:
    session = aioboto3.Session(aws_access_key_id="test", aws_secret_access_key="test")
    async with session.client("dynamodb", **_client_kwargs()) as client:
        return {
            AIO_CLIENT: client,
            AIOHTTP_SESSION: client_http_session(client),
            AIO_EMITTER: client.meta.events._emitter,
        }


@pytest.fixture(scope="module")
def samples() -> dict[str, Any]:
    """One real object of each class whose objects' internals the shim reads."""
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test")
    client = session.client("dynamodb", **_client_kwargs())
    return {
        CREDENTIALS: RefreshableCredentials.create_from_metadata(
            _metadata(), refresh_using=_metadata, method="test"
        ),
        AIO_CREDENTIALS: AioRefreshableCredentials.create_from_metadata(
            _metadata(), refresh_using=_metadata, method="test"
        ),
        CLIENT: client,
        URLLIB3_SESSION: client_http_session(client),
        EVENTS: client.meta.events,
        EMITTER: client.meta.events._emitter,
        **asyncio.run(_aio_client_samples()),
    }


def _installed(owner: str) -> str:
    distribution = owner.split(".", 1)[0]
    return f"{distribution} {metadata.version(distribution)}"


def _found(path: str) -> Any:
    """The module, or the class in a module, at a dotted ``path``."""
    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, _, name = path.rpartition(".")
        return getattr(_found(module), name)


def _owner(read: Read, samples: dict[str, Any]) -> Any:
    if not read.on_object:
        try:
            return _found(read.owner)
        except (AttributeError, ModuleNotFoundError):
            pytest.fail(
                f"{_installed(read.owner)} no longer has {read.owner}, whose {read.name} "
                f"{SHIM} reads: update the shim and the pin"
            )
    if read.owner not in samples:
        pytest.fail(f"no {read.owner} to check {read.name} on: add one to this test's samples")
    return samples[read.owner]


@pytest.mark.parametrize("read", READS, ids=lambda read: f"{read.owner}.{read.name}")
def test_botocore_still_has_what_the_shim_reads(read: Read, samples: dict[str, Any]) -> None:
    owner = _owner(read, samples)
    where = f"{read.owner}.{read.name}, which {SHIM} reads: update the shim and the pin"
    assert hasattr(owner, read.name), f"{_installed(read.owner)} no longer has {where}"
    assert read.holds(getattr(owner, read.name)), (
        f"{_installed(read.owner)} changed {where} (expected {read.shape}, found "
        f"{getattr(owner, read.name)!r})"
    )


def _internals_used(source: str) -> set[str]:
    """The private names the shim's code reads of other objects: ``x._name`` (not
    ``self._name``), and ``getattr``/``hasattr`` with a private name."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            used.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "hasattr"}
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        ):
            used.add(str(node.args[1].value))
    return used


def test_the_shim_lists_every_private_name_it_reads() -> None:
    source = (ROOT / SHIM).read_text()
    unlisted = _internals_used(source) - {read.name for read in READS}
    assert not unlisted, f"{SHIM} reads {sorted(unlisted)} without listing them in READS"


def test_the_shim_lists_every_botocore_name_it_imports() -> None:
    """An undocumented function or class the shim imports from botocore is a read of the
    list (itself, or the owner of one), so the check above covers it."""
    tree = ast.parse((ROOT / SHIM).read_text())
    imported = {
        f"{node.module}.{alias.name}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("botocore.")
        for alias in node.names
    }
    listed = {read.owner for read in READS if not read.on_object} | {
        f"{read.owner}.{read.name}" for read in READS if not read.on_object
    }
    documented = {"botocore.awsrequest.AWSRequest"}
    unlisted = imported - documented - listed
    assert imported and not unlisted, f"{SHIM} imports {sorted(unlisted)} without listing them"


def test_a_refused_token_can_force_a_refresh_of_botocore_s_credentials() -> None:
    refreshed: list[bool] = []

    def refresh() -> dict[str, str]:
        refreshed.append(True)
        return _metadata() | {"access_key": "again"}

    credentials = RefreshableCredentials.create_from_metadata(
        _metadata(), refresh_using=refresh, method="test"
    )
    used = credentials.get_frozen_credentials()
    assert refreshes(credentials)
    with refresh_lock(credentials):
        assert frozen_credentials(credentials) == used
        mandatory_refresh(credentials)
    assert refreshed == [True]
    assert credentials.get_frozen_credentials().access_key == "again"


def test_a_refused_token_can_force_a_refresh_of_aiobotocore_s_credentials() -> None:
    async def refresh() -> dict[str, str]:
        return _metadata() | {"access_key": "again"}

    async def force() -> str:
        credentials = AioRefreshableCredentials.create_from_metadata(
            _metadata(), refresh_using=refresh, method="test"
        )
        used = await credentials.get_frozen_credentials()
        async with refresh_lock(credentials):
            assert frozen_credentials(credentials) == used
            await mandatory_refresh(credentials)
        return str((await credentials.get_frozen_credentials()).access_key)

    assert asyncio.run(force()) == "again"


def test_the_handlers_of_an_event_are_found_as_the_client_finds_them(
    samples: dict[str, Any],
) -> None:
    events = samples[CLIENT].meta.events
    event = "before-send.dynamodb.GetItem"
    assert not handlers_of(events, "provide-client-params.dynamodb.GetItem")

    def answer(**_: Any) -> None:
        return None

    events.register(event, answer)
    try:
        assert answer in list(handlers_of(events, event))
    finally:
        events.unregister(event, answer)
    assert answer not in list(handlers_of(events, event))


def test_the_http_sessions_settings_are_the_client_config_s(samples: dict[str, Any]) -> None:
    config = default_botocore_config({})
    sync, aio = samples[URLLIB3_SESSION], samples[AIOHTTP_SESSION]
    assert pool_size(sync) == pool_size(aio) == config.max_pool_connections
    assert session_timeout(sync).connect_timeout == config.connect_timeout
    assert session_timeout(sync).read_timeout == config.read_timeout
    assert session_timeout(aio).sock_connect == config.connect_timeout
    assert session_timeout(aio).sock_read == config.read_timeout


def test_the_installed_botocore_and_boto3_are_the_pinned_ones() -> None:
    """CI installs what ``pyproject.toml`` allows and tests that: the pin must cover it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {
        requirement.name: requirement
        for requirement in map(Requirement, project["dependencies"])
        if requirement.name in {"botocore", "boto3"}
    }
    assert set(pins) == {"botocore", "boto3"}, "pyproject.toml must pin botocore and boto3"
    for name, requirement in pins.items():
        version = metadata.version(name)
        assert requirement.specifier.contains(version), (
            f"{name} {version} is installed, outside the pin {requirement}: {SHIM} was "
            "checked on the pinned minor only"
        )
