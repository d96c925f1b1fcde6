"""Consuming Gates: whether an object may go ahead, and waking it when a gate moves.

The gating-controller alone decides whether a Gate is open (its `Opened`
condition); consumers (sources, Kustomizations) only read that condition
from their informer cache, so checking gates costs no API call, and costs
nothing at all when `spec.gates` is empty. A gate that does not exist
counts as closed, with a message saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sluice_api.meta import JSON
from sluice_runtime.conditions import Conditions, condition_of
from sluice_runtime.informing.watching import Change, Index, Store
from sluice_runtime.reconciling.errors import Waiting

OPENED = "Opened"


class GateRef(Protocol):
    name: str


@dataclass(frozen=True)
class ClosedGate:
    key: str
    missing: bool

    @property
    def why(self) -> str:
        return "does not exist" if self.missing else "is closed"


def closed_gates(gates: Sequence[GateRef], *, namespace: str, store: Store) -> list[ClosedGate]:
    """The gates among `gates` that hold their consumer back, in spec order."""
    closed = []
    for ref in gates:
        key = f"{namespace}/{ref.name}"
        gate = store.get(key)
        if gate is None:
            closed.append(ClosedGate(key, missing=True))
        elif not is_open(gate):
            closed.append(ClosedGate(key, missing=False))
    return closed


def is_open(gate: JSON) -> bool:
    opened = condition_of(gate, OPENED)
    return opened is not None and opened.get("status") == "True"


def consumers_of(store: Store) -> Callable[[Change], list[str]]:
    """Keys of the objects in `store` listing a gate whose state just changed."""

    def mapper(change: Change) -> list[str]:
        was = is_open(change.old) if change.old is not None else None
        now = is_open(change.new) if change.new is not None else None
        if change.kind == "updated" and was == now:
            return []
        return store.referencing(GATE_REFS, change.key)

    return mapper


def _gate_refs(obj: JSON) -> list[str]:
    namespace = obj["metadata"].get("namespace", "")
    refs = (obj.get("spec") or {}).get("gates") or []
    return [f"{namespace}/{ref['name']}" for ref in refs if isinstance(ref, dict) and "name" in ref]


GATE_REFS = Index("spec.gates", _gate_refs)
"""Objects by the Gates they list (`namespace/name`, always their own namespace)."""


APPROVED = "Approved"
"""The condition a delivery's gates decide (Kustomization, HelmRelease)."""
GATE_CLOSED = "GateClosed"


def hold_while_closed(
    refs: Sequence[GateRef] | None,
    *,
    namespace: str,
    store: Store,
    conditions: Conditions,
    requeue_after: float,
) -> None:
    """Raise Waiting (Approved=False, GateClosed) while one of `refs` is closed;
    once every gate is open, mark Approved=True. A delivery is woken by the Gate
    watch, so `requeue_after` (its interval) is only a backstop."""
    if not refs:
        return
    closed = closed_gates(refs, namespace=namespace, store=store)
    if closed:
        first = closed[0]
        raise Waiting(
            GATE_CLOSED,
            f"Reconciliation is waiting approval, gate '{first.key}' {first.why}.",
            requeue_after=requeue_after,
            condition=APPROVED,
        )
    names = ", ".join(f"'{namespace}/{ref.name}'" for ref in refs)
    conditions.mark_true(
        APPROVED, "GateOpened", f"Reconciliation is approved, gates {names} are open."
    )
