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


def _compile(regex: str) -> Any:
    try:
        return re2.compile(regex)
    except Exception as err:
        raise FuncError(
            f"regexp: Compile({go_quote(regex)}): error parsing regexp: {err}"
        ) from None


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


REGEX: dict[str, GoFunc] = {
    "regexMatch": GoFunc(_regex_match, (S, S)),
    "mustRegexMatch": GoFunc(lambda r, s: _compile(r).search(s) is not None, (S, S)),
    "regexFindAll": GoFunc(
        lambda r, s, n: StrList(m.group(0) for m in _find_all(_compile(r), s, n)), (S, S, INT)
    ),
    "mustRegexFindAll": GoFunc(
        lambda r, s, n: StrList(m.group(0) for m in _find_all(_compile(r), s, n)), (S, S, INT)
    ),
    "regexFind": GoFunc(
        lambda r, s: (lambda m: m.group(0) if m else "")(_compile(r).search(s)), (S, S)
    ),
    "mustRegexFind": GoFunc(
        lambda r, s: (lambda m: m.group(0) if m else "")(_compile(r).search(s)), (S, S)
    ),
    "regexReplaceAll": GoFunc(lambda r, s, p: _replace_all(r, s, p, literal=False), (S, S, S)),
    "mustRegexReplaceAll": GoFunc(lambda r, s, p: _replace_all(r, s, p, literal=False), (S, S, S)),
    "regexReplaceAllLiteral": GoFunc(
        lambda r, s, p: _replace_all(r, s, p, literal=True), (S, S, S)
    ),
    "mustRegexReplaceAllLiteral": GoFunc(
        lambda r, s, p: _replace_all(r, s, p, literal=True), (S, S, S)
    ),
    "regexSplit": GoFunc(_regex_split, (S, S, INT)),
    "mustRegexSplit": GoFunc(_regex_split, (S, S, INT)),
    "regexQuoteMeta": GoFunc(_quote_meta, (S,)),
}
