"""The async worker without its optional dependency."""

from __future__ import annotations

import sys

import pytest

from runlane_sqs.core.errors import ConfigurationError
from runlane_sqs.runtime.aio.backend import INSTALL_HINT, new_session


def test_without_aioboto3_the_async_worker_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aioboto3", None)  # import fails as if not installed

    with pytest.raises(ConfigurationError) as raised:
        new_session()

    assert str(raised.value) == INSTALL_HINT
    assert "runlane-sqs[async]" in str(raised.value)
