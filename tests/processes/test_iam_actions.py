"""Each IAM policy of ``infra/runlane.yaml`` grants what its component calls, and no more.

Every component runs against the emulator with a boto3 (or aioboto3) session that records
each DynamoDB and SQS request it makes:

- the **producer** (a web app): triggers of every kind, ``trigger_many``, tokens created
  before triggering, signals, token completions, reading and waiting for a run;
- the **worker** (the long-running sync and async workers) and the Lambda **consumer**:
  runs that succeed, fail, retry, release, wait on a signal, a token or another run,
  record steps, outlive a heartbeat, hold keys, or whose task the worker does not know;
- **maintenance**: passes with due runs, an abandoned cancellation, a token timeout, a
  parked run and saved cursors;
- the **operator**: ``app.runs`` (list, get, events, attempts, wait, cancel, retry,
  rerun, unpark, prune), tokens, signals, ``app.idempotency.reset`` and a trigger.

Each request becomes what IAM authorises: its action (``SendMessageBatch`` is
``sqs:SendMessage``, each item of a ``TransactWriteItems`` its own ``PutItem``,
``UpdateItem``, ``DeleteItem`` or ``ConditionCheckItem``), its resource ARN and, for
DynamoDB, the values ``dynamodb:LeadingKeys`` holds (the table's partition keys, or for a
``Query`` on an index the index's partition key). The component's policy, read from the
template, must then allow every request; every action, resource and key pattern it grants
must have been used; the same requests in another environment must be refused; and the
producer policy must refuse what only operators do.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import aioboto3
import boto3
import pytest
import yaml

from runlane_sqs import ManualClock, RetryPolicy, Run, Runlane, RunStatus, TaskContext
from runlane_sqs.adapters.provision import provision_queues, table_definition
from runlane_sqs.core import machine
from runlane_sqs.core.names import new_lease_token
from runlane_sqs.engine.maintenance import MaintenanceConfig
from runlane_sqs.lambdas.consumer import sqs_handler
from tests.emulators import REPO_ROOT, TEST_BACKEND, Backend, wait_until

pytestmark = pytest.mark.timeout(300)
"""The first test also plays every component, once for the module: about a minute."""

TEMPLATE = REPO_ROOT / "infra" / "runlane.yaml"
REGION, ACCOUNT = "us-east-1", "123456789012"
ENVIRONMENT = "test"

PRODUCER, WORKER, CONSUMER, MAINTENANCE, OPERATOR = (
    "producer",
    "worker",
    "consumer",
    "maintenance",
    "operator",
)


# --- the components' tasks ---------------------------------------------------------

OK, ORDERED, FLAKY, BROKEN, LATER = "iam.ok", "iam.ordered", "iam.flaky", "iam.broken", "iam.later"
SIGNAL, TOKEN, PARENT, SLOW = "iam.signal", "iam.token", "iam.parent", "iam.slow"
ELSEWHERE = "iam.elsewhere"
"""A task the workers do not register: they park its runs."""
LEASE_SECONDS = 3
"""The workers' lease: their heartbeat beats every second, within ``SLOW``'s attempt."""
SLOW_SECONDS = 1.5


def register(app: Runlane, *, workers: bool = False) -> None:
    """The user's tasks, as every component's app module registers them (the workers'
    leave out ``ELSEWHERE``, whose code is deployed elsewhere)."""
    app.task(lambda ctx, payload: payload, name=OK)
    app.task(lambda ctx, payload: payload, name=ORDERED, queue="ordered")
    register_outcomes(app)
    register_waits(app)
    if not workers:
        app.task(lambda ctx, payload: payload, name=ELSEWHERE)


def register_outcomes(app: Runlane) -> None:
    @app.task(name=FLAKY, retry=RetryPolicy(max_attempts=2, backoff="fixed", delay=0))
    def flaky(ctx: TaskContext, payload: Any) -> int:
        if ctx.attempt == 1:
            raise RuntimeError("the first attempt fails")
        return ctx.attempt

    @app.task(name=BROKEN)
    def broken(ctx: TaskContext, payload: Any) -> None:
        raise ValueError("always")

    @app.task(name=LATER)
    def later(ctx: TaskContext, payload: Any) -> int:
        if ctx.attempt == 1:
            ctx.release(delay=0)
        return ctx.attempt

    @app.task(name=SLOW)
    def slow(ctx: TaskContext, payload: Any) -> Any:
        time.sleep(SLOW_SECONDS)  # a heartbeat renews the lease meanwhile
        return ctx.step("done", lambda: "slowly")


def register_waits(app: Runlane) -> None:
    @app.task(name=SIGNAL)
    def signal(ctx: TaskContext, payload: Any) -> Any:
        return ctx.wait_for_signal(payload["key"]).payload

    @app.task(name=TOKEN)
    def token(ctx: TaskContext, payload: Any) -> Any:
        token_id = payload.get("token") or ctx.step(
            "token", lambda: app.tokens.create(timeout=timedelta(hours=1)).id
        )
        return ctx.wait_for_token(token_id).status

    @app.task(name=PARENT)
    def parent(ctx: TaskContext, payload: Any) -> Any:
        child = payload.get("child") or ctx.step("child", lambda: app.trigger(OK, "child").id)
        return ctx.wait_for_run(child).status


# --- recording ----------------------------------------------------------------------


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


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short-form tags, loaded as their long forms."""


