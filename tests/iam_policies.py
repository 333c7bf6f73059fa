"""Requests as IAM authorises them, and the template's policies evaluated against them
(tests/processes/test_iam_actions.py records the requests; test_infra.py checks the
deployed policies the same way)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import aioboto3
import boto3

from runlane_sqs import Runlane
from runlane_sqs.adapters.provision import table_definition

REGION, ACCOUNT = "us-east-1", "123456789012"
ENVIRONMENT = "test"


@dataclass(frozen=True)
class Access:
    """One authorisation a request needs: IAM action, resource ARN, and for DynamoDB the
    partition key values ``dynamodb:LeadingKeys`` holds."""

    action: str
    resource: str
    keys: tuple[str, ...] = ()


@dataclass
class Recorder:
    """Every DynamoDB and SQS request of each component's session."""

    requests: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)

    def _hook(self, component: str) -> Callable[..., None]:
        log = self.requests.setdefault(component, [])

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            log.append((model.name, dict(params)))

        return record

    def session(self, component: str) -> boto3.Session:
        session = boto3.Session()
        for service in ("dynamodb", "sqs"):
            session.events.register(f"before-parameter-build.{service}", self._hook(component))
        return session

    def aio_session(self, component: str) -> Any:
        session = aioboto3.Session()
        for service in ("dynamodb", "sqs"):
            session.events.register(f"before-parameter-build.{service}", self._hook(component))
        return session


def queue_name(app: Runlane, queue: str) -> str:
    """The SQS name of one of the app's queues, as it resolves it."""
    return str(app.transport.queue_name(queue))  # type: ignore[attr-defined]


def table_arn(table: str) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"


def queue_arn(name: str) -> str:
    return f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"


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
    name = params.get("QueueName") or params["QueueUrl"].rstrip("/").rsplit("/", 1)[-1]
    return [Access(f"sqs:{SQS_ACTIONS.get(operation, operation)}", queue_arn(name))]


# --- the policies, from the template ---------------------------------------------------


@dataclass(frozen=True)
class Values:
    """What the template's intrinsic functions resolve to for the test's app."""

    parameters: dict[str, str]
    attributes: dict[str, str]
    """``Resource.Attribute`` -> value."""

    def sub(self, text: str, variables: dict[str, Any]) -> str:
        def value(match: re.Match[str]) -> str:
            name = match[1]
            if name in variables:
                return str(self.resolve(variables[name]))
            return self.parameters.get(name) or self.attributes[name]

        return re.sub(r"\$\{([^}]+)\}", value, text)

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1 and (function := INTRINSICS.get(next(iter(value)))):
            return function(self, next(iter(value.values())))
        return {k: self.resolve(v) for k, v in value.items()}


def _sub(values: Values, argument: Any) -> str:
    text, variables = argument if isinstance(argument, list) else (argument, {})
    return values.sub(text, variables)


def _split(values: Values, argument: list[Any]) -> list[str]:
    delimiter, text = argument
    return str(values.resolve(text)).split(delimiter)


INTRINSICS: dict[str, Callable[[Values, Any], Any]] = {
    "Ref": lambda values, name: values.parameters[name],
    "Fn::GetAtt": lambda values, path: values.attributes[".".join(path)],
    "Fn::Sub": _sub,
    "Fn::Split": _split,
    "Fn::Select": lambda values, arg: values.resolve(arg[1])[int(arg[0])],
}
"""The intrinsic functions the template's policies use."""


def template_values(template: dict[str, Any], app: Runlane, **parameters: str) -> Values:
    """The template's parameters with the names of the test's app (table, environment,
    queue prefix), and the ARNs of its table and queues."""
    values = Values(
        {
            **{name: str(spec.get("Default", "")) for name, spec in template["Parameters"].items()},
            "TableName": app.config.table,
            "Environment": app.config.environment,
            "QueuePrefix": queue_name(app, "default").removesuffix("default"),
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            **parameters,
        },
        {},
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


def key_patterns(statement: dict[str, Any]) -> list[Any] | None:
    """The ``dynamodb:LeadingKeys`` patterns of a statement (None: no condition)."""
    condition = statement.get("Condition")
    if condition is None:
        return None
    assert list(condition) == ["ForAllValues:StringLike"], condition
    [(key, patterns)] = condition["ForAllValues:StringLike"].items()
    assert key == "dynamodb:LeadingKeys", key
    return as_list(patterns)


def allowed(policy: list[dict[str, Any]], access: Access) -> bool:
    """IAM's answer for ``access`` under the Allow statements of ``policy``."""
    for statement in policy:
        assert statement["Effect"] == "Allow"
        if access.action not in as_list(statement["Action"]):
            continue
        if not any(fnmatch.fnmatchcase(access.resource, r) for r in as_list(statement["Resource"])):
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
    """The same request made by an app of another environment."""
    pattern = rf"(^|#){re.escape(ENVIRONMENT)}(#|$)"
    keys = tuple(re.sub(pattern, rf"\g<1>{environment}\g<2>", k, count=1) for k in access.keys)
    return replace(access, keys=keys)
