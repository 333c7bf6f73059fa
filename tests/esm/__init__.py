"""A simulator of the SQS event source mapping, driving the Lambda consumer
(``runlane_sqs.lambdas.consumer.sqs_handler``) from a real queue with real processes.

- :mod:`tests.esm.records`: Lambda SQS event records built from received messages, and
  ``ReportBatchItemFailures``: which records a response lets the mapping delete;
- :mod:`tests.esm.invocation`: one invocation in a process of its own, with a fake context
  counting down the function's timeout, killed (SIGKILL) when it runs out;
- :mod:`tests.esm.mapping`: the poller: batches, concurrency, duplicate invocations,
  deletes of what was not reported;
- :mod:`tests.esm.fifo`: the order a FIFO queue and the mapping promise, checked;
- :mod:`tests.esm.maintenance`: maintenance passes on a timer, as EventBridge runs them.

Nothing is imported here: an invocation's process imports only what it needs.
"""
