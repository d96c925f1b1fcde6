"""GitRepository spec.verify: signed commits and tags become artifacts, unsigned ones never do.

Signatures are made by git itself (`commit -S`, `tag -s`) with OpenPGP keys
(gpg) and SSH keys (`gpg.format ssh`) in private homes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sluice_envtest.gitserver import GitHttpServer, WorkRepo
from sluice_envtest.harness import condition, make_secret
from sluice_envtest.signing import SigningKey, gpg_available, pgp_key, ssh_key
from sluice_runtime.kube.client import JSON
from sluice_runtime.kube.resources import ResourceType

from .conftest import GITREPO, MANIFEST, SourceController, gitrepo

pytestmark = pytest.mark.skipif(not gpg_available(), reason="GnuPG is not installed")


@pytest.fixture(scope="module")
def keys() -> Iterator[dict[str, SigningKey]]:
    with pgp_key() as pgp, pgp_key() as stranger, ssh_key() as ssh:
        yield {"pgp": pgp, "stranger": stranger, "ssh": ssh}


def verified(obj: JSON) -> dict[str, Any] | None:
    return condition(obj, "SourceVerified")


def has_verified(status: str):  # type: ignore[no-untyped-def]
    return lambda obj: (verified(obj) or {}).get("status") == status


async def setup(
    sc: SourceController,
    git_http: GitHttpServer,
    name: str,
    *,
    trusted: str,
    verify: dict[str, Any],
    ref: dict[str, Any] | None = None,
) -> None:
    await make_secret(sc.client, sc.namespace, f"{name}-keys", {"key.asc": trusted})
    await sc.client.create(
        GITREPO,
        gitrepo(
            name,
            git_http.url(f"{name}-{sc.namespace}"),
            ref=ref or {"branch": "main"},
            verify={"secretRef": {"name": f"{name}-keys"}, **verify},
        ),
        namespace=sc.namespace,
    )


def repo(git_http: GitHttpServer, sc: SourceController, name: str) -> WorkRepo:
    return git_http.create_repo(f"{name}-{sc.namespace}")


@pytest.mark.parametrize("signer", ["pgp", "ssh"])
async def test_a_signed_head_is_verified_and_an_unsigned_one_keeps_the_last_artifact(
    source_controller: SourceController,
    git_http: GitHttpServer,
    keys: dict[str, SigningKey],
    signer: str,
) -> None:
    sc = source_controller
    key = keys[signer]
    work = repo(git_http, sc, "head")
    signed = work.commit("signed", files={"app.yaml": MANIFEST}, sign=key)
    work.push()
    await setup(sc, git_http, "head", trusted=key.public, verify={"mode": "HEAD"})
    obj = await sc.wait_ready(GITREPO, "head")
    assert obj["status"]["artifact"]["revision"] == f"main@sha1:{signed}"
    condition_ = verified(obj)
    assert condition_ is not None and condition_["status"] == "True"
    assert condition_["reason"] == "Succeeded"
    assert f"commit '{signed}' with key" in condition_["message"]

    unsigned = work.commit("unsigned", files={"app.yaml": MANIFEST.replace("k: v", "k: w")})
    work.push()
    await sc.poke(GITREPO, "head", "1")
    obj = await sc.wait(GITREPO, "head", has_verified("False"), what="SourceVerified=False")
    condition_ = verified(obj)
    assert condition_ is not None and condition_["reason"] == "VerificationError"
    assert f"commit '{unsigned}' failed: commit is not signed" in condition_["message"]
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert ready["reason"] == "VerificationError"
    assert obj["status"]["artifact"]["revision"] == f"main@sha1:{signed}", "last artifact kept"


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        pytest.param("stranger", "is not one of the trusted OpenPGP keys", id="untrusted-key"),
        pytest.param("unsigned", "commit is not signed", id="unsigned"),
        pytest.param("no-keys", "holds no OpenPGP (armored) or SSH public keys", id="no-keys"),
    ],
)
async def test_an_unverified_head_produces_no_artifact(
    source_controller: SourceController,
    git_http: GitHttpServer,
    keys: dict[str, SigningKey],
    case: str,
    expect: str,
) -> None:
    sc = source_controller
    work = repo(git_http, sc, "bad")
    work.commit("c", files={"app.yaml": MANIFEST},
                sign=keys["stranger"] if case == "stranger" else None)  # fmt: skip
    work.push()
    trusted = "no keys in here" if case == "no-keys" else keys["pgp"].public
    await setup(sc, git_http, "bad", trusted=trusted, verify={"mode": "HEAD"})
    obj = await sc.wait(GITREPO, "bad", has_verified("False"), what="SourceVerified=False")
    condition_ = verified(obj)
    assert condition_ is not None and expect in condition_["message"], condition_
    assert "artifact" not in obj["status"]
    assert not list(sc.storage.rglob("*.tar.gz")), "nothing unverified is stored"


@pytest.mark.parametrize(
    ("mode", "sign_commit", "sign_tag", "expect_status", "expect", "signer"),
    [
        pytest.param("Tag", False, True, "True", "tag 'v1.0.0' with key", "pgp", id="tag-signed"),
        pytest.param("Tag", True, False, "False", "tag 'v1.0.0' failed", "pgp", id="tag-unsigned"),
        pytest.param("TagAndHEAD", True, True, "True", "commit '", "pgp", id="both-signed"),
        pytest.param(
            "TagAndHEAD", False, True, "False", "commit is not signed", "pgp", id="head-unsigned"
        ),
        pytest.param("TagAndHEAD", True, True, "True", "with key 'SHA256:", "ssh", id="ssh-both"),
    ],
)
async def test_tag_modes(
    source_controller: SourceController,
    git_http: GitHttpServer,
    keys: dict[str, SigningKey],
    mode: str,
    sign_commit: bool,
    sign_tag: bool,
    expect_status: str,
    expect: str,
    signer: str,
) -> None:
    sc = source_controller
    key = keys[signer]
    work = repo(git_http, sc, "tagged")
    work.commit("c", files={"app.yaml": MANIFEST}, sign=key if sign_commit else None)
    work.tag("v1.0.0", message="release", sign=key if sign_tag else None)
    work.push()
    await setup(sc, git_http, "tagged", trusted=key.public, verify={"mode": mode},
                ref={"tag": "v1.0.0"})  # fmt: skip
    obj = await sc.wait(GITREPO, "tagged", has_verified(expect_status), what="SourceVerified")
    condition_ = verified(obj)
    assert condition_ is not None and expect in condition_["message"], condition_
    assert ("artifact" in obj["status"]) is (expect_status == "True")


async def test_tag_mode_without_a_tag_ref_stalls(
    source_controller: SourceController, git_http: GitHttpServer, keys: dict[str, SigningKey]
) -> None:
    sc = source_controller
    work = repo(git_http, sc, "notag")
    work.commit("c", files={"app.yaml": MANIFEST}, sign=keys["pgp"])
    work.push()
    await setup(sc, git_http, "notag", trusted=keys["pgp"].public, verify={"mode": "Tag"})
    obj = await sc.wait(GITREPO, "notag", has_verified("False"), what="SourceVerified=False")
    assert (condition(obj, "Stalled") or {}).get("status") == "True"
    assert "spec.ref names no tag" in (verified(obj) or {})["message"]


async def test_a_v1beta1_head_mode_written_in_lowercase_is_verified(
    source_controller: SourceController, git_http: GitHttpServer, keys: dict[str, SigningKey]
) -> None:
    """v1beta1 wrote the mode `head`; a GitRepository written so verifies its HEAD."""
    sc = source_controller
    key = keys["pgp"]
    work = repo(git_http, sc, "lower")
    signed = work.commit("signed", files={"app.yaml": MANIFEST}, sign=key)
    work.push()
    await make_secret(sc.client, sc.namespace, "lower-keys", {"key.asc": key.public})
    obj = gitrepo(
        "lower",
        git_http.url(f"lower-{sc.namespace}"),
        ref={"branch": "main"},
        verify={"mode": "head", "secretRef": {"name": "lower-keys"}},
    )
    obj["apiVersion"] = "source.toolkit.fluxcd.io/v1beta1"
    old = ResourceType(GITREPO.group, "v1beta1", GITREPO.plural, GITREPO.kind)
    await sc.client.create(old, obj, namespace=sc.namespace)
    ready = await sc.wait_ready(GITREPO, "lower")
    assert ready["spec"]["verify"]["mode"] == "head"
    condition_ = verified(ready)
    assert condition_ is not None and condition_["status"] == "True"
    assert f"commit '{signed}' with key" in condition_["message"]
