"""A new object's first wait is not published at once (issue 19): a source and its
follower are created together, and "no artifact yet" was a status patch per app
that the apply replaced seconds later.

The decision is pure (`quiet_wait_left`, a table); the runner's use of it runs
against the real API server with a step of the test's own that waits.
"""

from __future__ import annotations

import asyncio

import pytest

from sluice_api.meta import RECONCILE_REQUESTED_AT_ANNOTATION
from sluice_api.source import OCIRepository
from sluice_runtime.kube.attributing import Request
from sluice_runtime.kube.client import JSON, KubeClient
from sluice_runtime.kube.resources import ResourceType
from sluice_runtime.reconciling.errors import Waiting
from sluice_runtime.reconciling.running import Outcome, Reconciler, Runner, quiet_wait_left
from sluice_runtime.reconciling.steps import ReconcileContext, Result, step

OCIREPO = ResourceType.of_model(OCIRepository)
CREATED = "2026-11-29T10:00:00Z"
AT = 1795946400.0
"""CREATED as a Unix time."""
WAITING = Outcome("waiting", requeue_after=30.0)
CONDITIONS_ONLY: JSON = {"conditions": [{"type": "Ready", "status": "False"}]}
"""A waiting status that records nothing but its conditions."""


def new(**extra: object) -> JSON:
    return {"metadata": {"name": "app", "creationTimestamp": CREATED}, **extra}


@pytest.mark.parametrize(
    ("raw", "outcome", "now", "expected"),
    [
        # The stamp is whole seconds: the grace runs from the latest moment the
        # object can have been created, and never beyond `grace`.
        pytest.param(new(), WAITING, AT + 0.5, 5.0, id="just-created"),
        pytest.param(new(), WAITING, AT + 4.0, 2.0, id="part-of-the-grace-left"),
        pytest.param(new(), WAITING, AT + 6.0, None, id="grace-over"),
        pytest.param(new(), WAITING, AT - 60.0, 5.0, id="our-clock-behind-the-servers"),
        pytest.param(new(status={"conditions": [{"type": "Ready"}]}), WAITING, AT + 1.0, None,
                     id="published-before"),
        pytest.param(new(metadata={"name": "app", "creationTimestamp": CREATED, "annotations": {
            RECONCILE_REQUESTED_AT_ANNOTATION: "now"}}), WAITING, AT + 1.0, None,
                     id="someone-waits-for-requestedAt"),
        pytest.param(new(), Outcome("waiting", requeue_after=1.0, follow_up=True), AT + 1.0, None,
                     id="a-wait-in-progress"),
        pytest.param(new(), Outcome("waiting", publish=False), AT + 1.0, None,
                     id="already-unpublished"),
        pytest.param(new(), Outcome("error", backoff=True), AT + 1.0, None, id="a-failure"),
        pytest.param(new(), Outcome("success", requeue_after=600.0), AT + 1.0, None,
                     id="a-success"),
        pytest.param({"metadata": {"name": "app"}}, WAITING, AT + 1.0, None, id="no-stamp"),
    ],
)  # fmt: skip
def test_which_waits_stay_quiet_and_for_how_long(
    raw: JSON, outcome: Outcome, now: float, expected: float | None
) -> None:
    assert quiet_wait_left(raw, CONDITIONS_ONLY, outcome, 5.0, now) == expected


def test_a_grace_of_zero_publishes_every_wait() -> None:
    assert quiet_wait_left(new(), CONDITIONS_ONLY, WAITING, 0.0, AT + 0.5) is None


@pytest.mark.parametrize(
    ("old", "written", "expected"),
    [
        pytest.param({}, CONDITIONS_ONLY, 5.0, id="conditions-only"),
        pytest.param({"observedGeneration": -1}, {**CONDITIONS_ONLY, "observedGeneration": -1},
                     5.0, id="the-crds-default-unchanged"),
        pytest.param({}, {**CONDITIONS_ONLY, "helmChart": "team/team-app"}, None,
                     id="a-helmchart-created-before-the-wait"),
        pytest.param({}, {**CONDITIONS_ONLY, "lastAttemptedRevision": "main@sha1:0"}, None,
                     id="a-revision-attempted"),
    ],
)  # fmt: skip
def test_a_wait_that_records_more_than_its_conditions_is_published_at_once(
    old: JSON, written: JSON, expected: float | None
) -> None:
    """What a step did before it waited may have to be in status: a deletion
    meanwhile reads it there (a HelmRelease deletes the HelmChart it names)."""
    assert quiet_wait_left(new(status=old), written, WAITING, 5.0, AT + 0.5) == expected


class Patches:
    """Status patches of one object."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.count = 0

    def requested(self, request: Request) -> None:
        if request.key == self.key and request.phase == "status":
            self.count += 1


@step()
async def waits_for_an_artifact(ctx: ReconcileContext[OCIRepository]) -> Result | None:
    raise Waiting("ArtifactFailed", "no artifact yet", requeue_after=30.0)


async def reconcile(kube: KubeClient, raw: JSON, grace: float) -> tuple[Outcome, int]:
    runner = Runner(
        Reconciler(
            model=OCIRepository,
            steps=(waits_for_an_artifact,),
            context=ReconcileContext,
            quiet_first_wait=grace,
        ),
        client=kube,
        recorder=None,
    )
    patches = Patches(f"{raw['metadata']['namespace']}/{raw['metadata']['name']}")
    stop = kube.observe(patches)
    try:
        return await runner.reconcile(raw), patches.count
    finally:
        stop()


async def created(kube: KubeClient, namespace: str) -> JSON:
    """A new OCIRepository `app`, as the API server answered its creation."""
    return await kube.create(
        OCIREPO,
        {
            "apiVersion": "source.toolkit.fluxcd.io/v1",
            "kind": "OCIRepository",
            "metadata": {"name": "app"},
            "spec": {"url": "oci://registry.example/app", "interval": "10m"},
        },
        namespace=namespace,
    )


async def test_a_new_objects_wait_is_published_only_once_its_grace_is_over(
    kube: KubeClient, namespace: str
) -> None:
    raw = await created(kube, namespace)
    outcome, patches = await reconcile(kube, raw, grace=1.0)
    assert (outcome.result, outcome.publish, patches) == ("waiting", False, 0)
    # Looked at again by the grace's end, not after the wait's own 30 s.
    assert outcome.requeue_after is not None and 0 < outcome.requeue_after <= 1.0
    assert "conditions" not in (await kube.get(OCIREPO, "app", namespace))["status"]

    await asyncio.sleep(2.1)  # past the grace and the stamp's second
    raw = await kube.get(OCIREPO, "app", namespace)
    outcome, patches = await reconcile(kube, raw, grace=1.0)
    assert (outcome.result, outcome.publish, outcome.requeue_after, patches) == (
        "waiting", True, 30.0, 1,
    )  # fmt: skip
    ready = {
        c["type"]: c for c in (await kube.get(OCIREPO, "app", namespace))["status"]["conditions"]
    }
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("False", "ArtifactFailed")


async def test_without_a_grace_the_first_wait_is_published_at_once(
    kube: KubeClient, namespace: str
) -> None:
    raw = await created(kube, namespace)
    outcome, patches = await reconcile(kube, raw, grace=0.0)
    assert (outcome.result, outcome.publish, patches) == ("waiting", True, 1)
