"""The process's /metrics text: one series per object, however many, and none for the gone."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sluice_runtime.kube.attributing import Request
from sluice_runtime.observing import metrics


def counts(kind: str) -> dict[tuple[str, str], float]:
    """Reconciles counted by each `gotk_reconcile_duration_seconds` series of `kind`,
    by (namespace, name)."""
    text = metrics.exposition().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families.get("gotk_reconcile_duration_seconds")
    return {
        (s.labels["namespace"], s.labels["name"]): s.value
        for s in (family.samples if family else [])
        if s.name.endswith("_count") and s.labels.get("kind") == kind
    }


def object_series(kind: str) -> set[tuple[str, str]]:
    return set(counts(kind))


def test_every_object_of_a_fleet_past_the_sdks_default_limit_keeps_its_series() -> None:
    kind = "FleetProbe"
    recorder = metrics.ControllerMetrics.create(service="test-controller", kind=kind)
    objects = {("apps", f"app-{i}") for i in range(2_500)}  # the SDK's default folds at 2,000
    try:
        for namespace, name in objects:
            recorder.reconciled(name=name, namespace=namespace, seconds=0.2, result="success")
        assert object_series(kind) == objects
        assert b"otel_metric_overflow" not in metrics.exposition()
    finally:
        for namespace, name in objects:
            recorder.forget(name=name, namespace=namespace)
    assert object_series(kind) == set()


@pytest.mark.parametrize(
    ("recorded", "forgotten", "left"),
    [
        pytest.param(["a", "b"], ["a"], {"b"}, id="only the deleted object's series goes"),
        pytest.param(["a"], ["a", "a"], set(), id="forgetting twice is harmless"),
        pytest.param(["a"], ["never-seen"], {"a"}, id="an object never measured"),
        pytest.param(["a"], [], {"a"}, id="nothing deleted"),
    ],
)
def test_a_forgotten_objects_series_is_gone_from_the_text(
    recorded: list[str], forgotten: list[str], left: set[str]
) -> None:
    kind = "ForgetProbe"
    recorder = metrics.ControllerMetrics.create(service="test-controller", kind=kind)
    try:
        for name in recorded:
            recorder.reconciled(name=name, namespace="ns", seconds=0.1, result="success")
        for name in forgotten:
            recorder.forget(name=name, namespace="ns")
        assert object_series(kind) == {("ns", name) for name in left}
        # A series recreated after its object is recreated starts from zero, as in Flux.
        for name in set(forgotten):
            recorder.reconciled(name=name, namespace="ns", seconds=0.1, result="success")
        counted = counts(kind)
        assert all(counted[("ns", name)] == 1 for name in set(forgotten) - set(left))
    finally:
        for name in {*recorded, *forgotten}:
            recorder.forget(name=name, namespace="ns")


def request_series(phase: str) -> dict[str, dict[str, tuple[str, float]]]:
    """By family, each series of `phase`: its verb → (TYPE, value)."""
    found: dict[str, dict[str, tuple[str, float]]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            if sample.labels.get("phase") == phase and sample.name.endswith("_total"):
                found.setdefault(sample.name, {})[sample.labels["verb"]] = (
                    family.type,
                    sample.value,
                )
    return found


def test_requests_are_counted_by_phase_and_verb_across_observers() -> None:
    # Two observers in one process (two clients) add up, as one shared counter did.
    first, second = metrics.RequestMetrics("test-controller"), metrics.RequestMetrics("test")
    sent = [(first, "get", 0.25), (first, "apply", 0.5), (second, "get", 1.0)]
    for observer, verb, seconds in sent:
        observer.requested(Request(verb, "/api/v1/x", "ns/a", "probe-phase", seconds, 200))
    first.requested(Request("get", "/api/v1/x", "", "", 0.125, 200))
    assert request_series("probe-phase") == {
        "sluice_api_requests_total": {"get": ("counter", 2.0), "apply": ("counter", 1.0)},
        "sluice_api_request_seconds_total": {"get": ("counter", 1.25), "apply": ("counter", 0.5)},
    }
    assert request_series("none")["sluice_api_requests_total"]["get"][1] >= 1


def test_step_time_is_summed_by_kind_and_step() -> None:
    recorder = metrics.ControllerMetrics.create(service="test-controller", kind="StepProbe")
    for step, seconds in [("fetch", 0.5), ("apply", 0.25), ("fetch", 1.0)]:
        recorder.stepped(step, seconds)
    text = metrics.exposition().decode()
    found = {
        (family.type, sample.name, sample.labels["step"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("kind") == "StepProbe"
    }
    assert found == {
        ("counter", "sluice_step_seconds_total", "fetch"): 1.5,
        ("counter", "sluice_step_seconds_total", "apply"): 0.25,
    }
