"""A requested reconcile's blocking calls do not wait for threads that bulk work holds."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import pytest

from sluice_api.meta import FINALIZER
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import holding, lanes
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.reconciling.steps import Result, Step

from .conftest import GITREPO, RecordingContext, eventually, gitrepo, running_controller

REQUESTED_AT = "reconcile.fluxcd.io/requestedAt"


async def test_a_requested_reconcile_gets_threads_while_bulk_work_holds_the_default_executor(
    kube: KubeClient, namespace: str
) -> None:
    """As 1000 artifact writes hold asyncio's default executor while a webhook's fetch arrives."""
    wrote: list[str] = []

    async def write_artifact(ctx: RecordingContext) -> Result | None:
        if REQUESTED_AT in (ctx.obj.metadata.annotations or {}):
            await lanes.to_thread(wrote.append, ctx.obj.metadata.name)
        return None

    step = Step(fn=write_artifact, name="write_artifact", conditions=())
    release = threading.Event()
    loop = asyncio.get_running_loop()
    async with running_controller(kube, namespace, extra_steps=[step], concurrency=1) as harness:
        await kube.create(GITREPO, gitrepo("asked", namespace))
        # At least one: a first reconcile retried after a transient API error (a
        # status write refused under load) moves the count past 1 in 0.75 s, and
        # a wait for exactly 1 that missed that moment waited out its 20 s.
        await eventually(
            lambda: harness.journal.count(f"{namespace}/asked") >= 1, message="first reconcile"
        )
        # More blocked calls than the default executor has threads (at most 32).
        held = [loop.run_in_executor(None, release.wait) for _ in range(40)]
        try:
            await kube.merge_patch(
                GITREPO,
                "asked",
                {"metadata": {"annotations": {REQUESTED_AT: "now"}}},
                namespace=namespace,
            )
            await eventually(lambda: wrote == ["asked"], message="the requested write ran")
            assert not release.is_set()
        finally:
            release.set()
            await asyncio.gather(*held)


_BULK = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bulk")


@pytest.mark.parametrize(
    ("requested", "bulk", "expected"),
    [
        pytest.param(False, None, "default", id="bulk work: asyncio's default executor"),
        pytest.param(False, _BULK, "bulk", id="bulk work: the pool its caller gave"),
        pytest.param(True, None, "twin", id="requested: a twin of the default executor"),
        pytest.param(True, _BULK, "twin", id="requested: a twin of the caller's pool"),
    ],
)
def test_the_pool_a_blocking_call_runs_in(
    requested: bool, bulk: ThreadPoolExecutor | None, expected: str
) -> None:
    def choose() -> Executor | None:
        if requested:
            lanes.serving_requests()
        return lanes.executor(bulk)

    chosen = contextvars.copy_context().run(choose)
    kinds = {None: "default", _BULK: "bulk"}
    assert kinds.get(chosen, "twin") == expected
    if requested:
        # One twin per bulk pool: a hung requested ls-remote keeps its own threads.
        other = _BULK if bulk is None else None
        assert chosen is not contextvars.copy_context().run(
            lambda: (lanes.serving_requests(), lanes.executor(other))[1]
        )
    # The mark stays with the task that was given it.
    assert not lanes.is_requested()


async def test_a_requested_key_is_served_as_requested_by_whichever_worker_takes_it(
    kube: KubeClient, namespace: str
) -> None:
    """With the kept worker busy on one request, an idle bulk worker takes the next one:
    it is served as requested all the same (threads, the early read of its apply), and
    the bulk worker's next reconcile is not."""
    marks: dict[str, list[bool]] = {}
    hold = asyncio.Event()
    release = asyncio.Event()

    async def note(ctx: RecordingContext) -> Result | None:
        marks.setdefault(ctx.obj.metadata.name, []).append(lanes.is_requested())
        if ctx.obj.metadata.name == "first" and hold.is_set():
            await release.wait()
        return None

    step = Step(fn=note, name="note", conditions=())
    async with running_controller(kube, namespace, extra_steps=[step], concurrency=2):
        for name in ("first", "second"):
            await kube.create(GITREPO, gitrepo(name, namespace))
        await eventually(lambda: len(marks.get("second", [])) == 1 == len(marks.get("first", [])))
        hold.set()
        ask = {"metadata": {"annotations": {REQUESTED_AT: "now"}}}
        await kube.merge_patch(GITREPO, "first", ask, namespace=namespace)
        await eventually(lambda: len(marks["first"]) == 2, message="first request taken")
        await kube.merge_patch(GITREPO, "second", ask, namespace=namespace)
        await eventually(lambda: len(marks["second"]) == 2, message="second request taken")
        release.set()
        new_url = {"spec": {"url": "https://example.com/other.git"}}
        await kube.merge_patch(GITREPO, "second", new_url, namespace=namespace)
        await eventually(lambda: len(marks["second"]) == 3, message="a bulk reconcile after")
    assert marks == {"first": [False, True], "second": [False, True, False]}


# -- the event loop's ready queue in two lanes --------------------------------------


