"""The embedded moto server, with DynamoDB requests applied one at a time.

moto checks a condition and applies the write as separate steps, so two conditional
writes arriving at the same moment can both succeed: two workers could both claim one
run. DynamoDB never allows that, and the product relies on it (one claim wins). This
wrapper serialises DynamoDB requests; SQS stays concurrent so long polls never block
storage. Run as ``python -m runlane_sqs.local.server --port N`` (what
:class:`runlane_sqs.local.MotoServer` does, with ``--server-id`` so that it can tell its
own server from another one answering on the port, and ``--quiet``).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from runlane_sqs.local.moto import SERVER_ID_PATH

DYNAMODB_TARGET_PREFIX = "DynamoDB_"

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serialise_dynamodb(app: Wsgi) -> Wsgi:
    """Wrap a WSGI app so requests whose ``X-Amz-Target`` is DynamoDB's run one at a time."""
    lock = threading.Lock()

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith(DYNAMODB_TARGET_PREFIX):
            return app(environ, start_response)
        with lock:
            return [b"".join(app(environ, start_response))]

    return application


def identify(app: Wsgi, server_id: str) -> Wsgi:
    """Wrap a WSGI app so ``GET SERVER_ID_PATH`` answers ``server_id`` (plain text)."""
    body = server_id.encode()
    headers = [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))]

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != SERVER_ID_PATH:
            return app(environ, start_response)
        start_response("200 OK", headers)
        return [body]

    return application


def main(argv: list[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import (  # noqa: PLC0415 (optional extra)
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple  # noqa: PLC0415 (optional extra)

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--server-id", default="", help=f"What GET {SERVER_ID_PATH} answers.")
    parser.add_argument("--quiet", action="store_true", help="Log warnings and errors only.")
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    if args.quiet:  # no line per request
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = serialise_dynamodb(DomainDispatcherApplication(create_backend_app))
    if args.server_id:
        app = identify(app, args.server_id)
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
