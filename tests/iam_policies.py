"""Requests as IAM authorises them, and the template's policies evaluated against them
(tests/processes/test_iam_actions.py records the requests; test_infra.py checks the
deployed policies the same way).

S3 requests of the payload bucket are recorded too; the KMS requests S3 makes for them
when the bucket encrypts with a KMS key are not requests of the app's, so
:func:`through_key` derives them from the S3 ones as AWS documents them. The KMS requests
of a ``KmsEncryption`` codec are the app's own, and recorded."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import aioboto3
import boto3

from runlane_sqs import Runlane
from runlane_sqs.adapters.dynamodb.items import table_definition

REGION, ACCOUNT = "us-east-1", "123456789012"
ENVIRONMENT = "test"


@dataclass(frozen=True)
class Access:
    """One authorisation a request needs: IAM action, resource ARN, for DynamoDB the
    partition key values ``dynamodb:LeadingKeys`` holds, and the other condition keys the
    request carries (``context``: for KMS through S3, the service and the bucket; for a
    codec's KMS request, its encryption context)."""

    action: str
    resource: str
    keys: tuple[str, ...] = ()
    context: tuple[tuple[str, str], ...] = ()


RECORDED_SERVICES = ("dynamodb", "sqs", "s3", "kms")


@dataclass
class Recorder:
    """Every DynamoDB, SQS, S3 and KMS request of each component's session."""

    requests: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)

    def _hook(self, component: str) -> Callable[..., None]:
        log = self.requests.setdefault(component, [])

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            log.append((model.name, dict(params)))

        return record

    def session(self, component: str) -> boto3.Session:
        session = boto3.Session()
        for service in RECORDED_SERVICES:
            session.events.register(f"before-parameter-build.{service}", self._hook(component))
        return session

    def aio_session(self, component: str) -> Any:
        session = aioboto3.Session()
        for service in RECORDED_SERVICES:
            session.events.register(f"before-parameter-build.{service}", self._hook(component))
        return session


def queue_name(app: Runlane, queue: str) -> str:
    """The SQS name of one of the app's queues, as it resolves it."""
    return str(app.transport.queue_name(queue))  # type: ignore[attr-defined]


def table_arn(table: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"


def queue_arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


def bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


INDEX_PARTITION_KEYS = {
    index["IndexName"]: next(
        k["AttributeName"] for k in index["KeySchema"] if k["KeyType"] == "HASH"
    )
    for index in table_definition("x")["GlobalSecondaryIndexes"]
}
TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}
SQS_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


KMS_ACTIONS = ("GenerateDataKey", "Decrypt")
"""What a ``KmsEncryption`` codec asks KMS for."""


def kms_access(operation: str, params: dict[str, Any]) -> Access:
    """A codec's KMS request: on the key it names (a ``Decrypt`` without ``KeyId`` would
    be authorised on the key in the ciphertext, which the recorder cannot see), with its
    encryption context as IAM's ``kms:EncryptionContext:`` keys."""
    assert str(params.get("KeyId", "")).startswith("arn:aws:kms:"), params.get("KeyId")
    context = tuple(
        (f"kms:EncryptionContext:{k}", v) for k, v in sorted(params["EncryptionContext"].items())
    )
    return Access(f"kms:{operation}", params["KeyId"], context=context)


def partition_of(params: dict[str, Any]) -> str:
    """The partition key value a ``Query`` reads: the value its key condition sets the
    table's (or the index's) partition key equal to."""
    attribute = INDEX_PARTITION_KEYS.get(params.get("IndexName", ""), "pk")
    names = params.get("ExpressionAttributeNames", {})
    values = params["ExpressionAttributeValues"]
    for name, value in re.findall(r"([#\w]+)\s*=\s*(:\w+)", params["KeyConditionExpression"]):
        if names.get(name, name) == attribute:
            return str(values[value]["S"])
    raise AssertionError(f"no partition key in {params['KeyConditionExpression']!r}")


def accesses(operation: str, params: dict[str, Any]) -> list[Access]:
    """What IAM authorises for one request."""
    if operation in KMS_ACTIONS:
        return [kms_access(operation, params)]
    if "Bucket" in params:  # an object request; a bucket-wide one has no Key
        resource = bucket_arn(params["Bucket"])
        if "Key" in params:
            resource = f"{resource}/{params['Key']}"
        return [Access(f"s3:{operation}", resource)]
    if "QueueName" in params or "QueueUrl" in params:
        name = params.get("QueueName") or params["QueueUrl"].rstrip("/").rsplit("/", 1)[-1]
        return [Access(f"sqs:{SQS_ACTIONS.get(operation, operation)}", queue_arn(name))]
    return dynamodb_accesses(operation, params)


