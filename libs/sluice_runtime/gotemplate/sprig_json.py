"""Sprig's JSON functions, writing JSON as Go's encoding/json does (sorted keys, HTML escaped)."""

from __future__ import annotations

import json
import math
from typing import Any

from sluice_runtime.gotemplate import budgets
from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import format_float
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.values import NO_VALUE, type_name, unbox

S = "string"


def _json_float(f: float) -> str:
    if math.isnan(f) or math.isinf(f):
        raise FuncError(f"json: unsupported value: {format_float(f)}")
    a = abs(f)
    if a != 0 and (a < 1e-6 or a >= 1e21):
        text = format_float(f, "e", -1)
        # Go's encoder writes e-07 as e-7.
        mant, _, exp = text.partition("e")
        sign, digits = exp[0], exp[1:].lstrip("0") or "0"
        return f"{mant}e{sign}{digits}"
    return _json_plain(f)


def _json_plain(f: float) -> str:
    text = repr(f)
    if "e" in text or "E" in text:
        text = f"{f:.20f}".rstrip("0").rstrip(".")
    return text[:-2] if text.endswith(".0") else text


def _json_string(s: str, escape_html: bool) -> str:
    out = ['"']
    for c in s:
        o = ord(c)
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\r":
            out.append("\\r")
        elif c == "\t":
            out.append("\\t")
        elif o < 0x20 or (escape_html and c in "<>&") or o in (0x2028, 0x2029):
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def to_json(v: Any, *, indent: str = "", escape_html: bool = True, level: int = 0) -> str:
    if level == 0:
        budgets.spend_deep(v)  # shared parts are written each time they appear
    return _to_json(v, indent=indent, escape_html=escape_html, level=level)


def _to_json(v: Any, *, indent: str = "", escape_html: bool = True, level: int = 0) -> str:
    v = unbox(v)
    if v is None or v is NO_VALUE:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _json_float(v)
    if isinstance(v, str):
        return _json_string(v, escape_html)
    nl = "\n" + indent * (level + 1) if indent else ""
    end = "\n" + indent * level if indent else ""
    colon = ": " if indent else ":"
    if isinstance(v, list | tuple):
        if not v:
            return "[]"
        items = [to_json(x, indent=indent, escape_html=escape_html, level=level + 1) for x in v]
        return "[" + nl + ("," + nl).join(items) + end + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [
            _json_string(str(k), escape_html)
            + colon
            + to_json(v[k], indent=indent, escape_html=escape_html, level=level + 1)
            for k in sorted(v)
        ]
        return "{" + nl + ("," + nl).join(items) + end + "}"
    raise FuncError(f"json: unsupported type: {type_name(v)}")


def _from_json(s: str) -> Any:
    try:
        return json.loads(s, parse_int=float)
    except (ValueError, RecursionError) as err:
        raise FuncError(str(err)) from None


def _from_json_quiet(s: str) -> Any:
    try:
        return _from_json(s)
    except FuncError:
        return None


def _quiet(fn: Any) -> Any:
    def call(v: Any) -> str:
        try:
            return str(fn(v))
        except FuncError:
            return ""

    return call


JSON: dict[str, GoFunc] = {
    "fromJson": GoFunc(_from_json_quiet, (S,), boxed_result=True),
    "mustFromJson": GoFunc(_from_json, (S,), boxed_result=True),
    "toJson": GoFunc(_quiet(to_json), (ANY,)),
    "mustToJson": GoFunc(to_json, (ANY,)),
    "toPrettyJson": GoFunc(_quiet(lambda v: to_json(v, indent="  ")), (ANY,)),
    "mustToPrettyJson": GoFunc(lambda v: to_json(v, indent="  "), (ANY,)),
    "toRawJson": GoFunc(lambda v: to_json(v, escape_html=False), (ANY,)),
    "mustToRawJson": GoFunc(lambda v: to_json(v, escape_html=False), (ANY,)),
}