def _tag(loader: CfnLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    return {name: value}


CfnLoader.add_multi_constructor("!", _tag)


def load_template() -> dict[str, Any]:
    return yaml.load(TEMPLATE.read_text(), Loader=CfnLoader)  # type: ignore[no-any-return]


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


# --- the components at work --------------------------------------------------------


class LambdaContext:
    def __init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@dataclass
class Components:
    """One app per component (each its own process in a deployment), all on one clock."""

    clock: ManualClock
    setup: Runlane
    """The test's own app: forges leases, not recorded."""
    producer: Runlane
    worker: Runlane
    consumer: Runlane
    maintenance: Runlane
    operator: Runlane
    recorder: Recorder
    sqs: Any
    """The test's own SQS client (not recorded)."""
    queue_urls: dict[str, str]

    def drain(self) -> int:
        total = 0
        while executed := self.worker.worker(["default", "ordered"], worker_id="ecs").drain():
            total += executed
        return total

    def drain_async(self) -> int:
        worker = self.worker.async_worker(
            ["default", "ordered"], session=self.recorder.aio_session(WORKER)
        )
        return asyncio.run(worker.drain())

    def deliver(self) -> int:
        """Play the event source mapping: receive (the test's client), invoke the consumer
        handler, delete what it did not report."""
        handler = sqs_handler(self.consumer)
        delivered = 0
        for url in self.queue_urls.values():
            while messages := self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
            ).get("Messages", []):
                records = [
                    {
                        "messageId": m["MessageId"],
                        "receiptHandle": m["ReceiptHandle"],
                        "body": m["Body"],
                        "attributes": m.get("Attributes", {}),
                        "messageAttributes": {},
                        "eventSource": "aws:sqs",
                        "eventSourceARN": queue_arn(url.rsplit("/", 1)[-1]),
                        "awsRegion": REGION,
                    }
                    for m in messages
                ]
                response = handler({"Records": records}, LambdaContext())
                assert response["batchItemFailures"] == []
                self.sqs.delete_message_batch(
                    QueueUrl=url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(messages)
                    ],
                )
                delivered += len(messages)
        return delivered

    def forge_lease(self, run_id: str, deadline: timedelta | None = None) -> None:
        """A worker claimed the run and died (no heartbeat, no outcome)."""
        claim = machine.claim_lease(
            self.setup.runs.get(run_id),
            now=self.clock.now(),
            owner="dead-worker",
            token=new_lease_token(),
            duration=timedelta(minutes=1),
            timeout=deadline,
        )
        assert isinstance(claim, machine.Transition)
        self.setup.store.apply(claim)

    def run_worker_with_foreign_wakeups(self) -> None:
        """Start a long-running worker (it unparks the parked runs it can run) while each
        queue holds a wakeup of another environment; stop it once it has handed both
        back."""
        urls = self.queue_urls
        other = Runlane.from_env(clock=self.clock, environment="other", queue_urls=urls)
        register(other)
        for task in (OK, ORDERED):
            other.trigger(task, "not for this worker")
        worker = self.worker.worker(["default", "ordered"], worker_id="ecs", wait_seconds=1)
        thread = threading.Thread(target=worker.run)
        thread.start()
        requests = self.recorder.requests[WORKER]
        handed_back = set(urls.values())
        wait_until(
            lambda: (
                handed_back
                <= {p["QueueUrl"] for o, p in list(requests) if o == "ChangeMessageVisibilityBatch"}
            ),
            timeout=30,
            what="the worker to hand back the other environment's wakeups",
        )
        worker.stop()
        thread.join(timeout=30)
        assert not thread.is_alive()
        for url in urls.values():  # the other environment's worker takes them
            for message in self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
                "Messages", []
            ):
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def status(self, run_id: str) -> RunStatus:
        return self.setup.runs.get(run_id).status

    def waiting_on(self, run_id: str) -> str:
        waiting = self.setup.runs.get(run_id).waiting
        assert waiting is not None and waiting.target is not None
        return waiting.target


