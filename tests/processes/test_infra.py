"""``infra/runlane.yaml`` deployed to the moto server's CloudFormation, and runs completed
through what it created.

moto creates the template's resources (table, queues, IAM, both Lambda functions, event
source mappings, the EventBridge rule, the ECS cluster, task definition and service; it
skips the CloudWatch alarms, see test_the_stack_deploys_with_an_alarm_topic) but runs
none of them: it has no Lambda runtime without Docker and never fires
``rate()`` rules. So the test plays AWS's part, with the deployed configuration:

- the consumer is the handler the stack names (``ConsumerHandler``), imported with the
  environment variables the stack set on the consumer function; the test receives
  messages from the stack's queues, builds the SQS event Lambda would deliver, invokes
  the handler and, like the event source mapping, deletes the records not reported;
- maintenance is ``runlane_sqs.lambdas.maintenance.handler`` invoked with an EventBridge
  scheduled-event payload, as the stack's rule would.

The event source mappings are deployed disabled (``ConsumerEnabled=false``): moto would
otherwise try to invoke the function (in Docker) on every SendMessage and make the
messages invisible. moto keeps a list item that is ``Ref: AWS::NoValue`` (the policy
statements and the lifecycle rule that exist only under a condition) as a null, which
CloudFormation drops; :func:`template_body` drops them first. moto also ignores
``TimeToLiveSpecification`` and ``SSESpecification`` of a CloudFormation table, so those
are checked on the template
(tests/core/test_deploy_files.py), not here; so are the queue policies and the
dead-letter queues' ``RedriveAllowPolicy`` (tests/iam_policies.py), which
moto's CloudFormation does not apply. moto authorises DynamoDB requests against the
resource ``*`` only, so instead of enforcing IAM the test records every request the app
makes and checks each against the deployed roles' policy documents, conditions included
(``dynamodb:LeadingKeys``, evaluated as in tests/iam_policies.py).
"""

from __future__ import annotations

import ast
import importlib
import io
import json
import sys
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from runlane_sqs import Runlane, RunStatus
from runlane_sqs.adapters.dynamodb.items import table_definition
from runlane_sqs.core.values import RELEASE_GRACE, Sealed
from runlane_sqs.engine.reports import JOB_DUE, JOB_OBJECTS
from runlane_sqs.lambdas import maintenance as lambda_handler
from runlane_sqs.local import MotoServer
from tests.emulators import REPO_ROOT, queue_counts
from tests.iam_policies import Access, Values, accesses, allowed, table_arn
from tests.templates import load_template

APP_MODULE = "tests.apps.stack_app"
RUNLANE_VARIABLES = (
    "RUNLANE_APP",
    "RUNLANE_TABLE",
    "RUNLANE_ENVIRONMENT",
    "RUNLANE_QUEUE_PREFIX",
    "RUNLANE_QUEUE_URLS",
    "RUNLANE_MAINTENANCE_PERIOD_SECONDS",
    "RUNLANE_PAYLOAD_BUCKET",
)
LARGE_PAYLOAD = {"blob": "x" * 100 * 1024}
"""Over the inline limit (32 KiB): kept in the stack's payload bucket."""


def _strings(variables: dict[str, Any]) -> dict[str, str]:
    """A function's variables as AWS gives them (moto hands a Number parameter back as a
    number)."""
    return {name: str(value) for name, value in variables.items()}


SCHEDULED_EVENT: dict[str, Any] = {
    "version": "0",
    "id": "89d1a02d-5ec7-412e-82f5-13505f849b41",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2030-01-01T00:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/runlane-maintenance"],
    "detail": {},
}


