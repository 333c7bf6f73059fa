"""Each IAM policy of ``infra/runlane.yaml`` grants what its component calls, and no more.

Every component runs against the emulator with a boto3 (or aioboto3) session that records
each DynamoDB, SQS and S3 request it makes, with a payload bucket, so values over the
inline limit are kept there:

- the **producer** (a web app): triggers of every kind, ``trigger_many``, tokens created
  before triggering, signals, token completions, reading and waiting for a run; a large
  payload (twice, with one idempotency key) and its run's large result;
- the **worker** (the long-running sync and async workers) and the Lambda **consumer**:
  runs that succeed, fail, retry, release, wait on a signal, a token or another run,
  record steps, outlive a heartbeat, hold keys, or whose task the worker does not know;
  runs of a concurrency limit that take and free its slot, wait for one, and wake the
  next waiter; large payloads read and large results written;
- **maintenance**: passes with due runs, an abandoned cancellation, a token timeout, a
  parked run and saved cursors; a dead worker's limited run whose lease it recovers, and
  a leaked slot holder it drops; a run waiting for a large result it resumes, an object
  record a writer pinned that it takes off the agenda, and the objects pruned runs no
  longer reference, which it deletes; a bulk retry by tag an operator left running;
- the **operator**: ``app.runs`` (list, by tag too, get, events, attempts, wait, cancel, retry,
  rerun, unpark, prune; a cancelled run waiting for a slot), tokens, signals,
  ``app.idempotency.reset``, ``app.queues.list``, a trigger; a run's large values read,
  a trigger with a large payload, a rerun of one.

Each request becomes what IAM authorises: its action (``SendMessageBatch`` is
``sqs:SendMessage``, each item of a ``TransactWriteItems`` its own ``PutItem``,
``UpdateItem``, ``DeleteItem`` or ``ConditionCheckItem``), its resource ARN (for S3, the
object's: ``arn:aws:s3:::BUCKET/KEY``) and, for DynamoDB, the values
``dynamodb:LeadingKeys`` holds (the table's partition keys, or for a ``Query`` on an
index the index's partition key). With the bucket encrypted by a KMS key
(``PayloadKeyArn``), each ``PutObject`` also needs ``kms:GenerateDataKey`` and each
``GetObject`` ``kms:Decrypt``, which S3 asks for with the caller's permissions. The
component's policy, read from the template, must then allow every request; every action,
resource and key pattern it grants must have been used; the same requests in another
environment must be refused; and the producer policy must refuse what only operators do.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest

from runlane_sqs import ManualClock, Runlane
from runlane_sqs.adapters.provision import provision_queues
from runlane_sqs.codecs import KmsEncryption
from tests.emulators import TEST_BACKEND, Backend
from tests.iam_components import (
    CODECS,
    CONSUMER,
    ENCRYPTIONS,
    LEASE_SECONDS,
    MAINTENANCE,
    OPERATOR,
    PAYLOAD_KEY_ARN,
    PRODUCER,
    ROLES,
    WORKER,
    Components,
    Played,
    Recorded,
    play,
    register,
)
from tests.iam_policies import (
    ENVIRONMENT,
    Recorder,
    Values,
    accesses,
    allowed,
    as_list,
    grants,
    in_environment,
    key_patterns,
    queue_name,
    template_values,
    used,
)
from tests.templates import load_template

pytestmark = pytest.mark.timeout(600)
"""The first test also plays every component, twice for the module: about two minutes."""


@pytest.fixture(scope="module")
def recorded(session_backend: Backend) -> Recorded:
    """Each component's accesses, from two plays of them all, each on a fresh backend:
    one storing values as they are, one encrypting them with a KMS codec."""
    template = load_template()
    plays = {codec: play_all(session_backend, template, codec) for codec in CODECS}
    return Recorded(plays, template)


def play_all(session_backend: Backend, template: dict[str, Any], codec: str) -> Played:
    """Every component at work, on a fresh backend; with ``codec="kms"`` each app
    (configured in code, as a user's would be) encrypts its values with a
    ``KmsEncryption`` codec on a key of the emulator, through the recorded session."""
    with pytest.MonkeyPatch.context() as env:
        session_backend.reset()
        for name, value in session_backend.environment().items():
            env.setenv(name, value)
        env.setenv("RUNLANE_TABLE", f"runlane-{uuid.uuid4().hex[:8]}")
        env.setenv("RUNLANE_ENVIRONMENT", ENVIRONMENT)
        env.setenv("RUNLANE_PAYLOAD_BUCKET", f"runlane-values-{uuid.uuid4().hex[:8]}")
        if TEST_BACKEND != "moto":
            env.setenv("RUNLANE_QUEUE_PREFIX", f"runlane-{uuid.uuid4().hex[:8]}-")
        key = None
        if codec == "kms":
            kms = boto3.client("kms")
            key = str(kms.create_key(Description="runlane values")["KeyMetadata"]["Arn"])
            kms.close()

        def codec_of(session: Any) -> dict[str, Any]:
            return {"codec": KmsEncryption(key, client=session.client("kms"))} if key else {}

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
        # the test's own app, now with the FIFO's URL (and the codec: it forges records)
        setup = Runlane.from_env(clock=clock, **codec_of(boto3.Session()))
        register(setup)
        recorder = Recorder()

        def app(component: str, **options: Any) -> Runlane:
            session = recorder.session(component)
            built = Runlane.from_env(clock=clock, session=session, **codec_of(session), **options)
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
        return Played(found, template_values(template, setup), key)


# --- the policies against what the components did ----------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("encryption", list(ENCRYPTIONS))
@pytest.mark.parametrize("role", list(ROLES))
def test_each_role_allows_every_request_its_components_make(
    recorded: Recorded, role: str, encryption: str, codec: str
) -> None:
    policy = recorded.policy(*ROLES[role].policies, encryption=encryption, codec=codec)
    needs = recorded.of(ROLES[role], encryption, codec)
    assert any(a.action.startswith("s3:") for a in needs)
    value_key = recorded.plays[codec].value_key
    assert any(a.resource == PAYLOAD_KEY_ARN for a in needs) == (encryption == "sse-kms")
    assert any(a.resource == value_key for a in needs) == (codec == "kms")
    assert {a for a in needs if not allowed(policy, a)} == set()


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("encryption", list(ENCRYPTIONS))
@pytest.mark.parametrize("role", list(ROLES))
def test_each_policy_grants_only_what_its_components_use(
    recorded: Recorded, role: str, encryption: str, codec: str
) -> None:
    """Every (action, resource, key pattern) a policy grants was needed by a request its
    components made that the role's other policies did not already allow."""
    *base, own = ROLES[role].policies
    needs = recorded.of(ROLES[role], encryption, codec)
    if base:
        others = recorded.policy(*base, encryption=encryption, codec=codec)
        needs = {a for a in needs if not allowed(others, a)}
    granted = grants(recorded.policy(own, encryption=encryption, codec=codec))
    assert [g for g in granted if not used(g, needs)] == []


@pytest.mark.parametrize("role", list(ROLES))
def test_a_payload_key_is_used_through_s3_for_the_payload_bucket_only(
    recorded: Recorded, role: str
) -> None:
    """With SSE-KMS, the key's uses are allowed only through S3 in the stack's region,
    with the payload bucket as encryption context (a bucket key's)."""
    policy = recorded.policy(*ROLES[role].policies, encryption="sse-kms")
    uses = {a for a in recorded.of(ROLES[role], "sse-kms") if a.action.startswith("kms:")}
    assert uses
    for use in uses:
        context = dict(use.context)
        for key, other in (
            ("kms:ViaService", "dynamodb.us-east-1.amazonaws.com"),
            ("kms:ViaService", "s3.eu-west-1.amazonaws.com"),
            ("kms:EncryptionContext:aws:s3:arn", "arn:aws:s3:::another-bucket"),
        ):
            elsewhere = replace(use, context=tuple({**context, key: other}.items()))
            assert not allowed(policy, elsewhere), (use, key, other)


@pytest.mark.parametrize("role", list(ROLES))
def test_a_value_key_is_used_for_runlane_values_only(recorded: Recorded, role: str) -> None:
    """With ``ValueKeyArn``, the codec's uses of its key are allowed with the codec's
    encryption context of the stack's environment only, and on no other key; a data key
    of the earlier format (no environment in its context) may still be opened, while
    such values are migrated."""
    policy = recorded.policy(*ROLES[role].policies, codec="kms")
    key = recorded.plays["kms"].value_key
    uses = {a for a in recorded.of(ROLES[role], codec="kms") if a.resource == key}
    assert uses
    purpose = ("kms:EncryptionContext:purpose", "runlane-sqs value")
    for use in uses:
        environment = dict(use.context)["kms:EncryptionContext:environment"]
        assert dict(use.context) == {
            purpose[0]: purpose[1],
            "kms:EncryptionContext:environment": environment,
        }
        for elsewhere in (
            replace(use, context=()),
            replace(use, context=(("kms:EncryptionContext:purpose", "another use"),)),
            replace(use, context=(purpose, ("kms:EncryptionContext:environment", "another-env"))),
            replace(use, resource=PAYLOAD_KEY_ARN),
        ):
            assert not allowed(policy, elsewhere), elsewhere
        assert allowed(policy, replace(use, context=(purpose,)))  # the earlier format


def test_without_the_bucket_no_policy_grants_objects_or_keys(recorded: Recorded) -> None:
    """``DeployPayloadBucket=false``: no statement on S3, KMS or object records, and the
    rest as with the bucket."""
    for names in {role.policies for role in ROLES.values()}:
        without = set(grants(recorded.policy(*names, DeployPayloadBucket="false")))
        assert not any(
            action.startswith(("s3:", "kms:")) or (pattern or "").startswith("OBJECT#")
            for action, _, pattern in without
        ), names
        assert without < set(grants(recorded.policy(*names)))


@pytest.mark.parametrize("environment", ["prod", "test2", "tes"])
@pytest.mark.parametrize("role", list(ROLES))
def test_no_policy_reaches_the_items_of_another_environment(
    recorded: Recorded, role: str, environment: str
) -> None:
    """The same table and bucket, another environment (also one whose name starts with
    this one's, or that this one's starts with): every DynamoDB and S3 request is
    refused."""
    policy = recorded.policy(*ROLES[role].policies)
    elsewhere = {
        in_environment(a, environment)
        for a in recorded.of(ROLES[role])
        if a.action.startswith(("dynamodb:", "s3:"))
    }
    assert any(a.action.startswith("s3:") for a in elsewhere)
    assert {a for a in elsewhere if allowed(policy, a)} == set()


def test_a_producer_can_neither_list_nor_delete_runs(recorded: Recorded) -> None:
    """What the operator did beyond producing (listing runs, by tag too, deleting runs and keys,
    reading keys, operating schedules, reading concurrency limits, counting queues,
    reading and deleting dead letters) is refused to the producer policy."""
    producer = recorded.policy("ProducerPolicy")
    refused = {a for a in recorded.needs[OPERATOR] if not allowed(producer, a)}
    prefix = recorded.values.parameters["QueuePrefix"]
    named = {(a.action, a.resource.rsplit("/", 1)[-1].rsplit(":", 1)[-1]) for a in refused}
    assert named == {
        ("dynamodb:Query", "by_status"),
        *(("dynamodb:Query", f"tag_{n}") for n in range(4)),  # runs listed by tag
        ("dynamodb:Query", "waits"),  # of runs: cancelling resumes the runs waiting
        ("dynamodb:Query", "agenda"),  # the slot records app.queues lists
        ("dynamodb:BatchGetItem", recorded.values.parameters["TableName"]),
        ("dynamodb:DeleteItem", recorded.values.parameters["TableName"]),
        ("dynamodb:GetItem", recorded.values.parameters["TableName"]),  # key owners
        ("dynamodb:PutItem", recorded.values.parameters["TableName"]),  # pause a schedule
        ("dynamodb:Query", recorded.values.parameters["TableName"]),  # list schedules
    } | {  # app.health: each queue's and dead-letter queue's counts
        (action, f"{prefix}{name}")
        for name in ("default", "ordered.fifo", "default-dlq", "ordered-dlq.fifo")
        for action in ("sqs:GetQueueAttributes", "sqs:GetQueueUrl")
        if (action, name) != ("sqs:GetQueueUrl", "ordered.fifo")  # its URL is configured
        and (action, name) != ("sqs:GetQueueUrl", "default")  # producers look it up too
    } | {  # queues dlq: read, return and delete dead letters
        (action, f"{prefix}{name}")
        for name in ("default-dlq", "ordered-dlq.fifo")
        for action in ("sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage")
    }


def template_statements(
    template: dict[str, Any],
) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """Every statement of the template's managed policies as written: (policy, condition,
    statement), a conditional one (``Fn::If``) with its condition."""
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::IAM::ManagedPolicy":
            continue
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]:
            if "Fn::If" not in statement:
                yield name, None, statement
                continue
            condition, body, otherwise = statement["Fn::If"]
            assert otherwise == {"Ref": "AWS::NoValue"}, (name, body)
            yield name, condition, body


