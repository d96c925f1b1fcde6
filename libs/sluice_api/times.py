"""Go's durations and Kubernetes' RFC 3339 times, read and written as Flux writes them.

`parse_duration`/`format_duration` are Go's time.ParseDuration and
Duration.String (microsecond resolution); `parse_time`/`format_time` read
and write metav1.Time. Every kind's interval, timeout and timestamp goes
through these, so the API models and the controllers agree on them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Literal

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_MICROSECONDS = {
    "ns": 0.001,
    "us": 1,
    "µs": 1,
    "μs": 1,  # Go accepts both the micro sign and the Greek letter mu
    "ms": 1_000,
    "s": 1_000_000,
    "m": 60_000_000,
    "h": 3_600_000_000,
}


# Go's Duration is int64 nanoseconds: about 2562047h47m16.85s.
_MAX_DURATION_MICROSECONDS = (2**63 - 1) / 1_000


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration string (`1h30m`, `0.5s`, `-1m`, `0`) like time.ParseDuration.

    The result has microsecond resolution; nanoseconds are rounded.
    """
    body = text[1:] if text[:1] in ("-", "+") else text
    if body == "0":
        return timedelta(0)
    position = 0
    microseconds = 0.0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None:
            break
        microseconds += float(match.group(1)) * _UNIT_MICROSECONDS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(f"invalid duration {text!r}")
    if microseconds > _MAX_DURATION_MICROSECONDS:
        raise ValueError(f"invalid duration {text!r}: out of range")
    sign = -1 if text.startswith("-") else 1
    return timedelta(microseconds=sign * microseconds)


def format_duration(value: timedelta) -> str:
    """Format a duration the way Go's Duration.String does, e.g. `1h30m0s`, `500ms`."""
    total = abs(value) // timedelta(microseconds=1)
    sign = "-" if value < timedelta(0) else ""
    if total == 0:
        return "0s"
    if total < 1_000:
        return f"{sign}{total}µs"
    if total < 1_000_000:
        return f"{sign}{_decimal(total, 1_000)}ms"
    hours, rest = divmod(total, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    text = f"{_decimal(rest, 1_000_000)}s"
    if hours or minutes:
        text = f"{minutes}m{text}"
    if hours:
        text = f"{hours}h{text}"
    return sign + text


def _decimal(value: int, unit: int) -> str:
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")


_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]+))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)


def parse_time(text: str) -> datetime:
    """An RFC 3339 time with its zone (`2026-11-21T10:00:00Z`, `...+01:00`), in UTC.

    Nothing else is accepted: no missing zone, no date alone, no space for
    `T`. Fractions beyond microseconds are truncated. Raises ValueError.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an RFC3339 time")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    offset = timedelta(0)
    if not zulu:
        if int(off_h) > 23 or int(off_m) > 59:
            raise ValueError(f"{text!r} has an invalid offset")
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1)
    try:
        local = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError) as error:
        raise ValueError(f"{text!r} is out of range: {error}") from None


def format_time(value: datetime, *, fraction: Literal["auto", "none", "micro"] = "auto") -> str:
    """RFC 3339 in UTC with a `Z`.

    `fraction`: "auto" writes one only when there is one (trailing zeros
    dropped); "none" truncates to the second, as Kubernetes writes a `Time`
    (condition transitions, timestamps); "micro" always writes six digits, as
    it writes a `MicroTime` (Lease renewals, requestedAt tokens).
    """
    t = value.astimezone(UTC)
    text = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if fraction == "micro":
        text += f".{t.microsecond:06d}"
    elif fraction == "auto" and t.microsecond:
        text += "." + f"{t.microsecond:06d}".rstrip("0")
    return text + "Z"