def play(c: Components) -> None:
    """Every component's calls, in the order a deployment makes them."""
    runs = trigger(c)
    work_and_decide(c, runs)
    work_elsewhere(c)
    operate(c, runs)
    maintain(c, runs)
    cursor = None  # last, the operator prunes what is finished
    while (pruned := c.operator.runs.prune(older_than=timedelta(0), cursor=cursor)).cursor:
        cursor = pruned.cursor


def trigger(c: Components) -> dict[str, Run]:
    """The producer triggers every kind of run; tokens may be created before triggering."""
    producer = c.producer
    runs = {
        "ok": producer.trigger(OK, {"n": 1}),
        "ordered": producer.trigger(ORDERED, {"n": 1}),
        "keyed": producer.trigger(
            OK, "keyed", idempotency_key="order-7", singleton_key="customer-7"
        ),
        "later": producer.trigger(OK, "later", delay=timedelta(hours=2)),
        "ordered later": producer.trigger(ORDERED, "later", delay=timedelta(hours=2)),
        "flaky": producer.trigger(FLAKY),
        "broken": producer.trigger(BROKEN),
        "keyed broken": producer.trigger(BROKEN, idempotency_key="broken-1"),
        "released": producer.trigger(LATER),
        "signal": producer.trigger(SIGNAL, {"key": "payment:7"}),
        "worker's token": producer.trigger(TOKEN, {}),
        "token timing out": producer.trigger(TOKEN, {}),
        "parent": producer.trigger(PARENT, {}),
        "slow": producer.trigger(SLOW),
        "parked": producer.trigger(ELSEWHERE, 1),
        "parked too": producer.trigger(ELSEWHERE, 2),
    }
    producer.trigger_many(OK, [{"n": n} for n in range(3)])
    assert not producer.trigger(OK, "again", idempotency_key="order-7").created
    assert not producer.trigger(OK, "again", singleton_key="customer-7").created
    made = producer.tokens.create(metadata={"for": "a reviewer"})
    assert producer.tokens.get(made.id).id == made.id
    runs["producer's token"] = producer.trigger(TOKEN, {"token": made.id})
    runs["blocked"] = producer.trigger(OK, "b", singleton_key="b", delay=timedelta(hours=3))
    runs["blocked parent"] = producer.trigger(PARENT, {"child": runs["blocked"].id})
    # Two runs whose worker died: one to cancel, one past its attempt deadline.
    runs["victim"] = producer.trigger(OK, "victim", singleton_key="victim")
    c.forge_lease(runs["victim"].id)
    producer.trigger(PARENT, {"child": runs["victim"].id})
    runs["overdue"] = producer.trigger(OK, "overdue", idempotency_key="overdue")
    c.forge_lease(runs["overdue"].id, deadline=timedelta(seconds=30))
    return runs


