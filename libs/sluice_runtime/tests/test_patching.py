"""Merge-patch computation: what the runner sends to /status."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_runtime.kube.patching import merge_patch


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        pytest.param({"a": 1}, {"a": 1}, {}, id="equal-is-empty"),
        pytest.param({"a": 1}, {"a": 2}, {"a": 2}, id="changed-scalar"),
        pytest.param({"a": 1, "b": 2}, {"a": 1}, {"b": None}, id="removed-key-is-null"),
        pytest.param({}, {"a": {"b": 1}}, {"a": {"b": 1}}, id="new-object"),
        pytest.param(
            {"artifact": {"revision": "r1", "size": 3}},
            {"artifact": {"revision": "r2", "size": 3}},
            {"artifact": {"revision": "r2"}},
            id="nested-only-the-difference",
        ),
        pytest.param({"m": {"x": "1"}}, {"m": {}}, {"m": {"x": None}}, id="emptied-map"),
        pytest.param({"l": [1, 2]}, {"l": [1]}, {"l": [1]}, id="lists-replaced-whole"),
        pytest.param({"a": None}, {"a": {"b": 1}}, {"a": {"b": 1}}, id="null-to-object"),
    ],
)
def test_merge_patch(old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(old, new) == patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386's reference algorithm, to check that our patches round-trip."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


@pytest.mark.parametrize(
    ("old", "new"),
    [
        pytest.param(
            {"conditions": [{"type": "Ready"}], "artifact": {"metadata": {"a": "1"}}},
            {"conditions": [], "artifact": {"metadata": {"b": "2"}}, "url": "u"},
            id="status-like",
        ),
        pytest.param({"x": {"y": {"z": 1}}}, {"x": {"y": {}}}, id="deep-removal"),
    ],
)
def test_patch_applied_to_old_gives_new(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert apply_merge_patch(old, merge_patch(old, new)) == new
