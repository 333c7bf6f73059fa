"""The chaos suite (``make chaos``, ``python -m chaos``): real worker processes and
maintenance on DynamoDB Local + LocalStack SQS while workers are killed and frozen,
wakeups are duplicated, forged and purged, and DynamoDB is throttled, fails, loses
responses and restarts; a share of the triggers fan out as groups. Counts lost, stuck
and doubly executed runs from a ground-truth log the handlers write, outside the
library's own records, and checks that every group joined once. See
docs/reliability.md."""