class LambdaContext:
    """The part of the Lambda context object the handlers use; a new request id each."""

    def __init__(self, remaining_ms: int = 60_000) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Stack:
    name: str
    outputs: dict[str, str]
    resources: dict[str, str]
    """Logical id -> physical id."""
    clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        """A boto3 client of the test's own (the environment points it at moto)."""
        if service not in self.clients:
            self.clients[service] = boto3.client(service)
        return self.clients[service]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def lambda_zip() -> bytes:
    """What the functions' code would be; moto stores it and never runs it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "tests/apps/stack_app.py",
            Path(REPO_ROOT, "tests/apps/stack_app.py").read_text(),
        )
    return buffer.getvalue()


def template_body(parameters: dict[str, str]) -> str:
    """The template as JSON, each list item ``Fn::If`` whose other branch is
    ``AWS::NoValue`` resolved for ``parameters`` (the others at their defaults), as
    CloudFormation resolves it: moto would keep a null in the list."""
    template = load_template()
    defaults = {n: str(spec.get("Default", "")) for n, spec in template["Parameters"].items()}
    values = Values({**defaults, **parameters}, {}, template["Conditions"])

    def resolved(node: Any) -> Any:
        if isinstance(node, dict):  # a function's arguments are not a list property
            return {
                key: [resolved(v) for v in value]
                if key.startswith("Fn::") and isinstance(value, list)
                else resolved(value)
                for key, value in node.items()
            }
        if not isinstance(node, list):
            return node
        kept = []
        for item in node:
            if isinstance(item, dict) and list(item) == ["Fn::If"]:
                condition, then, otherwise = item["Fn::If"]
                if otherwise == {"Ref": "AWS::NoValue"}:
                    if values.holds(condition):
                        kept.append(resolved(then))
                    continue
            kept.append(resolved(item))
        return kept

    return json.dumps(resolved(template))


def deploy(parameters: dict[str, str], name: str) -> Stack:
    """Create the stack (and the code bucket and network it refers to) on the moto server."""
    stack = Stack(name, {}, {})
    s3 = stack.client("s3")
    s3.create_bucket(Bucket="runlane-code")
    s3.put_object(Bucket="runlane-code", Key="app.zip", Body=lambda_zip())
    ec2 = stack.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="worker", Description="worker", VpcId=vpc)
    values = {
        "Environment": "test",
        "TableName": f"runlane-{uuid.uuid4().hex[:8]}",
        "AppSpec": f"{APP_MODULE}:app",
        "ConsumerHandler": f"{APP_MODULE}.handler",
        "ConsumerEnabled": "false",
        "LambdaCodeBucket": "runlane-code",
        "LambdaCodeKey": "app.zip",
        "ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/runlane-worker:1",
        "SubnetIds": subnet,
        "SecurityGroupIds": group["GroupId"],
        **parameters,
    }
    cfn = stack.client("cloudformation")
    cfn.create_stack(
        StackName=name,
        TemplateBody=template_body(values),
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
        Capabilities=["CAPABILITY_IAM"],
    )
    cfn.get_waiter("stack_create_complete").wait(
        StackName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
    )
    [described] = cfn.describe_stacks(StackName=name)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}
    summaries = cfn.list_stack_resources(StackName=name)["StackResourceSummaries"]
    assert all(s["ResourceStatus"] == "CREATE_COMPLETE" for s in summaries), summaries
    stack.outputs = outputs
    stack.resources = {s["LogicalResourceId"]: s.get("PhysicalResourceId", "") for s in summaries}
    return stack


@pytest.fixture
def on_moto(moto_server: MotoServer, backend_env: dict[str, str]) -> dict[str, str]:
    """The moto server's CloudFormation (skipped with RUNLANE_TEST_BACKEND=aws-local:
    LocalStack without Docker runs no Lambda, IAM or ECS, and DynamoDB Local no stacks)."""
    return backend_env


@pytest.fixture
def stack(on_moto: dict[str, str]) -> Iterator[Stack]:
    deployed = deploy({}, "runlane-test")
    yield deployed
    deployed.close()


# --- what the stack created --------------------------------------------------------


def function_variables(
    outputs: dict[str, str], consumer: dict[str, Any], maintenance: dict[str, Any]
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """Each function's configuration and the variables the stack must give it."""
    app_variables = {
        "RUNLANE_APP": f"{APP_MODULE}:app",
        "RUNLANE_TABLE": outputs["TableName"],
        "RUNLANE_ENVIRONMENT": "test",
        "RUNLANE_QUEUE_PREFIX": "runlane-",
        "RUNLANE_QUEUE_URLS": outputs["QueueUrls"],
        "RUNLANE_MAINTENANCE_PERIOD_SECONDS": "60",
        "RUNLANE_METRICS": "none",  # LambdaMetrics: emf writes CloudWatch EMF lines
        "RUNLANE_PAYLOAD_BUCKET": outputs["PayloadBucketName"],
    }
    consumer_variables = {  # the consumer's time settings (docs/deploy-lambda.md)
        "RUNLANE_LAMBDA_TIMEOUT_SECONDS": str(consumer["Timeout"]),
        "RUNLANE_LAMBDA_SAFETY_MARGIN_SECONDS": "10",
    }
    return [(consumer, app_variables | consumer_variables), (maintenance, app_variables)]


