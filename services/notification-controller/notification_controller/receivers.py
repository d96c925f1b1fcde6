"""Receiver objects: the webhook path each one answers on, and its token.

Reconciling a Receiver reads the token from its Secret and publishes
`status.webhookPath` = `/hook/` + sha256(token + name + namespace), so the
path changes when the token does. The token itself is kept in this process
only (the webhook server needs it to check signatures), never in status,
logs or events. The webhook server finds a Receiver by its path through
`Directory`, fed by the informer: no API call to route a request.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

from notification_controller.filtering import InvalidFilter, compile_filters
from sluice_api.notification import (
    RECEIVER_SECRET_REQUIRED,
    WEBHOOK_PATH_PREFIX,
    NotificationReason,
    Receiver,
)
from sluice_runtime.informing.watching import Change
from sluice_runtime.kube.secrets import SecretError, require, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.running import Reconciler
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step


def webhook_path(token: str, name: str, namespace: str) -> str:
    digest = hashlib.sha256(f"{token}{name}{namespace}".encode()).hexdigest()
    return f"{WEBHOOK_PATH_PREFIX}{digest}"


@dataclass
class Directory:
    """Receivers by webhook path, and their tokens, as this process knows them."""

    by_path: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)

    def key_for(self, path: str) -> str | None:
        return self.by_path.get(path)

    def on_change(self, change: Change) -> None:
        """Informer handler: index Receivers by their published path."""
        for stale in [p for p, k in self.by_path.items() if k == change.key]:
            del self.by_path[stale]
        if change.kind == "deleted" or change.new is None:
            self.tokens.pop(change.key, None)
            return
        path = (change.new.get("status") or {}).get("webhookPath")
        if path:
            self.by_path[path] = change.key


@dataclass(kw_only=True)
class ReceiverContext(ReconcileContext[Receiver]):
    directory: Directory
    no_cross_namespace_refs: bool = False


def unsupported(receiver: Receiver) -> str | None:
    """Why the Receiver's spec cannot be honoured, naming the field; None when it can.

    Flux manifests must apply, so the API accepts fields Sluice has not built
    (OIDC tokens); refusing them here beats acting on webhooks the author meant
    to be authenticated differently. CEL filters that do not compile are
    refused here too, before the Receiver gets a path. Flux's CEL rule
    that every type but generic-oidc names a secretRef is enforced here too, as
    API servers before 1.25 cannot check it.
    """
    spec = receiver.spec
    if spec.type == "generic-oidc":
        return "spec.type 'generic-oidc' is not supported by this version of Sluice"
    if spec.oidc_providers:
        return "spec.oidcProviders is only valid with spec.type 'generic-oidc'"
    if spec.secret_ref is None:
        return RECEIVER_SECRET_REQUIRED  # Flux's CEL rule, for servers without CEL
    try:
        compile_filters(receiver)
    except InvalidFilter as error:
        return str(error)
    return None


@step()
async def reconcile_spec(ctx: ReceiverContext) -> Result | None:
    problem = unsupported(ctx.obj)
    if problem is not None:
        raise Stalling(NotificationReason.INVALID_CONFIG, problem)
    return None


@step()
async def reconcile_resources(ctx: ReceiverContext) -> Result | None:
    """Refuse, once and clearly, resources a webhook could never act on."""
    receiver = ctx.obj
    namespace = receiver.namespace
    for resource in receiver.spec.resources:
        where = f"{resource.kind}/{resource.namespace or namespace}/{resource.name}"
        if resource.action and resource.kind != "Gate":
            raise Stalling(
                NotificationReason.INVALID_CONFIG,
                f"resource {where}: action '{resource.action}' applies to Gates only",
            )
        cross_namespace = resource.namespace not in (None, namespace)
        if resource.action and cross_namespace:
            # Gate actions are patched with the controller's own rights, in
            # every namespace: refused whatever --no-cross-namespace-refs says,
            # or one tenant's Receiver would hold another tenant's Gate.
            raise Stalling(
                NotificationReason.INVALID_CONFIG,
                f"resource {where}: a Receiver can open or close Gates in its own namespace only",
            )
        if ctx.no_cross_namespace_refs and cross_namespace:
            raise Stalling(
                NotificationReason.INVALID_CONFIG,
                f"resource {where}: cross-namespace references are not allowed",
            )
    return None


@step()
async def reconcile_token(ctx: ReceiverContext) -> Result | None:
    receiver = ctx.obj
    namespace = receiver.namespace
    assert receiver.spec.secret_ref is not None  # reconcile_spec refused it otherwise
    name = receiver.spec.secret_ref.name
    try:
        data = await secret_data(ctx.client, namespace, name)
        require(data, "token", secret=f"{namespace}/{name}")
    except SecretError as error:
        ctx.directory.tokens.pop(receiver.key, None)
        raise StepError(NotificationReason.TOKEN_NOT_FOUND, str(error)) from None
    token = data["token"]
    ctx.directory.tokens[receiver.key] = token
    path = webhook_path(token, receiver.metadata.name, namespace)
    receiver.status.webhook_path = path
    ctx.ready_message = f"Receiver initialised for path: {path}"
    return None


STEPS = (reconcile_spec, reconcile_resources, reconcile_token)


def reconciler(
    directory: Directory, *, no_cross_namespace_refs: bool = False
) -> Reconciler[ReceiverContext]:
    context = functools.partial(
        ReceiverContext, directory=directory, no_cross_namespace_refs=no_cross_namespace_refs
    )
    return Reconciler(
        model=Receiver,
        steps=STEPS,
        context=context,
        uses_finalizer=False,
        success_reason=NotificationReason.SUCCEEDED,
    )
