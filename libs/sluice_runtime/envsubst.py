"""Flux's envsubst: the `${...}` expression language postBuild substitution expands.

A recursive-descent reading of the grammar of Flux's fork of drone/envsubst,
evaluated as it goes (defaults may nest; bash-like functions: length, case,
substring, prefix/suffix trimming with globs, replacement); `substituting`
decides what text it is applied to and with which variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sluice_runtime.patterns import InvalidPattern, Pattern, compile_pattern


class SubstitutionError(Exception):
    """Substitution failed; the message names the object or variable, for a condition."""


class _Malformed(Exception):
    def __init__(self, reason: str, at: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`text` with every `${...}` expression expanded (undefined variables are empty).

    Raises SubstitutionError quoting the malformed expression.
    """
    expander = _Expander(text, variables)
    try:
        return expander.text()
    except _Malformed as error:
        start = text.rfind("${", 0, error.at + 1)
        start = start if start >= 0 else error.at
        line_end = text.find("\n", start)
        snippet = text[start : line_end if line_end >= 0 else len(text)]
        if len(snippet) > 60:
            snippet = snippet[:60] + "…"
        raise SubstitutionError(f"{error.reason} in '{snippet}'") from None


@dataclass
class _Expander:
    """A recursive-descent reading of Flux's envsubst grammar, evaluated as it goes."""

    source: str
    variables: Mapping[str, str]
    pos: int = 0

    def peek(self, offset: int = 0) -> str:
        index = self.pos + offset
        return self.source[index] if index < len(self.source) else ""

    def text(self) -> str:
        out: list[str] = []
        while self.pos < len(self.source):
            char = self.source[self.pos]
            if char == "$" and self.peek(1) == "{":
                self.pos += 2
                out.append(self.expression())
            elif char == "$" and self.peek(1) == "$":
                out.append("$")  # `$$` is the escape for a literal `$`
                self.pos += 2
            else:
                out.append(char)
                self.pos += 1
        return "".join(out)

    def expression(self) -> str:
        """After `${`: one expression up to and including its `}`."""
        if self.peek() == "#":
            self.pos += 1
            name = self.name()
            if not name:
                raise _Malformed("bad substitution", self.pos)
            self.close()
            return str(len(self.value(name).encode()))  # bytes, as Go's len()
        name = self.name()
        if not name:
            raise _Malformed("unable to parse variable name", self.pos)
        value = self.value(name)
        char = self.peek()
        if char == "}":
            self.pos += 1
            return value
        if char == ":" and self.peek(1) in ("=", "-", "?", "+"):
            self.pos += 2
            return self.default(value)
        if char == "=":
            self.pos += 1
            return self.default(value)
        if char == ":":
            self.pos += 1
            return self.substring(value)
        if char in (",", "^"):
            return self.casing(value)
        if char == "/":
            return self.replace(value)
        if char in ("#", "%"):
            return self.trim(value, char)
        raise _Malformed("missing closing brace", self.pos)

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.source) and (
            self.source[self.pos].isalnum() or self.source[self.pos] == "_"
        ):
            self.pos += 1
        return self.source[start : self.pos]

    def value(self, name: str) -> str:
        return self.variables.get(name, "")

    def close(self) -> None:
        if self.peek() != "}":
            raise _Malformed("bad substitution", self.pos)
        self.pos += 1

    def param(self, stop: str, *, escapes: bool = False) -> str:
        """A nested expression, or literal text up to `${` or a character in `stop`."""
        if self.peek() == "$" and self.peek(1) == "{":
            self.pos += 2
            return self.expression()
        out: list[str] = []
        while self.pos < len(self.source):
            char = self.source[self.pos]
            if char == "$" and self.peek(1) == "{":
                break
            if escapes and (
                (char == "\\" and self.peek(1) in ("/", "\\"))
                or (char == "$" and self.peek(1) == "$")
            ):
                out.append(self.source[self.pos + 1])
                self.pos += 2
                continue
            if char in stop:
                break
            out.append(char)
            self.pos += 1
        if not out:
            raise _Malformed("unable to parse substitution within function", self.pos)
        return "".join(out)

    def default(self, value: str) -> str:
        """`${var:=word}` and friends: word (text and nested expressions) when value is empty."""
        parts: list[str] = []
        while self.peek() != "}":
            parts.append(self.param("}"))
        self.pos += 1
        return value if value else "".join(parts)

    def substring(self, value: str) -> str:
        """`${var:offset}` and `${var:offset:length}`; bash returns value on bad numbers."""
        offset = self.param(":}")
        length: str | None = None
        if self.peek() == ":":
            while self.peek() == ":":
                self.pos += 1
            length = self.param("}")
            self.close()
        else:
            self.close()
        return _substring(value, offset, length)

    def casing(self, value: str) -> str:
        op = self.source[self.pos : self.pos + 2]
        op = op if op in (",,", "^^", ",^", "^,") else op[0]
        self.pos += len(op)
        self.close()
        if op == "^":
            return value[:1].upper() + value[1:]
        if op == "^^":
            return value.upper()
        if op == ",":
            return value[:1].lower() + value[1:]
        if op == ",,":
            return value.lower()
        return value

    def trim(self, value: str, mark: str) -> str:
        op = mark * 2 if self.peek(1) == mark else mark
        self.pos += len(op)
        pattern = self.param("}")
        self.close()
        return _trim(value, pattern, prefix=mark == "#", longest=len(op) == 2)

    def replace(self, value: str) -> str:
        op = "/" + self.peek(1) if self.peek(1) in ("/", "#", "%") else "/"
        self.pos += len(op)
        old = "" if self.peek() == "/" else self.param("/", escapes=True)
        if self.peek() != "/":
            raise _Malformed("bad substitution", self.pos)
        while self.peek() == "/":
            self.pos += 1
        new: str | None = None
        if self.peek() != "}":
            new = self.param("}", escapes=True)
        self.close()
        return _replace(value, op, old, new)


