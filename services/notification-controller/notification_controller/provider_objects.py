"""Provider objects: refuse, on the object, a type the event hub cannot deliver to.

The API accepts every provider type Flux has, so Flux manifests apply; a
Provider whose type Sluice has no delivery for would otherwise look healthy
and drop every event. Reconciling it stalls it with a message naming the
type; a Provider of a supported type is Ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from notification_controller.providers import SUPPORTED_TYPES
from sluice_api.notification import NotificationReason, Provider
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step


def unsupported_type(provider: Provider) -> str | None:
    """Why the Provider's type cannot be served, or None when it can."""
    kind = provider.spec.type
    if kind in SUPPORTED_TYPES:
        return None
    supported = ", ".join(sorted(SUPPORTED_TYPES))
    return f"spec.type '{kind}' is not supported by this version of Sluice (supported: {supported})"


@dataclass(kw_only=True)
class ProviderContext(ReconcileContext[Provider]):
    """Checking a Provider needs nothing beyond the base context."""


@step()
async def reconcile_type(ctx: ProviderContext) -> Result | None:
    problem = unsupported_type(ctx.obj)
    if problem is not None:
        raise Stalling(NotificationReason.INVALID_CONFIG, problem)
    ctx.ready_message = "Initialized"
    return None


STEPS = (reconcile_type,)


def reconciler() -> Reconciler[ProviderContext]:
    return Reconciler(
        model=Provider,
        steps=STEPS,
        context=ProviderContext,
        uses_finalizer=False,
        success_reason=NotificationReason.SUCCEEDED,
    )