def dynamodb_accesses(operation: str, params: dict[str, Any]) -> list[Access]:
    """What IAM authorises for one DynamoDB request."""
    if operation == "TransactWriteItems":
        found = []
        for entry in params["TransactItems"]:
            [(kind, item)] = entry.items()
            key = item.get("Key") or item["Item"]
            found.append(
                Access(
                    f"dynamodb:{TRANSACT_ACTIONS[kind]}",
                    table_arn(item["TableName"]),
                    (key["pk"]["S"],),
                )
            )
        return found
    if operation == "BatchGetItem":
        [(table, request)] = params["RequestItems"].items()
        pks = tuple(key["pk"]["S"] for key in request["Keys"])
        return [Access("dynamodb:BatchGetItem", table_arn(table), pks)]
    if "TableName" in params:
        resource = table_arn(params["TableName"])
        if operation == "Query":
            if "IndexName" in params:
                resource = f"{resource}/index/{params['IndexName']}"
            return [Access("dynamodb:Query", resource, (partition_of(params),))]
        key = params.get("Key") or params.get("Item")  # none: a table-wide call, like a Scan
        return [Access(f"dynamodb:{operation}", resource, (key["pk"]["S"],) if key else ())]
    raise AssertionError(f"a request of no recorded kind: {operation} {sorted(params)}")


# --- the policies, from the template ---------------------------------------------------


NO_VALUE = object()
"""What ``Ref: AWS::NoValue`` resolves to: the list item or property is left out."""


@dataclass(frozen=True)
class Values:
    """What the template's intrinsic functions resolve to for the test's app."""

    parameters: dict[str, str]
    attributes: dict[str, str]
    """``Resource.Attribute`` -> value."""
    conditions: dict[str, Any] = field(default_factory=dict)
    """The template's ``Conditions``, evaluated with ``parameters`` by :meth:`holds`."""

    def holds(self, condition: Any) -> bool:
        """A condition's value: its name, or a condition function."""
        if isinstance(condition, str):
            return self.holds(self.conditions[condition])
        [(function, argument)] = condition.items()
        if function in ("Condition", "Fn::Condition"):  # the short form loads as the latter
            return self.holds(argument)
        if function == "Fn::Equals":
            left, right = (str(self.resolve(a)) for a in argument)
            return left == right
        if function == "Fn::Not":
            return not self.holds(argument[0])
        if function == "Fn::And":
            return all(self.holds(a) for a in argument)
        if function == "Fn::Or":
            return any(self.holds(a) for a in argument)
        raise AssertionError(f"condition function {function} not evaluated here")

    def sub(self, text: str, variables: dict[str, Any]) -> str:
        def value(match: re.Match[str]) -> str:
            name = match[1]
            if name in variables:
                return str(self.resolve(variables[name]))
            return self.parameters.get(name) or self.attributes[name]

        return re.sub(r"\$\{([^}]+)\}", value, text)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [r for r in (self.resolve(v) for v in value) if r is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1 and (function := INTRINSICS.get(next(iter(value)))):
            return function(self, next(iter(value.values())))
        resolved = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}


def _sub(values: Values, argument: Any) -> str:
    text, variables = argument if isinstance(argument, list) else (argument, {})
    return values.sub(text, variables)


def _if(values: Values, argument: list[Any]) -> Any:
    condition, then, otherwise = argument
    return values.resolve(then if values.holds(condition) else otherwise)


def _ref(values: Values, name: str) -> Any:
    return NO_VALUE if name == "AWS::NoValue" else values.parameters[name]


def _split(values: Values, argument: list[Any]) -> list[str]:
    delimiter, text = argument
    return str(values.resolve(text)).split(delimiter)


INTRINSICS: dict[str, Callable[[Values, Any], Any]] = {
    "Ref": _ref,
    "Fn::If": _if,
    "Fn::GetAtt": lambda values, path: values.attributes[".".join(path)],
    "Fn::Sub": _sub,
    "Fn::Split": _split,
    "Fn::Select": lambda values, arg: values.resolve(arg[1])[int(arg[0])],
}
"""The intrinsic functions the template's policies use."""


def template_values(template: dict[str, Any], app: Runlane, **parameters: str) -> Values:
    """The template's parameters (``parameters`` given, the others at their defaults) with
    the names of the test's app (table, environment, queue prefix, payload bucket), and
    the ARNs of its table, queues and bucket."""
    bucket = app.config.payload_bucket or "no-payload-bucket"
    values = Values(
        {
            **{name: str(spec.get("Default", "")) for name, spec in template["Parameters"].items()},
            "TableName": app.config.table,
            "Environment": app.config.environment,
            "QueuePrefix": queue_name(app, "default").removesuffix("default"),
            "PayloadBucket": bucket,
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            **parameters,
        },
        {"PayloadBucket.Arn": bucket_arn(bucket)},
        template.get("Conditions", {}),
    )
    values.attributes["RunsTable.Arn"] = table_arn(app.config.table)
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::SQS::Queue":
            queue = values.resolve(resource["Properties"]["QueueName"])
            values.attributes[f"{name}.Arn"] = queue_arn(queue)
    return values