def test_every_dynamodb_statement_is_limited_to_the_environments_items() -> None:
    """No DynamoDB grant without a ``dynamodb:LeadingKeys`` condition, and every pattern
    starts with a key prefix and the environment."""
    for name, _, statement in template_statements(load_template()):
        if not any(a.startswith("dynamodb:") for a in as_list(statement["Action"])):
            continue
        patterns = key_patterns(statement)
        assert patterns, (name, statement.get("Sid"))
        for pattern in patterns:
            assert re.fullmatch(
                r"((RUN|IDEM|SINGLETON|DEBOUNCE|BATCH|TOKEN|SLOT|RATE|OBJECT)#\$\{Environment\}#\*"
                r"|SLOT#\$\{Environment\}#order#\*|(MAINT|SCHED|BULK)#\$\{Environment\})"
                r"|\$\{Environment\}#[a-z_]*#?\*?",
                pattern["Fn::Sub"],
            ), (name, pattern)


def test_objects_and_keys_are_granted_in_the_environments_prefix_and_conditionally() -> None:
    """S3 grants name the payload bucket's objects under ``{Environment}/values/`` and
    exist with the bucket (object records too); KMS grants name the payload key or the
    codec's value key and exist with it (a value key's without the bucket too)."""
    found = set()
    for name, condition, statement in template_statements(load_template()):
        actions = as_list(statement["Action"])
        objects = any(
            p == {"Fn::Sub": "OBJECT#${Environment}#*"} for p in key_patterns(statement) or []
        )
        if any(a.startswith("s3:") for a in actions):
            assert statement["Resource"] == {
                "Fn::Sub": "${PayloadBucket.Arn}/${Environment}/values/*"
            }, name
            assert condition == "WithPayloadBucket", name
            found.add((name, "s3"))
        elif statement["Resource"] == {"Ref": "ValueKeyArn"}:
            assert condition == "WithValueKey", name
            found.add((name, "value key"))
        elif any(a.startswith("kms:") for a in actions):
            assert statement["Resource"] == {"Ref": "PayloadKeyArn"}, name
            assert condition == "WithPayloadKey", name
            found.add((name, "kms"))
        else:
            assert condition == ("WithPayloadBucket" if objects else None), name
    policies = ("ProducerPolicy", "MaintenancePolicy", "OperatorPolicy")
    assert found == {(name, kind) for name in policies for kind in ("s3", "kms", "value key")}


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


