"""Alert objects: refuse, on the object, what the event hub would skip silently.

Flux's event server logs an inclusion or exclusion regex that does not
compile and carries on, so an Alert meant to keep noise out forwards
everything (or nothing) and its author is never told. Reconciling an Alert
compiles its lists once, with the RE2 compiler the hub matches with, and
stalls it with a message naming each bad field (`spec.exclusionList[1]`)
and RE2's reason; a pattern only Python's `re` would take (backreferences,
lookaround) is refused here too, saying so. A valid Alert is Ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from notification_controller.alerting import invalid_patterns
from sluice_api.notification import Alert, NotificationReason
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step


@dataclass(kw_only=True)
class AlertContext(ReconcileContext[Alert]):
    """Checking an Alert needs nothing beyond the base context."""


@step()
async def reconcile_patterns(ctx: AlertContext) -> Result | None:
    errors = invalid_patterns(ctx.obj)
    if errors:
        raise Stalling(NotificationReason.INVALID_CONFIG, "; ".join(str(e) for e in errors))
    ctx.ready_message = "Initialized"
    return None


STEPS = (reconcile_patterns,)


def reconciler() -> Reconciler[AlertContext]:
    return Reconciler(
        model=Alert,
        steps=STEPS,
        context=AlertContext,
        uses_finalizer=False,
        success_reason=NotificationReason.SUCCEEDED,
    )
