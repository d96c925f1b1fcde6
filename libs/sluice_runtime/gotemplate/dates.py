"""sprig's hermetic date functions over Go's time layouts (toDate, unixEpoch, ...).

Go parses times against a reference layout ("2006-01-02 15:04:05"); this is
a port of time.Parse for the layout elements templates use, in a process
whose local zone is UTC (as Flux Operator's container is), with Go's error
texts and Go's way of printing a time.Time.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from sluice_runtime.gotemplate import converting as cv
from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.literals import go_quote
from sluice_runtime.gotemplate.values import unbox

_CHUNK = re.compile(
    r"January|Jan(?![a-z])|Monday|Mon(?![a-z])|MST|2006|0[1-6]|002|__2|_2|15|[1-5]|PM|pm"
    r"|-070000|-07:00:00|-0700|-07:00|-07|Z070000|Z07:00:00|Z0700|Z07:00|Z07|[.,](?:0+|9+)(?!\d)"
)
_MONTHS = [calendar.month_name[i] for i in range(1, 13)]
_DAYS = list(calendar.day_name)


@dataclass(frozen=True)
class GoTime:
    """A time.Time: the instant, and the zone offset and name it is shown in."""

    utc: dt.datetime
    offset: int = 0
    zone: str = "UTC"
    # Python has no year 0, Go does: such a time is kept 2000 years on (the same
    # 400-year calendar) and shifted back when shown or counted.
    shift: int = 0
    go_type_name = "time.Time"

    def local(self) -> dt.datetime:
        return self.utc + dt.timedelta(seconds=self.offset)

    def __str__(self) -> str:
        t = self.local()
        frac = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
        sign = "-" if self.offset < 0 else "+"
        off = f"{sign}{abs(self.offset) // 3600:02d}{abs(self.offset) % 3600 // 60:02d}"
        return f"{t.year + self.shift:04d}-{t:%m-%d %H:%M:%S}{frac} {off} {self.zone or off}"


ZERO = GoTime(dt.datetime(1, 1, 1))


class _Bad(Exception):
    pass


def _getnum(value: str, fixed: bool) -> tuple[int, str]:
    if not value[:1].isdigit():
        raise _Bad
    if not value[1:2].isdigit():
        if fixed:
            raise _Bad
        return int(value[0]), value[1:]
    return int(value[:2]), value[2:]


def _skip(value: str, prefix: str) -> str:
    while prefix:
        if prefix[0] == " ":
            if value and value[0] != " ":
                raise _Bad
            prefix, value = prefix.lstrip(" "), value.lstrip(" ")
            continue
        if not value or value[0] != prefix[0]:
            raise _Bad
        prefix, value = prefix[1:], value[1:]
    return value


def _lookup(value: str, names: list[str]) -> tuple[int, str]:
    for i, name in enumerate(names):
        if value[: len(name)].lower() == name.lower():
            return i, value[len(name) :]
    raise _Bad


def parse_time(layout: str, value: str) -> GoTime:
    """time.ParseInLocation(layout, value, time.Local) with Local being UTC."""
    avalue = value

    def fail(message: str) -> FuncError:
        return FuncError(f"parsing time {go_quote(avalue)}{message}")

    year, month, day, hour, minute, sec, usec = 0, -1, -1, 0, 0, 0, 0
    pm: bool | None = None
    offset: int | None = None
    zone = ""
    rest = layout
    while True:
        m = _CHUNK.search(rest)
        prefix = rest[: m.start()] if m else rest
        try:
            value = _skip(value, prefix)
        except _Bad:
            raise fail(
                f" as {go_quote(layout)}: cannot parse {go_quote(value)} as {go_quote(prefix)}"
            ) from None
        if m is None:
            if value:
                raise fail(f": extra text: {go_quote(value)}")
            break
        std, rest, hold = m.group(0), rest[m.end() :], value
        out_of_range = ""
        try:
            if std == "2006":
                if len(value) < 4 or not value[:4].isdigit():
                    raise _Bad
                year, value = int(value[:4]), value[4:]
            elif std == "06":
                n, value = _getnum(value, True)
                year = n + (1900 if n >= 69 else 2000)
            elif std in ("01", "1"):
                month, value = _getnum(value, std == "01")
                out_of_range = "month" if not 1 <= month <= 12 else ""
            elif std in ("January", "Jan"):
                i, value = _lookup(value, _MONTHS if std == "January" else [n[:3] for n in _MONTHS])
                month = i + 1
            elif std in ("Monday", "Mon"):
                _, value = _lookup(value, _DAYS if std == "Monday" else [d[:3] for d in _DAYS])
            elif std in ("02", "2", "_2", "__2"):
                if std == "_2" and value[:1] == " ":
                    value = value[1:]
                day, value = _getnum(value, std == "02")
            elif std in ("15", "03", "3"):
                hour, value = _getnum(value, std == "03")
                out_of_range = "hour" if not 0 <= hour < (24 if std == "15" else 13) else ""
            elif std in ("04", "4"):
                minute, value = _getnum(value, std == "04")
                out_of_range = "minute" if not 0 <= minute < 60 else ""
            elif std in ("05", "5"):
                sec, value = _getnum(value, std == "05")
                out_of_range = "second" if not 0 <= sec < 60 else ""
                nxt = _CHUNK.search(rest)
                frac_next = nxt is not None and nxt.start() == 0 and nxt.group(0)[0] in ".,"
                fm = re.match(r"[.,](\d+)", value)
                if fm and not frac_next:
                    usec, value = int(fm.group(1)[:6].ljust(6, "0")), value[fm.end() :]
            elif std in ("PM", "pm"):
                word = value[:2]
                if word not in (("AM", "PM") if std == "PM" else ("am", "pm")):
                    raise _Bad
                pm, value = word.upper() == "PM", value[2:]
            elif std == "MST":
                zm = re.match(r"UTC|[A-Z]{3,5}", value)
                if zm is None:
                    raise _Bad
                zone, value = zm.group(0), value[zm.end() :]
            elif std[0] in "-Z":
                if std[0] == "Z" and value[:1] == "Z":
                    offset, zone, value = 0, "UTC", value[1:]
                else:
                    shape = std[1:].replace("07", r"\d\d").replace("00", r"\d\d")
                    zm = re.match(r"[+-]" + shape, value)
                    if zm is None:
                        raise _Bad
                    digits = re.sub(r"\D", "", zm.group(0)).ljust(6, "0")
                    secs = int(digits[:2]) * 3600 + int(digits[2:4]) * 60 + int(digits[4:6])
                    offset = -secs if zm.group(0)[0] == "-" else secs
                    value = value[zm.end() :]
            else:  # fractional seconds: .000 exactly that many digits, .999 any
                if std[1] == "0":
                    n = len(std)
                    if len(value) < n or value[0] != std[0] or not value[1:n].isdigit():
                        raise _Bad
                    usec, value = int(value[1:n][:6].ljust(6, "0")), value[n:]
                else:
                    fm = re.match(r"[.,](\d+)", value)
                    if fm:
                        usec, value = int(fm.group(1)[:6].ljust(6, "0")), value[fm.end() :]
        except _Bad:
            raise fail(
                f" as {go_quote(layout)}: cannot parse {go_quote(hold)} as {go_quote(std)}"
            ) from None
        if out_of_range:
            raise fail(f": {out_of_range} out of range")
    if pm is True and hour < 12:
        hour += 12
    elif pm is False and hour == 12:
        hour = 0
    month, day = (1 if month < 0 else month), (1 if day < 0 else day)
    shift = -2000 if year == 0 else 0
    if not 1 <= day <= calendar.monthrange(year - shift, month)[1]:
        raise fail(": day out of range")
    wall = dt.datetime(year - shift, month, day, hour, minute, sec, usec)
    if offset is not None and offset != 0:
        utc = wall - dt.timedelta(seconds=offset)
        return GoTime(utc, offset, zone if zone != "UTC" else "", shift)
    return GoTime(wall, 0, zone if zone and offset is None else "UTC", shift)


def _to_date(layout: str, value: str) -> GoTime:
    try:
        return parse_time(layout, value)
    except FuncError:
        return ZERO


def _unix(t: GoTime) -> int:
    return calendar.timegm(t.utc.timetuple()) + t.shift // 400 * 146097 * 86400


def _date_modify(change: str, t: GoTime) -> GoTime:
    ns = cv.parse_duration(change)
    if ns is None:
        raise FuncError(f"time: invalid duration {go_quote(change)}")
    return GoTime(t.utc + dt.timedelta(microseconds=ns // 1000), t.offset, t.zone, t.shift)


def _ago(date: Any) -> str:
    date = unbox(date)
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    if isinstance(date, GoTime):
        then = date.utc
    elif isinstance(date, int) and not isinstance(date, bool):
        then = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=date)
    else:
        then = now
    return cv.duration_string(round((now - then).total_seconds()) * 10**9)


TIME = "time.Time"
DATES: dict[str, GoFunc] = {
    "toDate": GoFunc(_to_date, ("string", "string")),
    "mustToDate": GoFunc(parse_time, ("string", "string")),
    "unixEpoch": GoFunc(lambda t: str(_unix(t)), (TIME,)),
    "mustDateModify": GoFunc(_date_modify, ("string", TIME)),
    "must_date_modify": GoFunc(_date_modify, ("string", TIME)),
    "ago": GoFunc(_ago, (ANY,)),
}
