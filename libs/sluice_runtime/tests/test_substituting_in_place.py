"""Substitution in place gives what Flux's text substitution gives, or leaves it to the text.

Each case substitutes one object both ways (`substitute`, which takes the
in-place path when it can, and `_substitute_text`, Flux's write-expand-read)
and requires the same result, key order and value types included, or the
same error.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from sluice_runtime.substituting import (
    SubstitutionError,
    _NeedsText,
    _substitute_in_place,
    _substitute_text,
    substitute,
)


def config_map(**data: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "labels": {"color": "${C}"}},
        "data": data,
    }


def deployment(*args: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "args": list(args)}]}}},
    }


IN_PLACE = [
    pytest.param(config_map(a="${C}"), {"C": "blue"}, id="string"),
    *(
        pytest.param(config_map(a="${C}", b="x-${C}"), {"C": value}, id=f"value-{label}")
        for label, value in [
            ("int", "3"), ("bool", "true"), ("yaml11-bool", "yes"), ("empty", ""),
            ("float", "1.5"), ("tilde", "~"), ("hex", "0x1F"), ("date", "2024-01-01"),
            ("version", "v1.2.3"), ("url", "https://example.com/a/b"), ("pairs", "a=b,c=d"),
            ("sexagesimal", "10:30"), ("plus", "+1"),
        ]
    ),
    pytest.param(config_map(a="${UNDEFINED}"), {"C": "blue"}, id="undefined-is-empty"),
    pytest.param(deployment("--color=${C}", "${N}", "plain"), {"C": "red", "N": "7"}, id="list-items"),
    pytest.param(config_map(script="echo ${C}\nexit 0\n"), {"C": "blue"}, id="literal-block"),
    pytest.param(config_map(a="key: ${C}", b="x #${C}", c="'${C}'"), {"C": "blue"}, id="quoted-strings"),
    pytest.param(config_map(a=1, b=True, c=None, d=1.5, e="10:30", f="2024-01-01"), {"C": "b"}, id="other-values-unchanged"),
]  # fmt: skip

TEXT = [
    pytest.param(config_map(**{"${C}": "v"}), {"C": "blue"}, id="key"),
    pytest.param(config_map(a="$${C}"), {"C": "blue"}, id="escape"),
    pytest.param(config_map(a="${C:=red}"), {"X": "1"}, id="default"),
    pytest.param(config_map(a="${C^^}"), {"C": "blue"}, id="function"),
    pytest.param(config_map(a="${C"), {"C": "blue"}, id="malformed"),
    pytest.param(config_map(a="$C"), {"C": "blue"}, id="no-braces"),
    *(
        pytest.param(config_map(a="${C}"), {"C": value}, id=f"untame-{label}")
        for label, value in [
            ("space", "a b"), ("colon-space", "x: y"), ("trailing-colon", "a:"),
            ("flow", "[a]"), ("alias", "*a"), ("block", "|"), ("dash", "-"), ("comment", "#x"),
            ("quote", "it's"),
        ]
    ),
]  # fmt: skip


def same(a: object, b: object) -> bool:
    return json.dumps(a, default=str) == json.dumps(b, default=str)


def outcome(run: Any) -> object:
    try:
        return run()
    except SubstitutionError as error:
        return f"SubstitutionError: {error}"


@pytest.mark.parametrize(("obj", "variables"), IN_PLACE)
def test_in_place_substitution_is_the_text_substitution(
    obj: dict[str, Any], variables: dict[str, str]
) -> None:
    _substitute_in_place(copy.deepcopy(obj), variables, {})  # does not need the text
    [in_place] = substitute([copy.deepcopy(obj)], variables)
    assert same(in_place, _substitute_text(copy.deepcopy(obj), variables))


@pytest.mark.parametrize(("obj", "variables"), TEXT)
def test_other_expressions_and_values_go_to_the_text(
    obj: dict[str, Any], variables: dict[str, str]
) -> None:
    with pytest.raises(_NeedsText):
        _substitute_in_place(copy.deepcopy(obj), variables, {})
    assert same(
        outcome(lambda: substitute([copy.deepcopy(obj)], variables)),
        outcome(lambda: [_substitute_text(copy.deepcopy(obj), variables)]),
    )


def test_objects_without_expressions_are_returned_as_they_are() -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "$"}}
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}
    result = substitute([plain, obj], {"C": "blue"})
    assert result[0] is plain
    assert result[1] == obj
