"""Go's conversions that sprig leans on: strval, spf13/cast, Go paths and durations."""

from __future__ import annotations

import math
import re
from typing import Any

from sluice_runtime.gotemplate.formatting import format_value
from sluice_runtime.gotemplate.values import NO_VALUE, Int64, unbox

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def wrap64(n: int) -> Int64:
    """Go's int64 arithmetic wraps around."""
    return Int64((n - INT64_MIN) % 2**64 + INT64_MIN)


def strval(v: Any) -> str:
    v = unbox(v)
    if isinstance(v, str):
        return v
    return format_value(None if v is NO_VALUE else v)


def _trim_zero_decimal(s: str) -> str:
    found_zero = False
    for i in range(len(s), 0, -1):
        c = s[i - 1]
        if c == ".":
            return s[: i - 1] if found_zero else s
        if c == "0":
            found_zero = True
        else:
            return s
    return s


_GO_INT = re.compile(
    r"[+-]?(0[xX](_?[0-9a-fA-F])+|0[bB](_?[01])+|0[oO](_?[0-7])+|0(_?[0-7])*|[1-9](_?[0-9])*)"
)


def parse_go_int(s: str) -> int | None:
    """strconv.ParseInt(s, 0, 64), None on error."""
    if not _GO_INT.fullmatch(s):
        return None
    sign = -1 if s.startswith("-") else 1
    body = s.lstrip("+-").replace("_", "")
    if body[:2].lower() == "0x":
        value = int(body[2:], 16)
    elif body[:2].lower() == "0b":
        value = int(body[2:], 2)
    elif body[:2].lower() == "0o":
        value = int(body[2:], 8)
    elif len(body) > 1 and body[0] == "0":
        value = int(body, 8)
    else:
        value = int(body)
    value *= sign
    return value if INT64_MIN <= value <= INT64_MAX else None


_GO_FLOAT = re.compile(
    r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|[iI]nf(inity)?|NaN|nan)"
)


def parse_go_float(s: str) -> float | None:
    """strconv.ParseFloat(s, 64) for decimal forms, None on error."""
    if _GO_FLOAT.fullmatch(s):
        return float(s)
    return None


def to_int64(v: Any) -> int:
    """cast.ToInt64: numbers truncate, strings parse (base 0), bools are 0/1, else 0."""
    v = unbox(v)
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return INT64_MIN
        return int(v)
    if isinstance(v, str):
        parsed = parse_go_int(_trim_zero_decimal(v))
        return parsed if parsed is not None else 0
    return 0


def to_float64(v: Any) -> float:
    v = unbox(v)
    if isinstance(v, bool | int | float):
        return float(v)
    if isinstance(v, str):
        parsed = parse_go_float(v)
        return parsed if parsed is not None else 0.0
    return 0.0


def go_trunc_div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def go_mod(a: int, b: int) -> int:
    return a - b * go_trunc_div(a, b)


# -- paths (Go's path package; filepath is the same on Linux) -----------------------------


def path_clean(p: str) -> str:
    if p == "":
        return "."
    rooted = p.startswith("/")
    parts: list[str] = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    out = "/".join(parts)
    if rooted:
        return "/" + out
    return out or "."


def path_base(p: str) -> str:
    if p == "":
        return "."
    p = p.rstrip("/")
    if p == "":
        return "/"
    return p[p.rfind("/") + 1 :]


def path_dir(p: str) -> str:
    return path_clean(p[: p.rfind("/") + 1])


def path_ext(p: str) -> str:
    for i in range(len(p) - 1, -1, -1):
        if p[i] == "/":
            break
        if p[i] == ".":
            return p[i:]
    return ""


# -- durations ---------------------------------------------------------------------


def duration_string(ns: int) -> str:
    """time.Duration.String."""
    if ns == 0:
        return "0s"
    neg = ns < 0
    u = abs(ns)
    if u < 10**9:
        for unit, size in (("ns", 1), ("µs", 10**3), ("ms", 10**6)):
            if u < size * 1000:
                text = _frac(u, size) + unit
                break
    else:
        secs, frac_ns = divmod(u, 10**9)
        hours, rem = divmod(secs, 3600)
        minutes, seconds = divmod(rem, 60)
        text = _frac(seconds * 10**9 + frac_ns, 10**9) + "s"
        if hours or minutes:
            text = f"{minutes}m" + text
        if hours:
            text = f"{hours}h" + text
    return ("-" if neg else "") + text


def _frac(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    if not frac:
        return str(whole)
    digits = str(frac).rjust(len(str(size)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


_UNITS = {"ns": 1, "us": 10**3, "µs": 10**3, "μs": 10**3, "ms": 10**6, "s": 10**9}
_UNITS |= {"m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_PART = re.compile(r"(\d*\.?\d*)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(s: str) -> int | None:
    """time.ParseDuration, None on error."""
    text = s
    neg = text.startswith("-")
    text = text.lstrip("+-") if text[:1] in "+-" else text
    if text == "0":
        return 0
    if not text:
        return None
    total = 0.0
    pos = 0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None or m.group(1) in ("", "."):
            return None
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    return int(-total if neg else total)
