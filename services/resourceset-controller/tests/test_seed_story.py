"""The design note's story: one OCI repository, one tag per
microservice, a ResourceSetInputProvider listing the tags and a ResourceSet
deploying an OCIRepository pinned by digest and a Kustomization per tag; CI
calls a Receiver after a push. Its manifests are used as written, except for
the placeholders (registry, namespace) and `insecure: true`, which the test
registry (plain HTTP) needs. The CI step runs the README's script: `sluice
diff artifact` skips an unchanged app, `sluice push artifact` sends a changed
one from its directory."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from sluice_envtest.harness import condition, is_ready, make_secret
from sluice_envtest.registry import OciRegistry

from .conftest import (
    CONFIG_MAP,
    KUSTOMIZATION,
    OCIREPO,
    RECEIVER,
    RSET,
    RSIP,
    Fleet,
    generic_hmac_headers,
)

PROVIDER = """
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSetInputProvider
metadata:
  name: app-microservices-tags
  namespace: default
  annotations:
    fluxcd.controlplane.io/reconcile: "enabled"
    fluxcd.controlplane.io/reconcileEvery: "5m"
spec:
    type: OCIRepositoryTag
    url: oci://ghcr.io/<org>/<mono-repo>
    secretRef:
      name: ghcr-pull-secret
    filter:
      includeTag: "^app-.*"
"""

RECEIVER_YAML = """
apiVersion: notification.toolkit.fluxcd.io/v1
kind: Receiver
metadata:
  name: registry-scan-webhook
  namespace: apps
spec:
  type: generic-hmac
  secretRef:
    name: receiver-token
  resources:
    - apiVersion: fluxcd.controlplane.io/v1
      kind: ResourceSetInputProvider
      name: app-microservices-tags
"""

RESOURCESET = """
apiVersion: fluxcd.controlplane.io/v1
kind: ResourceSet
metadata:
  name: app-microservices
  namespace: apps
spec:
  inputsFrom:
    - kind: ResourceSetInputProvider
      name: app-microservices-tags
  resources:
    - apiVersion: source.toolkit.fluxcd.io/v1beta2
      kind: OCIRepository
      metadata:
        name: << inputs.tag | quote >>
        namespace: apps
      spec:
        interval: 1h
        url: oci://ghcr.io/<org>/<mono-repo>
        ref:
          digest: << inputs.digest | quote >>
        secretRef:
          name: ghcr-pull-secret
    - apiVersion: kustomize.toolkit.fluxcd.io/v1
      kind: Kustomization
      metadata:
        name: << inputs.tag | quote >>
        namespace: apps
      spec:
        interval: 1h
        retryInterval: 5m
        timeout: 5m
        sourceRef:
          kind: OCIRepository
          name: << inputs.tag | quote >>
        path: overlays/production
        prune: true
        wait: true
"""

TOKEN = "ci-webhook-token"


def localized(text: str, registry: OciRegistry, repository: str, namespace: str) -> str:
    """The seed's placeholders filled in for this test's registry and namespace."""
    url = registry.oci_url(repository)
    lines = []
    for line in text.splitlines():
        if line.strip() == "url: oci://ghcr.io/<org>/<mono-repo>":
            indent = line[: len(line) - len(line.lstrip())]
            lines += [f"{indent}url: {url}", f"{indent}insecure: true"]
        else:
            lines.append(line)
    return (
        "\n".join(lines)
        .replace("namespace: default", f"namespace: {namespace}")
        .replace("namespace: apps", f"namespace: {namespace}")
    )


def manifests(app: str, version: str, namespace: str) -> dict[str, str]:
    """What CI pushes for one microservice: a ConfigMap under overlays/production."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": app, "namespace": namespace},
        "data": {"version": version},
    }
    return {"overlays/production/app.yaml": json.dumps(cm)}


