"""Values kept in S3: the object store of an app with a ``payload_bucket``.

Requests go through the app's boto3 S3 client (path-style addressing when an endpoint is
configured: emulators serve every bucket at one host). Only values over the app's
``inline_limit`` come here, so a run with small values sends no S3 request.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from runlane_sqs.core.errors import (
    MissingResourceError,
    ObjectUnreadable,
    StorageError,
    StorageUnavailable,
)
from runlane_sqs.core.values import other_size

UNAVAILABLE_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "503", "500"}
)
NO_OBJECT_CODES = frozenset({"NoSuchKey", "404"})
REFUSED_CODES = frozenset({"AccessDenied", "403"})


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


class S3Objects:
    """The objects of one bucket, through ``client`` (a boto3 S3 client)."""

    def __init__(self, client: Any, bucket: str) -> None:
        self._client = client
        self._bucket = bucket

    @property
    def bucket(self) -> str:
        return self._bucket

    def put(self, key: str, data: bytes) -> None:
        self._call("PutObject", key, Bucket=self._bucket, Key=key, Body=data)

    def get(self, key: str, size: int) -> bytes | None:
        """The object at ``key`` if it holds ``size`` bytes: its length (the response's
        ``Content-Length``) is compared before its body is read, and at most ``size``
        bytes are read."""
        try:
            response = self._call("GetObject", key, Bucket=self._bucket, Key=key)
        except KeyError:
            return None
        body, length = response["Body"], response.get("ContentLength")
        try:
            if length != size:  # an unread body is dropped with its connection
                raise ObjectUnreadable(other_size(length, size))
            data: bytes = body.read(size)
        except BotoCoreError as exc:
            where = f"s3://{self._bucket}/{key}"
            raise StorageUnavailable(f"S3 GetObject of {where} broke off: {exc}") from exc
        finally:
            body.close()
        return data

    def delete(self, key: str) -> None:
        self._call("DeleteObject", key, Bucket=self._bucket, Key=key)

    def _call(self, operation: str, key: str, **request: Any) -> Any:
        method = getattr(self._client, _snake(operation))
        where = f"s3://{self._bucket}/{key}"
        try:
            return method(**request)
        except ClientError as exc:
            code = _code(exc)
            if code in NO_OBJECT_CODES:
                raise KeyError(key) from None
            if code in REFUSED_CODES and operation == "GetObject":
                raise ObjectUnreadable(
                    f"S3 refused GetObject of {where} ({code}): the object is missing (S3 "
                    "answers so for a missing key to a role without s3:ListBucket), or this "
                    "role may not read it"
                ) from exc
            if code == "NoSuchBucket":
                raise MissingResourceError(
                    f"S3 bucket {self._bucket!r} (payload_bucket) does not exist; create it "
                    "with app.provision() (local use) or your CloudFormation stack (AWS)"
                ) from exc
            if code in UNAVAILABLE_CODES:
                raise StorageUnavailable(f"S3 {operation} of {where} failed: {code}") from exc
            raise StorageError(f"S3 {operation} of {where} was refused: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageUnavailable(f"cannot reach S3 for {operation} of {where}: {exc}") from exc


def _snake(operation: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in operation).lstrip("_")