def test_the_stack_creates_the_table_queues_and_compute_the_library_expects(
    stack: Stack,
) -> None:
    outputs = stack.outputs
    table = stack.client("dynamodb").describe_table(TableName=outputs["TableName"])["Table"]
    expected = table_definition(outputs["TableName"])
    assert table["KeySchema"] == expected["KeySchema"]
    assert sorted(table["AttributeDefinitions"], key=str) == sorted(
        expected["AttributeDefinitions"], key=str
    )
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert table["DeletionProtectionEnabled"] is True
    indexes = {i["IndexName"]: i for i in table["GlobalSecondaryIndexes"]}
    for index in expected["GlobalSecondaryIndexes"]:
        deployed = indexes.pop(index["IndexName"])
        assert deployed["KeySchema"] == index["KeySchema"]
        assert deployed["Projection"]["ProjectionType"] == index["Projection"]["ProjectionType"]
        assert set(deployed["Projection"].get("NonKeyAttributes", [])) == set(
            index["Projection"].get("NonKeyAttributes", [])
        )
    assert indexes == {}

    sqs = stack.client("sqs")
    for kind in ("Standard", "Fifo"):
        attributes = sqs.get_queue_attributes(
            QueueUrl=outputs[f"{kind}QueueUrl"], AttributeNames=["All"]
        )["Attributes"]
        dlq = sqs.get_queue_attributes(
            QueueUrl=outputs[f"{kind}DeadLetterQueueUrl"], AttributeNames=["QueueArn"]
        )["Attributes"]
        assert attributes["QueueArn"] == outputs[f"{kind}QueueArn"]
        assert json.loads(attributes["RedrivePolicy"]) == {
            "deadLetterTargetArn": dlq["QueueArn"],
            "maxReceiveCount": 5,
        }
        assert attributes["SqsManagedSseEnabled"] == "true"
        assert attributes["VisibilityTimeout"] == "360"
        assert (attributes.get("FifoQueue") == "true") == (kind == "Fifo")
    assert outputs["QueueUrls"] == (
        f"default={outputs['StandardQueueUrl']},ordered={outputs['FifoQueueUrl']}"
    )
    check_payload_bucket(stack, key=None)

    functions = stack.client("lambda")
    consumer = functions.get_function_configuration(FunctionName=outputs["ConsumerFunctionName"])
    maintenance = functions.get_function_configuration(
        FunctionName=outputs["MaintenanceFunctionName"]
    )
    assert consumer["Handler"] == f"{APP_MODULE}.handler"
    assert maintenance["Handler"] == "runlane_sqs.lambdas.maintenance.handler"
    for function, variables in function_variables(outputs, consumer, maintenance):
        assert function["Runtime"] == "python3.11"
        assert _strings(function["Environment"]["Variables"]) == variables
    mappings = functions.list_event_source_mappings()["EventSourceMappings"]
    by_queue = {m["EventSourceArn"]: m for m in mappings}
    assert {m["FunctionArn"] for m in mappings} == {consumer["FunctionArn"]}
    assert set(by_queue) == {outputs["StandardQueueArn"], outputs["FifoQueueArn"]}
    for mapping in by_queue.values():
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mapping["BatchSize"] == 10
        assert mapping["State"] == "Disabled"  # ConsumerEnabled=false, see the docstring

    events = stack.client("events")
    rule = events.describe_rule(Name=stack.resources["MaintenanceSchedule"])
    assert rule["ScheduleExpression"] == "rate(1 minute)"
    [target] = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
    assert target["Arn"] == maintenance["FunctionArn"]

    # The execution role pulls from the one repository ImageUri names.
    assert [
        s["Resource"]
        for s in role_statements(stack, "WorkerExecutionRole")
        if "ecr:BatchGetImage" in s["Action"]
    ] == ["arn:aws:ecr:us-east-1:123456789012:repository/runlane-worker"]

    check_worker_service(stack)


