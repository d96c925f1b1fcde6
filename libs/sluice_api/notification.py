"""The notification.toolkit.fluxcd.io kinds: webhooks in, events out.

Receiver is Flux's v1 schema; Alert and Provider are Flux's v1beta3 schema.
v1beta2 and v1beta1 are served too, with conversion `None`: their fields are
a subset of the newest version's, so the one superset schema serves all.
Sluice adds an optional `action` to a Receiver's resources so that a
webhook can open or close a Gate, and gives Alert and Provider an optional
status (Flux's v1beta3 has none) so their controller can report readiness.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints

from sluice_api.meta import (
    AGE_COLUMN,
    READY_COLUMN,
    STATUS_COLUMN,
    CELRule,
    Duration,
    KubeModel,
    LocalObjectReference,
    PrinterColumn,
    ReconcileStatus,
    Resource,
    TimeoutDuration,
    cel_rules,
)

GROUP = "notification.toolkit.fluxcd.io"
CATEGORIES = ("all", "fluxcd", "fluxcd-notifications")

WEBHOOK_PATH_PREFIX = "/hook/"
"""A Receiver's webhook path is this prefix + hex sha256(token + name + namespace)."""


class NotificationReason(StrEnum):
    """Reasons the notification-controller gives for its conditions."""

    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PROGRESSING = "Progressing"
    INITIALIZED = "Initialized"
    VALIDATION_FAILED = "ValidationFailed"
    TOKEN_NOT_FOUND = "TokenNotFound"  # noqa: S105 - a reason, not a secret
    INVALID_CONFIG = "InvalidConfig"
    NOTIFICATION_DISPATCH_FAILED = "NotificationDispatchFailed"


ReferableKind = Literal[
    "Bucket",
    "GitRepository",
    "Kustomization",
    "HelmRelease",
    "HelmChart",
    "HelmRepository",
    "ImageRepository",
    "ImagePolicy",
    "ImageUpdateAutomation",
    "OCIRepository",
    "ArtifactGenerator",
    "ExternalArtifact",
    "FluxInstance",
    "ResourceSet",
    "ResourceSetInputProvider",
    "Gate",
]

_ReferenceName = Annotated[str, StringConstraints(min_length=1, max_length=253)]


class CrossNamespaceObjectReference(KubeModel):
    """A reference to one object, or to objects by label, in any namespace."""

    api_version: str | None = None
    """API version of the referent."""

    kind: ReferableKind
    """Kind of the referent."""

    name: _ReferenceName
    """Name of the referent; `*` with matchLabels selects several objects."""

    namespace: _ReferenceName | None = None
    """Namespace of the referent; defaults to the namespace of the referrer."""

    match_labels: dict[str, str] | None = None
    """Labels the referents must have; requires name `*`."""


class ReceiverResource(CrossNamespaceObjectReference):
    """An object a Receiver acts on when its webhook is called."""

    filter: str | None = None
    """(Flux 2.9) CEL expression that must be true to act on this resource, ANDed
    with spec.resourceFilter; it reads the object as `res` and the request body
    as `req`."""

    action: Literal["open", "close"] | None = None
    """Sluice, for kind Gate only: open or close the gate instead of
    requesting a reconcile."""


# Receiver ---------------------------------------------------------------------


class OIDCVariable(KubeModel):
    """A named CEL expression over the token's claims."""

    name: str
    """Name the expression's value is available under, as `vars.<name>`."""

    expression: str
    """CEL expression over `claims`."""


class OIDCValidation(KubeModel):
    """A CEL rule the token must satisfy."""

    expression: str
    """CEL expression that must be true."""

    message: str | None = None
    """Why the token is refused when the expression is false."""


class OIDCProvider(KubeModel):
    """An OIDC issuer a generic-oidc Receiver accepts tokens from."""

    issuer_url: str = Field(alias="issuerURL")
    """The issuer, e.g. `https://token.actions.githubusercontent.com`."""

    audience: str | None = None
    """The audience the token must be issued for."""

    variables: list[OIDCVariable] | None = None
    """Values computed from the claims, for the validations."""

    validations: list[OIDCValidation] | None = None
    """Rules the token must satisfy, all of them."""


RECEIVER_SECRET_REQUIRED = "spec.secretRef is required unless spec.type is 'generic-oidc'"  # noqa: S105
RECEIVER_RULES = (
    CELRule("self.type == 'generic-oidc' || has(self.secretRef)", RECEIVER_SECRET_REQUIRED),
)


class ReceiverSpec(KubeModel):
    """How to authenticate a webhook and what it triggers."""

    model_config = ConfigDict(json_schema_extra=cel_rules(*RECEIVER_RULES))

    type: Literal[
        "generic",
        "generic-hmac",
        "github",
        "gitlab",
        "bitbucket",
        "harbor",
        "dockerhub",
        "quay",
        "gcr",
        "nexus",
        "acr",
        "cdevents",
        "generic-oidc",
    ]
    """The webhook sender; decides how the payload is authenticated and parsed."""

    interval: Duration = "10m"
    """How often to reconcile the Receiver with its Secret."""

    events: list[str] | None = None
    """Event types to act on, e.g. `push` for GitHub; all when not set."""

    resources: list[ReceiverResource]
    """The objects to reconcile (or gates to open or close) on a webhook."""

    resource_filter: str | None = None
    """CEL expression, evaluated per resource, that must be true to act on it; it
    reads the object as `res` and the request body as `req`."""

    secret_ref: LocalObjectReference | None = None
    """Secret with the `token` that authenticates the webhook; required by every
    type except generic-oidc."""

    oidc_providers: list[OIDCProvider] | None = Field(default=None, alias="oidcProviders")
    """(Flux 2.8) For generic-oidc: the OIDC issuers whose tokens are accepted.
    Sluice refuses generic-oidc (Stalled) until it verifies OIDC tokens."""

    suspend: bool = False
    """Stop handling webhooks; the endpoint answers 503."""