def test_the_payload_bucket_is_private_and_refuses_requests_without_tls() -> None:
    template = load_template()
    [(name, bucket)] = resources_of(template, "AWS::S3::Bucket").items()
    assert bucket["Condition"] == "WithPayloadBucket"
    assert bucket["DeletionPolicy"] == bucket["UpdateReplacePolicy"] == "Retain"
    assert bucket["Properties"]["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["Properties"]["OwnershipControls"] == {
        "Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]
    }
    [policy] = resources_of(template, "AWS::S3::BucketPolicy").values()
    assert policy["Condition"] == "WithPayloadBucket"
    assert policy["Properties"]["Bucket"] == {"Ref": name}
    [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
    assert statement == {
        "Sid": "DenyWithoutTls",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [{"Fn::GetAtt": [name, "Arn"]}, {"Fn::Sub": f"${{{name}.Arn}}/*"}],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def rendered_bucket(recorded: Recorded, **parameters: str) -> dict[str, Any]:
    """The payload bucket's properties for the template ``parameters`` given."""
    values = replace(recorded.values, parameters={**recorded.values.parameters, **parameters})
    properties: dict[str, Any] = values.resolve(
        recorded.template["Resources"]["PayloadBucket"]["Properties"]
    )
    return properties


def test_the_payload_bucket_encrypts_with_s3_keys_or_the_named_kms_key(
    recorded: Recorded,
) -> None:
    """SSE-S3, or with ``PayloadKeyArn`` SSE-KMS with a bucket key (one data key for many
    objects, not a KMS request per object). Only a key's ARN is accepted: IAM grants on
    an alias do not authorise the key's use."""
    [(encryption, key)] = [(e, p) for e, p in ENCRYPTIONS.items() if p]
    assert rendered_bucket(recorded)["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
        ]
    }
    assert rendered_bucket(recorded, **key)["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [
            {
                "ServerSideEncryptionByDefault": {
                    "SSEAlgorithm": "aws:kms",
                    "KMSMasterKeyID": key["PayloadKeyArn"],
                },
                "BucketKeyEnabled": True,
            }
        ]
    }, encryption
    pattern = recorded.template["Parameters"]["PayloadKeyArn"]["AllowedPattern"]
    multi_region = "arn:aws:kms:eu-west-1:123456789012:key/mrk-" + "0" * 32
    for accepted in ("", key["PayloadKeyArn"], multi_region):
        assert re.fullmatch(pattern, accepted), accepted
    for refused in ("alias/runlane", "arn:aws:kms:eu-west-1:123456789012:alias/runlane"):
        assert not re.fullmatch(pattern, refused), refused


@pytest.mark.parametrize("days", ["400", "30", "0"])
def test_the_payload_bucket_keeps_no_versions_and_expires_values_as_a_backstop(
    recorded: Recorded, days: str
) -> None:
    """Versioning off (objects never change, and a late delete cannot reach a newer
    object); objects under the environment's values/ expire ``PayloadExpirationDays``
    after they were written (0: never); incomplete multipart uploads go after a day."""
    bucket = rendered_bucket(recorded, PayloadExpirationDays=days)
    assert "VersioningConfiguration" not in bucket
    rules = {rule["Id"]: rule for rule in bucket["LifecycleConfiguration"]["Rules"]}
    assert rules.pop("abort-incomplete-multipart-uploads") == {
        "Id": "abort-incomplete-multipart-uploads",
        "Status": "Enabled",
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
    }
    expiring = {
        "Id": "expire-values",
        "Status": "Enabled",
        "Prefix": f"{ENVIRONMENT}/values/",
        "ExpirationInDays": days,
    }
    assert rules == ({} if days == "0" else {"expire-values": expiring})


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
