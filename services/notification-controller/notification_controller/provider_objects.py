"""Provider objects: refuse, on the object, a type the event hub cannot deliver to.

The API accepts every provider type Flux has, so Flux manifests apply; a
Provider whose type Sluice has no delivery for would otherwise look healthy
and drop every event. Reconciling it stalls it with a message naming the
type; a Provider of a supported type is Ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from notification_controller.commitstatuses import InvalidExpression, compile_expression
from notification_controller.providers import SUPPORTED_TYPES
from sluice_api.notification import NotificationReason, Provider
from sluice_runtime.reconciling.errors import Stalling
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step


def unsupported_type(provider: Provider) -> str | None:
    """Why the Provider cannot be served (its type, a `serviceAccountName`, or a
    `commitStatusExpr` that does not compile: no event could fix them), or None
    when it can."""
    kind = provider.spec.type
    if kind not in SUPPORTED_TYPES:
        supported = ", ".join(sorted(SUPPORTED_TYPES))
        return (
            f"spec.type '{kind}' is not supported by this version of Sluice "
            f"(supported: {supported})"
        )
    if provider.spec.service_account_name:
        # Workload identity for cloud providers: without it, deliveries would go out
        # with the secret's credentials alone, or none.
        return (
            "spec.serviceAccountName (workload identity) is not supported by this version "
            "of Sluice; use spec.secretRef"
        )
    if provider.spec.commit_status_expr:
        try:
            compile_expression(provider.spec.commit_status_expr)
        except InvalidExpression as error:
            return str(error)
    return None


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
