"""The deployment files agree with the library: the CloudFormation table equals
``table_definition``, IAM stays least-privilege, the Dockerfile keeps its invariants.

hadolint (``make lint``) checks the Dockerfile's style; the invariants below are the
ones it does not enforce (a HEALTHCHECK, a non-root numeric USER, exec-form CMD, a
pinned base image).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from maintenance import lambda_handler
from runlane_sqs import Telemetry
from runlane_sqs.adapters.dynamodb.items import TTL_ATTRIBUTE, table_definition
from runlane_sqs.adapters.provision import DLQ_SUFFIX
from runlane_sqs.core.limits import DEFAULT_MAX_RECEIVE_COUNT
from tests.templates import load_template

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
INDEXES = ("agenda", "by_status", "waits", "tag_0", "tag_1", "tag_2", "tag_3")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource["Type"] == kind
    }


def by_name(items: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    return {item[key]: item for item in items}


def projection(value: dict[str, Any]) -> dict[str, Any]:
    """A projection with its attribute list as a set (DynamoDB keeps no order)."""
    out = dict(value)
    if "NonKeyAttributes" in out:
        out["NonKeyAttributes"] = set(out["NonKeyAttributes"])
    return out


def test_the_table_equals_the_one_the_library_provisions(template: dict[str, Any]) -> None:
    [table] = resources(template, "AWS::DynamoDB::Table").values()
    props = table["Properties"]
    expected = table_definition("x")

    assert props["TableName"] == {"Ref": "TableName"}
    assert props["BillingMode"] == expected["BillingMode"] == "PAY_PER_REQUEST"
    assert by_name(props["AttributeDefinitions"], "AttributeName") == by_name(
        expected["AttributeDefinitions"], "AttributeName"
    )
    assert props["KeySchema"] == expected["KeySchema"]
    ours = by_name(props["GlobalSecondaryIndexes"], "IndexName")
    theirs = by_name(expected["GlobalSecondaryIndexes"], "IndexName")
    assert (
        set(ours)
        == set(theirs)
        == {
            "agenda",
            "by_status",
            "waits",
            "tag_0",
            "tag_1",
            "tag_2",
            "tag_3",
        }
    )
    for name, index in theirs.items():
        assert ours[name]["KeySchema"] == index["KeySchema"], name
        assert projection(ours[name]["Projection"]) == projection(index["Projection"]), name
        assert set(ours[name]) == {"IndexName", "KeySchema", "Projection"}, name
    assert props["SSESpecification"] == {"SSEEnabled": expected["SSESpecification"]["Enabled"]}
    assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert set(props) == {
        "TableName",
        "BillingMode",
        "AttributeDefinitions",
        "KeySchema",
        "GlobalSecondaryIndexes",
        "SSESpecification",
        "TimeToLiveSpecification",
        "PointInTimeRecoverySpecification",
        "DeletionProtectionEnabled",
    }
    assert props["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"


def test_queues_are_encrypted_and_redrive_to_their_dead_letter_queues(
    template: dict[str, Any],
) -> None:
    queues = resources(template, "AWS::SQS::Queue")
    assert set(queues) == {
        "StandardQueue",
        "StandardDeadLetterQueue",
        "FifoQueue",
        "FifoDeadLetterQueue",
    }
    for props in (q["Properties"] for q in queues.values()):
        assert props["SqsManagedSseEnabled"] is True
    for name in ("StandardQueue", "FifoQueue"):
        props = queues[name]["Properties"]
        dlq = f"{name.removesuffix('Queue')}DeadLetterQueue"
        assert props["RedrivePolicy"] == {
            "deadLetterTargetArn": {"Fn::GetAtt": [dlq, "Arn"]},
            "maxReceiveCount": {"Ref": "MaxReceiveCount"},
        }
    assert queues["FifoQueue"]["Properties"]["FifoQueue"] is True
    assert queues["FifoDeadLetterQueue"]["Properties"]["FifoQueue"] is True
    # the names app.provision() would give: {prefix}{queue}, {prefix}{queue}-dlq
    assert queues["StandardQueue"]["Properties"]["QueueName"] == {
        "Fn::Sub": "${QueuePrefix}${StandardQueueName}"
    }
    assert queues["StandardDeadLetterQueue"]["Properties"]["QueueName"] == {
        "Fn::Sub": f"${{QueuePrefix}}${{StandardQueueName}}{DLQ_SUFFIX}"
    }
    assert template["Parameters"]["MaxReceiveCount"]["Default"] == DEFAULT_MAX_RECEIVE_COUNT


def test_lambdas_schedule_and_event_source_mappings(template: dict[str, Any]) -> None:
    functions = resources(template, "AWS::Lambda::Function")
    maintenance = functions["MaintenanceFunction"]["Properties"]
    assert maintenance["Handler"] == "runlane_sqs.lambdas.maintenance.handler"
    assert callable(lambda_handler.handler)
    assert functions["ConsumerFunction"]["Properties"]["Handler"] == {"Ref": "ConsumerHandler"}
    [rule] = resources(template, "AWS::Events::Rule").values()
    period = template["Parameters"]["MaintenancePeriodMinutes"]
    periods = template["Mappings"]["MaintenancePeriods"]
    assert rule["Properties"]["ScheduleExpression"] == {
        "Fn::FindInMap": ["MaintenancePeriods", {"Ref": "MaintenancePeriodMinutes"}, "Rate"]
    }
    assert periods[period["Default"]]["Rate"] == "rate(1 minute)"
    # the rate and every app process's setting come from the one parameter (the alarm
    # window of each period is checked in tests/core/test_alarms.py)
    assert set(period["AllowedValues"]) == set(periods)
    for minutes, values in periods.items():
        plural = "minute" if minutes == "1" else "minutes"
        assert values["Rate"] == f"rate({minutes} {plural})"
        assert values["Seconds"] == str(int(minutes) * 60)
    mappings = resources(template, "AWS::Lambda::EventSourceMapping")
    assert {m["Properties"]["EventSourceArn"]["Fn::GetAtt"][0] for m in mappings.values()} == {
        "StandardQueue",
        "FifoQueue",
    }
    for mapping in mappings.values():
        assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_lambdas_log_json_lines_and_take_their_metrics_output_from_one_parameter(
    template: dict[str, Any],
) -> None:
    """JSON lines keep a log record's fields (the pass report, a failure's traceback, the
    trace id): Lambda's text format drops them (docs/observability.md)."""
    metrics = template["Parameters"]["LambdaMetrics"]
    assert metrics["Default"] == "none"
    assert set(metrics["AllowedValues"]) == {"none", "emf", "otel"}
    assert all(Telemetry.from_env({"RUNLANE_METRICS": v}) for v in metrics["AllowedValues"])
    for function in resources(template, "AWS::Lambda::Function").values():
        properties = function["Properties"]
        assert properties["LoggingConfig"] == {"LogFormat": "JSON"}
        variables = properties["Environment"]["Variables"]
        assert variables["RUNLANE_METRICS"] == {"Ref": "LambdaMetrics"}


