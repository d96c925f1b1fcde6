"""Tenant regular expressions: RE2 syntax, linear-time matching, errors naming the field."""

from __future__ import annotations

import pytest

from sluice_runtime.patterns import UNSUPPORTED, InvalidPattern, compile_pattern


@pytest.mark.parametrize(
    ("pattern", "subject", "search", "fullmatch"),
    [
        pytest.param(".*-prod$", "1.0.0-prod", True, True, id="anchored-end"),
        pytest.param("prod", "1.0.0-prod.1", True, False, id="search-is-unanchored"),
        pytest.param("^v\\d+", "v12", True, True, id="digit-class"),
        pytest.param("(?i)PROD", "prod", True, True, id="inline-flag"),
        pytest.param("(?P<major>\\d+)\\.", "1.2", True, False, id="named-group"),
        pytest.param("é+", "éé", True, True, id="unicode"),
        pytest.param("", "anything", True, False, id="empty-matches-everywhere"),
    ],
)
def test_matching(pattern: str, subject: str, search: bool, fullmatch: bool) -> None:
    compiled = compile_pattern(pattern, what="spec.x")
    assert compiled.search(subject) is search
    assert compiled.fullmatch(subject) is fullmatch


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("pattern", "subject", "found"),
    [
        pytest.param("(a+)+$", "a" * 50 + "b", False, id="nested-quantifier"),
        pytest.param("(a+)+b$", "a" * 50 + "b", True, id="nested-quantifier-found"),
        pytest.param("^(a|aa)+$", "a" * 60 + "b", False, id="alternation"),
        pytest.param("^(.*a){20}$", "a" * 40 + "b", False, id="repeated-star"),
    ],
)
def test_catastrophic_patterns_complete(pattern: str, subject: str, found: bool) -> None:
    # Each of these takes exponential (or high polynomial) time on Python's
    # backtracking `re`; the timeout fails the test on such an engine.
    assert compile_pattern(pattern, what="spec.x").search(subject) is found


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        pytest.param("(", "missing ): (", id="unbalanced"),
        pytest.param("[z-a]", "invalid character class range: z-a", id="bad-range"),
        pytest.param("a**", "bad repetition operator: **", id="bad-repetition"),
        pytest.param("(a)\\1", f"invalid escape sequence: \\1 ({UNSUPPORTED})", id="backreference"),
        pytest.param("foo(?=bar)", f"invalid perl operator: (?= ({UNSUPPORTED})", id="lookahead"),
        pytest.param("(?<!x)y", f"invalid perl operator: (?<! ({UNSUPPORTED})", id="lookbehind"),
    ],
)
def test_invalid_patterns_name_the_field(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidPattern) as error:
        compile_pattern(pattern, what="spec.ref.semverFilter")
    assert str(error.value) == (
        f"invalid regular expression in spec.ref.semverFilter {pattern!r}: {reason}"
    )
    assert error.value.what == "spec.ref.semverFilter"