def check_worker_service(stack: Stack) -> None:
    """The ECS worker's task definition and service, as the stack created them."""
    outputs = stack.outputs
    ecs = stack.client("ecs")
    task = ecs.describe_task_definition(taskDefinition=stack.resources["WorkerTaskDefinition"])
    [container] = task["taskDefinition"]["containerDefinitions"]
    worker_variables = {v["name"]: v["value"] for v in container["environment"]}
    assert worker_variables["RUNLANE_PAYLOAD_BUCKET"] == outputs["PayloadBucketName"]
    assert container["stopTimeout"] == 120
    assert container["command"][:4] == ["runlane-sqs", "worker", "--app", f"{APP_MODULE}:app"]
    [service] = ecs.describe_services(
        cluster=outputs["WorkerClusterName"], services=[outputs["WorkerServiceName"]]
    )["services"]
    # (moto's CloudFormation drops LaunchType; the template's is checked in unit tests)
    assert service["taskDefinition"] == task["taskDefinition"]["taskDefinitionArn"]
    assert service["desiredCount"] == 1  # WorkerMinCount: scaling starts from it
    # (moto's CloudFormation creates no Application Auto Scaling resources: the backlog
    # scaling is checked on the template, tests/core/test_deploy_files.py)


def check_payload_bucket(stack: Stack, key: str | None) -> None:
    """The payload bucket as deployed: encrypted with S3's keys or with ``key``, without
    versions. (moto's CloudFormation applies a bucket's encryption only: its public access
    block, ownership and lifecycle rules, and the bucket policy, are checked on the
    template, in tests/processes/test_iam_actions.py.)"""
    s3, bucket = stack.client("s3"), stack.outputs["PayloadBucketName"]
    assert stack.outputs["PayloadBucketArn"] == f"arn:aws:s3:::{bucket}"
    assert stack.resources["PayloadBucket"] == bucket
    [rule] = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rule["ApplyServerSideEncryptionByDefault"] == (
        {"SSEAlgorithm": "AES256"}
        if key is None
        else {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key}
    )
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)  # never enabled


def test_without_compute_the_stack_holds_storage_queues_and_maintenance(
    on_moto: dict[str, str],
) -> None:
    stack = deploy(
        {
            "DeployLambdaConsumer": "false",
            "DeployEcsWorker": "false",
            "SubnetIds": "",
            "SecurityGroupIds": "",
            "ImageUri": "",
        },
        "runlane-lean",
    )
    stack.close()
    assert "ConsumerFunction" not in stack.resources
    assert "WorkerService" not in stack.resources
    assert {"RunsTable", "StandardQueue", "FifoQueue", "MaintenanceFunction"} <= set(
        stack.resources
    )
    assert "ConsumerFunctionName" not in stack.outputs


LEAN = {"DeployEcsWorker": "false", "SubnetIds": "", "SecurityGroupIds": "", "ImageUri": ""}
"""Parameters of a stack without the ECS worker."""


def test_with_a_payload_key_the_bucket_encrypts_with_it(on_moto: dict[str, str]) -> None:
    """``PayloadKeyArn``: SSE-KMS with that key (the grants to use it are checked on the
    template: moto's S3 does not call KMS)."""
    kms = boto3.client("kms")
    key = kms.create_key(Description="runlane payloads")["KeyMetadata"]["Arn"]
    kms.close()
    stack = deploy({**LEAN, "PayloadKeyArn": key, "PayloadExpirationDays": "0"}, "runlane-kms")
    check_payload_bucket(stack, key=key)
    stack.close()


