"""API requests per Kustomization, counted (a count, not a timing, so it can be asserted).

The MTTP benchmark's app shape (four objects, `wait`, `prune`, a tenant service
account, post-build substitution) is reconciled once from scratch and once
with nothing changed; every request the kustomize-controller sends on behalf
of that Kustomization (finalizer, steps, status patches, its Events) is
counted by verb and phase through the client's request observer.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from sluice_runtime.kube.client import Request

from .conftest import GITREPO, KUSTOMIZATION, Delivery, make_tenant

APP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: app-${INDEX}
data:
  greeting: hello
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: app-${INDEX}
---
apiVersion: v1
kind: Service
metadata:
  name: app-${INDEX}
spec:
  selector:
    app: app-${INDEX}
  ports:
    - name: http
      port: 9898
      protocol: TCP
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app-${INDEX}
spec:
  rules:
    - host: app.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: app-${INDEX}
                port:
                  number: 9898
"""


class Requests:
    """Requests sent for one Kustomization, by (phase, verb)."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.counts: Counter[tuple[str, str]] = Counter()

    def requested(self, request: Request) -> None:
        if request.key == self.key:
            self.counts[(request.phase, request.verb)] += 1

    def total(self) -> int:
        return sum(self.counts.values())


async def reconciled(d: Delivery, key: str, count: int, timeout: float = 30.0) -> None:
    """Until `count` reconciles of `key` ran and the Events they recorded were written."""
    deadline = time.monotonic() + timeout
    while d.reconciles.counts[key] < count:
        assert time.monotonic() < deadline, f"{key}: {d.reconciles.counts[key]} reconciles"
        await asyncio.sleep(0.05)
    await asyncio.wait_for(d.kustomize.recorder.flushed(), timeout)


async def test_a_first_reconcile_and_a_no_change_one_cost_few_requests(delivery: Delivery) -> None:
    d = delivery
    ns = d.namespace
    await make_tenant(
        d,
        ["get", "list", "watch", "create", "update", "patch", "delete"],
        ("configmaps", "serviceaccounts", "services"),
    )
    await d.kube.request(
        "PATCH",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles/tenant",
        body=[{"op": "add", "path": "/rules/-", "value": {
            "apiGroups": ["networking.k8s.io"], "resources": ["ingresses"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}}],
        content_type="application/json-patch+json",
    )  # fmt: skip
    repo = d.repo("app")
    repo.commit("app", files={"app.yaml": APP})
    repo.push()
    await d.git_repository("app")
    await d.observe.wait_ready(GITREPO, "app")
    key = f"{ns}/app"
    counted = Requests(key)
    stop = d.kustomize.client.observe(counted)
    try:
        await d.kustomization(
            "app",
            source="app",
            wait=True,
            timeout="1m",
            serviceAccountName="tenant",
            targetNamespace=ns,
            postBuild={"substitute": {"INDEX": "1"}},
        )
        await d.observe.wait_ready(KUSTOMIZATION, "app")
        await reconciled(d, key, 1)
        first, by_phase = counted.total(), dict(counted.counts)
        counted.counts.clear()

        await d.observe.poke(KUSTOMIZATION, "app", "now")
        await reconciled(d, key, 2)
        again, again_by_phase = counted.total(), dict(counted.counts)
    finally:
        stop()
    # First: the finalizer, a dry-run and an apply of each object (no GET: the
    # dry-run's answer says whether it exists), no health GET (the apply's
    # answers show all four Current), one status patch, the Ready event.
    print("first", first, by_phase)
    print("again", again, again_by_phase)
    assert first <= 11, by_phase
    # Nothing changed (same artifact, spec and inventory; no object changed
    # since it was applied): one LIST of the objects' metadata per kind and
    # namespace tells that, and the status patch records the handled request.
    assert again <= 5, again_by_phase
