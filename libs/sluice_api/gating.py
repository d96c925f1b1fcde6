"""The gating.toolkit.fluxcd.io Gate: a manual or scheduled approval for rollouts.

Flux's gating RFC designed this kind but Flux never shipped it, so the RFC is
the contract: `spec.default`, `spec.window`, `status.requestedAt`,
`status.resetToDefaultAt` and the `Opened` condition. Sluice adds recurring
open windows (`spec.schedule`) and an audit trail of who opened or closed the
gate (`status.history`); both are optional, so RFC manifests apply unchanged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from sluice_api.meta import (
    AGE_COLUMN,
    Duration,
    KubeModel,
    PrinterColumn,
    ReconcileStatus,
    Resource,
    Timestamp,
)

GROUP = "gating.toolkit.fluxcd.io"
VERSION = "v1alpha1"

OPEN_REQUESTED_AT_ANNOTATION = "open.gate.fluxcd.io/requestedAt"
"""Setting this annotation to an RFC 3339 time opens the gate."""
CLOSE_REQUESTED_AT_ANNOTATION = "close.gate.fluxcd.io/requestedAt"
"""Setting this annotation to an RFC 3339 time closes the gate."""
OPEN_REQUESTED_BY_ANNOTATION = "open.gate.fluxcd.io/requestedBy"
"""Sluice: who asked to open (`cli:<user>`, `receiver:<ns>/<name>`), for the audit trail."""
CLOSE_REQUESTED_BY_ANNOTATION = "close.gate.fluxcd.io/requestedBy"
"""Sluice: who asked to close, for the audit trail."""


class GateCondition(StrEnum):
    """Condition types of a Gate."""

    OPENED = "Opened"


class GateReason(StrEnum):
    """Reasons the gating-controller gives for its conditions."""

    RECONCILIATION_SUCCEEDED = "ReconciliationSucceeded"


class GateSchedule(KubeModel):
    """A recurring time at which the gate opens for a while."""

    cron: str
    """Standard five-field cron expression for when the gate opens."""

    time_zone: str = "UTC"
    """IANA time zone the cron expression is read in."""

    window: Duration
    """How long the gate stays open each time."""


class GateSpec(KubeModel):
    """When a gate is open."""

    interval: Duration
    """How often to re-evaluate the gate."""

    default: Literal["opened", "closed"] = "closed"
    """The state the gate returns to when no request or schedule holds it."""

    window: Duration = "1h"
    """How long an open request lasts before the gate returns to its default."""

    schedule: list[GateSchedule] | None = None
    """Sluice: recurring windows during which the gate is open."""


class GateHistoryEntry(KubeModel):
    """One open or close of the gate."""

    time: Timestamp
    """When the gate was opened or closed."""

    action: Literal["open", "close"]
    """What happened."""

    source: str
    """What caused it, e.g. `annotation`, `schedule` or `Receiver/<ns>/<name>`."""

    user: str | None = None
    """Who asked for it, when known."""


class GateStatus(ReconcileStatus):
    """Observed state of a Gate."""

    requested_at: str | None = None
    """The open or close request currently in effect."""

    reset_to_default_at: Timestamp | None = None
    """When the gate returns to its default state."""

    history: list[GateHistoryEntry] | None = None
    """Sluice: the most recent opens and closes, newest last."""


class Gate(Resource[GateSpec, GateStatus]):
    """A gate that Kustomizations and sources wait on while it is closed."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Gate"
    PLURAL: ClassVar[str] = "gates"
    SINGULAR: ClassVar[str] = "gate"
    CATEGORIES: ClassVar[tuple[str, ...]] = ("all", "fluxcd", "fluxcd-gating")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn(
            name="Opened",
            type="string",
            json_path='.status.conditions[?(@.type=="Opened")].status',
        ),
        # A date column would print a future time as "<invalid>".
        PrinterColumn(name="Until", type="string", json_path=".status.resetToDefaultAt"),
        PrinterColumn(
            name="Status",
            type="string",
            json_path='.status.conditions[?(@.type=="Opened")].message',
        ),
        AGE_COLUMN,
    )

    spec: GateSpec
    status: GateStatus = Field(default_factory=GateStatus)