def work_and_decide(c: Components, runs: dict[str, Run]) -> None:
    """The long-running worker drains; the producer decides what runs wait for."""
    producer = c.producer
    c.drain()
    assert c.status(runs["signal"].id) is RunStatus.RELEASED
    assert c.status(runs["blocked parent"].id) is RunStatus.RELEASED
    assert c.status(runs["parked"].id) is RunStatus.PARKED
    assert producer.signals.send("payment:7", {"paid": True}) == 1
    producer.tokens.complete(c.waiting_on(runs["producer's token"].id), {"approved": True})
    producer.tokens.complete(c.waiting_on(runs["worker's token"].id), {"approved": False})
    assert producer.runs.wait(runs["ok"].id, timeout=1).status is RunStatus.SUCCEEDED
    assert producer.trigger(OK, "after", singleton_key="customer-7").created  # key freed
    assert producer.trigger(BROKEN, idempotency_key="broken-1").created  # key freed
    c.drain()
    for name in ("signal", "producer's token", "worker's token", "flaky", "parent"):
        assert c.status(runs[name].id) is RunStatus.SUCCEEDED, name


def work_elsewhere(c: Components) -> None:
    """The async worker, the Lambda consumer, and a long-running worker starting up."""
    producer = c.producer
    by_async = [producer.trigger(FLAKY), producer.trigger(OK, "a", singleton_key="async")]
    by_async.append(producer.trigger(LATER))
    while c.drain_async():
        pass
    consumed = [producer.trigger(t, {}) for t in (OK, FLAKY, LATER, PARENT)]
    consumed.append(producer.trigger(OK, "lambda", singleton_key="lambda"))
    producer.trigger(ORDERED)
    while c.deliver():
        pass
    assert all(c.status(r.id) is RunStatus.SUCCEEDED for r in (*by_async, *consumed))
    c.run_worker_with_foreign_wakeups()


def operate(c: Components, runs: dict[str, Run]) -> None:
    """The operator observes and recovers."""
    operator = c.operator
    assert operator.runs.list(limit=100).runs
    assert operator.runs.list(status="failed", task=BROKEN).runs
    assert operator.runs.get(runs["keyed"].id).status is RunStatus.SUCCEEDED
    operator.runs.events(runs["keyed"].id)
    operator.runs.attempts(runs["flaky"].id)
    assert operator.runs.wait(runs["keyed"].id, timeout=1).status is RunStatus.SUCCEEDED
    assert operator.runs.find_current(OK, "order-7") is not None
    assert operator.runs.find_active(OK, "victim") is not None
    operator.runs.cancel(runs["blocked"].id, reason="not needed")  # resumes its waiter
    operator.runs.cancel(runs["victim"].id, reason="stuck")  # running: cancel requested
    operator.runs.retry(runs["broken"].id, reason="fixed")
    operator.runs.rerun(runs["ordered"].id)
    operator.runs.unpark(runs["parked"].id)
    token = operator.tokens.create(timeout=timedelta(days=1))
    operator.tokens.get(token.id)
    operator.tokens.complete(token.id, "yes")
    operator.tokens.time_out(operator.tokens.create().id)
    operator.signals.send("nobody-waits")
    operator.idempotency.reset(OK, "order-7")
    operator.trigger(OK, "by hand", idempotency_key="by-hand", singleton_key="by-hand")
    c.drain()


