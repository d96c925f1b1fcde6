"""Client-side throttling: off when the API server has Priority and Fairness (as
Flux's runtime client decides), and a 429's Retry-After honoured.

Against a real HTTPS peer on loopback that answers as a server with or
without APF would, and against the real control plane (v1.20: v1beta1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from sluice_envtest.pytest_plugin import Cluster
from sluice_envtest.traps import Recorded, RecordingHttpsServer
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import TooManyRequests
from sluice_runtime.kube.kubeconfigs import Credentials
from sluice_runtime.kube.throttling import retry_after

VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0"}


def group(*versions: str) -> dict[str, Any]:
    return {
        "kind": "APIGroup",
        "name": "flowcontrol.apiserver.k8s.io",
        "versions": [{"groupVersion": f"flowcontrol.apiserver.k8s.io/{v}", "version": v}
                     for v in versions],
    }  # fmt: skip


@dataclass
class ApiServer(RecordingHttpsServer):
    """Answers /version, the flowcontrol group (when it has `flowcontrol` versions),
    and sheds the first `shed` requests to /api/v1/namespaces with 429."""

    flowcontrol: tuple[str, ...] = ()
    shed: int = 0
    retry_after: str | None = "0"
    answers: dict[str, int] = field(default_factory=dict)

    async def _record(self, request: web.Request) -> web.Response:
        self.requests.append(Recorded(request.method, request.path, dict(request.headers)))
        if request.path == "/version":
            return web.json_response(VERSION)
        if request.path == "/apis/flowcontrol.apiserver.k8s.io":
            if not self.flowcontrol:
                return web.json_response({"kind": "Status", "code": 404}, status=404)
            return web.json_response(group(*self.flowcontrol))
        if self.shed > 0:
            self.shed -= 1
            headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
            body = {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                    "message": "too many requests, please try again later"}  # fmt: skip
            return web.json_response(body, status=429, headers=headers)
        return web.json_response({"kind": "NamespaceList", "items": []})


async def connect(server: ApiServer, *, qps: float = 5.0) -> KubeClient:
    credentials = Credentials(server.url, ca_data=server.ca_pem)
    return await KubeClient.from_credentials(credentials, qps=qps, burst=1)


@pytest.mark.parametrize(
    ("served", "throttled"),
    [
        pytest.param(("v1", "v1beta3"), False, id="current-server-v1"),
        pytest.param(("v1beta3",), False, id="v1beta3"),
        pytest.param(("v1beta1",), False, id="v1.20-v1beta1"),
        pytest.param(("v1alpha1",), True, id="alpha-only"),
        pytest.param((), True, id="no-apf"),
    ],
)
async def test_client_side_throttling_is_off_when_the_server_has_apf(
    served: tuple[str, ...], throttled: bool
) -> None:
    async with ApiServer(flowcontrol=served) as server:
        client = await connect(server)
        try:
            assert client.throttled is throttled
        finally:
            await client.close()


async def test_a_429_is_sent_again_after_its_retry_after() -> None:
    async with ApiServer(flowcontrol=("v1",), shed=2) as server:
        client = await connect(server)
        try:
            await client.request("GET", "/api/v1/namespaces")
        finally:
            await client.close()
    listed = [r for r in server.requests if r.path == "/api/v1/namespaces"]
    assert len(listed) == 3, "two 429s, then the answer"


async def test_a_server_that_keeps_shedding_is_reported() -> None:
    async with ApiServer(flowcontrol=("v1",), shed=100) as server:
        client = await connect(server)
        try:
            with pytest.raises(TooManyRequests):
                await client.request("GET", "/api/v1/namespaces")
        finally:
            await client.close()
    assert len([r for r in server.requests if r.path == "/api/v1/namespaces"]) == 11


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        pytest.param("3", 3.0, id="seconds"),
        pytest.param(None, 1.0, id="missing"),
        pytest.param("soon", 1.0, id="unreadable"),
        pytest.param("3600", 30.0, id="capped"),
        pytest.param("-5", 0.0, id="negative"),
    ],
)
def test_retry_after(header: str | None, seconds: float) -> None:
    assert retry_after(header) == seconds


async def test_the_local_control_plane_has_apf(cluster: Cluster) -> None:
    client = await KubeClient.connect(kubeconfig=str(cluster.kubeconfig), qps=5, burst=1)
    try:
        assert client.throttled is False
    finally:
        await client.close()
