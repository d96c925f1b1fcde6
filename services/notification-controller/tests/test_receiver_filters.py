"""Receiver CEL filters (`spec.resourceFilter`, Flux 2.9's `spec.resources[].filter`):
honoured, reading the object as `res` and the request body as `req`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from notification_controller.filtering import (
    FilterFailed,
    InvalidFilter,
    compile_filters,
    request_of,
)
from notification_controller.receivers import unsupported
from sluice_api.notification import Receiver
from sluice_envtest.harness import condition
from sluice_runtime.evaluating import Budget

from .conftest import GITREPO, RECEIVER, Platform, parked


def receiver_of(**spec: Any) -> Receiver:
    return Receiver.from_obj(
        {
            "metadata": {"name": "hook", "namespace": "apps"},
            "spec": {
                "type": "generic",
                "secretRef": {"name": "token"},
                "resources": [{"kind": "GitRepository", "name": "*"}],
                **spec,
            },
        }
    )


APP = {"metadata": {"name": "app", "labels": {"team": "web"}}}
TAG = {"tag": "app"}


@pytest.mark.parametrize(
    ("spec", "res", "req", "allowed"),
    [
        pytest.param({}, APP, TAG, True, id="no-filter"),
        pytest.param({"resourceFilter": "res.metadata.name == req.tag"}, APP, TAG, True, id="shared-true"),
        pytest.param({"resourceFilter": "res.metadata.name == req.tag"}, APP, {"tag": "db"}, False,
                     id="shared-false"),
        pytest.param({"resources": [{"kind": "GitRepository", "name": "*",
                                     "filter": "res.metadata.labels.team == 'web'"}]},
                     APP, TAG, True, id="own-true"),
        pytest.param({"resourceFilter": "true",
                      "resources": [{"kind": "GitRepository", "name": "*",
                                     "filter": "res.metadata.labels.team == 'data'"}]},
                     APP, TAG, False, id="own-false-anded"),
        pytest.param({"resourceFilter": "false",
                      "resources": [{"kind": "GitRepository", "name": "*", "filter": "true"}]},
                     APP, TAG, False, id="shared-false-anded"),
    ],
)  # fmt: skip
async def test_filters_decide_per_object_and_request(
    spec: dict[str, Any], res: dict[str, Any], req: Any, allowed: bool
) -> None:
    filters = compile_filters(receiver_of(**spec))
    assert await filters.allows(0, res, req=req, budget=Budget()) is allowed


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param({"resourceFilter": "req.missing == 1"},
                     "spec.resourceFilter 'req.missing == 1' cannot be evaluated: no such member",
                     id="missing-field"),
        pytest.param({"resourceFilter": "res.metadata.name"},
                     "spec.resourceFilter 'res.metadata.name' gave StringType, not a bool", id="not-bool"),
    ],
)  # fmt: skip
async def test_a_filter_that_cannot_decide_names_itself(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(FilterFailed) as raised:
        await compile_filters(receiver_of(**spec)).allows(0, APP, req=TAG, budget=Budget())
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param({"resourceFilter": "res.metadata.name == req.tag"}, None, id="valid-shared"),
        pytest.param({"resources": [{"kind": "GitRepository", "name": "a", "filter": "true"}]},
                     None, id="valid-own"),
        pytest.param({"resourceFilter": "res.metadata.name =="},
                     "spec.resourceFilter: invalid CEL expression 'res.metadata.name =='",
                     id="invalid-shared"),
        pytest.param({"resources": [{"kind": "OCIRepository", "name": "a"},
                                    {"kind": "GitRepository", "name": "b", "filter": "(("}]},
                     "spec.resources[1].filter: invalid CEL expression '(('", id="invalid-own"),
    ],
)  # fmt: skip
def test_filters_that_do_not_compile_are_refused_naming_the_field(
    spec: dict[str, Any], problem: str | None
) -> None:
    found = unsupported(receiver_of(**spec))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)
    if problem is not None:
        with pytest.raises(InvalidFilter):
            compile_filters(receiver_of(**spec))


def test_the_request_must_be_json_for_a_filter() -> None:
    assert request_of(b'{"tag": "app"}') == {"tag": "app"}
    assert request_of(b"") == {}
    with pytest.raises(FilterFailed, match="the request body is not JSON"):
        request_of(b"tag=app")


def requested_at(obj: dict[str, Any]) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get("reconcile.fluxcd.io/requestedAt")


async def annotated(p: Platform, *names: str) -> dict[str, bool]:
    return {
        name: requested_at(await p.kube.get(GITREPO, name, p.namespace)) is not None
        for name in names
    }


async def test_resource_filter_acts_only_on_what_the_request_names(platform: Platform) -> None:
    p = platform
    for name, team in (("flt-app", "web"), ("flt-db", "web"), ("flt-etl", "data")):
        await parked(p, name, team=team)
    url = await p.receiver(
        "filtered",
        "generic",
        "unused",
        [
            {"kind": "GitRepository", "name": "*", "matchLabels": {"team": "web"}},
            {"kind": "GitRepository", "name": "flt-etl", "filter": "req.all == true"},
        ],
        resourceFilter="req.all == true || res.metadata.name == 'flt-' + req.tag",
    )
    status, text = await p.post(url, json.dumps({"tag": "app", "all": False}).encode(), {})
    assert (status, text) == (200, "ok")
    assert await annotated(p, "flt-app", "flt-db", "flt-etl") == {
        "flt-app": True,
        "flt-db": False,
        "flt-etl": False,
    }
    # A different body right after is not folded into the first: it acts on its own.
    status, _ = await p.post(url, json.dumps({"tag": "db", "all": True}).encode(), {})
    assert status == 200
    assert await annotated(p, "flt-db", "flt-etl") == {"flt-db": True, "flt-etl": True}


async def test_a_filtered_receiver_refuses_a_body_that_is_not_json(platform: Platform) -> None:
    p = platform
    await parked(p, "flt-plain")
    url = await p.receiver(
        "filtered-plain",
        "generic",
        "unused",
        [{"kind": "GitRepository", "name": "flt-plain"}],
        resourceFilter="req.tag == 'x'",
    )
    status, text = await p.post(url, b"tag=x", {})
    assert status == 400
    assert text == "the request body is not JSON, which the Receiver's filters read"
    assert await annotated(p, "flt-plain") == {"flt-plain": False}


async def test_a_filter_that_does_not_compile_stalls_the_receiver(platform: Platform) -> None:
    p = platform
    await p.create(
        RECEIVER,
        "bad-filter",
        {
            "type": "generic",
            "secretRef": {"name": "bad-filter-token"},
            "resources": [{"kind": "GitRepository", "name": "x"}],
            "resourceFilter": "res.metadata.name ==",
        },
    )
    obj = await p.observe.wait(
        RECEIVER, "bad-filter", lambda o: (condition(o, "Stalled") or {}).get("status") == "True"
    )
    message = condition(obj, "Stalled")["message"]  # type: ignore[index]
    assert message.startswith("spec.resourceFilter: invalid CEL expression 'res.metadata.name =='")
    assert "webhookPath" not in obj["status"]


NESTED_FILTER = "req.a.all(x, req.a.all(y, req.a.all(z, x + y + z >= 0)))"
"""A million iterations over a 100-element list: about 50 s of cel-python's time
unbounded, on the event loop it would have stopped every other webhook."""


async def test_a_filter_past_its_budget_fails_while_other_receivers_are_served(
    platform: Platform,
) -> None:
    p = platform
    await parked(p, "flt-attacked")
    await parked(p, "flt-bystander")
    attack_url = await p.receiver(
        "attack",
        "generic",
        "unused",
        [{"kind": "GitRepository", "name": "flt-attacked"}],
        resourceFilter=NESTED_FILTER,
    )
    other_url = await p.receiver(
        "bystander", "generic", "unused", [{"kind": "GitRepository", "name": "flt-bystander"}]
    )
    body = json.dumps({"a": list(range(100))}).encode()
    assert len(body) < 400
    acted = p.counts.actions
    attack = asyncio.get_running_loop().create_task(p.post(attack_url, body, {}))
    # The attack's action has begun (it is evaluating its filter) ...
    for _ in range(3000):
        if p.counts.actions > acted or attack.done():
            break
        await asyncio.sleep(0.01)
    # ... and another Receiver is served, to the end, before it has finished.
    assert await p.post(other_url, b"{}", {}) == (200, "ok")
    assert await annotated(p, "flt-bystander") == {"flt-bystander": True}
    assert not attack.done()
    status, text = await attack
    assert status == 500
    assert text == (
        f"spec.resourceFilter {NESTED_FILTER!r}: CEL evaluation exceeded its cost budget "
        "of 100000 steps (spent 100001)"
    )
    assert await annotated(p, "flt-attacked") == {"flt-attacked": False}


async def test_a_filtered_receiver_refuses_a_body_past_its_limit(platform: Platform) -> None:
    p = platform
    await parked(p, "flt-big")
    url = await p.receiver(
        "filtered-big",
        "generic",
        "unused",
        [{"kind": "GitRepository", "name": "flt-big"}],
        resourceFilter="req.tag == 'x'",
    )
    body = json.dumps({"tag": "x", "pad": "y" * 70_000}).encode()
    status, text = await p.post(url, body, {})
    assert (status, text) == (
        413,
        "body larger than 65536 bytes, the limit of a Receiver with CEL filters",
    )
    assert await annotated(p, "flt-big") == {"flt-big": False}
