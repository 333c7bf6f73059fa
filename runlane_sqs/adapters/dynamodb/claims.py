"""The claim on a wakeup's hint: one ``UpdateItem`` that writes every attribute a claim
sets, with no read before it (docs/design/storage.md, "Claims")."""

from __future__ import annotations

from runlane_sqs.adapters.dynamodb import keys
from runlane_sqs.adapters.dynamodb.codec import (
    HISTORY_ATTRIBUTE,
    event_to_wire,
    run_state_attributes,
)
from runlane_sqs.adapters.dynamodb.writes import Request, RunWrite
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
    "line_at",
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
    write = RunWrite()
    for name in CLAIM_WRITES if keeps_listing else CLAIM_WRITES + LISTING:
        write.set(name, values[name])
    write.append(HISTORY_ATTRIBUTE, [event_to_wire(e) for e in blind.events])
    hint = claim.hint
    write.require("seq", "=", hint.seq)
    write.require("attempt", "=", hint.attempt)
    write.require("task", "=", hint.task)
    write.require_in("status", RUNNABLE)
    write.require("due_at", "<=", to_epoch_ms(blind.after.updated_at))
    write.require_absent("wait_pk")
    if keeps_listing:
        assert hint.review_at is not None
        write.require("agenda_at", "=", to_epoch_ms(hint.review_at))
    return write.request(
        {
            "TableName": table,
            "Key": keys.run_key(claim.environment, claim.run_id),
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
    )