class _Handle:
    """What ReadyLanes reads of an asyncio.Handle: its context."""

    def __init__(self, name: str, context: contextvars.Context) -> None:
        self.name, self._context = name, context


def _context(requested: bool) -> contextvars.Context:
    context = contextvars.copy_context()
    if requested:
        context.run(lanes.serving_requests)
    return context


@pytest.mark.parametrize(
    ("queued", "requested_first", "order"),
    [
        pytest.param("b1 b2 R1", True, "R1 b1 b2", id="a requested callback goes first"),
        pytest.param("b1 R1 b2 R2 b3", True, "R1 R2 b1 b2 b3", id="each lane keeps its order"),
        pytest.param("b1 R1 b2", False, "b1 R1 b2", id="fifo: as asyncio's own queue"),
        pytest.param("", True, "", id="empty"),
    ],
)  # fmt: skip
def test_ready_lanes_order(queued: str, requested_first: bool, order: str) -> None:
    contexts = {"b": _context(False), "R": _context(True)}
    ready = lanes.ReadyLanes(requested_first=requested_first)
    for name in queued.split():
        ready.append(_Handle(name, contexts[name[0]]))  # type: ignore[arg-type]
    assert len(ready) == len(queued.split()) and bool(ready) == bool(queued)
    taken = [ready.popleft().name for _ in range(len(ready))]  # type: ignore[attr-defined]
    assert taken == order.split() and not ready


def _noise_and_hops(requested_first: bool) -> int:
    """Bulk callbacks the loop ran while a requested task made 20 hops through it,
    with 50 bulk tasks keeping the loop's ready queue full (asyncio's own loop)."""
    loop = asyncio.new_event_loop()
    lanes.prioritize(loop, requested_first=requested_first)
    ran = [0]
    stop = asyncio.Event()

    async def bulk() -> None:
        while not stop.is_set():
            ran[0] += 1
            await asyncio.sleep(0)

    async def requested() -> int:
        lanes.serving_requests()
        await asyncio.sleep(0)  # the bulk tasks are all ready from here on
        before = ran[0]
        for _ in range(20):
            await asyncio.sleep(0)
        return ran[0] - before

    async def main() -> int:
        noise = [asyncio.create_task(bulk()) for _ in range(50)]
        await asyncio.sleep(0)
        passed = await asyncio.create_task(requested())
        stop.set()
        await asyncio.gather(*noise)
        return passed

    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("requested_first", "bulk_between"),
    [
        pytest.param(True, 0, id="requested first: no bulk callback runs between its hops"),
        pytest.param(False, 20 * 50, id="fifo: each hop waits for the 50 bulk tasks"),
    ],
)  # fmt: skip
def test_a_requested_task_is_not_queued_behind_bulk_callbacks(
    requested_first: bool, bulk_between: int
) -> None:
    assert _noise_and_hops(requested_first) == bulk_between


@pytest.mark.parametrize(
    ("requested_first", "expected"),
    [
        pytest.param(True, 0, id="requested first"),
        pytest.param(False, 20 * 50, id="fifo"),
    ],
)  # fmt: skip
async def test_a_requested_reconcile_resumes_ahead_of_a_busy_loop(
    kube: KubeClient, namespace: str, requested_first: bool, expected: int
) -> None:
    """As a webhook's push while bulk work keeps the loop's ready queue full: the requested
    reconcile's steps resume ahead of every bulk callback that was ready before them (its
    requests, on connections of their own, are answered on the same terms)."""
    loop = asyncio.get_running_loop()
    ran = [0]
    stop = asyncio.Event()
    passed: list[int] = []

    async def bulk() -> None:
        while not stop.is_set():
            ran[0] += 1
            await asyncio.sleep(0)

    async def hops(ctx: RecordingContext) -> Result | None:
        if REQUESTED_AT in (ctx.obj.metadata.annotations or {}):
            await ctx.client.get(GITREPO, ctx.obj.metadata.name, ctx.obj.metadata.namespace)
            before = ran[0]
            for _ in range(20):
                await asyncio.sleep(0)
            passed.append(ran[0] - before)
        return None

    step = Step(fn=hops, name="hops", conditions=())
    lanes.prioritize(loop, requested_first=requested_first)
    try:
        async with running_controller(kube, namespace, extra_steps=[step]) as harness:
            await kube.create(GITREPO, gitrepo("asked", namespace))
            key = f"{namespace}/asked"
            await eventually(lambda: harness.journal.count(key) == 1, message="first reconcile")
            noise = [loop.create_task(bulk(), context=contextvars.Context()) for _ in range(50)]
            await kube.merge_patch(
                GITREPO, "asked", {"metadata": {"annotations": {REQUESTED_AT: "now"}}},
                namespace=namespace,
            )  # fmt: skip
            await eventually(lambda: bool(passed), message="requested reconcile")
            stop.set()
            await asyncio.gather(*noise)
            await eventually(lambda: harness.journal.count(key) == 2, message="its status")
    finally:
        stop.set()
        lanes.prioritize(loop, requested_first=False)  # as asyncio's own, for the tests after
    assert passed == [expected]


