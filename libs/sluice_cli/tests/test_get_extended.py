"""`sluice get`, `suspend`, `resume` and `reconcile` for the kinds beyond Flux's own
controllers: ResourceSets and their input providers (Flux Operator's columns),
ArtifactGenerators, ExternalArtifacts and KubeSphere Applications."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_cli import kinds
from sluice_envtest.harness import running_service
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime.kube.client import KubeClient

from .conftest import CONFIG_MAP, KUSTOMIZATION, Capture, cli_output, sluice, sluice_sync

WAITING = ["waiting", "to", "be", "reconciled"]


def ready(
    message: str, *, status: str = "True", at: str = "2026-11-21T10:00:00Z"
) -> dict[str, Any]:
    return {
        "type": "Ready", "status": status, "reason": "ReconciliationSucceeded",
        "message": message, "lastTransitionTime": at,
    }  # fmt: skip


async def make(
    kube: KubeClient,
    kind: kinds.Kind,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    *,
    status: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> None:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    body = {"apiVersion": kind.rt.api_version, "kind": kind.rt.kind, "metadata": metadata}
    await kube.create(kind.rt, {**body, "spec": spec})
    if status is not None:
        await kube.merge_patch(
            kind.rt, name, {"status": status}, namespace=namespace, subresource="status"
        )


def entry(name: str) -> dict[str, str]:
    return {"id": f"apps_{name}__ConfigMap", "v": "v1"}


async def make_extended_fleet(kube: KubeClient, namespace: str) -> None:
    await make(kube, kinds.RESOURCESET, namespace, "tenants", {"inputs": [{"tenant": "a"}]},
               status={"inventory": {"entries": [entry("a"), entry("b")]},
                       "lastAppliedRevision": "sha256:" + "a" * 64,
                       "conditions": [ready("Reconciliation finished in 1s")]})  # fmt: skip
    await make(kube, kinds.RESOURCESET, namespace, "new", {})
    await make(kube, kinds.INPUT_PROVIDER, namespace, "branches",
               {"type": "Static", "defaultValues": {"env": "dev"}},
               status={"exportedInputs": [{"id": "1"}, {"id": "2"}, {"id": "3"}],
                       "nextSchedule": {"cron": "0 * * * *", "when": "2026-11-21T11:00:00Z"},
                       "conditions": [ready("Reconciliation finished in 0s")]})  # fmt: skip
    await make(kube, kinds.ARTIFACT_GENERATOR, namespace, "split", {
        "sources": [{"alias": "repo", "kind": "GitRepository", "name": "fleet"}],
        "artifacts": [{"name": "frontend", "copy": [{"from": "@repo/fe/**", "to": "@artifact/"}]}],
    }, status={"conditions": [ready("reconciliation succeeded, generated 1 artifact(s)")]})  # fmt: skip
    await make(kube, kinds.EXTERNAL, namespace, "frontend",
               {"sourceRef": {"apiVersion": "source.extensions.fluxcd.io/v1beta1",
                              "kind": "ArtifactGenerator", "name": "split"}},
               status={"artifact": {"path": "x.tar.gz", "url": "http://storage/x.tar.gz",
                                    "revision": "latest@sha256:" + "b" * 64,
                                    "digest": "sha256:" + "b" * 64,
                                    "lastUpdateTime": "2026-11-21T10:00:00Z"},
                       "conditions": [ready("stored artifact")]})  # fmt: skip
    await make(kube, kinds.APPLICATION, namespace, "shop", {"kind": "fluxcd"},
               labels={"gitops.kubesphere.io/ready-number": "1-2"},
               status={"conditions": [ready("1 of 2 HelmReleases not ready", status="False")]})  # fmt: skip


async def test_get_all_lists_the_extended_kinds_with_their_columns(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    await make_extended_fleet(kube, namespace)

    code = await sluice("get", "all", "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    tables = [[line.split() for line in table.splitlines()] for table in out.split("\n\n")]
    assert tables == [
        # An ExternalArtifact: a revision, nothing to suspend (its producer is).
        [["NAME", "REVISION", "READY", "MESSAGE"],
         ["externalartifact/frontend", "latest@sha256:" + "b" * 64, "True", "stored", "artifact"]],
        [["NAME", "SUSPENDED", "READY", "MESSAGE"],
         ["artifactgenerator/split", "False", "True", "reconciliation", "succeeded,",
          "generated", "1", "artifact(s)"]],
        # Flux Operator's columns: RESOURCES (the inventory) and LAST RECONCILED.
        [["NAME", "RESOURCES", "READY", "MESSAGE", "LAST", "RECONCILED"],
         ["resourceset/new", "0", "False", *WAITING, "Unknown"],
         ["resourceset/tenants", "2", "True", "Reconciliation", "finished", "in", "1s",
          "2026-11-21T10:00:00Z"]],
        [["NAME", "INPUTS", "READY", "MESSAGE", "NEXT", "SCHEDULE"],
         ["resourcesetinputprovider/branches", "3", "True", "Reconciliation", "finished", "in",
          "0s", "2026-11-21T11:00:00Z"]],
        # KubeSphere's Application: the CRD's own columns (Flux has no such kind).
        [["NAME", "KIND", "READY", "CHILDREN", "READY", "MESSAGE"],
         ["application/shop", "fluxcd", "1-2", "False", "1", "of", "2", "HelmReleases", "not",
          "ready"]],
    ]  # fmt: skip

    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    assert await sluice("get", "sources", "external", "frontend", *flags) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[0] == "frontend"
    assert await sluice("get", "rsip", *flags) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:2] == ["branches", "3"]
    assert await sluice("get", "app", "nope", *flags) == 1
    assert capsys.readouterr().err == f"✗ sluice get: Application {namespace}/nope not found\n"


async def test_suspend_and_resume_use_the_reconcile_annotation(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    """ResourceSets, input providers and ArtifactGenerators have no spec.suspend:
    they are suspended with their `reconcile: disabled` annotation, as
    `flux-operator suspend` and Flux's source-watcher do it."""
    await make_extended_fleet(kube, namespace)
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    cases = [
        (kinds.RESOURCESET, "rset", "tenants", "fluxcd.controlplane.io/reconcile"),
        (kinds.INPUT_PROVIDER, "inputprovider", "branches", "fluxcd.controlplane.io/reconcile"),
        (kinds.ARTIFACT_GENERATOR, "ag", "split", "source.extensions.fluxcd.io/reconcile"),
    ]
    for kind, word, name, annotation in cases:
        assert await sluice("suspend", word, name, *flags) == 0
        assert cli_output(capsys)[0] == f"✔ {kind.rt.kind} {namespace}/{name} suspended\n"
        obj = await kube.get(kind.rt, name, namespace)
        assert obj["metadata"]["annotations"] == {annotation: "disabled"}
        assert "suspend" not in obj["spec"]

    assert await sluice("get", "rset", "tenants", *flags) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["tenants", "2", "Suspended"]
    assert await sluice("get", "ag", *flags) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["split", "True", "True"]
    assert await sluice("reconcile", "rset", "tenants", *flags) == 1
    assert cli_output(capsys)[1] == (
        f"✗ sluice reconcile: ResourceSet {namespace}/tenants is suspended: resume it first "
        "(sluice resume ...)\n"
    )

    for kind, word, name, annotation in cases:
        assert await sluice("resume", word, name, *flags, "--wait", "false") == 0
        assert cli_output(capsys)[0] == f"✔ {kind.rt.kind} {namespace}/{name} resumed\n"
        obj = await kube.get(kind.rt, name, namespace)
        assert annotation not in (obj["metadata"].get("annotations") or {})


