"""The template's CloudWatch alarms, as an operator relies on them: each queue and
dead-letter queue watched on the right metric, maintenance watched for errors and for
passes that stop coming, the consumer's alarms only with the consumer, notifications
only when ``AlarmTopicArn`` is set.

The moto server's CloudFormation does not create ``AWS::CloudWatch::Alarm`` resources
(it skips the type), so the alarms are checked here, on the template rendered for given
parameters: conditions evaluated, ``Fn::If``, ``Fn::Sub``, ``Fn::FindInMap`` and the
names a ``Ref`` or ``Fn::GetAtt`` stands for resolved.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.templates import load_template

ROOT = Path(__file__).resolve().parents[2]
ALARM = "AWS::CloudWatch::Alarm"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:runlane-on-call"
PSEUDO = {
    "AWS::StackName": "runlane-prod",
    "AWS::Region": "eu-west-1",
    "AWS::AccountId": "123456789012",
    "AWS::Partition": "aws",
}
NO_VALUE = object()
"""What ``Ref: AWS::NoValue`` renders to: the property is left out."""
NAME_PROPERTIES = {"AWS::Lambda::Function": "FunctionName", "AWS::SQS::Queue": "QueueName"}


class Rendered:
    """The template as CloudFormation would create it for ``parameters`` (the others
    at their defaults), limited to what the alarms use."""

    def __init__(self, template: dict[str, Any], **parameters: str) -> None:
        self.template = template
        defaults = {n: str(spec.get("Default", "")) for n, spec in template["Parameters"].items()}
        self.names = {**PSEUDO, **defaults, **parameters}
        self._conditions: dict[str, bool] = {}

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = self._test(self.template["Conditions"][name])
        return self._conditions[name]

    def _test(self, node: dict[str, Any]) -> bool:
        [(function, argument)] = node.items()
        if function == "Condition":
            return self.condition(argument)
        if function == "Fn::Equals":
            left, right = (self.value(a) for a in argument)
            return bool(left == right)
        if function == "Fn::Not":
            return not self._test(argument[0])
        if function == "Fn::And":
            return all(self._test(a) for a in argument)
        if function == "Fn::Or":
            return any(self._test(a) for a in argument)
        raise AssertionError(f"condition function {function} not rendered here")

    def exists(self, name: str) -> bool:
        """Whether this stack creates the resource ``name``."""
        condition = self.template["Resources"][name].get("Condition")
        return condition is None or self.condition(condition)

    def alarms(self) -> dict[str, dict[str, Any]]:
        """The alarms this stack creates, their properties rendered."""
        return {
            name: self.value(resource["Properties"])
            for name, resource in self.template["Resources"].items()
            if resource["Type"] == ALARM and self.exists(name)
        }

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            [(function, argument)] = node.items()
            if function == "Ref":
                return self.ref(argument)
            if function.startswith("Fn::"):
                return self._function(function, argument)
        rendered = {k: self.value(v) for k, v in node.items()}
        return {k: v for k, v in rendered.items() if v is not NO_VALUE}

    def _function(self, function: str, argument: Any) -> Any:
        if function == "Fn::If":
            condition, when_true, when_false = argument
            return self.value(when_true if self.condition(condition) else when_false)
        if function == "Fn::GetAtt":
            return self.attribute(*argument)
        if function == "Fn::FindInMap":
            mapping, key, entry = (self.value(a) for a in argument)
            return self.template["Mappings"][mapping][key][entry]
        if function == "Fn::Sub":
            text, variables = argument if isinstance(argument, list) else (argument, {})
            return re.sub(r"\$\{([^}!]+)\}", lambda m: self._variable(m[1], variables), text)
        raise AssertionError(f"{function} not rendered here")

    def _variable(self, name: str, variables: dict[str, Any]) -> str:
        if name in variables:
            return str(self.value(variables[name]))
        if "." in name:
            return str(self.attribute(*name.split(".", 1)))
        return str(self.ref(name))

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.names:
            return self.names[name]
        resource = self.template["Resources"][name]
        name_property = NAME_PROPERTIES.get(resource["Type"])
        if name_property and name_property in resource["Properties"]:
            return self.value(resource["Properties"][name_property])
        return f"{self.names['AWS::StackName']}-{name}-GENERATED"  # a generated name

    def attribute(self, resource: str, attribute: str) -> Any:
        assert attribute == "QueueName", f"{resource}.{attribute} not rendered here"
        return self.value(self.template["Resources"][resource]["Properties"]["QueueName"])


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def watched(alarm: dict[str, Any]) -> tuple[str, str, str]:
    """(namespace, metric, resource name) of an alarm on one metric of one resource."""
    [dimension] = alarm["Dimensions"]
    return alarm["Namespace"], alarm["MetricName"], dimension["Value"]


def test_every_queue_and_dead_letter_queue_has_its_alarm(template: dict[str, Any]) -> None:
    stack = Rendered(template, QueuePrefix="acme-", StandardQueueName="jobs", FifoQueueName="steps")
    queues = {
        name: stack.ref(name)
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::SQS::Queue"
    }
    on_queues = {watched(a)[1:]: a for a in stack.alarms().values() if a["Namespace"] == "AWS/SQS"}
    assert {name for _, name in on_queues} == set(queues.values())
    assert queues == {
        "StandardQueue": "acme-jobs",
        "StandardDeadLetterQueue": "acme-jobs-dlq",
        "FifoQueue": "acme-steps.fifo",
        "FifoDeadLetterQueue": "acme-steps-dlq.fifo",
    }
    for dlq in ("StandardDeadLetterQueue", "FifoDeadLetterQueue"):  # a message in it alarms
        alarm = on_queues.pop(("ApproximateNumberOfMessagesVisible", queues[dlq]))
        assert alarm["Statistic"] == "Maximum"
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
        assert alarm["EvaluationPeriods"] == 1
    for queue in ("StandardQueue", "FifoQueue"):  # a wakeup left waiting, for a while
        alarm = on_queues.pop(("ApproximateAgeOfOldestMessage", queues[queue]))
        assert alarm["Statistic"] == "Maximum"
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert alarm["Threshold"] == "900"
        assert alarm["EvaluationPeriods"] > 1
    assert on_queues == {}
    # the dimension names the queue itself (its name, not a copy of its expression)
    for name, resource in template["Resources"].items():
        if resource["Type"] == ALARM and resource["Properties"]["Namespace"] == "AWS/SQS":
            [dimension] = resource["Properties"]["Dimensions"]
            assert dimension["Name"] == "QueueName", name
            assert dimension["Value"]["Fn::GetAtt"][1] == "QueueName", name
    age = template["Parameters"]["OldestMessageAgeAlarmSeconds"]
    assert age["Default"] == 900 and age["MinValue"] >= 60
    longer = Rendered(template, OldestMessageAgeAlarmSeconds="3600").alarms()
    assert longer["FifoQueueOldestMessageAlarm"]["Threshold"] == "3600"


def test_maintenance_alarms_on_errors_and_on_passes_that_stop(template: dict[str, Any]) -> None:
    periods = template["Parameters"]["MaintenancePeriodMinutes"]["AllowedValues"]
    assert set(periods) == set(template["Mappings"]["MaintenancePeriods"])
    for minutes in periods:
        stack = Rendered(template, MaintenancePeriodMinutes=minutes)
        function = stack.ref("MaintenanceFunction")
        on_maintenance = {
            metric: alarm
            for alarm in stack.alarms().values()
            for namespace, metric, name in [watched(alarm)]
            if (namespace, name) == ("AWS/Lambda", function)
        }
        assert set(on_maintenance) == {"Errors", "Invocations"}
        errors = on_maintenance["Errors"]
        assert (errors["ComparisonOperator"], errors["Threshold"]) == (
            "GreaterThanOrEqualToThreshold",
            1,
        )
        missed = on_maintenance["Invocations"]
        assert (missed["Statistic"], missed["ComparisonOperator"], missed["Threshold"]) == (
            "Sum",
            "LessThanThreshold",
            1,
        )
        # a schedule that stopped firing publishes no data point: that must alarm
        assert missed["TreatMissingData"] == "breaching"
        window = int(missed["Period"]) * missed["EvaluationPeriods"]
        period = int(minutes) * 60
        assert window >= 2 * period, minutes  # one late invocation does not alarm
        assert window >= 300, minutes  # nor does a delay of a minute or two
        assert window <= 86_400 and int(missed["Period"]) % 60 == 0, minutes  # CloudWatch's limits
        assert f"not invoked for {window} s" in missed["AlarmDescription"], minutes


def test_consumer_alarms_exist_only_with_the_consumer(template: dict[str, Any]) -> None:
    consumer = Rendered(template, DeployLambdaConsumer="true")
    name = consumer.ref("ConsumerFunction")
    on_consumer = [watched(a) for a in consumer.alarms().values() if watched(a)[2] == name]
    assert sorted(on_consumer) == [
        ("AWS/Lambda", "Errors", name),
        ("AWS/Lambda", "Throttles", name),
    ]
    without = Rendered(template, DeployLambdaConsumer="false")
    assert consumer.exists("ConsumerFunction") and not without.exists("ConsumerFunction")
    assert all(watched(a)[2] != name for a in without.alarms().values())
    assert len(without.alarms()) == len(consumer.alarms()) - 2


def test_alarms_notify_the_topic_only_when_it_is_set(template: dict[str, Any]) -> None:
    silent = Rendered(template).alarms()
    assert len(silent) == 8
    for name, alarm in silent.items():
        assert "AlarmActions" not in alarm and "OKActions" not in alarm, name
    notifying = Rendered(template, AlarmTopicArn=TOPIC).alarms()
    assert set(notifying) == set(silent)
    for name, alarm in notifying.items():
        assert alarm["AlarmActions"] == alarm["OKActions"] == [TOPIC], name
    pattern = template["Parameters"]["AlarmTopicArn"]["AllowedPattern"]
    assert template["Parameters"]["AlarmTopicArn"]["Default"] == ""
    assert re.fullmatch(pattern, "") and re.fullmatch(pattern, TOPIC)
    for wrong in ("runlane-on-call", "arn:aws:sqs:eu-west-1:123456789012:runlane-default"):
        assert not re.fullmatch(pattern, wrong), wrong


def headings(document: Path) -> set[str]:
    return {
        line.lstrip("#").strip() for line in document.read_text().splitlines() if line[:2] == "##"
    }


def test_alarm_names_and_descriptions_tell_the_operator_what_to_do(
    template: dict[str, Any],
) -> None:
    # names as long as the parameters allow, to check AWS's limits on the results
    longest = Rendered(
        template,
        **{"AWS::StackName": "s" * 128},
        QueuePrefix="p" * 40,
        StandardQueueName="q" * 40,
        FifoQueueName="f" * 40,
        MaxReceiveCount="1000",
        OldestMessageAgeAlarmSeconds="345600",
    )
    alarms = longest.alarms()
    assert len({a["AlarmName"] for a in alarms.values()}) == len(alarms)
    readme = (ROOT / "infra" / "README.md").read_text()
    referenced: set[tuple[str, str]] = set()
    for name, alarm in alarms.items():
        assert alarm["AlarmName"].startswith("s" * 128 + "-"), name
        assert len(alarm["AlarmName"]) <= 255, name
        assert 200 <= len(alarm["AlarmDescription"]) <= 1024, name
        assert f"`{name}`" in readme, f"{name} is not documented in infra/README.md"
        # "See docs/operations.md, Maintenance, Running it." names headings of that file
        for document, sections in re.findall(
            r"See (docs/[\w-]+\.md), ([^.]+)\.", alarm["AlarmDescription"]
        ):
            for section in sections.split(", "):
                assert section in headings(ROOT / document), (name, document, section)
                referenced.add((document, section))
    assert ("docs/operations.md", "Visibility timeout and dead-letter queues") in referenced


def test_the_alarm_parameters_are_grouped(template: dict[str, Any]) -> None:
    groups = template["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [p for group in groups for p in group["Parameters"]]
    assert sorted(grouped) == sorted(template["Parameters"])  # each parameter in one group
    [alarm_group] = [g for g in groups if g["Label"]["default"] == "Alarms"]
    assert alarm_group["Parameters"] == ["AlarmTopicArn", "OldestMessageAgeAlarmSeconds"]