def test_without_the_payload_bucket_values_stay_in_their_records(
    on_moto: dict[str, str],
) -> None:
    """``DeployPayloadBucket=false``: no bucket, no output, and no RUNLANE_PAYLOAD_BUCKET
    for the functions (their apps keep every value in its record)."""
    stack = deploy({**LEAN, "DeployPayloadBucket": "false"}, "runlane-inline")
    functions = stack.client("lambda")
    for name in ("MaintenanceFunctionName", "ConsumerFunctionName"):
        variables = functions.get_function_configuration(FunctionName=stack.outputs[name])
        assert "RUNLANE_TABLE" in variables["Environment"]["Variables"]
        assert "RUNLANE_PAYLOAD_BUCKET" not in variables["Environment"]["Variables"]
    stack.close()
    assert "PayloadBucket" not in stack.resources
    assert "PayloadBucketName" not in stack.outputs


def test_the_stack_deploys_with_an_alarm_topic(on_moto: dict[str, str]) -> None:
    """``AlarmTopicArn`` set: the stack still deploys. moto's CloudFormation has no model
    of ``AWS::CloudWatch::Alarm`` and skips the alarms (with a warning in the server's
    log), so their metrics, dimensions and actions are checked on the template
    (tests/core/test_alarms.py); this fails once moto creates them, to check them here."""
    sns = boto3.client("sns")
    topic = sns.create_topic(Name="runlane-on-call")["TopicArn"]
    sns.close()
    stack = deploy({**LEAN, "AlarmTopicArn": topic}, "runlane-alarmed")
    alarms = stack.client("cloudwatch").describe_alarms()["MetricAlarms"]
    stack.close()
    assert {"StandardQueue", "MaintenanceFunction", "ConsumerFunction"} <= set(stack.resources)
    assert not any(name.endswith("Alarm") for name in stack.resources)
    assert alarms == []


# --- runs through the deployed resources ----------------------------------------------


