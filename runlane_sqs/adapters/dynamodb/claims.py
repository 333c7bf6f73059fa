"""The claim on a wakeup's hint: one ``UpdateItem`` that writes every attribute a claim
sets, with no read before it (docs/design/storage.md, "Claims")."""

from __future__ import annotations

from pynamodb.expressions.update import Action

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import event_to_map, run_state_attributes
from runlane_sqs.adapters.dynamodb.items import RunItem
from runlane_sqs.adapters.dynamodb.requests import Request, expressions
from runlane_sqs.core.claims import HintedClaim
from runlane_sqs.core.durations import to_epoch_ms
from runlane_sqs.core.model import RUNNABLE_STATUSES

RUNNABLE = sorted(status.value for status in RUNNABLE_STATUSES)

CLAIM_WRITES = (
    "status",
    "seq",
    "attempt",
    "updated_at",
    "due_at",
    "lease_owner",
    "lease_token",
    "lease_expires_at",
    "deadline_at",
    "wake_at",
    "publishes",
    "waiting",
    "wait_pk",
    "wait_sk",
    "status_pk",
)
"""Every attribute a claim sets or removes (the rest of the run item stays as it is),
besides its agenda entry."""
LISTING = ("agenda_pk", "agenda_at")


def claim_hinted(table: str, claim: HintedClaim) -> Request:
    """Claim without a read: write every attribute a claim sets, if the run is still as
    the wakeup's hint says (same seq, attempt and task), runnable, due, and waiting for
    nothing but a time (no waits-index entry). Returns the claimed item.

    A run listed on the agenda early enough (:meth:`HintedClaim.keeps_listing`) keeps
    its entry: the write leaves ``agenda_at`` as it is, on condition that it is still
    the hinted time, so the claim writes nothing to the agenda index."""
    blind = claim.blind()
    values = run_state_attributes(blind.after)
    keeps_listing = claim.keeps_listing()
    actions: list[Action] = []
    for name in CLAIM_WRITES if keeps_listing else CLAIM_WRITES + LISTING:
        attribute = getattr(RunItem, name)
        value = values[name]
        actions.append(attribute.remove() if value is None else attribute.set(value))
    appended = RunItem.events.append([event_to_map(e) for e in blind.events])
    actions.append(RunItem.events.set(appended))
    hint = claim.hint
    condition = (
        (RunItem.seq == hint.seq)
        & (RunItem.attempt == hint.attempt)
        & (RunItem.task == hint.task)
        & RunItem.status.is_in(*RUNNABLE)
        & (RunItem.due_at <= to_epoch_ms(blind.after.updated_at))
        & RunItem.wait_pk.does_not_exist()
    )
    if keeps_listing:
        assert hint.review_at is not None
        condition &= RunItem.agenda_at == to_epoch_ms(hint.review_at)
    request: Request = {
        "TableName": table,
        "Key": keys.run_key(claim.environment, claim.run_id),
        "ReturnValues": "ALL_NEW",
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    return expressions(request, condition=condition, actions=actions)
