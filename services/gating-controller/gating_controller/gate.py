"""Gate: compute whether it is open, record it, and wake up exactly when it changes.

One step. `gates.evaluate` decides everything from the spec, the
annotations, the history and the clock; this module writes the result
(status `requestedAt`, `resetToDefaultAt`, the audit trail, the `Opened`
condition), announces each open and close as an event ("sre-approval opened
by Receiver/flux-system/github until 2026-11-21T11:00:00Z"), and asks to be
requeued at the next transition, not on a poll. A malformed request makes
Ready False with the bad value quoted, and the gate keeps its last state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from gating_controller.evaluating import InvalidGate, evaluate
from sluice_api.gating import (
    CLOSE_REQUESTED_AT_ANNOTATION,
    CLOSE_REQUESTED_BY_ANNOTATION,
    OPEN_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_BY_ANNOTATION,
    Gate,
    GateCondition,
    GateReason,
)
from sluice_api.meta import parse_duration
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, done, step

Clock = Callable[[], datetime]
INVALID_GATE = "InvalidGate"


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass(kw_only=True)
class GateContext(ReconcileContext[Gate]):
    clock: Clock


@step()
async def reconcile_gate(ctx: GateContext) -> Result | None:
    gate = ctx.obj
    now = ctx.clock()
    try:
        state = evaluate(gate, now=now)
    except InvalidGate as error:
        # The Opened condition is left as it was: the gate keeps its last state.
        raise Stalling(INVALID_GATE, error.message) from None
    was_open = ctx.conditions.is_true(GateCondition.OPENED)
    had_opened = ctx.conditions.has(GateCondition.OPENED)
    status = gate.status
    status.requested_at = state.requested_at
    status.reset_to_default_at = state.reset_to_default_at
    status.history = state.history or None
    if state.opened:
        ctx.conditions.mark_true(GateCondition.OPENED, state.reason, state.message)
    else:
        ctx.conditions.mark_false(GateCondition.OPENED, state.reason, state.message)
    ctx.ready_reason = GateReason.RECONCILIATION_SUCCEEDED
    ctx.ready_message = state.message
    if had_opened and was_open != state.opened:
        # "until" only while held away from the default: a request for the
        # default state ("Gate close requested") ends nothing.
        away = state.opened != (gate.spec.default == "opened")
        until = state.reset_to_default_at if away else None
        _announce(ctx, state.opened, state.source, state.user, until)
    if state.next_transition is None:
        return None  # the interval is the backstop
    wait = max((state.next_transition - now).total_seconds(), 0.0)
    interval = parse_duration(gate.spec.interval).total_seconds()
    return done(requeue_after=min(wait, interval) if interval > 0 else wait)


def _announce(
    ctx: GateContext, opened: bool, source: str, user: str | None, until: str | None
) -> None:
    verb = "opened" if opened else "closed"
    who = f"{source}:{user}" if user and source == "cli" else (user or source)
    message = f"{ctx.obj.metadata.name} {verb} by {who}"
    if until:
        message += f" until {until}"
    ctx.events.normal("GateOpened" if opened else "GateClosed", message)


STEPS = (reconcile_gate,)
TRIGGERS = (
    OPEN_REQUESTED_AT_ANNOTATION,
    CLOSE_REQUESTED_AT_ANNOTATION,
    OPEN_REQUESTED_BY_ANNOTATION,
    CLOSE_REQUESTED_BY_ANNOTATION,
)


def reconciler(clock: Clock = system_clock) -> Reconciler[GateContext]:
    context = functools.partial(GateContext, clock=clock)
    return Reconciler(
        model=Gate,
        steps=STEPS,
        context=context,
        uses_finalizer=False,
        trigger_annotations=TRIGGERS,
        success_reason=GateReason.RECONCILIATION_SUCCEEDED,
    )
