"""KubeClient sends past kubernetes-asyncio's `ApiClient.call_api` (kube/sending.py):
what reaches the server is what that path sent, byte for byte, and its credentials
are still renewed per request.

Against a real HTTPS peer on loopback that records each request whole (method,
path, query string, headers, body), with `call_api` itself as the reference.
"""

from __future__ import annotations

import datetime
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sluice_envtest.traps import RecordingHttpsServer
from sluice_runtime.kube.client import KubeClient
from sluice_runtime.kube.errors import ApiError
from sluice_runtime.kube.kubeconfigs import Credentials, ExecPlugin
from sluice_runtime.kube.sending import encode_body
from sluice_runtime.kube.writing import APPLY_PATCH, JSON_PATCH, MERGE_PATCH


@dataclass(frozen=True)
class Whole:
    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass
class WholeRecorder(RecordingHttpsServer):
    seen: list[Whole] = field(default_factory=list)

    async def _record(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = tuple(request.headers.items())
        self.seen.append(Whole(request.method, request.path, request.query_string, headers, body))
        return web.json_response({"kind": "Status", "code": 200})


DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "team-a", "labels": {"app": "web"},
                 "annotations": {"note": "café ✓ \"quoted\" \\ back\nslash"}},
    "spec": {"replicas": 0, "paused": False, "progressDeadlineSeconds": 600,
             "template": {"spec": {"containers": [{"name": "c", "args": ["-v", "2"],
                                                   "resources": {"limits": {"cpu": 0.5}}}]}}},
}  # fmt: skip

CASES = [
    pytest.param("PATCH", "/apis/apps/v1/namespaces/team-a/deployments/web",
                 [("fieldManager", "kustomize-controller"), ("force", "true"), ("dryRun", "All")],
                 DEPLOYMENT, APPLY_PATCH, id="apply-dry-run"),
    pytest.param("PATCH", "/apis/apps/v1/namespaces/team-a/deployments/web/status", [],
                 {"metadata": {"finalizers": None}, "status": {"conditions": []}},
                 MERGE_PATCH, id="merge-patch-with-null"),
    pytest.param("PATCH", "/api/v1/namespaces/team-a/configmaps/c", [],
                 [{"op": "remove", "path": "/metadata/labels/a~1b"}], JSON_PATCH,
                 id="json-patch-list"),
    pytest.param("POST", "/api/v1/namespaces/team-a/events", [],
                 {"kind": "Event", "count": 1, "firstTimestamp": datetime.datetime(
                     2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC), "tuple": ("a", 1)},
                 "application/json", id="create-datetime-and-tuple"),
    pytest.param("DELETE", "/api/v1/namespaces/team-a/configmaps/c", [],
                 {"apiVersion": "v1", "kind": "DeleteOptions",
                  "propagationPolicy": "Background"}, "application/json", id="delete-options"),
    pytest.param("POST", "/api/v1/namespaces", [], {}, "application/json", id="empty-body"),
    pytest.param("PUT", "/api/v1/namespaces/team-a", [], "a string", "application/json",
                 id="string-body"),
    pytest.param("GET", "/api/v1/namespaces/team-a/configmaps",
                 [("labelSelector", "app in (a,b),tier!=x"), ("limit", "500"),
                  ("continue", "eyJ2Ijoi+/=")], None, "application/json", id="list-query"),
    pytest.param("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:aggregate-to-edit",
                 [], None, "application/json", id="colon-in-name"),
]  # fmt: skip


async def reference(
    client: KubeClient,
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: Any,
    content_type: str,
    headers: dict[str, str],
) -> None:
    """What KubeClient sent before: the request through kubernetes-asyncio's call_api."""
    response = await client._shared.api.call_api(
        path, method, query_params=list(query),
        header_params={"Accept": "application/json", "Content-Type": content_type, **headers},
        body=body, auth_settings=["BearerToken"], _preload_content=False, _request_timeout=30.0,
    )  # fmt: skip
    response.release()


@pytest.mark.parametrize("user", [pytest.param(None, id="own"), pytest.param("tenant", id="as")])
@pytest.mark.parametrize(("method", "path", "query", "body", "content_type"), CASES)
async def test_the_request_is_what_call_api_sent(
    method: str,
    path: str,
    query: list[tuple[str, str]],
    body: Any,
    content_type: str,
    user: str | None,
) -> None:
    async with WholeRecorder() as server:
        credentials = Credentials(server.url, ca_data=server.ca_pem, token="t0ken")
        client = await KubeClient.from_credentials(credentials, verify=False)
        if user is not None:
            client = client.impersonate(user)
        try:
            headers = {"Impersonate-User": user} if user else {}
            await reference(client, method, path, query, body, content_type, headers)
            await client.request(method, path, query=query, body=body, content_type=content_type)
        finally:
            await client.close()
    before, after = server.seen
    assert after == before
    assert dict(after.headers)["Authorization"] == "Bearer t0ken"
    if method != "GET":
        assert json.loads(after.body) == json.loads(encode_body(body))


def test_a_body_is_json_dumps_of_it_with_datetimes_in_iso_8601() -> None:
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    body = {"at": when, "day": when.date(), "list": [1, 2.5, None, True], "é": "✓"}
    expected = '{"at": "2026-01-02T03:04:05+00:00", "day": "2026-01-02", '
    expected += '"list": [1, 2.5, null, true], "\\u00e9": "\\u2713"}'
    assert encode_body(body) == expected.encode()
    with pytest.raises(TypeError, match="set is not JSON serializable"):
        encode_body({"x": {1}})


def counting_plugin(tmp_path: Path) -> ExecPlugin:
    """Issues token `t<n>` on its n-th run, expiring in 10 s: inside the 30 s the
    client renews before expiry, so every request reruns it."""
    script = (
        "import datetime, json, pathlib\n"
        f"runs = pathlib.Path({str(tmp_path / 'runs')!r})\n"
        "n = len(runs.read_text()) + 1 if runs.exists() else 1\n"
        "runs.write_text('x' * n)\n"
        "expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=10)\n"
        "status = {'token': f't{n}', 'expirationTimestamp': expiry.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1',\n"
        "                  'kind': 'ExecCredential', 'status': status}))\n"
    )
    return ExecPlugin(sys.executable, ("-c", script), ())


async def test_an_expiring_token_is_renewed_before_each_request(tmp_path: Path) -> None:
    async with WholeRecorder() as server:
        credentials = Credentials(server.url, ca_data=server.ca_pem, exec=counting_plugin(tmp_path))
        client = await KubeClient.from_credentials(credentials, verify=False)  # issues t1
        try:
            await client.request("GET", "/api/v1/namespaces")
            await client.impersonate("tenant").request("GET", "/api/v1/namespaces")
        finally:
            await client.close()
    sent = [dict(whole.headers)["Authorization"] for whole in server.seen]
    assert sent == ["Bearer t2", "Bearer t3"]


@dataclass
class Refusing(RecordingHttpsServer):
    """Answers 503 with a body that is not UTF-8 (a proxy's page, say)."""

    async def _record(self, request: web.Request) -> web.Response:
        return web.Response(status=503, body=b"\xff\xfe upstream gone", content_type="text/plain")


async def test_an_error_body_that_is_not_utf8_is_still_a_typed_error() -> None:
    async with Refusing() as server:
        client = await KubeClient.from_credentials(
            Credentials(server.url, ca_data=server.ca_pem), verify=False
        )
        try:
            with pytest.raises(ApiError) as raised:
                await client.request("GET", "/api/v1/namespaces")
        finally:
            await client.close()
    assert raised.value.status == 503
    assert "upstream gone" in str(raised.value)
