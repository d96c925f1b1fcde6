"""The kstatus summary rules: how a reconcile's ending becomes Ready, Reconciling
and Stalled, and what each step exception means."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sluice_api.meta import Condition
from sluice_runtime.conditions import Conditions
from sluice_runtime.kube.errors import ApiUnavailable, Conflict
from sluice_runtime.reconciling.errors import Stalling, StepError, Waiting
from sluice_runtime.reconciling.summarizing import (
    Ending,
    ending_of,
    failed_status,
    summarize,
)

NOW = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
NEGATIVE = ("FetchFailed", "ArtifactOutdated")
Summary = dict[str, tuple[str, str, str]]


def cond(type_: str, status: str, reason: str = "R", message: str = "m") -> Condition:
    return Condition(
        type=type_,
        status=status,  # type: ignore[arg-type]
        reason=reason,
        message=message,
        last_transition_time="2026-01-01T09:00:00Z",
    )


def summary(conditions: Conditions) -> Summary:
    return {c.type: (c.status, c.reason, c.message) for c in conditions.as_list()}


@pytest.mark.parametrize(
    ("before", "ending", "after"),
    [
        pytest.param(
            [],
            Ending("success", "Succeeded", "stored artifact"),
            {"Ready": ("True", "Succeeded", "stored artifact")},
            id="success-is-ready-with-the-steps-reason-and-message",
        ),
        pytest.param(
            [cond("Reconciling", "True"), cond("Stalled", "True"), cond("Ready", "False")],
            Ending("success", "Succeeded", "ok"),
            {"Ready": ("True", "Succeeded", "ok")},
            id="success-clears-reconciling-and-stalled",
        ),
        pytest.param(
            [cond("ArtifactOutdated", "True", "NewRevision", "new"), cond("FetchFailed", "True")],
            Ending("success", "Succeeded", "ok"),
            {
                "Ready": ("False", "R", "m"),
                "ArtifactOutdated": ("True", "NewRevision", "new"),
                "FetchFailed": ("True", "R", "m"),
            },
            id="success-with-a-negative-condition-true-is-not-ready-first-in-priority-wins",
        ),
        pytest.param(
            [cond("FetchFailed", "False")],
            Ending("success", "Succeeded", "ok"),
            {"Ready": ("True", "Succeeded", "ok"), "FetchFailed": ("False", "R", "m")},
            id="a-negative-condition-that-is-false-does-not-block-ready",
        ),
        pytest.param(
            [cond("Reconciling", "True")],
            Ending("stalled", "InvalidURL", "bad url"),
            {
                "Ready": ("False", "InvalidURL", "bad url"),
                "Stalled": ("True", "InvalidURL", "bad url"),
            },
            id="stalled-drops-reconciling",
        ),
        pytest.param(
            [cond("Stalled", "True")],
            Ending("error", "GitOperationFailed", "timeout"),
            {
                "Ready": ("False", "GitOperationFailed", "timeout"),
                "Reconciling": (
                    "True",
                    "ProgressingWithRetry",
                    "reconciliation failed, retrying with backoff",
                ),
            },
            id="error-without-retry-interval-retries-with-backoff-and-clears-stalled",
        ),
        pytest.param(
            [],
            Ending("error", "BuildFailed", "no kustomization.yaml", requeue_after=120),
            {
                "Ready": ("False", "BuildFailed", "no kustomization.yaml"),
                "Reconciling": (
                    "True",
                    "ProgressingWithRetry",
                    "reconciliation failed, retrying in 2m0s",
                ),
            },
            id="error-with-retry-interval-says-when",
        ),
        pytest.param(
            [cond("Stalled", "True"), cond("Ready", "True")],
            Ending("waiting", "DependencyNotReady", "dependency 'a/b' is not ready", 30),
            {
                "Ready": ("False", "DependencyNotReady", "dependency 'a/b' is not ready"),
                "Reconciling": ("True", "Progressing", "dependency 'a/b' is not ready"),
            },
            id="waiting-is-progressing-not-stalled",
        ),
        pytest.param(
            [cond("Ready", "True")],
            Ending("waiting", "Progressing", "Running health checks", 0.5, in_progress=True),
            {
                "Ready": ("Unknown", "Progressing", "Running health checks"),
                "Reconciling": ("True", "Progressing", "Running health checks"),
            },
            id="work-in-progress-leaves-ready-unknown",
        ),
    ],
)
def test_summarize(before: list[Condition], ending: Ending, after: Summary) -> None:
    conditions = Conditions(before, generation=3, now=NOW)
    summarize(conditions, ending, negative_conditions=NEGATIVE)
    assert summary(conditions) == after
    summarized = [c for c in conditions.as_list() if c.type in ("Ready", "Reconciling", "Stalled")]
    assert all(c.observed_generation == 3 for c in summarized)


@pytest.mark.parametrize(
    ("error", "ending"),
    [
        pytest.param(
            Stalling("InvalidURL", "bad url"),
            Ending("stalled", "InvalidURL", "bad url"),
            id="stalling",
        ),
        pytest.param(
            StepError("BuildFailed", "broken", requeue_after=60),
            Ending("error", "BuildFailed", "broken", 60),
            id="step-error-keeps-its-retry-interval",
        ),
        pytest.param(
            Waiting("ArtifactFailed", "no artifact yet", requeue_after=10),
            Ending("waiting", "ArtifactFailed", "no artifact yet", 10),
            id="waiting",
        ),
        pytest.param(
            Waiting("Progressing", "health", requeue_after=1, in_progress=True),
            Ending("waiting", "Progressing", "health", 1, in_progress=True),
            id="waiting-on-own-work-keeps-ready-unknown",
        ),
        pytest.param(
            Waiting("Progressing", "health", requeue_after=1, in_progress=True, publish=False),
            Ending("waiting", "Progressing", "health", 1, in_progress=True, publish=False),
            id="status-left-to-the-reconcile-that-continues",
        ),
        pytest.param(
            ApiUnavailable("connection refused"),
            Ending("error", "ProgressingWithRetry", "connection refused"),
            id="api-unavailable-is-transient",
        ),
        pytest.param(
            Conflict(status=409, reason="Conflict", message="the object has been modified"),
            Ending("error", "ProgressingWithRetry", "the object has been modified"),
            id="conflict-is-transient",
        ),
        pytest.param(
            KeyError("spec"),
            Ending("error", "ReconciliationFailed", "internal error: KeyError: 'spec'"),
            id="a-bug-is-named-and-retried",
        ),
    ],
)
def test_ending_of(error: Exception, ending: Ending) -> None:
    assert ending_of(error) == ending


@pytest.mark.parametrize(
    ("condition", "status"),
    [
        pytest.param("FetchFailed", "True", id="negative-polarity-is-true-when-failing"),
        pytest.param("ArtifactInStorage", "False", id="positive-polarity-is-false-when-failing"),
    ],
)
def test_failed_status(condition: str, status: str) -> None:
    assert failed_status(condition, NEGATIVE) == status
