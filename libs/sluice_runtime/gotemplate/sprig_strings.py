"""Sprig's string, encoding, regex, path, conversion and math functions (slim-sprig's set)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import os
import random
import re
import zlib
from typing import Any

from sluice_runtime.gotemplate import budgets
from sluice_runtime.gotemplate import converting as cv
from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import go_quote, sprintf
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.values import Int64, IntList, StrList, StrMap, unbox

S, INT, F, B = "string", "int", "float64", "bool"


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


def _split_map(parts: list[str]) -> StrMap:
    return StrMap((f"_{i}", p) for i, p in enumerate(parts))


def _quote(*args: Any) -> str:
    return " ".join(go_quote(cv.strval(a)) for a in args if unbox(a) is not None)


def _squote(*args: Any) -> str:
    return " ".join(sprintf("'%v'", a) for a in args if unbox(a) is not None)


def _cat(*args: Any) -> str:
    return " ".join(sprintf("%v", a) for a in args if unbox(a) is not None)


def _indent(spaces: int, v: str) -> str:
    budgets.spend(max(spaces, 0) * (v.count("\n") + 1))
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


def _repeat(count: int, s: str) -> str:
    if count < 0:
        _neg_repeat()
    budgets.spend(count * len(s))
    return s * count


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
    if step:
        budgets.spend(budgets.ELEMENT_BYTES * max(len(range(start, stop, step)), 0))
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
    return random.randrange(hi - lo) + lo


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
    for size, unit in (
        (hour * 24 * 365, "y"),
        (hour * 24 * 30, "mo"),
        (hour * 24, "d"),
        (hour, "h"),
        (60 * 10**9, "m"),
        (10**9, "s"),
    ):
        if u > size:
            return f"{u // size}{unit}"
    return "0s"


STRINGS: dict[str, GoFunc] = {
    "hello": GoFunc(lambda: "Hello!", ()),
    "trunc": GoFunc(_trunc, (INT, S)),
    "trim": GoFunc(lambda s: s.strip(" \t\n\r\v\f\x85\xa0"), (S,)),
    "upper": GoFunc(str.upper, (S,)),
    "lower": GoFunc(str.lower, (S,)),
    "title": GoFunc(_title, (S,)),
    "substr": GoFunc(_substr, (INT, INT, S)),
    "repeat": GoFunc(_repeat, (INT, S)),
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
    "indent": GoFunc(_indent, (INT, S)),
    "nindent": GoFunc(lambda n, v: "\n" + _indent(n, v), (INT, S)),
    "replace": GoFunc(lambda old, new, src: _go_replace(src, old, new), (S, S, S)),
    "plural": GoFunc(lambda one, many, count: one if count == 1 else many, (S, S, INT)),
    "sha1sum": GoFunc(lambda s: hashlib.sha1(s.encode()).hexdigest(), (S,)),  # noqa: S324
    "sha256sum": GoFunc(lambda s: hashlib.sha256(s.encode()).hexdigest(), (S,)),
    "adler32sum": GoFunc(lambda s: str(zlib.adler32(s.encode())), (S,)),
    "toString": GoFunc(cv.strval, (ANY,)),
    "atoi": GoFunc(_atoi, (S,)),
    "int64": GoFunc(lambda v: Int64(cv.to_int64(v)), (ANY,)),
    "int": GoFunc(cv.to_int64, (ANY,)),
    "float64": GoFunc(cv.to_float64, (ANY,)),
    "seq": GoFunc(_seq, (INT,), variadic=True),
    "toDecimal": GoFunc(_to_decimal, (ANY,)),
    "split": GoFunc(lambda sep, orig: _split_map(_go_split(orig, sep)), (S, S)),
    "splitList": GoFunc(lambda sep, orig: StrList(_go_split(orig, sep)), (S, S)),
    "splitn": GoFunc(lambda sep, n, orig: _split_map(_go_split(orig, sep, n)), (S, INT, S)),
    "until": GoFunc(lambda count: _until_step(0, count, -1 if count < 0 else 1), (INT,)),
    "untilStep": GoFunc(_until_step, (INT, INT, INT)),
    "add1": GoFunc(lambda i: cv.wrap64(cv.to_int64(i) + 1), (ANY,)),
    "add": GoFunc(_add, (ANY,), variadic=True),
    "sub": GoFunc(lambda a, b: cv.wrap64(cv.to_int64(a) - cv.to_int64(b)), (ANY, ANY)),
    "div": GoFunc(
        lambda a, b: cv.wrap64(cv.go_trunc_div(cv.to_int64(a), cv.to_int64(b))), (ANY, ANY)
    ),
    "mod": GoFunc(lambda a, b: cv.wrap64(cv.go_mod(cv.to_int64(a), cv.to_int64(b))), (ANY, ANY)),
    "mul": GoFunc(_mul, (ANY, ANY), variadic=True),
    "randInt": GoFunc(_rand_int, (INT, INT)),
    "biggest": GoFunc(_max, (ANY, ANY), variadic=True),
    "max": GoFunc(_max, (ANY, ANY), variadic=True),
    "min": GoFunc(_min, (ANY, ANY), variadic=True),
    "maxf": GoFunc(
        lambda a, *r: max([cv.to_float64(a), *map(cv.to_float64, r)]), (ANY, ANY), variadic=True
    ),
    "minf": GoFunc(
        lambda a, *r: min([cv.to_float64(a), *map(cv.to_float64, r)]), (ANY, ANY), variadic=True
    ),
    "ceil": GoFunc(lambda a: float(math.ceil(cv.to_float64(a))), (ANY,)),
    "floor": GoFunc(lambda a: float(math.floor(cv.to_float64(a))), (ANY,)),
    "round": GoFunc(_round, (ANY, INT, F), variadic=True),
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
    "osAbs": GoFunc(
        lambda p: cv.path_clean(p if p.startswith("/") else os.getcwd() + "/" + p), (S,)
    ),
    "b64enc": GoFunc(lambda v: base64.b64encode(v.encode()).decode(), (S,)),
    "b64dec": GoFunc(_b64dec, (S,)),
    "b32enc": GoFunc(lambda v: base64.b32encode(v.encode()).decode(), (S,)),
    "b32dec": GoFunc(_b32dec, (S,)),
    "fail": GoFunc(lambda msg: _fail(msg), (S,)),
    "duration": GoFunc(_duration, (ANY,)),
    "durationRound": GoFunc(_duration_round, (ANY,)),
}


def _neg_repeat() -> str:
    raise FuncError("strings: negative Repeat count")


def _fail(msg: str) -> str:
    raise FuncError(msg)


def _go_replace(src: str, old: str, new: str) -> str:
    budgets.spend((len(src) + 1 if old == "" else src.count(old)) * len(new))
    if old == "":
        # strings.Replace with an empty old inserts new around every rune.
        return new + new.join(src) + new if src else new
    return src.replace(old, new)
