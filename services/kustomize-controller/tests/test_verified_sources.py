"""A source that verifies signatures hands the Kustomization only what verified: an unsigned
commit is never applied, a signed one is."""

from __future__ import annotations

import pytest

from sluice_envtest.harness import condition
from sluice_envtest.signing import gpg_available, pgp_key
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import SECRET

from .conftest import CONFIG_MAP, GITREPO, KUSTOMIZATION, Delivery, config_map

pytestmark = pytest.mark.skipif(not gpg_available(), reason="GnuPG is not installed")


async def test_an_unsigned_commit_is_never_applied_and_a_signed_one_is(
    delivery: Delivery,
) -> None:
    d = delivery
    with pgp_key() as key:
        repo = d.repo("signed")
        repo.commit("unsigned", files={"cm.yaml": config_map("unsigned")})
        repo.push()
        await d.kube.create(
            SECRET,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "trusted", "namespace": d.namespace},
                "stringData": {"author.asc": key.public},
            },
        )
        await d.git_repository("signed", verify={"mode": "HEAD", "secretRef": {"name": "trusted"}})
        await d.kustomization("signed", source="signed", targetNamespace=d.namespace)
        source = await d.observe.wait(
            GITREPO,
            "signed",
            lambda o: (condition(o, "SourceVerified") or {}).get("status") == "False",
            what="SourceVerified=False",
        )
        assert "commit is not signed" in (condition(source, "SourceVerified") or {})["message"]
        ks = await d.observe.wait_reason(KUSTOMIZATION, "signed", "ArtifactFailed")
        assert "has no artifact yet" in (condition(ks, "Ready") or {})["message"]
        with pytest.raises(NotFound):
            await d.kube.get(CONFIG_MAP, "unsigned", d.namespace)

        repo.commit("signed", files={"cm.yaml": config_map("signed")}, sign=key)
        repo.push()
        await d.observe.poke(GITREPO, "signed", "1")
    await d.observe.wait_ready(KUSTOMIZATION, "signed")
    await d.kube.get(CONFIG_MAP, "signed", d.namespace)
    with pytest.raises(NotFound):
        await d.kube.get(CONFIG_MAP, "unsigned", d.namespace)