def test_kinds_nothing_reconciles_or_suspends_have_no_such_verb(capsys: Capture) -> None:
    """An ExternalArtifact is refreshed by its producer, and an Application has no
    spec.suspend: the CLI offers no verb that would wait for nothing."""
    for argv in (
        ("reconcile", "source", "external", "x"),
        ("suspend", "source", "external", "x"),
        ("suspend", "application", "x"),
    ):
        with pytest.raises(SystemExit) as exited:
            sluice_sync(*argv, "--kubeconfig", "/nonexistent")
        assert exited.value.code == 2
        assert "invalid choice" in capsys.readouterr().err


async def test_reconcile_resourceset_and_provider_wait_for_the_controller(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    from resourceset_controller import __main__ as resourceset_main

    kubeconfig = str(cluster.kubeconfig)
    flags = ("-n", namespace, "--kubeconfig", kubeconfig, "--timeout", "60s")
    await make(kube, kinds.INPUT_PROVIDER, namespace, "tenants",
               {"type": "Static", "defaultValues": {"tenant": "blue"}})  # fmt: skip
    await make(kube, kinds.RESOURCESET, namespace, "tenants", {
        "inputsFrom": [{"kind": "ResourceSetInputProvider", "name": "tenants"}],
        "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "tenant-<< inputs.tenant >>", "namespace": namespace}}],
    })  # fmt: skip
    async with running_service(resourceset_main, kubeconfig=kubeconfig, namespace=namespace):
        provider_code = await sluice("reconcile", "inputprovider", "tenants", *flags)
        provider_out, provider_err = cli_output(capsys)
        code = await sluice("reconcile", "rset", "tenants", *flags)
        out, err = cli_output(capsys)
    assert (provider_code, code) == (0, 0), provider_err + err
    provider = await kube.get(kinds.INPUT_PROVIDER.rt, "tenants", namespace)
    exported = provider["status"]["lastExportedRevision"]
    assert provider_out == (
        f"✔ ResourceSetInputProvider {namespace}/tenants: exported revision {exported}\n"
    )
    obj = await kube.get(kinds.RESOURCESET.rt, "tenants", namespace)
    revision = obj["status"]["lastAppliedRevision"]
    assert out == f"✔ ResourceSet {namespace}/tenants: applied revision {revision}\n"
    assert await kube.get(CONFIG_MAP, "tenant-blue", namespace)


async def test_reconcile_with_source_of_an_external_artifact_names_its_producer(
    cluster: Cluster, kube: KubeClient, namespace: str, capsys: Capture
) -> None:
    """Nothing reconciles an ExternalArtifact itself: `--with-source` says which
    producer to reconcile rather than waiting for nothing."""
    await make_extended_fleet(kube, namespace)
    await kube.create(KUSTOMIZATION, {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
        "metadata": {"name": "frontend", "namespace": namespace},
        "spec": {"interval": "10m", "path": "./", "prune": True,
                 "sourceRef": {"kind": "ExternalArtifact", "name": "frontend"}},
    })  # fmt: skip
    flags = ("-n", namespace, "--kubeconfig", str(cluster.kubeconfig))
    assert await sluice("reconcile", "ks", "frontend", "--with-source", *flags) == 1
    assert cli_output(capsys) == ("", (
        f"✗ sluice reconcile: Kustomization {namespace}/frontend: its source ExternalArtifact "
        f"{namespace}/frontend is refreshed by its producer; run `sluice reconcile "
        "artifactgenerator split` first\n"
    ))  # fmt: skip
    annotations = (await kube.get(KUSTOMIZATION, "frontend", namespace))["metadata"]
    assert "annotations" not in annotations  # nothing was requested


async def test_get_all_skips_kinds_whose_crd_is_absent(
    second_cluster: Cluster, capsys: Capture
) -> None:
    """A cluster without the CRDs (KubeSphere's Application is often absent):
    `get all` leaves the kinds out and succeeds; naming the kind says what to do."""
    kubeconfig = str(second_cluster.kubeconfig)
    assert await sluice("get", "all", "-A", "--kubeconfig", kubeconfig) == 0
    assert capsys.readouterr() == ("", "no Flux objects found in any namespace\n")
    assert await sluice("get", "applications", "-A", "--kubeconfig", kubeconfig) == 1
    assert capsys.readouterr().err == (
        "✗ sluice get: the Application API (gitops.kubesphere.io/v1alpha1) is not served by "
        "this cluster: install the CRDs with `sluice crds install`\n"
    )
