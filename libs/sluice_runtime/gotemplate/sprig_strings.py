"""Sprig's string, encoding, regex, path, conversion and math functions (slim-sprig's set)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import random
import re
import zlib
from typing import Any

import re2  # type: ignore[import-untyped]

from sluice_runtime.gotemplate import converting as cv
from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import go_quote, sprintf
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.values import Int64, IntList, StrList, unbox

S, I, F, B = "string", "int", "float64", "bool"


def _title(s: str) -> str:
    """strings.Title: upper-case the first letter of each word."""
    out: list[str] = []
    prev = " "
    for c in s:
        sep = (c.isascii() and not (c.isalnum() or c == "_")) or c.isspace()
        prev_sep = (prev.isascii() and not (prev.isalnum() or prev == "_")) or prev.isspace()
        out.append(c.title() if prev_sep and not sep else c)
        prev = c
    return "".join(out)


def _bytes_cut(s: str, start: int | None, end: int | None) -> str:
    data = s.encode()
    n = len(data)
    lo = 0 if start is None else start
    hi = n if end is None else end
    if not 0 <= lo <= hi <= n:
        if hi > n:
            raise FuncError(f"runtime error: slice bounds out of range [:{hi}] with length {n}")
        raise FuncError(f"runtime error: slice bounds out of range [{lo}:{hi}]")
    return data[lo:hi].decode("utf-8", "replace")


def _trunc(c: int, s: str) -> str:
    n = len(s.encode())
    if c < 0 and n + c > 0:
        return _bytes_cut(s, n + c, None)
    if c >= 0 and n > c:
        return _bytes_cut(s, None, c)
    return s


def _substr(start: int, end: int, s: str) -> str:
    if start < 0:
        return _bytes_cut(s, None, end)
    if end < 0 or end > len(s.encode()):
        return _bytes_cut(s, start, None)
    return _bytes_cut(s, start, end)


def _go_split(s: str, sep: str, n: int = -1) -> list[str]:
    """strings.SplitN: n == 0 gives nothing, n < 0 everything."""
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if 0 < n < len(chars):
            return [*chars[: n - 1], "".join(chars[n - 1 :])]
        return chars
    return s.split(sep, n - 1 if n > 0 else -1)


def _split_map(parts: list[str]) -> dict[str, Any]:
    return {f"_{i}": p for i, p in enumerate(parts)}


def _quote(*args: Any) -> str:
    return " ".join(go_quote(cv.strval(a)) for a in args if unbox(a) is not None)


def _squote(*args: Any) -> str:
    return " ".join(sprintf("'%v'", a) for a in args if unbox(a) is not None)


def _cat(*args: Any) -> str:
    return " ".join(sprintf("%v", a) for a in args if unbox(a) is not None)


def _indent(spaces: int, v: str) -> str:
    pad = " " * spaces
    return pad + v.replace("\n", "\n" + pad)


def _b64dec(v: str) -> str:
    try:
        return base64.b64decode(v, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return f"illegal base64 data at input byte {_bad_base64_at(v, 64)}"


def _b32dec(v: str) -> str:
    try:
        return base64.b32decode(v).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return f"illegal base32 data at input byte {_bad_base64_at(v, 32)}"


def _bad_base64_at(v: str, base: int) -> int:
    alphabet = (
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        if base == 64
        else "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    )
    for i, c in enumerate(v):
        if c not in alphabet and c != "=":
            return i
    return len(v.rstrip("=")) // 4 * 4 if base == 64 else len(v.rstrip("=")) // 8 * 8


def _atoi(a: str) -> int:
    return int(a) if re.fullmatch(r"[+-]?\d+", a) and abs(int(a)) < 2**63 else 0


def _seq(*params: int) -> str:
    def until_step(start: int, stop: int, step: int) -> list[int]:
        return _until_step(start, stop, step)

    if len(params) == 1:
        end, inc = params[0], (-1 if params[0] < 1 else 1)
        values = until_step(1, end + inc, inc)
    elif len(params) == 2:
        start, end = params
        step = -1 if end < start else 1
        values = until_step(start, end + step, step)
    elif len(params) == 3:
        start, step, end = params
        inc = 1
        if end < start:
            inc = -1
            if step > 0:
                return ""
        values = until_step(start, end + inc, step)
    else:
        return ""
    return " ".join(str(v) for v in values)


def _until_step(start: int, stop: int, step: int) -> IntList:
    if stop < start:
        return IntList(range(start, stop, step)) if step < 0 else IntList()
    return IntList(range(start, stop, step)) if step > 0 else IntList()


def _round(a: Any, p: int, *r_opt: float) -> float:
    round_on = r_opt[0] if r_opt else 0.5
    val = cv.to_float64(a)
    pow10 = math.pow(10, float(p))
    digit = pow10 * val
    frac = math.modf(digit)[0]
    rounded = math.ceil(digit) if frac >= round_on else math.floor(digit)
    return rounded / pow10


def _to_decimal(v: Any) -> Int64:
    text = cv.strval(v)
    if re.fullmatch(r"[+-]?[0-7]+", text):
        return Int64(int(text, 8))
    return Int64(0)


def _max(a: Any, *rest: Any) -> Int64:
    return Int64(max([cv.to_int64(a), *(cv.to_int64(b) for b in rest)]))


def _min(a: Any, *rest: Any) -> Int64:
    return Int64(min([cv.to_int64(a), *(cv.to_int64(b) for b in rest)]))


def _add(*args: Any) -> Int64:
    return cv.wrap64(sum(cv.to_int64(a) for a in args))


def _mul(a: Any, *rest: Any) -> Int64:
    value = cv.to_int64(a)
    for b in rest:
        value = cv.wrap64(value * cv.to_int64(b))
    return cv.wrap64(value)


def _rand_int(lo: int, hi: int) -> int:
    if hi - lo <= 0:
        raise FuncError("invalid argument to Intn")
    return random.randrange(hi - lo) + lo  # noqa: S311 - sprig's randInt is not for secrets


# -- regular expressions: Go's are RE2, so re2 compiles them as Go does ----------------


def _compile(regex: str) -> Any:
    try:
        return re2.compile(regex)
    except Exception as err:
        raise FuncError(f"regexp: Compile({go_quote(regex)}): error parsing regexp: {err}")


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
        name_match = re.match(r"\{([A-Za-z0-9_]+)\}" if brace else r"([A-Za-z0-9_]+)", template[i + 1 :])
        if name_match is None:
            out.append(c)
            i += 1
            continue
        name = name_match.group(1)
        i += 1 + name_match.end()
        try:
            group = m.group(int(name)) if name.isdigit() else m.group(name)
        except (IndexError, KeyError, re2.error if hasattr(re2, "error") else IndexError):
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


def _duration(sec: Any) -> str:
    sec = unbox(sec)
    n = 0
    if isinstance(sec, str):
        n = int(sec) if re.fullmatch(r"[+-]?\d+", sec) else 0
    elif isinstance(sec, Int64):
        n = int(sec)
    return cv.duration_string(n * 10**9)


def _duration_round(d: Any) -> str:
    d = unbox(d)
    ns = 0
    if isinstance(d, str):
        ns = cv.parse_duration(d) or 0
    elif isinstance(d, Int64):
        ns = int(d)
    u = abs(ns)
    hour = 3600 * 10**9
    for size, unit in ((hour * 24 * 365, "y"), (hour * 24 * 30, "mo"), (hour * 24, "d"),
                       (hour, "h"), (60 * 10**9, "m"), (10**9, "s")):  # fmt: skip
        if u > size:
            return f"{u // size}{unit}"
    return "0s"


def _must(fn: Any) -> Any:
    return fn


STRINGS: dict[str, GoFunc] = {
    "hello": GoFunc(lambda: "Hello!", ()),
    "trunc": GoFunc(_trunc, (I, S)),
    "trim": GoFunc(lambda s: s.strip(" \t\n\r\v\f\x85\xa0"), (S,)),
    "upper": GoFunc(str.upper, (S,)),
    "lower": GoFunc(str.lower, (S,)),
    "title": GoFunc(_title, (S,)),
    "substr": GoFunc(_substr, (I, I, S)),
    "repeat": GoFunc(lambda count, s: s * count if count >= 0 else _neg_repeat(), (I, S)),
    "trimall": GoFunc(lambda a, b: b.strip(a) if a else b, (S, S)),
    "trimAll": GoFunc(lambda a, b: b.strip(a) if a else b, (S, S)),
    "trimSuffix": GoFunc(lambda a, b: b[: -len(a)] if a and b.endswith(a) else b, (S, S)),
    "trimPrefix": GoFunc(lambda a, b: b[len(a) :] if b.startswith(a) else b, (S, S)),
    "contains": GoFunc(lambda sub, s: sub in s, (S, S)),
    "hasPrefix": GoFunc(lambda sub, s: s.startswith(sub), (S, S)),
    "hasSuffix": GoFunc(lambda sub, s: s.endswith(sub), (S, S)),
    "quote": GoFunc(_quote, (ANY,), variadic=True),
    "squote": GoFunc(_squote, (ANY,), variadic=True),
    "cat": GoFunc(_cat, (ANY,), variadic=True),
    "indent": GoFunc(_indent, (I, S)),
    "nindent": GoFunc(lambda n, v: "\n" + _indent(n, v), (I, S)),
    "replace": GoFunc(lambda old, new, src: _go_replace(src, old, new), (S, S, S)),
    "plural": GoFunc(lambda one, many, count: one if count == 1 else many, (S, S, I)),
    "sha1sum": GoFunc(lambda s: hashlib.sha1(s.encode()).hexdigest(), (S,)),  # noqa: S324
    "sha256sum": GoFunc(lambda s: hashlib.sha256(s.encode()).hexdigest(), (S,)),
    "adler32sum": GoFunc(lambda s: str(zlib.adler32(s.encode())), (S,)),
    "toString": GoFunc(cv.strval, (ANY,)),
    "atoi": GoFunc(_atoi, (S,)),
    "int64": GoFunc(lambda v: Int64(cv.to_int64(v)), (ANY,)),
    "int": GoFunc(cv.to_int64, (ANY,)),
    "float64": GoFunc(cv.to_float64, (ANY,)),
    "seq": GoFunc(_seq, (I,), variadic=True),
    "toDecimal": GoFunc(_to_decimal, (ANY,)),
    "split": GoFunc(lambda sep, orig: _split_map(_go_split(orig, sep)), (S, S)),
    "splitList": GoFunc(lambda sep, orig: StrList(_go_split(orig, sep)), (S, S)),
    "splitn": GoFunc(lambda sep, n, orig: _split_map(_go_split(orig, sep, n)), (S, I, S)),
    "until": GoFunc(lambda count: _until_step(0, count, -1 if count < 0 else 1), (I,)),
    "untilStep": GoFunc(_until_step, (I, I, I)),
    "add1": GoFunc(lambda i: cv.wrap64(cv.to_int64(i) + 1), (ANY,)),
    "add": GoFunc(_add, (ANY,), variadic=True),
    "sub": GoFunc(lambda a, b: cv.wrap64(cv.to_int64(a) - cv.to_int64(b)), (ANY, ANY)),
    "div": GoFunc(lambda a, b: cv.wrap64(cv.go_trunc_div(cv.to_int64(a), cv.to_int64(b))),
                  (ANY, ANY)),  # fmt: skip
    "mod": GoFunc(lambda a, b: cv.wrap64(cv.go_mod(cv.to_int64(a), cv.to_int64(b))), (ANY, ANY)),
    "mul": GoFunc(_mul, (ANY, ANY), variadic=True),
    "randInt": GoFunc(_rand_int, (I, I)),
    "biggest": GoFunc(_max, (ANY, ANY), variadic=True),
    "max": GoFunc(_max, (ANY, ANY), variadic=True),
    "min": GoFunc(_min, (ANY, ANY), variadic=True),
    "maxf": GoFunc(lambda a, *r: max([cv.to_float64(a), *map(cv.to_float64, r)]), (ANY, ANY),
                   variadic=True),  # fmt: skip
    "minf": GoFunc(lambda a, *r: min([cv.to_float64(a), *map(cv.to_float64, r)]), (ANY, ANY),
                   variadic=True),  # fmt: skip
    "ceil": GoFunc(lambda a: float(math.ceil(cv.to_float64(a))), (ANY,)),
    "floor": GoFunc(lambda a: float(math.floor(cv.to_float64(a))), (ANY,)),
    "round": GoFunc(_round, (ANY, I, F), variadic=True),
    "base": GoFunc(cv.path_base, (S,)),
    "dir": GoFunc(cv.path_dir, (S,)),
    "clean": GoFunc(cv.path_clean, (S,)),
    "ext": GoFunc(cv.path_ext, (S,)),
    "isAbs": GoFunc(lambda p: p.startswith("/"), (S,)),
    "osBase": GoFunc(cv.path_base, (S,)),
    "osClean": GoFunc(cv.path_clean, (S,)),
    "osDir": GoFunc(cv.path_dir, (S,)),
    "osExt": GoFunc(cv.path_ext, (S,)),
    "osIsAbs": GoFunc(lambda p: p.startswith("/"), (S,)),
    "b64enc": GoFunc(lambda v: base64.b64encode(v.encode()).decode(), (S,)),
    "b64dec": GoFunc(_b64dec, (S,)),
    "b32enc": GoFunc(lambda v: base64.b32encode(v.encode()).decode(), (S,)),
    "b32dec": GoFunc(_b32dec, (S,)),
    "fail": GoFunc(lambda msg: _fail(msg), (S,)),
    "regexMatch": GoFunc(_regex_match, (S, S)),
    "mustRegexMatch": GoFunc(lambda r, s: _compile(r).search(s) is not None, (S, S)),
    "regexFindAll": GoFunc(lambda r, s, n: StrList(m.group(0) for m in _find_all(_compile(r), s, n)),
                           (S, S, I)),  # fmt: skip
    "mustRegexFindAll": GoFunc(
        lambda r, s, n: StrList(m.group(0) for m in _find_all(_compile(r), s, n)), (S, S, I)
    ),
    "regexFind": GoFunc(lambda r, s: (lambda m: m.group(0) if m else "")(_compile(r).search(s)),
                        (S, S)),  # fmt: skip
    "mustRegexFind": GoFunc(
        lambda r, s: (lambda m: m.group(0) if m else "")(_compile(r).search(s)), (S, S)
    ),
    "regexReplaceAll": GoFunc(lambda r, s, p: _replace_all(r, s, p, literal=False), (S, S, S)),
    "mustRegexReplaceAll": GoFunc(lambda r, s, p: _replace_all(r, s, p, literal=False),
                                  (S, S, S)),  # fmt: skip
    "regexReplaceAllLiteral": GoFunc(lambda r, s, p: _replace_all(r, s, p, literal=True),
                                     (S, S, S)),  # fmt: skip
    "mustRegexReplaceAllLiteral": GoFunc(lambda r, s, p: _replace_all(r, s, p, literal=True),
                                         (S, S, S)),  # fmt: skip
    "regexSplit": GoFunc(_regex_split, (S, S, I)),
    "mustRegexSplit": GoFunc(_regex_split, (S, S, I)),
    "regexQuoteMeta": GoFunc(_quote_meta, (S,)),
    "duration": GoFunc(_duration, (ANY,)),
    "durationRound": GoFunc(_duration_round, (ANY,)),
}


def _neg_repeat() -> str:
    raise FuncError("strings: negative Repeat count")


def _fail(msg: str) -> str:
    raise FuncError(msg)


def _go_replace(src: str, old: str, new: str) -> str:
    if old == "":
        # strings.Replace with an empty old inserts new around every rune.
        return new + new.join(src) + new if src else new
    return src.replace(old, new)
