"""The verify step of a GitRepository: the signatures `spec.verify` asks for.

The signature rules themselves (trusted keys, OpenPGP and SSH checks) are
in `verifying`; this step picks what to check (the tag, the commit, or
both) and turns the outcome into the SourceVerified condition.
"""

from __future__ import annotations

import asyncio

from sluice_api.source import SourceCondition, SourceReason
from sluice_runtime.kube.secrets import SecretError, secret_data
from sluice_runtime.reconciling.errors import Stalling, StepError
from sluice_runtime.reconciling.steps import Result, step
from source_controller import verifying
from source_controller.gitcontexts import GitRepositoryContext


@step()
async def reconcile_verify(ctx: GitRepositoryContext) -> Result | None:
    """Check the signatures `spec.verify` asks for; a failure keeps the last artifact.

    SourceVerified is set here rather than owned by the step, so that a
    no-op fetch (the stored commit was verified when it was stored) keeps it.
    """
    verify = ctx.obj.spec.verify
    if verify is None:
        ctx.conditions.delete(SourceCondition.SOURCE_VERIFIED)
        return None
    if ctx.noop:
        return None
    assert ctx.checkout is not None and ctx.resolved is not None
    mode = "HEAD" if verify.mode.lower() == "head" else verify.mode
    tag = tag_name(ctx)
    if mode != "HEAD" and tag is None:
        raise Stalling(
            SourceReason.VERIFICATION_ERROR,
            f"spec.verify.mode '{mode}' verifies a tag, but spec.ref names no tag "
            "(use spec.ref.tag or spec.ref.semver, or mode HEAD)",
            condition=SourceCondition.SOURCE_VERIFIED,
        )
    namespace = ctx.obj.namespace
    try:
        data = await secret_data(ctx.client, namespace, verify.secret_ref.name)
        keys = verifying.trusted_keys(data)
    except (SecretError, verifying.VerificationError) as error:
        raise _unverified(f"verification keys: {error}") from None
    if not keys:
        raise _unverified(
            f"verification keys: secret '{namespace}/{verify.secret_ref.name}' holds no "
            "OpenPGP (armored) or SSH public keys"
        )
    checkout = ctx.checkout
    checks: list[tuple[str, str, bytes | None, bytes]] = []
    if mode in ("Tag", "TagAndHEAD"):
        assert tag is not None
        # A lightweight tag is only a name for a commit: nothing signed it.
        payload, signature = verifying.split_signed_tag(checkout.tag_object or b"")
        checks.append(("tag", tag, signature, payload))
    if mode in ("HEAD", "TagAndHEAD"):
        checks.append(("commit", checkout.commit, checkout.signature, checkout.signed_payload))
    verified = []
    for what, name, signature, payload in checks:
        failed = f"signature verification of {what} '{name}' failed"
        if signature is None:
            raise _unverified(f"{failed}: {what} is not signed")
        try:
            key = await asyncio.to_thread(verifying.verify, signature, payload, keys)
        except verifying.VerificationError as error:
            raise _unverified(f"{failed}: {error}") from None
        verified.append(f"{what} '{name}' with key '{key}'")
    ctx.conditions.mark_true(
        SourceCondition.SOURCE_VERIFIED,
        SourceReason.SUCCEEDED,
        "verified signature of\n" + "\n".join(f"\t- {v}" for v in verified),
    )
    return None


def _unverified(message: str) -> StepError:
    return StepError(
        SourceReason.VERIFICATION_ERROR, message, condition=SourceCondition.SOURCE_VERIFIED
    )


def tag_name(ctx: GitRepositoryContext) -> str | None:
    """The tag `spec.ref` names (a semver ref: the one resolved), fetched and verified."""
    ref = ctx.obj.spec.ref
    if ref is None or ref.commit or ref.name:
        return None
    if ref.tag:
        return ref.tag
    if ref.semver and ctx.resolved is not None:
        return ctx.resolved.revision.split("@sha1:", 1)[0]
    return None