def test_the_ecs_worker_stops_gracefully(template: dict[str, Any]) -> None:
    [task] = resources(template, "AWS::ECS::TaskDefinition").values()
    [container] = task["Properties"]["ContainerDefinitions"]
    assert container["StopTimeout"] == 120
    assert container["Command"][:2] == ["runlane-sqs", "worker"]
    grace = template["Parameters"]["WorkerGracePeriodSeconds"]
    assert grace["MaxValue"] < container["StopTimeout"]
    assert task["Properties"]["RequiresCompatibilities"] == ["FARGATE"]


def test_the_ecs_worker_scales_on_its_backlog_and_protects_busy_tasks(
    template: dict[str, Any],
) -> None:
    """Target tracking on the wakeups waiting in both queues per running task, between
    WorkerMinCount and WorkerMaxCount; the service starts from the minimum; the task role
    may protect its own cluster's tasks (the worker does while attempts are in flight)."""
    [target] = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    [policy] = resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values()
    assert target["Condition"] == policy["Condition"] == "WithWorkerScaling"
    props = target["Properties"]
    assert (props["MinCapacity"], props["MaxCapacity"]) == (
        {"Ref": "WorkerMinCount"},
        {"Ref": "WorkerMaxCount"},
    )
    assert props["ResourceId"] == {"Fn::Sub": "service/${WorkerCluster}/${WorkerService.Name}"}
    tracking = policy["Properties"]["TargetTrackingScalingPolicyConfiguration"]
    assert tracking["TargetValue"] == {"Ref": "WorkerBacklogPerTask"}
    metrics = {m["Id"]: m for m in tracking["CustomizedMetricSpecification"]["Metrics"]}
    assert metrics["backlog_per_task"]["Expression"] == "(standard + fifo) / tasks"
    assert [m["Id"] for m in metrics.values() if m["ReturnData"]] == ["backlog_per_task"]
    for name, queue in (("standard", "StandardQueue"), ("fifo", "FifoQueue")):
        stat = metrics[name]["MetricStat"]
        assert stat["Metric"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert stat["Metric"]["Dimensions"] == [
            {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}
        ]
    tasks = metrics["tasks"]["MetricStat"]["Metric"]
    assert (tasks["Namespace"], tasks["MetricName"]) == (
        "ECS/ContainerInsights",
        "RunningTaskCount",
    )
    [service] = resources(template, "AWS::ECS::Service").values()
    assert service["Properties"]["DesiredCount"] == {
        "Fn::If": ["WithWorkerScaling", {"Ref": "WorkerMinCount"}, {"Ref": "WorkerDesiredCount"}]
    }
    [cluster] = resources(template, "AWS::ECS::Cluster").values()
    assert {"Name": "containerInsights", "Value": "enabled"} in cluster["Properties"][
        "ClusterSettings"
    ]
    protection = [s for owner, s in policy_statements(template) if owner == "WorkerTaskRole"]
    assert [(s["Action"], s["Resource"]) for s in protection] == [
        (
            ["ecs:UpdateTaskProtection", "ecs:GetTaskProtection"],
            {
                "Fn::Sub": "arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:"
                "task/${WorkerCluster}/*"
            },
        )
    ]


def policy_statements(template: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, resource in template["Resources"].items():
        props = resource["Properties"]
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            for listed in props["PolicyDocument"]["Statement"]:
                # a statement only with the payload bucket (or its key): its true side
                yield name, listed["Fn::If"][1] if "Fn::If" in listed else listed
        elif resource["Type"] == "AWS::IAM::Role":
            for policy in props.get("Policies", []):
                yield from ((name, s) for s in policy["PolicyDocument"]["Statement"])


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_iam_has_no_wildcard_actions_and_scoped_resources(template: dict[str, Any]) -> None:
    statements = list(policy_statements(template))
    assert statements
    for owner, statement in statements:
        actions = as_list(statement["Action"])
        assert "NotAction" not in statement and "NotResource" not in statement
        assert statement["Effect"] == "Allow"
        for action in actions:
            assert "*" not in action, f"{owner}: wildcard action {action}"
        resources_ = as_list(statement["Resource"])
        if "*" in resources_:  # only where AWS has no resource-level permission
            assert actions == ["ecr:GetAuthorizationToken"], owner
        for resource in resources_:
            check_resource(owner, actions, resource)
        if any(a.startswith("kms:") for a in actions):
            [key] = (r["Ref"] for r in resources_)
            assert set(statement["Condition"]["StringEquals"]) == KEY_CONDITIONS[key], owner


SCOPED = {
    "s3:": [{"Fn::Sub": "${PayloadBucket.Arn}/${Environment}/values/*"}],
    "kms:": [{"Ref": "PayloadKeyArn"}, {"Ref": "ValueKeyArn"}],
}
"""The resources a statement of each of these services' actions may name."""
KEY_CONDITIONS = {
    "PayloadKeyArn": {"kms:ViaService", "kms:EncryptionContext:aws:s3:arn"},
    "ValueKeyArn": {"kms:EncryptionContext:purpose"},
}
"""Each key's statements: through S3 for the bucket, or a codec's values only."""


DEAD_LETTER_ACTIONS = {"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage"}
"""What the operator does to a dead-letter queue (``queues dlq``), and nothing more."""


def check_resource(owner: str, actions: list[str], resource: Any) -> None:
    """``resource`` is one a statement of ``actions`` in ``owner`` may name."""
    for prefix, scoped in SCOPED.items():
        if any(a.startswith(prefix) for a in actions):
            assert resource in scoped, owner
    if any(a.startswith("dynamodb:") for a in actions):
        assert resource in (
            {"Fn::GetAtt": ["RunsTable", "Arn"]},
            *({"Fn::Sub": f"${{RunsTable.Arn}}/index/{i}"} for i in INDEXES),
        ), owner
    if any(a.startswith("sqs:") for a in actions):
        queues = [{"Fn::GetAtt": [q, "Arn"]} for q in ("StandardQueue", "FifoQueue")]
        dead = [
            {"Fn::GetAtt": [q, "Arn"]} for q in ("StandardDeadLetterQueue", "FifoDeadLetterQueue")
        ]
        if set(actions) <= {"sqs:GetQueueAttributes", "sqs:GetQueueUrl"}:
            queues += dead  # counting the dead-letter queues (app.health)
        elif owner == "OperatorPolicy" and set(actions) == DEAD_LETTER_ACTIONS:
            queues = dead  # queues dlq: read and delete dead letters, never send to them
        assert resource in queues, owner
    if any(a.startswith("logs:") for a in actions):
        assert re.fullmatch(r"\w+LogGroup", resource["Fn::GetAtt"][0]), owner


# --- Dockerfile ------------------------------------------------------------------


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_invariants() -> None:
    steps = instructions()
    keywords = [k for k, _ in steps]
    bases = [args for k, args in steps if k == "FROM"]
    assert bases and all(re.match(r"python:3\.11-slim\b", b) for b in bases), bases
    users = [args for k, args in steps if k == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), users  # numeric, not root
    assert keywords.index("USER") < keywords.index("CMD")
    [healthcheck] = [args for k, args in steps if k == "HEALTHCHECK"]
    assert "CMD [" in healthcheck
    [cmd] = [args for k, args in steps if k == "CMD"]
    assert cmd == '["runlane-sqs", "worker"]'  # exec form: the worker gets SIGTERM itself
    assert "ENTRYPOINT" not in keywords or all(
        args.startswith("[") for k, args in steps if k == "ENTRYPOINT"
    )
    assert ("STOPSIGNAL", "SIGTERM") in steps
    wheels = [args for k, args in steps if k == "RUN" and "pip wheel" in args]
    assert wheels and '".[console]"' in wheels[0]  # the same image runs the console
