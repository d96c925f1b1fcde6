"""Sprig's regular-expression functions. Go's regexps are RE2, so re2 compiles them as Go does."""

from __future__ import annotations

import re
from typing import Any

import re2

from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import go_quote
from sluice_runtime.gotemplate.functions import GoFunc
from sluice_runtime.gotemplate.values import StrList

S, INT = "string", "int"


_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # the error goes into the template's error, not to stderr

# RE2's error codes worded as Go's regexp/syntax words them.
_GO_CODES = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid repetition size": "invalid repeat count",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid named capture group": "invalid named capture",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "trailing \\": "trailing backslash at end of expression",
}


class _CompileError(FuncError):
    def __init__(self, regex: str, message: str) -> None:
        super().__init__(message)
        self.regex = regex


def _compile(regex: str) -> Any:
    """regexp.Compile: the error reads as Go's ("error parsing regexp: ...")."""
    try:
        return re2.compile(regex, _OPTIONS)
    except re2.error as err:
        detail = err.args[0] if err.args else err
        text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
        code, _, fragment = text.partition(": ")
        message = f"error parsing regexp: {_GO_CODES.get(code, code)}: `{fragment}`"
        raise _CompileError(regex, message) from None


def _must_compile(fn: Any) -> Any:
    """sprig's non-must functions use regexp.MustCompile, which panics with the pattern."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except _CompileError as err:
            quoted = f"`{err.regex}`" if "`" not in err.regex else go_quote(err.regex)
            raise FuncError(f"regexp: Compile({quoted}): {err}") from None

    return call


def _expand(template: str, m: Any) -> str:
    """Go's Regexp.Expand: $1, ${1}, $name, ${name}, $$."""
    out: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c != "$" or i + 1 >= len(template):
            out.append(c)
            i += 1
            continue
        if template[i + 1] == "$":
            out.append("$")
            i += 2
            continue
        brace = template[i + 1] == "{"
        name_match = re.match(
            r"\{([A-Za-z0-9_]+)\}" if brace else r"([A-Za-z0-9_]+)", template[i + 1 :]
        )
        if name_match is None:
            out.append(c)
            i += 1
            continue
        name = name_match.group(1)
        i += 1 + name_match.end()
        try:
            group = m.group(int(name)) if name.isdigit() else m.group(name)
        except (IndexError, KeyError):
            group = ""
        out.append(group or "")
    return "".join(out)


def _find_all(r: Any, s: str, n: int) -> list[Any]:
    if n == 0:
        return []
    out: list[Any] = []
    prev_end = -1
    for m in r.finditer(s):
        if m.start() == m.end() and m.start() == prev_end:
            continue  # Go ignores an empty match right after the previous match
        out.append(m)
        prev_end = m.end()
        if 0 < n <= len(out):
            break
    return out


def _replace_all(regex: str, s: str, repl: str, *, literal: bool) -> str:
    r = _compile(regex)
    out: list[str] = []
    last = 0
    for m in _find_all(r, s, -1):
        out.append(s[last : m.start()])
        out.append(repl if literal else _expand(repl, m))
        last = m.end()
    out.append(s[last:])
    return "".join(out)


def _regex_split(regex: str, s: str, n: int) -> StrList:
    if n == 0:
        return StrList()
    r = _compile(regex)
    if regex and s == "":
        return StrList([""])
    parts = StrList()
    beg = end = 0
    for m in _find_all(r, s, n):
        if n > 0 and len(parts) == n - 1:
            break
        end = m.start()
        if m.end() != 0:
            parts.append(s[beg:end])
        beg = m.end()
    if end != len(s):
        parts.append(s[beg:])
    return parts


def _regex_match(regex: str, s: str) -> bool:
    try:
        return _compile(regex).search(s) is not None
    except FuncError:
        return False


def _quote_meta(s: str) -> str:
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in s)


def _find_all_strings(r: str, s: str, n: int) -> StrList:
    return StrList(m.group(0) for m in _find_all(_compile(r), s, n))


def _find(r: str, s: str) -> str:
    m = _compile(r).search(s)
    return str(m.group(0)) if m else ""


def _replace(r: str, s: str, p: str) -> str:
    return _replace_all(r, s, p, literal=False)


def _replace_literal(r: str, s: str, p: str) -> str:
    return _replace_all(r, s, p, literal=True)


REGEX: dict[str, GoFunc] = {
    "regexMatch": GoFunc(_regex_match, (S, S)),
    "mustRegexMatch": GoFunc(lambda r, s: _compile(r).search(s) is not None, (S, S)),
    "regexFindAll": GoFunc(_must_compile(_find_all_strings), (S, S, INT)),
    "mustRegexFindAll": GoFunc(_find_all_strings, (S, S, INT)),
    "regexFind": GoFunc(_must_compile(_find), (S, S)),
    "mustRegexFind": GoFunc(_find, (S, S)),
    "regexReplaceAll": GoFunc(_must_compile(_replace), (S, S, S)),
    "mustRegexReplaceAll": GoFunc(_replace, (S, S, S)),
    "regexReplaceAllLiteral": GoFunc(_must_compile(_replace_literal), (S, S, S)),
    "mustRegexReplaceAllLiteral": GoFunc(_replace_literal, (S, S, S)),
    "regexSplit": GoFunc(_must_compile(_regex_split), (S, S, INT)),
    "mustRegexSplit": GoFunc(_regex_split, (S, S, INT)),
    "regexQuoteMeta": GoFunc(_quote_meta, (S,)),
}