class RequestLog:
    """Every request the app's boto3 clients make, with the phase it belongs to."""

    def __init__(self, app: Runlane) -> None:
        self.phase = "producer"
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        for service in ("dynamodb", "sqs", "s3"):
            app.client(service).meta.events.register(
                f"before-parameter-build.{service}.*", self._record
            )

    def _record(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        self.requests.append((self.phase, model.name, params))

    def of(self, phase: str) -> list[tuple[str, dict[str, Any]]]:
        return [(name, params) for p, name, params in self.requests if p == phase]


def statements_of(document: Any) -> list[dict[str, Any]]:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:  # moto keeps a stack's inline policies as Python repr
            document = ast.literal_eval(document)
    return list(document["Statement"])


def policy_statements(stack: Stack, policy_arn: str) -> list[dict[str, Any]]:
    iam = stack.client("iam")
    version = iam.get_policy(PolicyArn=policy_arn)["Policy"]["DefaultVersionId"]
    policy = iam.get_policy_version(PolicyArn=policy_arn, VersionId=version)
    return statements_of(policy["PolicyVersion"]["Document"])


def role_statements(stack: Stack, role_logical_id: str) -> list[dict[str, Any]]:
    """Every statement of a deployed role (attached and inline policies)."""
    iam = stack.client("iam")
    role = stack.resources[role_logical_id]
    found = []
    for attached in iam.list_attached_role_policies(RoleName=role)["AttachedPolicies"]:
        found.extend(policy_statements(stack, attached["PolicyArn"]))
    for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
        found.extend(
            statements_of(iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"])
        )
    return found


def needed(stack: Stack, requests: list[tuple[str, dict[str, Any]]]) -> set[Access]:
    """What IAM authorises for the recorded requests (action, resource, leading keys)."""
    assert stack.outputs["TableArn"] == table_arn(stack.outputs["TableName"])
    found = {a for name, params in requests for a in accesses(name, params)}
    queue_arns = {stack.outputs["StandardQueueArn"], stack.outputs["FifoQueueArn"]}
    assert {a.resource for a in found if a.action.startswith("sqs:")} <= queue_arns
    values = f"{stack.outputs['PayloadBucketArn']}/test/values/"
    assert all(a.resource.startswith(values) for a in found if a.action.startswith("s3:"))
    return found


def refused(statements: list[dict[str, Any]], needs: set[Access]) -> set[Access]:
    return {access for access in needs if not allowed(statements, access)}


@pytest.fixture
def deployed_app(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The user module, imported as the consumer function would import it: with the
    variables the stack set on that function (the endpoint comes from the test's env)."""
    consumer = stack.client("lambda").get_function_configuration(
        FunctionName=stack.outputs["ConsumerFunctionName"]
    )
    for name, value in consumer["Environment"]["Variables"].items():
        monkeypatch.setenv(name, str(value))  # moto: a Number parameter stays a number
    monkeypatch.delitem(sys.modules, APP_MODULE, raising=False)
    monkeypatch.setattr(lambda_handler, "_app", None)
    module_name, _, attribute = consumer["Handler"].rpartition(".")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, attribute))
    yield module
    sys.modules.pop(APP_MODULE, None)


def deliver(stack: Stack, handler: Callable[..., Any], kind: str) -> tuple[int, list[str]]:
    """Play the event source mapping for one queue until it is empty: receive a batch,
    invoke the handler, delete the records it did not report. Returns (records, reported)."""
    sqs = stack.client("sqs")
    url, arn = stack.outputs[f"{kind}QueueUrl"], stack.outputs[f"{kind}QueueArn"]
    delivered, reported = 0, []
    while True:
        messages = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return delivered, reported
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
        response = handler({"Records": records}, LambdaContext())
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        done = [m for m in messages if m["MessageId"] not in failed]
        if done:
            sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)
                ],
            )
        delivered += len(messages)
        reported.extend(failed)
        if failed:
            return delivered, reported


def check_large_values(stack: Stack, app: Runlane, run_id: str) -> None:
    """A run whose payload and result are over the inline limit: both kept in the stack's
    payload bucket, read back whole."""
    assert app.runs.get(run_id).result == {"echo": LARGE_PAYLOAD, "attempt": 1}
    stored = app.runs.get_stored(run_id)
    assert isinstance(stored.payload, Sealed) and isinstance(stored.result, Sealed)
    reference = stored.result.reference
    assert reference is not None and reference.bucket == stack.outputs["PayloadBucketName"]


