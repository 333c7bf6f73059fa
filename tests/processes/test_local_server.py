"""``MotoServer``, the embedded local backend: it serves on its own port or says why not.

A port that is taken, or a server process that exits before it answers, is a
``LocalServerError`` naming the port and the reason, never a server that seems to start.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from runlane_sqs.local import LocalServerError, MotoServer, free_port
from runlane_sqs.local import moto as local_moto


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    """A port another program listens on (it never answers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock


def test_a_port_another_program_listens_on_is_refused_with_the_port_named(
    listening_socket: socket.socket,
) -> None:
    port = listening_socket.getsockname()[1]
    server = MotoServer(port)

    with pytest.raises(LocalServerError, match=f"port {port} is already in use"):
        server.start()
    assert not server.running


def test_another_moto_server_answering_on_the_port_is_not_taken_for_ours(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the port is taken between the check and the server's own bind: our server exits,
    # and the other one, which answers moto's requests, must not pass for it
    monkeypatch.setattr(local_moto, "ensure_port_free", lambda port: None)
    server = MotoServer(moto_server.port)

    with pytest.raises(LocalServerError) as raised:
        server.start()
    message = str(raised.value)
    assert message.startswith(f"the moto server on port {moto_server.port} exited with code 1")
    assert "Address already in use" in message  # from its stderr
    assert not server.running
    moto_server.reset()  # the other server is untouched


def test_a_server_that_dies_at_start_quotes_the_end_of_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a moto that cannot be imported in the server process (a broken install)
    broken = tmp_path / "moto"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('this moto is broken')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    port = free_port()
    server = MotoServer(port)

    with pytest.raises(LocalServerError) as raised:
        server.start()
    message = str(raised.value)
    assert message.startswith(f"the moto server on port {port} exited with code 1")
    assert message.endswith("RuntimeError: this moto is broken")
    assert not server.running


def test_a_free_port_is_chosen_when_none_is_given_and_the_server_serves_on_it() -> None:
    with MotoServer() as server:
        assert server.running
        server.check_running()  # alive: no error
        server.reset()  # it answers moto's own API on its port
    assert not server.running
    with pytest.raises(LocalServerError, match=f"port {server.port} is not running"):
        server.check_running()
