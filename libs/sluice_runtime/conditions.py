"""Pure functions over status conditions, in kstatus form.

Everything here is deterministic given its inputs (the clock is a
parameter), which is what lets the runner compute status once at the end of
a reconcile and lets unit tests pin the rules down: `lastTransitionTime`
moves only when `status` moves; Ready, Reconciling and Stalled come first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from sluice_api.meta import JSON, Condition, ConditionType, format_time

Status = Literal["True", "False", "Unknown"]

_FIRST = (ConditionType.READY, ConditionType.RECONCILING, ConditionType.STALLED)


class Conditions:
    """An editable copy of an object's conditions for one reconcile."""

    def __init__(
        self, existing: Iterable[Condition], *, generation: int, now: datetime | None = None
    ) -> None:
        self._items: dict[str, Condition] = {c.type: c.model_copy() for c in existing}
        # What the object had when the reconcile began: a condition cleared
        # and set again within one reconcile is not a transition.
        self._initial = dict(self._items)
        self.generation = generation
        self._now = format_time(now or datetime.now(UTC), fraction="none")

    def get(self, type_: str) -> Condition | None:
        return self._items.get(type_)

    def has(self, type_: str) -> bool:
        return type_ in self._items

    def is_true(self, type_: str) -> bool:
        found = self._items.get(type_)
        return found is not None and found.status == "True"

    def set(self, type_: str, status: Status, reason: str, message: str) -> None:
        previous = self._items.get(type_) or self._initial.get(type_)
        transition = (
            previous.last_transition_time
            if previous is not None and previous.status == status
            else self._now
        )
        self._items[type_] = Condition(
            type=type_,
            status=status,
            reason=reason,
            # The API server rejects messages over 32 KiB; keep the start.
            message=message[:32000],
            observed_generation=self.generation,
            last_transition_time=transition,
        )

    def mark_true(self, type_: str, reason: str, message: str) -> None:
        self.set(type_, "True", reason, message)

    def mark_false(self, type_: str, reason: str, message: str) -> None:
        self.set(type_, "False", reason, message)

    def mark_unknown(self, type_: str, reason: str, message: str) -> None:
        self.set(type_, "Unknown", reason, message)

    def delete(self, *types: str) -> None:
        for type_ in types:
            self._items.pop(type_, None)

    def as_list(self) -> list[Condition]:
        ordered = [self._items[t] for t in _FIRST if t in self._items]
        ordered += [c for t, c in self._items.items() if t not in _FIRST]
        return ordered

    def first_true(self, types: Sequence[str]) -> Condition | None:
        """The first of `types` that is True, in the order given (priority order)."""
        for type_ in types:
            found = self._items.get(type_)
            if found is not None and found.status == "True":
                return found
        return None


# -- over raw JSON: objects as the informer caches them --------------------------------


def condition_of(obj: Mapping[str, Any], type_: str = ConditionType.READY) -> JSON | None:
    """The condition `type_` of a raw object's status, None when it has none."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return None
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == type_:
            return condition
    return None


def ready_state(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """Ready's (status, reason, message), None before the first reconcile."""
    ready = condition_of(obj)
    if ready is None:
        return None
    return (
        str(ready.get("status") or ""),
        str(ready.get("reason") or ""),
        str(ready.get("message") or ""),
    )


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Ready=True for the object's current generation.

    A Ready condition from before the last spec change says nothing about
    the new spec, so readiness counts only once `status.observedGeneration`
    has caught up.
    """
    ready = condition_of(obj)
    if ready is None or ready.get("status") != "True":
        return False
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    return generation is not None and status.get("observedGeneration") == generation