class ReceiverStatus(ReconcileStatus):
    """Observed state of a Receiver."""

    webhook_path: str | None = None
    """The webhook path, `/hook/<sha256(token + name + namespace)>`."""


class Receiver(Resource[ReceiverSpec, ReceiverStatus]):
    """An incoming webhook that triggers reconciles or opens and closes gates."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = "v1"
    KIND: ClassVar[str] = "Receiver"
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PLURAL: ClassVar[str] = "receivers"
    SINGULAR: ClassVar[str] = "receiver"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        AGE_COLUMN,
        READY_COLUMN,
        STATUS_COLUMN,
    )

    spec: ReceiverSpec
    status: ReceiverStatus = Field(default_factory=ReceiverStatus)


# Alert ------------------------------------------------------------------------


class AlertSpec(KubeModel):
    """Which events to forward to a Provider."""

    provider_ref: LocalObjectReference
    """The Provider to send the events to."""

    event_severity: Literal["info", "error"] = "info"
    """`info` forwards every event, `error` only errors."""

    event_sources: list[CrossNamespaceObjectReference]
    """The objects whose events are forwarded."""

    inclusion_list: list[str] | None = None
    """Regular expressions; only events whose message matches one are forwarded."""

    exclusion_list: list[str] | None = None
    """Regular expressions; events whose message matches one are dropped."""

    event_metadata: dict[str, str] | None = None
    """Metadata added to every event; never overrides the event's own."""

    summary: Annotated[str, StringConstraints(max_length=255)] | None = None
    """Short description of the impact and the affected cluster."""

    suspend: bool = False
    """Stop forwarding events."""


class Alert(Resource[AlertSpec, ReconcileStatus]):
    """A rule that forwards events of some objects to a Provider."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = "v1beta3"
    KIND: ClassVar[str] = "Alert"
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PLURAL: ClassVar[str] = "alerts"
    SINGULAR: ClassVar[str] = "alert"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (AGE_COLUMN,)

    spec: AlertSpec
    status: ReconcileStatus = Field(default_factory=ReconcileStatus)


# Provider ---------------------------------------------------------------------


class ProviderSpec(KubeModel):
    """Where and how to send events."""

    type: Literal[
        "slack",
        "discord",
        "msteams",
        "rocket",
        "generic",
        "generic-hmac",
        "github",
        "gitlab",
        "gitea",
        "bitbucketserver",
        "bitbucket",
        "azuredevops",
        "googlechat",
        "googlepubsub",
        "webex",
        "sentry",
        "azureeventhub",
        "telegram",
        "lark",
        "matrix",
        "opsgenie",
        "alertmanager",
        "grafana",
        "githubdispatch",
        "pagerduty",
        "datadog",
        "nats",
        "otel",
        "zulip",
        "githubpullrequestcomment",
        "gitlabmergerequestcomment",
        "giteapullrequestcomment",
        "incident.io",
        "zoom",
    ]
    """The kind of receiving service. Sluice delivers to generic, generic-hmac,
    slack, discord, msteams, github and gitlab; a Provider of another type is
    Stalled, naming the type, rather than accepted and never delivered to."""

    interval: Duration | None = None
    """Deprecated and unused in v1beta3."""

    channel: Annotated[str, StringConstraints(max_length=2048)] | None = None
    """Destination channel, for the services that have channels."""

    username: Annotated[str, StringConstraints(max_length=2048)] | None = None
    """Name events are posted under."""

    address: Annotated[str, StringConstraints(max_length=2048)] | None = None
    """Where events are sent: an HTTP(S) URL for `generic`, a project or
    namespace for some other types."""

    timeout: TimeoutDuration | None = None
    """Timeout for sending an event; 15s when not set."""

    proxy: (
        Annotated[str, StringConstraints(max_length=2048, pattern=r"^(http|https)://.*$")] | None
    ) = None
    """Deprecated: HTTP(S) proxy address; use proxySecretRef."""

    proxy_secret_ref: LocalObjectReference | None = None
    """Secret with the proxy `address` and optional `username`/`password`."""

    secret_ref: LocalObjectReference | None = None
    """Secret with credentials: `address`, `token`, `username`, `password`,
    `headers` (YAML map), depending on the type."""

    service_account_name: str | None = None
    """ServiceAccount for workload identity with cloud services."""

    cert_secret_ref: LocalObjectReference | None = None
    """Secret with `ca.crt` and/or `tls.crt` and `tls.key` for the connection."""

    suspend: bool = False
    """Stop sending events."""

    commit_status_expr: str | None = None
    """CEL expression for the commit status of the Git provider types."""


class Provider(Resource[ProviderSpec, ReconcileStatus]):
    """A service events are sent to."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = "v1beta3"
    KIND: ClassVar[str] = "Provider"
    EXTRA_VERSIONS: ClassVar[tuple[str, ...]] = ("v1beta2", "v1beta1")
    PLURAL: ClassVar[str] = "providers"
    SINGULAR: ClassVar[str] = "provider"
    CATEGORIES: ClassVar[tuple[str, ...]] = CATEGORIES
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (AGE_COLUMN,)

    spec: ProviderSpec
    status: ReconcileStatus = Field(default_factory=ReconcileStatus)