def _substring(value: str, offset: str, length: str | None) -> str:
    # Characters rather than Go's bytes: the same for ASCII, and never splits a character.
    if not re.fullmatch(r"[-+]?\d+", offset):
        return value
    start = int(offset)
    if start < 0:
        start = max(len(value) + start, 0)
    if length is None:
        return value[start:]
    if not re.fullmatch(r"[-+]?\d+", length):
        return value
    count = int(length)
    if count < 0:
        end = len(value) + count
        return value[start:end] if end >= start else ""
    return value[start : start + count]


def _replace(value: str, op: str, old: str, new: str | None) -> str:
    if op == "//":
        return value.replace(old, new or "")
    if op == "/":
        return value.replace(old, new or "", 1)
    if new is None:
        return value  # prefix and suffix replacement need both parts, as in Flux
    if op == "/#":
        return new + value[len(old) :] if value.startswith(old) else value
    return value[: len(value) - len(old)] + new if value.endswith(old) else value


def _trim(value: str, pattern: str, *, prefix: bool, longest: bool) -> str:
    matcher = _glob(pattern)
    if matcher is None:
        return value  # a malformed pattern leaves the value alone, as in Flux
    lengths = range(len(value), 0, -1) if longest else range(1, len(value) + 1)
    for size in lengths:
        part = value[:size] if prefix else value[len(value) - size :]
        if matcher.fullmatch(part):
            return value[size:] if prefix else value[: len(value) - size]
    return value


def _glob(pattern: str) -> Pattern | None:
    """Go's path.Match patterns: `*` and `?` never match `/`, `[...]` classes, `\\` escapes.

    The pattern comes from a tenant's manifest and `_trim` tries it against
    every prefix or suffix of the value: it runs on RE2, since `*a*a*a*b`
    translated for a backtracking engine takes polynomial time per try.
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            i += 1
            if i >= len(pattern):
                return None
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("^", "]") else i + 1)
            if end < 0:
                return None
            body = pattern[i + 1 : end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            if not body:
                return None
            items = [re.escape(c) if c != "-" else "-" for c in body]
            out.append("[" + ("^" if negate else "") + "".join(items) + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    try:
        return compile_pattern("".join(out), what="a ${var#glob} or ${var%glob} pattern")
    except InvalidPattern:
        return None
