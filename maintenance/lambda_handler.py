"""Deprecated alias of :func:`runlane_sqs.lambdas.maintenance.handler`, kept for one
release because deployed stacks name ``maintenance.lambda_handler.handler`` (see
CHANGELOG.md). New stacks name ``runlane_sqs.lambdas.maintenance.handler``."""

from runlane_sqs.lambdas.maintenance import handler

__all__ = ["handler"]
