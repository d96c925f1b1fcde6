"""Whom a tenant's calls run as: the object's service account, else the default one."""

from __future__ import annotations

import pytest

from sluice_runtime.kube.impersonation import impersonated_user


@pytest.mark.parametrize(
    ("ns", "account", "default", "user"),
    [
        pytest.param("apps", "deployer", None, "system:serviceaccount:apps:deployer", id="own"),
        pytest.param(
            "apps", "deployer", "default", "system:serviceaccount:apps:deployer", id="own-wins"
        ),
        pytest.param("apps", None, "default", "system:serviceaccount:apps:default", id="default"),
        pytest.param("apps", "", "default", "system:serviceaccount:apps:default", id="empty-own"),
        pytest.param("apps", None, None, None, id="controller-identity"),
        pytest.param("apps", None, "", None, id="empty-default"),
    ],
)
def test_impersonated_user(
    ns: str, account: str | None, default: str | None, user: str | None
) -> None:
    assert impersonated_user(ns, account, default) == user