def check_requests_allowed(stack: Stack, log: RequestLog) -> None:
    """Every request each part made is one its deployed role (or, for the producer and
    the operator, the policy the stack exports for them) allows."""
    producer = policy_statements(stack, stack.outputs["ProducerPolicyArn"])
    assert refused(producer, needed(stack, log.of("producer"))) == set()
    consumer_needs = needed(stack, log.of("consumer"))
    assert refused(role_statements(stack, "ConsumerRole"), consumer_needs) == set()
    worker_needs = needed(stack, log.of("worker"))
    assert {a.action for a in worker_needs} >= {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    assert refused(role_statements(stack, "WorkerTaskRole"), worker_needs) == set()
    maintenance_needs = needed(stack, log.of("maintenance"))
    assert {a.action for a in maintenance_needs} >= {
        "dynamodb:Query",
        "sqs:SendMessage",
        "s3:DeleteObject",
    }
    assert refused(role_statements(stack, "MaintenanceRole"), maintenance_needs) == set()
    operator = policy_statements(stack, stack.outputs["OperatorPolicyArn"])
    assert refused(operator, needed(stack, log.of("operator"))) == set()
    for phase in ("producer", "consumer"):
        assert {"s3:PutObject", "s3:GetObject"} <= {a.action for a in needed(stack, log.of(phase))}
    # ...and the roles are not wider than that: maintenance cannot consume, and the
    # producer policy cannot list runs.
    assert refused(
        role_statements(stack, "MaintenanceRole"),
        {Access("sqs:ReceiveMessage", stack.outputs["StandardQueueArn"])},
    )
    list_runs = Access(
        "dynamodb:Query", f"{stack.outputs['TableArn']}/index/by_status", ("test#succeeded#0",)
    )
    assert refused(producer, {list_runs})


def test_runs_complete_through_the_deployed_resources(stack: Stack, deployed_app: Any) -> None:
    app: Runlane = deployed_app.app
    handler = deployed_app.handler
    log = RequestLog(app)

    echo = app.trigger(deployed_app.ECHO_TASK, {"n": 1})
    large = app.trigger(deployed_app.ECHO_TASK, LARGE_PAYLOAD)  # kept in the payload bucket
    ordered = [app.trigger(deployed_app.ORDERED_TASK, {"n": n}) for n in range(3)]
    flaky = app.trigger(deployed_app.FLAKY_TASK, {})
    later = app.trigger(deployed_app.ECHO_TASK, {"n": "later"}, delay=timedelta(hours=2))
    sqs = stack.client("sqs")
    assert queue_counts(sqs, stack.outputs["StandardQueueUrl"])["visible"] == 3
    assert queue_counts(sqs, stack.outputs["FifoQueueUrl"])["visible"] == 3

    log.phase = "consumer"
    assert deliver(stack, handler, "Standard") == (3, [])
    assert deliver(stack, handler, "Fifo") == (3, [])

    assert app.runs.get(echo.id).status is RunStatus.SUCCEEDED
    assert app.runs.get(echo.id).result == {"echo": {"n": 1}, "attempt": 1}
    log.phase = "producer"
    check_large_values(stack, app, large.id)
    log.phase = "consumer"
    assert [app.runs.get(r.id).result for r in ordered] == [{"ordered": {"n": n}} for n in range(3)]
    assert app.runs.get(flaky.id).status is RunStatus.RETRYING  # due in an hour
    assert app.runs.get(later.id).status is RunStatus.QUEUED  # due in two hours

    deployed_app.clock.advance(timedelta(hours=2, minutes=1))
    log.phase = "maintenance"
    report = lambda_handler.handler(SCHEDULED_EVENT, LambdaContext())
    assert lambda_handler._app is app  # RUNLANE_APP named the deployed module's app
    assert report["jobs"][JOB_DUE]["published"] == 2

    log.phase = "consumer"
    assert deliver(stack, handler, "Standard") == (2, [])
    assert app.runs.get(flaky.id).status is RunStatus.SUCCEEDED
    assert app.runs.get(flaky.id).attempt == 2
    assert app.runs.get(later.id).result == {"echo": {"n": "later"}, "attempt": 1}

    log.phase = "producer"
    by_worker = [
        app.trigger(deployed_app.ECHO_TASK, {"n": "worker"}),
        app.trigger(deployed_app.ORDERED_TASK, {"n": "worker"}),
    ]
    log.phase = "worker"  # the long-running worker the ECS service runs
    assert app.worker(["default", "ordered"], worker_id="ecs-task").drain() == 2
    assert all(app.runs.get(r.id).status is RunStatus.SUCCEEDED for r in by_worker)
    for kind in ("Standard", "Fifo"):
        for queue in (f"{kind}QueueUrl", f"{kind}DeadLetterQueueUrl"):
            assert queue_counts(sqs, stack.outputs[queue]) == {
                "visible": 0,
                "in_flight": 0,
                "delayed": 0,
            }, queue

    # An operator prunes the finished runs; after the grace, maintenance deletes the
    # objects they alone referenced.
    log.phase = "operator"
    assert app.runs.prune(older_than=timedelta(0)).deleted == 9  # every run here
    deployed_app.clock.advance(RELEASE_GRACE + timedelta(seconds=1))
    log.phase = "maintenance"
    report = lambda_handler.handler(SCHEDULED_EVENT, LambdaContext())
    assert report["jobs"][JOB_OBJECTS]["acted"] == 2  # the large payload and result

    check_requests_allowed(stack, log)