async def sluice(*args: str, home: Path) -> tuple[int, str]:
    """Run the `sluice` command as a CI job does; its exit code and stdout."""
    done = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sluice_cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "DOCKER_CONFIG": str(home / "docker")},
    )  # fmt: skip
    out, err = await done.communicate()
    assert done.returncode is not None
    assert done.returncode in (0, 1), err.decode()
    return done.returncode, out.decode() + err.decode()


async def app_gone(f: Fleet, app: str) -> bool:
    """Nothing of `app` is left: its Kustomization, its OCIRepository, what it deployed."""
    return not any(
        [
            await f.exists(KUSTOMIZATION, f"app-{app}"),
            await f.exists(OCIREPO, f"app-{app}"),
            await f.exists(CONFIG_MAP, app),
        ]
    )


async def test_one_app_per_tag_upgraded_by_webhook_and_removed_with_its_tag(
    fleet: Fleet, tmp_path: Path
) -> None:
    f = fleet
    ns = f.namespace
    repo = f"{ns}/mono-repo"
    with OciRegistry(username="ci", password="pull-pw") as registry:
        await make_secret(
            f.kube, ns, "ghcr-pull-secret",
            {".dockerconfigjson": json.dumps(registry.docker_config)},
            type_="kubernetes.io/dockerconfigjson",
        )  # fmt: skip
        await make_secret(f.kube, ns, "receiver-token", {"token": TOKEN})
        digests = {
            n: registry.push_artifact(
                repo, f"app-microservice{n}", files=manifests(f"microservice{n}", "1", ns)
            )
            for n in (1, 2, 3)
        }
        registry.push_artifact(repo, "latest", files=manifests("not-an-app", "1", ns))
        for text in (PROVIDER, RECEIVER_YAML, RESOURCESET):
            await f.apply_yaml(localized(text, registry, repo, ns))

        # Three apps, each from the digest its tag had.
        provider = await f.observe.wait_ready(RSIP, "app-microservices-tags")
        exported = provider["status"]["exportedInputs"]
        assert sorted((i["tag"], i["digest"]) for i in exported) == [
            (f"app-microservice{n}", digests[n]) for n in (1, 2, 3)
        ]
        assert {i["id"] for i in exported} == {"1018562219", "1018627756", "1018693293"}
        assert provider["status"]["lastExportedRevision"].startswith("sha256:")
        for n in (1, 2, 3):
            ks = await f.wait_ready(KUSTOMIZATION, f"app-microservice{n}", timeout=90)
            assert ks["status"]["lastAppliedRevision"] == digests[n]
            oci = await f.observe.get(OCIREPO, f"app-microservice{n}")
            assert oci["spec"]["ref"] == {"digest": digests[n]}
            cm = await f.observe.get(CONFIG_MAP, f"microservice{n}")
            assert cm["data"] == {"version": "1"}
        rset = await f.observe.wait_ready(RSET, "app-microservices")
        assert len(rset["status"]["inventory"]["entries"]) == 6
        assert not await f.exists(CONFIG_MAP, "not-an-app")

        # CI pushes microservice2 and calls the Receiver: only that app moves.
        before = {
            n: (await f.observe.get(KUSTOMIZATION, f"app-microservice{n}"))["metadata"][
                "resourceVersion"
            ]
            for n in (1, 3)
        }
        checkout = tmp_path / "mono-repo"
        for n, version in ((1, "1"), (2, "2")):
            for name, text in manifests(f"microservice{n}", version, ns).items():
                (checkout / f"microservice{n}" / name).parent.mkdir(parents=True)
                (checkout / f"microservice{n}" / name).write_text(text)
        ci = ("--insecure-registry", "--creds", "ci:pull-pw")
        base = registry.oci_url(repo)
        unchanged = await sluice(
            "diff", "artifact", f"{base}:app-microservice1",
            "--path", str(checkout / "microservice1"), *ci, home=tmp_path,
        )  # fmt: skip
        assert unchanged[0] == 0, unchanged[1]  # CI skips this push
        changed = await sluice(
            "diff", "artifact", f"{base}:app-microservice2",
            "--path", str(checkout / "microservice2"), *ci, home=tmp_path,
        )  # fmt: skip
        assert changed == (
            1,
            f"'{checkout / 'microservice2'}' differs from {base[6:]}:app-microservice2\n",
        )
        code, out = await sluice(
            "push", "artifact", f"{base}:app-microservice2",
            "--path", str(checkout / "microservice2"), "--source", "https://git.example/mono.git",
            "--revision", "main@sha1:" + "2" * 40, "--reproducible", "-o", "json", *ci,
            home=tmp_path,
        )  # fmt: skip
        assert code == 0, out
        new = json.loads(out)["digest"]
        receiver = await f.observe.wait_ready(RECEIVER, "registry-scan-webhook")
        body = b'{"app": "microservice2"}'
        assert (
            await f.post(receiver["status"]["webhookPath"], body, generic_hmac_headers(TOKEN, body))
            == 200
        )

        async def upgraded() -> bool:
            cm = await f.observe.get(CONFIG_MAP, "microservice2")
            return bool(cm["data"] == {"version": "2"})

        took = await f.wait_for(upgraded, timeout=30, what="microservice2 upgraded")
        print(f"microservice2 upgraded {took:.1f}s after the webhook")
        ks2 = await f.observe.wait_ready(KUSTOMIZATION, "app-microservice2")
        assert ks2["status"]["lastAppliedRevision"] == new
        for n in (1, 3):
            ks = await f.observe.get(KUSTOMIZATION, f"app-microservice{n}")
            assert ks["metadata"]["resourceVersion"] == before[n], f"app {n} was touched"
            assert (await f.observe.get(CONFIG_MAP, f"microservice{n}"))["data"] == {"version": "1"}

        # Excluding a tag uninstalls its app: Kustomization (and what it applied) first.
        await f.kube.merge_patch(
            RSIP,
            "app-microservices-tags",
            {"spec": {"filter": {"excludeTag": "microservice3$"}}},
            namespace=ns,
        )

        await f.wait_for(
            lambda: app_gone(f, "microservice3"), timeout=60, what="microservice3 uninstalled"
        )

        # Deleting a tag uninstalls its app too.
        registry.delete(repo, "manifests", digests[1])
        body = b"{}"
        assert (
            await f.post(receiver["status"]["webhookPath"], body, generic_hmac_headers(TOKEN, body))
            == 200
        )

        await f.wait_for(
            lambda: app_gone(f, "microservice1"), timeout=60, what="microservice1 uninstalled"
        )
        rset = await f.observe.wait(
            RSET,
            "app-microservices",
            lambda o: len(o["status"]["inventory"]["entries"]) == 2,
            what="inventory of one app",
        )
        ids = [e["id"] for e in rset["status"]["inventory"]["entries"]]
        assert ids == [
            f"{ns}_app-microservice2_kustomize.toolkit.fluxcd.io_Kustomization",
            f"{ns}_app-microservice2_source.toolkit.fluxcd.io_OCIRepository",
        ]
        kept = (await f.observe.get(RSIP, "app-microservices-tags"))["status"]

    # The registry is down: the provider fails and says so, and nothing changes.
    await f.observe.poke(RSIP, "app-microservices-tags", "outage")
    provider = await f.observe.get(RSIP, "app-microservices-tags")
    ready = condition(provider, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert "registry" in ready["message"]
    assert provider["status"]["exportedInputs"] == kept["exportedInputs"]
    assert provider["status"]["lastExportedRevision"] == kept["lastExportedRevision"]
    await f.observe.poke(RSET, "app-microservices", "after-outage")
    assert is_ready(await f.observe.get(RSET, "app-microservices"))
    assert await f.exists(KUSTOMIZATION, "app-microservice2")
    assert (await f.observe.get(CONFIG_MAP, "microservice2"))["data"] == {"version": "2"}