def statements(template: dict[str, Any], values: Values, *policies: str) -> list[dict[str, Any]]:
    """The statements of the template's managed ``policies``, resolved."""
    found = []
    for policy in policies:
        resource = template["Resources"][policy]
        assert resource["Type"] == "AWS::IAM::ManagedPolicy", policy
        found.extend(values.resolve(resource["Properties"]["PolicyDocument"])["Statement"])
    return found


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


CONDITIONS = {"ForAllValues:StringLike", "StringEquals", "StringEqualsIfExists"}
"""The condition operators the policies use: ``dynamodb:LeadingKeys`` patterns, and
exact values of the other keys (required, or required only when the request has them)."""


def key_patterns(statement: dict[str, Any]) -> list[Any] | None:
    """The ``dynamodb:LeadingKeys`` patterns of a statement (None: no such condition)."""
    condition = statement.get("Condition", {})
    assert set(condition) <= CONDITIONS, condition
    if "ForAllValues:StringLike" not in condition:
        return None
    [(key, patterns)] = condition["ForAllValues:StringLike"].items()
    assert key == "dynamodb:LeadingKeys", key
    return as_list(patterns)


def _context_matches(statement: dict[str, Any], access: Access) -> bool:
    """Whether the request carries each ``StringEquals`` key with one of its values, and
    each ``StringEqualsIfExists`` key it carries has one of its values."""
    carried, condition = dict(access.context), statement.get("Condition", {})
    required = all(
        carried.get(key) in as_list(expected)
        for key, expected in condition.get("StringEquals", {}).items()
    )
    return required and all(
        carried[key] in as_list(expected)
        for key, expected in condition.get("StringEqualsIfExists", {}).items()
        if key in carried
    )


def allowed(policy: list[dict[str, Any]], access: Access) -> bool:
    """IAM's answer for ``access`` under the Allow statements of ``policy``."""
    for statement in policy:
        assert statement["Effect"] == "Allow"
        if access.action not in as_list(statement["Action"]):
            continue
        if not any(fnmatch.fnmatchcase(access.resource, r) for r in as_list(statement["Resource"])):
            continue
        if not _context_matches(statement, access):
            continue
        patterns = key_patterns(statement)
        if patterns is None or all(
            any(fnmatch.fnmatchcase(key, p) for p in patterns) for key in access.keys
        ):
            return True
    return False


def grants(policy: list[dict[str, Any]]) -> Iterator[tuple[str, str, str | None]]:
    """Every (action, resource, key pattern) the policy grants."""
    for statement in policy:
        for action in as_list(statement["Action"]):
            for resource in as_list(statement["Resource"]):
                patterns: list[str | None] = list(key_patterns(statement) or [None])
                for pattern in patterns:
                    yield action, resource, pattern


def used(grant: tuple[str, str, str | None], needed: set[Access]) -> bool:
    action, resource, pattern = grant
    return any(
        a.action == action
        and fnmatch.fnmatchcase(a.resource, resource)
        and (pattern is None or any(fnmatch.fnmatchcase(k, pattern) for k in a.keys))
        for a in needed
    )


def in_environment(access: Access, environment: str) -> Access:
    """The same request made by an app of another environment (for an object of the
    payload bucket, its key starts with the environment)."""
    pattern = rf"(^|#){re.escape(ENVIRONMENT)}(#|$)"
    keys = tuple(re.sub(pattern, rf"\g<1>{environment}\g<2>", k, count=1) for k in access.keys)
    resource = re.sub(
        rf"^(arn:aws:s3:::[^/]+/){re.escape(ENVIRONMENT)}/",
        rf"\g<1>{environment}/",
        access.resource,
    )
    return replace(access, keys=keys, resource=resource)


KMS_FOR_S3 = {"s3:PutObject": "kms:GenerateDataKey", "s3:GetObject": "kms:Decrypt"}
"""What S3 asks KMS for, with the caller's permissions, to write and to read an object
of a bucket encrypted with a KMS key (a single-request upload needs no ``kms:Decrypt``)."""


def through_key(needs: set[Access], key_arn: str) -> set[Access]:
    """The KMS uses the S3 requests in ``needs`` make when the bucket encrypts with the
    key ``key_arn`` and a bucket key: through S3 in the region, with the bucket's ARN as
    encryption context."""
    found = set()
    for access in needs:
        if access.action in KMS_FOR_S3:
            bucket = access.resource.split("/", 1)[0]
            context = (
                ("kms:ViaService", f"s3.{REGION}.amazonaws.com"),
                ("kms:EncryptionContext:aws:s3:arn", bucket),
            )
            found.add(Access(KMS_FOR_S3[access.action], key_arn, context=context))
    return found
