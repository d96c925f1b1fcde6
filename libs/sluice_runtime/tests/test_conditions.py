"""kstatus rules of the Conditions helper."""

from __future__ import annotations

from datetime import UTC, datetime

from sluice_api.meta import Condition
from sluice_runtime.conditions import Conditions

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 11, 0, tzinfo=UTC)


def cond(type_: str, status: str, when: str = "2026-01-01T10:00:00Z") -> Condition:
    return Condition(
        type=type_,
        status=status,
        reason="R",
        message="m",
        last_transition_time=when,  # type: ignore[arg-type]
    )


def test_transition_time_moves_only_when_status_moves() -> None:
    conditions = Conditions([cond("Ready", "False")], generation=2, now=T1)
    conditions.mark_false("Ready", "Other", "new message")
    same = conditions.get("Ready")
    assert same is not None
    assert same.last_transition_time == "2026-01-01T10:00:00Z"
    assert (same.reason, same.message, same.observed_generation) == ("Other", "new message", 2)
    conditions.mark_true("Ready", "Succeeded", "ok")
    moved = conditions.get("Ready")
    assert moved is not None and moved.last_transition_time == "2026-01-01T11:00:00Z"


def test_deleting_then_setting_again_keeps_the_original_transition_time() -> None:
    # The runner clears a step's conditions before running it; a repeated
    # failure must not look like a new transition.
    conditions = Conditions([cond("FetchFailed", "True")], generation=1, now=T1)
    conditions.delete("FetchFailed")
    conditions.mark_true("FetchFailed", "GitOperationFailed", "again")
    again = conditions.get("FetchFailed")
    assert again is not None and again.last_transition_time == "2026-01-01T10:00:00Z"


def test_kstatus_conditions_come_first() -> None:
    conditions = Conditions([], generation=1, now=T0)
    conditions.mark_true("ArtifactInStorage", "Succeeded", "x")
    conditions.mark_true("Stalled", "S", "x")
    conditions.mark_false("Ready", "S", "x")
    assert [c.type for c in conditions.as_list()] == ["Ready", "Stalled", "ArtifactInStorage"]


def test_first_true_respects_priority_order() -> None:
    conditions = Conditions([], generation=1, now=T0)
    conditions.mark_true("BuildFailed", "B", "b")
    conditions.mark_true("FetchFailed", "F", "f")
    found = conditions.first_true(["FetchFailed", "BuildFailed"])
    assert found is not None and found.type == "FetchFailed"
    assert conditions.first_true(["StorageOperationFailed"]) is None


def test_long_messages_are_cut_to_fit_the_api_limit() -> None:
    conditions = Conditions([], generation=1, now=T0)
    conditions.mark_false("Ready", "R", "x" * 40000)
    ready = conditions.get("Ready")
    assert ready is not None and len(ready.message) <= 32768
