"""``runlane-sqs console``: serve the web console (the ``console`` extra; docs/console.md)."""

from __future__ import annotations

import importlib.util
import os

import click

from runlane_sqs.cli.options import app_or_env_for_command, optional_app_option
from runlane_sqs.core.errors import ConfigurationError

DEFAULT_PORT = 8600


@click.command()
@optional_app_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535))
@click.option("--read-only", is_flag=True, help="Show runs; offer and accept no action.")
@click.option("--hide-payloads", is_flag=True, help="Never show payloads or results.")
def console(
    app_spec: str | None, host: str, port: int, read_only: bool, hide_payloads: bool
) -> None:
    """Serve the web console: runs, their history and failures, and recovery actions.

    Prints the URL to open; it carries the access token (RUNLANE_CONSOLE_TOKEN, else a
    random one)."""
    if importlib.util.find_spec("starlette") is None or importlib.util.find_spec("uvicorn") is None:
        raise ConfigurationError("the console needs its extra: pip install 'runlane-sqs[console]'")
    import uvicorn  # noqa: PLC0415 (the console extra)

    from runlane_sqs.console.security import ENV_TOKEN, access_token  # noqa: PLC0415
    from runlane_sqs.console.server import ConsoleSettings, console_app  # noqa: PLC0415

    app = app_or_env_for_command(app_spec)
    token = access_token()
    settings = ConsoleSettings(token=token, read_only=read_only, hide_payloads=hide_payloads)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown_host}:{port}/runs"
    if os.environ.get(ENV_TOKEN):  # a container's: not printed into its logs
        click.echo(f"runlane-sqs console: {url}?token=<{ENV_TOKEN}>", err=True)
    else:
        click.echo(f"runlane-sqs console: {url}?token={token}", err=True)
    uvicorn.run(console_app(app, settings), host=host, port=port, log_level="warning")