def maintain(c: Components, runs: dict[str, Run]) -> None:
    """Maintenance passes: due runs, the abandoned cancellation, the attempt deadline, a
    token timeout, a parked run; then saved cursors."""
    maintenance = c.maintenance.maintenance
    c.clock.advance(timedelta(hours=5))
    report = maintenance.run_pass()
    assert report.jobs["due_wakeups"].published >= 2, report
    assert report.jobs["abandoned_cancellations"].acted == 1, report
    assert report.jobs["attempt_deadlines"].acted == 1, report
    assert report.jobs["tokens"].acted >= 1, report
    assert report.jobs["parked_runs"].acted >= 1, report
    c.drain()
    for name in ("later", "ordered later", "token timing out"):
        assert c.status(runs[name].id) is RunStatus.SUCCEEDED, name
    assert c.status(runs["victim"].id) is RunStatus.CANCELLED
    assert c.status(runs["overdue"].id) is RunStatus.FAILED
    # Cursors: the agenda partitions hold more than a pass reads.
    for n in range(12):
        c.producer.trigger(OK, n, delay=timedelta(hours=2))
    c.clock.advance(timedelta(hours=3))
    maintenance.config = MaintenanceConfig(limit_per_job=4)
    while maintenance.run_pass().cursors:
        pass


@dataclass(frozen=True)
class Role:
    """A component's role: the policies it attaches (its own last) and the components
    whose requests they must allow."""

    policies: tuple[str, ...]
    components: tuple[str, ...]


ROLES = {
    "producer": Role(("ProducerPolicy",), (PRODUCER,)),
    "worker": Role(("ProducerPolicy", "WorkerPolicy"), (WORKER, CONSUMER)),
    "maintenance": Role(("MaintenancePolicy",), (MAINTENANCE,)),
    "operator": Role(("OperatorPolicy",), (OPERATOR,)),
}
"""The worker's and the consumer's task code triggers runs, sends signals and decides
tokens as a producer does: their roles attach ``ProducerPolicy`` too."""


@dataclass(frozen=True)
class Recorded:
    needs: dict[str, set[Access]]
    """Component -> what its requests needed."""
    template: dict[str, Any]
    values: Values

    def of(self, role: Role) -> set[Access]:
        return {a for component in role.components for a in self.needs[component]}

    def policy(self, *names: str) -> list[dict[str, Any]]:
        return statements(self.template, self.values, *names)


@pytest.fixture(scope="module")
def recorded(session_backend: Backend) -> Iterator[Recorded]:
    """Each component's accesses, from one play of them all on a fresh backend."""
    with pytest.MonkeyPatch.context() as env:
        session_backend.reset()
        for name, value in session_backend.environment().items():
            env.setenv(name, value)
        env.setenv("RUNLANE_TABLE", f"runlane-{uuid.uuid4().hex[:8]}")
        env.setenv("RUNLANE_ENVIRONMENT", ENVIRONMENT)
        if TEST_BACKEND != "moto":
            env.setenv("RUNLANE_QUEUE_PREFIX", f"runlane-{uuid.uuid4().hex[:8]}-")
        clock = ManualClock()
        setup = Runlane.from_env(clock=clock)
        register(setup)
        setup.provision(["default"])
        sqs = setup.client("sqs")
        default = setup.client("sqs").get_queue_url(QueueName=queue_name(setup, "default"))
        fifo_name = f"{queue_name(setup, 'default').removesuffix('default')}ordered.fifo"
        [fifo] = provision_queues(sqs, [fifo_name]).values()
        # The stack's compute gets every URL; here "ordered" only, so "default" is looked up.
        env.setenv("RUNLANE_QUEUE_URLS", f"ordered={fifo}")
        recorder = Recorder()

        def app(component: str, **options: Any) -> Runlane:
            built = Runlane.from_env(clock=clock, session=recorder.session(component), **options)
            register(built, workers=component in (WORKER, CONSUMER))
            return built

        worker_options = {"lease_duration": LEASE_SECONDS, "park_after_receives": 1}
        components = Components(
            clock=clock,
            setup=setup,
            producer=app(PRODUCER),
            worker=app(WORKER, **worker_options),
            consumer=app(CONSUMER, **worker_options),
            maintenance=app(MAINTENANCE),
            operator=app(OPERATOR),
            recorder=recorder,
            sqs=sqs,
            queue_urls={"default": default["QueueUrl"], "ordered": fifo},
        )
        play(components)
        found = {
            component: {a for operation, params in requests for a in accesses(operation, params)}
            for component, requests in recorder.requests.items()
        }
        template = load_template()
        yield Recorded(found, template, template_values(template, setup))


