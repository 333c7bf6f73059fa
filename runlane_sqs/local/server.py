"""The embedded moto server, with DynamoDB requests applied one at a time.

moto checks a condition and applies the write as separate steps, so two conditional
writes arriving at the same moment can both succeed: two workers could both claim one
run. DynamoDB never allows that, and the product relies on it (one claim wins). This
wrapper serialises DynamoDB requests; SQS stays concurrent so long polls never block
storage. Run as ``python -m runlane_sqs.local.server --port N`` (what
:class:`runlane_sqs.local.MotoServer` does, with ``--server-id`` so that it can tell its
own server from another one answering on the port, and ``--quiet``).

With ``--check-signatures`` the server verifies every request's SigV4 signature, as AWS
does: moto's IAM backend holds one user, whose key is ``CHECKED_CREDENTIALS`` and whose
policy allows everything, and moto refuses any request not signed by a key it knows
(``SignatureDoesNotMatch`` for a wrong secret, ``InvalidClientTokenId`` for an unknown
key). ``POST /moto-api/reset`` forgets that user with everything else, so the wrapper
registers it again after each reset. The reset and the server-id endpoints answer
unsigned requests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from runlane_sqs.local.moto import (
    CHECKED_CREDENTIALS,
    CHECKED_USER_NAME,
    LOCAL_REGION,
    RESET_PATH,
    SERVER_ID_PATH,
)

DYNAMODB_TARGET_PREFIX = "DynamoDB_"
ALLOW_EVERYTHING = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
}
"""The inline policy of the user ``--check-signatures`` registers."""

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


def register_checked_user() -> None:
    """Give moto's IAM backend (default account) the user ``CHECKED_CREDENTIALS`` belong to,
    allowed every action. moto makes up a key's id and secret, so the key it creates is
    given the fixed ones (and filed under the fixed id)."""
    from moto.core.models import DEFAULT_ACCOUNT_ID  # noqa: PLC0415 (optional extra)
    from moto.iam.models import iam_backends  # noqa: PLC0415 (optional extra)

    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    if CHECKED_USER_NAME in iam.users:  # a reset that did not reset
        return
    iam.create_user(region_name=LOCAL_REGION, user_name=CHECKED_USER_NAME)
    iam.put_user_policy(CHECKED_USER_NAME, "everything", json.dumps(ALLOW_EVERYTHING))
    key = iam.create_access_key(CHECKED_USER_NAME)
    del iam.access_keys[key.access_key_id]
    key.access_key_id = CHECKED_CREDENTIALS["AWS_ACCESS_KEY_ID"]
    key.secret_access_key = CHECKED_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]
    iam.access_keys[key.access_key_id] = key


def hash_empty_bodies() -> None:
    """Make moto hash an empty payload for a request that has no body, as AWS does.

    When it holds no raw body, moto 5 hashes the request's parsed parameters instead
    (right for a form body, which it has parsed and no longer holds); for a request with
    no body at all, such as Lambda's ``GetFunctionConfiguration`` (a GET with no query
    string), those parameters are the request's headers, so its right signature would
    be refused."""
    from moto.iam.access_control import IAMRequestBase  # noqa: PLC0415 (optional extra)

    build = IAMRequestBase._create_aws_request

    def create_aws_request(self: IAMRequestBase) -> Any:
        request = build(self)
        if not self._body and not int(self._headers.get("Content-Length") or 0):
            request.data = b""
        return request

    setattr(IAMRequestBase, "_create_aws_request", create_aws_request)  # noqa: B010


def check_signatures(app: Wsgi) -> Wsgi:
    """Turn moto's signature checks on for every request from now on, with the user of
    :func:`register_checked_user`; wrap ``app`` so that user is registered again after
    each ``POST RESET_PATH`` (which empties IAM with every other service)."""
    from moto import settings  # noqa: PLC0415 (optional extra)
    from moto.core.authorization import ActionAuthenticatorMixin  # noqa: PLC0415

    hash_empty_bodies()
    register_checked_user()
    # moto checks a request once it has counted this many unchecked ones: none
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    ActionAuthenticatorMixin.request_count = 0

    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != RESET_PATH or environ.get("REQUEST_METHOD") != "POST":
            return app(environ, start_response)
        body = b"".join(app(environ, start_response))
        register_checked_user()
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
    parser.add_argument(
        "--check-signatures",
        action="store_true",
        help="Refuse requests not signed (SigV4) by the fixed local key of a user allowed all.",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    if args.quiet:  # no line per request
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    app = serialise_dynamodb(DomainDispatcherApplication(create_backend_app))
    if args.check_signatures:
        app = check_signatures(app)
    if args.server_id:
        app = identify(app, args.server_id)
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
