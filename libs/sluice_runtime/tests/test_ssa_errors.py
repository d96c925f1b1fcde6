"""ApplyFailed's message and flags, and when the API calls a change immutable."""

from __future__ import annotations

import asyncio

import pytest

from sluice_runtime.kube.errors import ApiError, ApiUnavailable, Forbidden, Invalid
from sluice_runtime.ssa.changeset import ChangeSet
from sluice_runtime.ssa.errors import ApplyFailed, gather, is_immutable_error


@pytest.mark.parametrize(
    ("error", "immutable"),
    [
        pytest.param(
            Invalid(
                status=422,
                reason="Invalid",
                message='Job.batch "j" is invalid: spec.template: Invalid value: core.PodTemplateSpec{}: field is immutable',
            ),
            True,
            id="job-template",
        ),
        pytest.param(
            Invalid(
                status=422,
                reason="Invalid",
                message='ConfigMap "c" is invalid: data: Forbidden: field is immutable when `immutable` is set',
            ),
            True,
            id="immutable-configmap",
        ),
        pytest.param(
            Invalid(
                status=422,
                reason="Invalid",
                message="StatefulSet.apps \"s\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'template' are forbidden",
            ),
            True,
            id="statefulset-spec",
        ),
        pytest.param(
            ApiError(
                status=400,
                reason="BadRequest",
                message='admission webhook "v.example.com" denied the request: spec.size is immutable',
            ),
            True,
            id="webhook",
        ),
        pytest.param(
            Invalid(
                status=422,
                reason="Invalid",
                message='Service "immutable-svc" is invalid: spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535',
            ),
            False,
            id="plain-invalid-with-immutable-name",
        ),
        pytest.param(
            Forbidden(
                status=403,
                reason="Forbidden",
                message='configmaps "immutable" is forbidden: User "x" cannot patch resource',
            ),
            False,
            id="rbac",
        ),
    ],
)
def test_immutable_errors(error: ApiError, immutable: bool) -> None:
    assert is_immutable_error(error) is immutable


FORBIDDEN = Forbidden(status=403, reason="Forbidden", message='configmaps "a" is forbidden')
UNAVAILABLE = ApiUnavailable("connection refused")


@pytest.mark.parametrize(
    ("errors", "dry_run", "transient", "forbidden"),
    [
        pytest.param([FORBIDDEN], True, False, True, id="dry-run-refused"),
        pytest.param([UNAVAILABLE, UNAVAILABLE], False, True, False, id="all-transient"),
        # One object the API refused is enough to wait for the retry interval.
        pytest.param([UNAVAILABLE, FORBIDDEN], False, False, True, id="one-refusal"),
    ],
)
def test_a_combined_failure_is_complete_at_construction(
    errors: list[Exception], dry_run: bool, transient: bool, forbidden: bool
) -> None:
    failures = [ApplyFailed.of(f"ConfigMap/a/{i}", None, e) for i, e in enumerate(errors)]
    combined = ApplyFailed.combine(failures, ChangeSet(), dry_run=dry_run)
    assert (combined.dry_run, combined.transient, combined.forbidden) == (
        dry_run,
        transient,
        forbidden,
    )
    assert combined.failures == failures
    assert str(combined).splitlines()[0].startswith("ConfigMap/a/0: ")


def test_a_hint_shared_by_every_failure_is_said_once() -> None:
    failures = [ApplyFailed(f"ConfigMap/a/{i}", "forbidden", hint="grant it") for i in range(2)]
    assert str(ApplyFailed.combine(failures, ChangeSet())) == (
        "ConfigMap/a/0: forbidden\nConfigMap/a/1: forbidden; grant it"
    )
    mixed = [ApplyFailed("a", "x", hint="h"), ApplyFailed("b", "y")]
    assert str(ApplyFailed.combine(mixed, ChangeSet())) == "a: x; h\nb: y"


async def test_gather_collects_every_answer_within_the_limit() -> None:
    running = peak = 0

    async def one(n: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        running -= 1
        if n % 3 == 0:
            raise ApplyFailed(str(n), "refused")
        return n * 10

    done, failures = await gather(list(range(7)), one, limit=asyncio.Semaphore(2))
    assert done == [(1, 10), (2, 20), (4, 40), (5, 50)]
    assert [f.subject for f in failures] == ["0", "3", "6"]
    assert peak == 2
