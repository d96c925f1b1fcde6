"""kstatus rules of the Conditions helper."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sluice_api.meta import JSON, Condition
from sluice_runtime.conditions import Conditions, condition_of, is_ready, ready_state

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


def raw(generation: int | None, observed: int | None, *conditions: dict[str, str]) -> JSON:
    status: JSON = {"conditions": list(conditions)}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"metadata": {"name": "x", "generation": generation}, "status": status}


READY_TRUE = {"type": "Ready", "status": "True", "reason": "Succeeded", "message": "ok"}
READY_FALSE = {"type": "Ready", "status": "False", "reason": "Failed", "message": "no"}
OPENED = {"type": "Opened", "status": "True", "reason": "Open", "message": "open"}


@pytest.mark.parametrize(
    ("obj", "state", "ready"),
    [
        pytest.param(raw(2, 2, READY_TRUE), ("True", "Succeeded", "ok"), True, id="ready"),
        pytest.param(raw(3, 2, READY_TRUE), ("True", "Succeeded", "ok"), False, id="stale-ready"),
        pytest.param(raw(2, 2, READY_FALSE), ("False", "Failed", "no"), False, id="not-ready"),
        pytest.param(raw(2, 2, OPENED), None, False, id="only-another-condition"),
        pytest.param({"metadata": {"generation": 1}}, None, False, id="no-status"),
        pytest.param({"status": {"conditions": ["junk"]}}, None, False, id="malformed-condition"),
    ],
)
def test_ready_over_raw_objects(obj: JSON, state: tuple[str, str, str] | None, ready: bool) -> None:
    assert ready_state(obj) == state
    assert is_ready(obj) is ready


def test_condition_of_finds_any_type() -> None:
    assert condition_of(raw(1, 1, READY_TRUE, OPENED), "Opened") == OPENED