# --- the policies against what the components did ----------------------------------


@pytest.mark.parametrize("role", list(ROLES))
def test_each_role_allows_every_request_its_components_make(recorded: Recorded, role: str) -> None:
    policy = recorded.policy(*ROLES[role].policies)
    needs = recorded.of(ROLES[role])
    assert needs
    assert {a for a in needs if not allowed(policy, a)} == set()


@pytest.mark.parametrize("role", list(ROLES))
def test_each_policy_grants_only_what_its_components_use(recorded: Recorded, role: str) -> None:
    """Every (action, resource, key pattern) a policy grants was needed by a request its
    components made that the role's other policies did not already allow."""
    *base, own = ROLES[role].policies
    needs = recorded.of(ROLES[role])
    if base:
        others = recorded.policy(*base)
        needs = {a for a in needs if not allowed(others, a)}
    unused = [g for g in grants(recorded.policy(own)) if not used(g, needs)]
    assert unused == []


@pytest.mark.parametrize("environment", ["prod", "test2", "tes"])
@pytest.mark.parametrize("role", list(ROLES))
def test_no_policy_reaches_the_items_of_another_environment(
    recorded: Recorded, role: str, environment: str
) -> None:
    """The same table, another environment (also one whose name starts with this one's,
    or that this one's starts with): every DynamoDB request is refused."""
    policy = recorded.policy(*ROLES[role].policies)
    elsewhere = {
        in_environment(a, environment)
        for a in recorded.of(ROLES[role])
        if a.action.startswith("dynamodb:")
    }
    assert elsewhere
    assert {a for a in elsewhere if allowed(policy, a)} == set()


def test_a_producer_can_neither_list_nor_delete_runs(recorded: Recorded) -> None:
    """What the operator did beyond producing (listing runs, deleting runs and keys,
    reading keys) is refused to the producer policy."""
    producer = recorded.policy("ProducerPolicy")
    refused = {a for a in recorded.needs[OPERATOR] if not allowed(producer, a)}
    assert {(a.action, a.resource.rsplit("/", 1)[-1]) for a in refused} == {
        ("dynamodb:Query", "by_status"),
        ("dynamodb:Query", "waits"),  # of runs: cancelling resumes the runs waiting
        ("dynamodb:BatchGetItem", recorded.values.parameters["TableName"]),
        ("dynamodb:DeleteItem", recorded.values.parameters["TableName"]),
        ("dynamodb:GetItem", recorded.values.parameters["TableName"]),  # key owners
    }


def test_every_dynamodb_statement_is_limited_to_the_environments_items() -> None:
    """No DynamoDB grant without a ``dynamodb:LeadingKeys`` condition, and every pattern
    starts with a key prefix and the environment."""
    template = load_template()
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::ManagedPolicy":
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if not any(a.startswith("dynamodb:") for a in as_list(statement["Action"])):
                continue
            patterns = key_patterns(statement)
            assert patterns, (name, statement.get("Sid"))
            for pattern in patterns:
                assert re.fullmatch(
                    r"((RUN|IDEM|SINGLETON|TOKEN)#\$\{Environment\}#\*|MAINT#\$\{Environment\})"
                    r"|\$\{Environment\}#[a-z_]*#?\*?",
                    pattern["Fn::Sub"],
                ), (name, pattern)


# --- the rest of the template's IAM and resource policies ---------------------------