async def test_requested_work_reaches_the_server_on_connections_of_its_own(
    cluster: Cluster, namespace: str
) -> None:
    """With a tenant's client certificate too: the certificate was read from files deleted
    once the first pool's TLS context had loaded it, and the requested lane's pool has it."""
    credentials = kubeconfigs.parse(Path(cluster.kubeconfig).read_text())
    assert credentials.cert_data is not None
    client = await KubeClient.from_credentials(credentials)
    try:
        bulk = await client.request("GET", f"/api/v1/namespaces/{namespace}")
        with lanes.serving(True):
            asked = await client.request("GET", f"/api/v1/namespaces/{namespace}")
        assert asked["metadata"]["uid"] == bulk["metadata"]["uid"]
        assert client.lane_pools == 2
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("limit", "order"),
    [
        pytest.param(2.0, ["machinery answered", "requested done", "bulk answered"], id="held"),
        pytest.param(
            0.0, ["machinery answered", "bulk answered", "requested done"], id="holding off"
        ),
    ],
)
async def test_a_bulk_request_waits_while_a_requested_reconcile_is_in_flight(
    kube: KubeClient,
    namespace: str,
    limit: float,
    order: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """So the API server serves the requested reconcile's requests without ours (holding.py)."""
    seen: list[str] = []
    asked = asyncio.Event()
    answered = asyncio.Event()

    async def requested_work(ctx: RecordingContext) -> Result | None:
        if lanes.is_requested() and REQUESTED_AT in (ctx.obj.metadata.annotations or {}):
            asked.set()
            held = holding.HOLD.held
            # Until a bulk request is held, or was answered without waiting.
            await eventually(lambda: holding.HOLD.held > held or answered.is_set())
            seen.append("requested done")
        return None

    async def bulk_read() -> None:
        with lanes.serving(False):  # as a reconcile nobody asked for reads
            await kube.get(GITREPO, "asked", namespace)
        seen.append("bulk answered")
        answered.set()

    step = Step(fn=requested_work, name="requested_work", conditions=())
    # A hold of its own: one an earlier test's long request ran out leaves bulk a turn.
    monkeypatch.setattr(holding, "HOLD", holding.BulkHold(limit=limit))
    async with running_controller(kube, namespace, extra_steps=[step]) as harness:
        await kube.create(GITREPO, gitrepo("asked", namespace))
        await eventually(lambda: harness.journal.count(f"{namespace}/asked") >= 1)
        ask = {"metadata": {"annotations": {REQUESTED_AT: "now"}}}
        await kube.merge_patch(GITREPO, "asked", ask, namespace=namespace)
        await asyncio.wait_for(asked.wait(), timeout=20)
        # Outside any reconcile, as an informer's list or a lease renewal: never held.
        await asyncio.wait_for(kube.get(GITREPO, "asked", namespace), timeout=20)
        seen.append("machinery answered")
        await asyncio.wait_for(bulk_read(), timeout=20)
        await eventually(lambda: len(seen) == 3, message="all done")
    assert seen == order


@pytest.mark.parametrize(
    ("limit", "order"),
    [
        pytest.param(2.0, ["requested done", "bulk started"], id="held"),
        pytest.param(0.0, ["bulk started", "requested done"], id="holding off"),
    ],
)
async def test_a_bulk_reconcile_starts_after_a_requested_one_in_flight(
    kube: KubeClient,
    namespace: str,
    limit: float,
    order: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not only its requests: its fetch, build and CPU would compete with the request too."""
    seen: list[str] = []
    asked = asyncio.Event()

    async def note(ctx: RecordingContext) -> Result | None:
        name = ctx.obj.metadata.name
        if name == "bulk":
            seen.append("bulk started")
        elif lanes.is_requested() and REQUESTED_AT in (ctx.obj.metadata.annotations or {}):
            asked.set()
            held = holding.HOLD.held
            await eventually(lambda: holding.HOLD.held > held or "bulk started" in seen)
            seen.append("requested done")
        return None

    monkeypatch.setattr(holding, "HOLD", holding.BulkHold(limit=limit))
    step = Step(fn=note, name="note", conditions=())
    async with running_controller(kube, namespace, extra_steps=[step]) as harness:
        await kube.create(GITREPO, gitrepo("asked", namespace))
        await eventually(lambda: harness.journal.count(f"{namespace}/asked") >= 1)
        ask = {"metadata": {"annotations": {REQUESTED_AT: "now"}}}
        await kube.merge_patch(GITREPO, "asked", ask, namespace=namespace)
        await asyncio.wait_for(asked.wait(), timeout=20)
        # With its finalizer in place, its reconcile sends no request before the
        # step: only the worker holding back keeps it from starting. Sent as
        # requested work, so that this create is not itself held.
        bulk = gitrepo("bulk", namespace)
        bulk["metadata"]["finalizers"] = [FINALIZER]
        with lanes.serving(True):
            await kube.create(GITREPO, bulk)
        await eventually(lambda: len(seen) == 2, message="both done")
    assert seen == order
