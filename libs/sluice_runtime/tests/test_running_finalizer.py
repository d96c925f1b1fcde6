"""A first reconcile's finalizer, added before the steps or beside them (issue 19).

Against the real API server: the runner reconciles an OCIRepository (any
installed kind would do) through steps of the test's own, so what the
steps see, what they store and what is written can be observed exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice_api.meta import FINALIZER
from sluice_api.source import OCIRepository
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.reconciling.running import Outcome, Reconciler, Runner
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step

OCIREPO = ResourceType.of_model(OCIRepository)


class Seen:
    """This object's answered requests, in order: (phase, verb, HTTP status)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.answered: list[tuple[str, str, int]] = []

    def requested(self, request: Request) -> None:
        if request.key == self.key:
            self.answered.append((request.phase, request.verb, request.status))

    def finalizer_answered(self) -> bool:
        return any(phase == "runner" for phase, _, _ in self.answered)


def reconciler(
    *, beside: bool, seen: Seen, stored: Path, at_step_start: list[bool]
) -> Reconciler[ReconcileContext[OCIRepository]]:
    @step()
    async def store(ctx: ReconcileContext[OCIRepository]) -> Result | None:
        # Before any await: what the step knows when it starts.
        at_step_start.append(seen.finalizer_answered())
        stored.write_text("artifact")
        ctx.ready_message = "stored"
        return None

    async def finalize(ctx: ReconcileContext[OCIRepository]) -> None:
        stored.unlink(missing_ok=True)

    return Reconciler(
        model=OCIRepository,
        steps=(store,),
        context=ReconcileContext,
        finalize=finalize,
        finalizer_beside_steps=beside,
    )


async def created(kube: KubeClient, namespace: str, name: str) -> JSON:
    return await kube.create(
        OCIREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": {"name": name},
            "spec": {"url": "oci://registry.example/app", "interval": "10m"},
        },
        namespace=namespace,
    )


async def reconciled(
    kube: KubeClient, raw: JSON, tmp_path: Path, *, beside: bool
) -> tuple[Outcome, Seen, list[bool], Path]:
    """One reconcile of `raw` by the test reconciler: its outcome, the requests seen,
    whether the finalizer was answered when the step started, and where it stored."""
    seen = Seen(f"{raw['metadata']['namespace']}/{raw['metadata']['name']}")
    at_step_start: list[bool] = []
    stored = tmp_path / "artifact"
    runner = Runner(
        reconciler(beside=beside, seen=seen, stored=stored, at_step_start=at_step_start),
        client=kube,
        recorder=None,
    )
    stop = kube.observe(seen)
    try:
        outcome = await runner.reconcile(raw)
    finally:
        stop()
    return outcome, seen, at_step_start, stored


@pytest.mark.parametrize(
    ("beside", "answered_first"),
    [
        pytest.param(False, True, id="before-the-steps"),
        pytest.param(True, False, id="beside-the-steps"),
    ],
)
async def test_the_status_is_written_only_once_the_finalizer_is_in_place(
    kube: KubeClient, namespace: str, tmp_path: Path, beside: bool, answered_first: bool
) -> None:
    raw = await created(kube, namespace, "app")
    outcome, seen, at_step_start, _ = await reconciled(kube, raw, tmp_path, beside=beside)
    assert outcome.result == "success"
    # Beside: the steps start before the finalizer's answer (its round trip
    # overlaps theirs); before: after it.
    assert at_step_start == [answered_first]
    # Either way the status, the only place an artifact is published, is
    # written after the finalizer is in place.
    assert seen.answered == [("runner", "patch", 200), ("status", "patch", 200)]
    obj = await kube.get(OCIREPO, "app", namespace=namespace)
    assert obj["metadata"]["finalizers"] == [FINALIZER]
    ready = {c["type"]: c for c in obj["status"]["conditions"]}["Ready"]
    assert (ready["status"], ready["message"]) == ("True", "stored")


async def test_an_object_deleted_before_its_finalizer_is_cleaned_up_and_not_written(
    kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    """Deleted between the cache's copy and the finalizer patch: without the
    finalizer the deletion never comes back to the controller, so the runner
    must undo what the steps stored itself, and write no status."""
    raw = await created(kube, namespace, "gone")
    await kube.delete(OCIREPO, "gone", namespace=namespace)
    with pytest.raises(NotFound):
        await kube.get(OCIREPO, "gone", namespace=namespace)
    outcome, seen, at_step_start, stored = await reconciled(kube, raw, tmp_path, beside=True)
    assert outcome.result == "gone"
    assert at_step_start == [False], "the steps ran beside the finalizer patch"
    assert not stored.exists(), "finalize removed what the steps stored"
    assert seen.answered == [("runner", "patch", 404)]