def resources_of(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {n: r for n, r in template["Resources"].items() if r["Type"] == kind}


def test_service_roles_trust_their_service_in_this_account_only() -> None:
    roles = resources_of(load_template(), "AWS::IAM::Role")
    assert set(roles) == {
        "MaintenanceRole",
        "ConsumerRole",
        "WorkerExecutionRole",
        "WorkerTaskRole",
    }
    for name, role in roles.items():
        [statement] = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        condition = statement["Condition"]
        assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}, name
        if statement["Principal"] == {"Service": "ecs-tasks.amazonaws.com"}:
            assert condition["ArnLike"] == {
                "aws:SourceArn": {
                    "Fn::Sub": "arn:${AWS::Partition}:ecs:${AWS::Region}:${AWS::AccountId}:*"
                }
            }, name
    [permission] = resources_of(load_template(), "AWS::Lambda::Permission").values()
    assert permission["Properties"]["SourceArn"] == {"Fn::GetAtt": ["MaintenanceSchedule", "Arn"]}


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com/worker:1", "worker"),
        (
            "210987654321.dkr.ecr.us-east-2.amazonaws.com/team/worker:v1.2@sha256:" + "a" * 64,
            "team/worker",
        ),
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com/worker@sha256:" + "0" * 64, "worker"),
    ],
)
def test_the_execution_role_pulls_from_the_image_repository_only(
    image: str, repository: str
) -> None:
    template = load_template()
    pattern = template["Parameters"]["ImageUri"]["AllowedPattern"]
    assert re.fullmatch(pattern, image)
    account, _, _, region = image.split(".")[:4]
    values = Values({"ImageUri": image, "AWS::Partition": "aws"}, {})
    role = template["Resources"]["WorkerExecutionRole"]["Properties"]
    [document] = [p["PolicyDocument"] for p in role["Policies"]]
    [pull] = [s for s in document["Statement"] if "ecr:BatchGetImage" in s["Action"]]
    assert values.resolve(pull["Resource"]) == (
        f"arn:aws:ecr:{region}:{account}:repository/{repository}"
    )
    assert not re.fullmatch(pattern, "docker.io/library/python:3.11")


def test_the_queues_refuse_requests_without_tls() -> None:
    template = load_template()
    queues = set(resources_of(template, "AWS::SQS::Queue"))
    covered = set()
    for policy in resources_of(template, "AWS::SQS::QueuePolicy").values():
        [queue] = policy["Properties"]["Queues"]
        [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
        assert statement == {
            "Sid": "DenyWithoutTls",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "sqs:*",
            "Resource": {"Fn::GetAtt": [queue["Ref"], "Arn"]},
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        }
        covered.add(queue["Ref"])
    assert covered == queues


def test_each_dead_letter_queue_takes_only_its_source_queues_messages(
    recorded: Recorded,
) -> None:
    queues = resources_of(recorded.template, "AWS::SQS::Queue")
    for source in ("StandardQueue", "FifoQueue"):
        dlq = queues[source]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
        allow = recorded.values.resolve(queues[dlq]["Properties"]["RedriveAllowPolicy"])
        assert allow == {
            "redrivePermission": "byQueue",
            "sourceQueueArns": [recorded.values.attributes[f"{source}.Arn"]],
        }


def test_the_table_cannot_be_deleted_by_mistake() -> None:
    table = load_template()["Resources"]["RunsTable"]
    assert table["Properties"]["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == table["UpdateReplacePolicy"] == "Retain"


def test_policies_are_attached_as_each_role_needs_and_exported() -> None:
    template = load_template()

    def refs(value: Any) -> set[str]:
        if isinstance(value, dict):
            if "Ref" in value:
                return {value["Ref"]} - {"AWS::NoValue"}
            return {r for v in value.values() for r in refs(v)}
        if isinstance(value, list):
            return {r for v in value for r in refs(v)}
        return set()

    attached = {
        name: refs(policy["Properties"].get("Roles"))
        for name, policy in resources_of(template, "AWS::IAM::ManagedPolicy").items()
    }
    assert attached == {
        "ProducerPolicy": {"ConsumerRole", "WorkerTaskRole"},
        "WorkerPolicy": {"ConsumerRole", "WorkerTaskRole"},
        "MaintenancePolicy": {"MaintenanceRole"},
        "OperatorPolicy": set(),
    }
    outputs = template["Outputs"]
    for name in attached:
        assert outputs[f"{name}Arn"]["Value"] == {"Ref": name}
        assert outputs[f"{name}Arn"]["Description"]
