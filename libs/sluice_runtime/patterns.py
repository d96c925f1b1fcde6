"""Regular expressions written by tenants, matched in linear time.

A pattern from a custom resource or a repository file (an OCIRepository's
`semverFilter`, an Alert's inclusion and exclusion lists, a `${var##glob}`
in a manifest) runs inside a controller shared by every tenant. On Python's
backtracking `re`, one pattern like `(a+)+$` against a few dozen characters
takes longer than the universe's age and blocks the event loop with it.
RE2 matches in time linear in the input, whatever the pattern; it is also
the syntax Flux's Go controllers accept, so Flux manifests mean the same.

RE2 has no backreferences (`\\1`) and no lookaround (`(?=`, `(?!`, `(?<=`,
`(?<!`): a pattern that uses them is refused with a message saying so,
rather than silently matching differently. Every tenant pattern goes
through `compile_pattern`; `what` names the field, so the error can become
a condition a person can act on.
"""

from __future__ import annotations

import re
from typing import Any

import re2

_OPTIONS = re2.Options()
# RE2 would also print every rejected pattern on stderr through absl; the
# error we raise carries the message, once, where the caller decides.
_OPTIONS.log_errors = False

UNSUPPORTED = "RE2 syntax has no backreferences or lookaround"


class InvalidPattern(ValueError):
    """A tenant's regular expression that does not compile; the message names the field."""

    def __init__(self, *, what: str, pattern: str, reason: str) -> None:
        super().__init__(f"invalid regular expression in {what} {pattern!r}: {reason}")
        self.what = what
        self.pattern = pattern
        self.reason = reason


class Pattern:
    """A compiled tenant pattern; matching never backtracks."""

    __slots__ = ("_regexp", "text")

    def __init__(self, text: str, regexp: Any) -> None:
        self.text = text
        self._regexp = regexp

    def search(self, subject: str) -> bool:
        """Whether the pattern matches anywhere in `subject` (Go's `regexp.MatchString`)."""
        return self._regexp.search(subject) is not None

    def fullmatch(self, subject: str) -> bool:
        """Whether the pattern matches all of `subject`."""
        return self._regexp.fullmatch(subject) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"


def compile_pattern(text: str, *, what: str) -> Pattern:
    """Compile `text` with RE2, or raise `InvalidPattern` naming `what` (a field path)."""
    try:
        regexp = re2.compile(text, _OPTIONS)
    except re2.error as error:
        reason = _reason(error)
        if _python_accepts(text):
            reason = f"{reason} ({UNSUPPORTED})"
        raise InvalidPattern(what=what, pattern=text, reason=reason) from None
    return Pattern(text, regexp)


def _reason(error: Exception) -> str:
    # The binding raises its error with RE2's message as bytes.
    detail = error.args[0] if error.args else error
    if isinstance(detail, bytes):
        return detail.decode("utf-8", errors="replace")
    return str(detail)


def _python_accepts(text: str) -> bool:
    # Compiling (never matching) with `re` is bounded by the pattern's size;
    # a pattern Python takes and RE2 refuses uses one of Python's extras.
    try:
        re.compile(text)
    except re.error:
        return False
    return True
