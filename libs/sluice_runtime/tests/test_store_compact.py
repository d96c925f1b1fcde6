"""`compact`: the same JSON, with keys shared across separately decoded documents."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice_runtime.informing.watching import compact


def keys_of(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for key, item in value.items() for k in (key, *keys_of(item))]
    if isinstance(value, list):
        return [k for item in value for k in keys_of(item)]
    return []


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"lastTransitionTime": "t", "observedGeneration": 1}', id="flat"),
        pytest.param('{"status": {"conditions": [{"type": "Ready"}]}}', id="nested-in-list"),
        pytest.param('[{"someKeyNotInterned": null}, 1, "x", true]', id="top-level-list"),
        pytest.param('"just a string"', id="scalar"),
        pytest.param("{}", id="empty"),
    ],
)
def test_compact_keeps_the_document_and_shares_its_keys(text: str) -> None:
    first, second = compact(json.loads(text)), compact(json.loads(text))
    assert first == json.loads(text) and second == first
    pairs = list(zip(keys_of(first), keys_of(second), strict=True))
    assert all(a is b for a, b in pairs)
    # Without compact, decoding twice gives two copies of every key.
    plain = list(zip(keys_of(json.loads(text)), keys_of(json.loads(text)), strict=True))
    assert not any(a is b for a, b in plain if len(a) > 1)
