"""Go's fmt for template values: Sprint, Sprintln, Sprintf with the common verbs."""

from __future__ import annotations

import math
import re
from typing import Any

from sluice_runtime.gotemplate.quoting import go_quote
from sluice_runtime.gotemplate.values import NO_VALUE, type_name, unbox

__all__ = ["go_quote", "sprint", "sprintf", "sprintln", "format_value"]


def format_float(f: float, verb: str = "g", prec: int = -1, *, v_mode: bool = False) -> str:
    """strconv.FormatFloat for 'e', 'f', 'g' (and %v's shortest form)."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    lower = verb.lower()
    if lower == "f":
        return f"{f:.{6 if prec < 0 else prec}f}"
    if lower == "e":
        if prec < 0:
            digits, exp = _shortest(f)
            mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
            text = ("-" if math.copysign(1, f) < 0 else "") + mant + _exp(exp, "e")
        else:
            text = _fix_exp(f"{f:.{prec}e}")
        return text.upper() if verb == "E" else text
    # 'g'
    if prec < 0:
        digits, exp = _shortest(f)
        # strconv decides between %e and %f with precision 6 when printing shortest.
        eprec = 6
        sign = "-" if math.copysign(1, f) < 0 else ""
        if exp < -4 or exp >= eprec:
            mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
            text = sign + mant + _exp(exp, "e")
        elif exp < 0:
            text = sign + "0." + "0" * (-exp - 1) + digits
        elif exp + 1 >= len(digits):
            text = sign + digits + "0" * (exp + 1 - len(digits))
        else:
            text = sign + digits[: exp + 1] + "." + digits[exp + 1 :]
    else:
        text = _fix_exp(f"{f:.{max(prec, 1) if prec else 1}g}")
    return text.upper() if verb == "G" else text


def _shortest(f: float) -> tuple[str, int]:
    """The shortest decimal digits that round-trip, and the decimal exponent."""
    if f == 0:
        return "0", 0
    text = repr(abs(f))
    mant, _, e = text.partition("e")
    exp = int(e) if e else 0
    intpart, _, frac = mant.partition(".")
    if frac == "0":
        frac = ""
    digits = (intpart + frac).lstrip("0")
    exp += len(intpart.lstrip("0")) - 1 if intpart.lstrip("0") else -(len(frac) - len(frac.lstrip("0"))) - 1
    return digits.rstrip("0") or "0", exp


def _exp(exp: int, e: str) -> str:
    return f"{e}{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _fix_exp(text: str) -> str:
    return re.sub(r"e([+-])(\d+)$", lambda m: f"e{m.group(1)}{int(m.group(2)):02d}", text)


def format_value(v: Any, verb: str = "v", *, plus: bool = False, sharp: bool = False) -> str:
    """%v (and element-wise other verbs) of one value, without padding."""
    v = unbox(v)
    if v is NO_VALUE:
        return "<no value>"
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return format_float(v, "g", -1, v_mode=True)
    if isinstance(v, str):
        return v
    if isinstance(v, list | tuple):
        return "[" + " ".join(format_value(x, verb) for x in v) + "]"
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: kv[0])
        return "map[" + " ".join(f"{k}:{format_value(x, verb)}" for k, x in items) + "]"
    return str(v)


def sprint(*args: Any) -> str:
    out: list[str] = []
    prev_string = False
    for i, a in enumerate(args):
        a = unbox(a)
        is_string = isinstance(a, str)
        if i > 0 and not is_string and not prev_string:
            out.append(" ")
        out.append(format_value(a))
        prev_string = is_string
    return "".join(out)


def sprintln(*args: Any) -> str:
    return " ".join(format_value(a) for a in args) + "\n"


_SPEC = re.compile(r"%([-+# 0]*)(\*|\d+)?(?:\.(\*|\d*))?(.?)", re.S)


def sprintf(fmt: str, *args: Any) -> str:  # noqa: C901 - Go's doPrintf is one loop too
    out: list[str] = []
    argi = 0
    i = 0
    while i < len(fmt):
        j = fmt.find("%", i)
        if j < 0:
            out.append(fmt[i:])
            break
        out.append(fmt[i:j])
        m = _SPEC.match(fmt, j)
        assert m is not None
        flags, width_s, prec_s, verb = m.group(1), m.group(2), m.group(3), m.group(4)
        i = m.end()
        width = -1
        prec = -1
        bad = ""
        if width_s == "*":
            if argi < len(args) and isinstance(unbox(args[argi]), int) and not isinstance(
                unbox(args[argi]), bool
            ):
                width = unbox(args[argi])
                if width < 0:
                    flags += "-"
                    width = -width
            else:
                bad += "%!(BADWIDTH)"
            argi += 1
        elif width_s:
            width = int(width_s)
        if prec_s is not None:
            if prec_s == "*":
                if argi < len(args) and isinstance(unbox(args[argi]), int):
                    prec = unbox(args[argi])
                    if prec < 0:
                        prec = -1
                else:
                    bad += "%!(BADPREC)"
                argi += 1
            else:
                prec = int(prec_s or "0")
        out.append(bad)
        if verb == "":
            out.append("%!(NOVERB)")
            break
        if verb == "%":
            out.append("%")
            continue
        if argi >= len(args):
            out.append(f"%!{verb}(MISSING)")
            continue
        arg = unbox(args[argi])
        argi += 1
        out.append(_pad(_format_one(arg, verb, flags, prec), width, flags, arg, verb))
    if argi < len(args):
        extra = ", ".join(
            "<nil>" if unbox(a) is None else f"{type_name(unbox(a))}={format_value(a)}"
            for a in args[argi:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


def _bad(verb: str, arg: Any) -> str:
    if arg is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({type_name(arg)}={format_value(arg)})"


def _format_one(arg: Any, verb: str, flags: str, prec: int) -> str:  # noqa: C901
    if verb == "T":
        return type_name(arg) if arg is not None else "<nil>"
    if arg is None:
        return "<nil>" if verb == "v" else _bad(verb, arg)
    if isinstance(arg, list | tuple) and verb not in "vT" and not (
        verb in "sxXq" and False
    ):
        return "[" + " ".join(_format_one(x, verb, flags, prec) for x in arg) + "]"
    if isinstance(arg, dict) and verb != "v":
        items = sorted(arg.items())
        return "map[" + " ".join(
            f"{_format_one(k, verb, flags, prec)}:{_format_one(x, verb, flags, prec)}"
            for k, x in items
        ) + "]"
    if isinstance(arg, bool):
        if verb in "vt":
            return "true" if arg else "false"
        return _bad(verb, arg)
    if isinstance(arg, int):
        return _format_int(arg, verb, flags, prec)
    if isinstance(arg, float):
        return _format_float_verb(arg, verb, flags, prec)
    if isinstance(arg, str):
        return _format_str(arg, verb, flags, prec)
    if verb == "v":
        return format_value(arg)
    return _bad(verb, arg)


def _sign(text: str, negative: bool, flags: str) -> str:
    if negative:
        return "-" + text
    if "+" in flags:
        return "+" + text
    if " " in flags:
        return " " + text
    return text


def _format_int(n: int, verb: str, flags: str, prec: int) -> str:
    base = {"d": 10, "v": 10, "b": 2, "o": 8, "O": 8, "x": 16, "X": 16}.get(verb)
    if verb == "c":
        return chr(n) if 0 <= n <= 0x10FFFF else "\ufffd"
    if verb == "q":
        from sluice_runtime.gotemplate.quoting import is_print

        c = chr(n) if 0 <= n <= 0x10FFFF else "\ufffd"
        body = go_quote(c)[1:-1].replace("\\\"", '"')
        if c == "'":
            body = "\\'"
        del is_print
        return "'" + body + "'"
    if verb == "U":
        text = f"U+{n:04X}"
        if "#" in flags and 0 <= n <= 0x10FFFF and chr(n).isprintable():
            text += f" '{chr(n)}'"
        return text
    if verb in "eEfFgG":
        return _format_float_verb(float(n), verb, flags, prec) if False else _bad(verb, n)
    if base is None:
        return _bad(verb, n)
    digits = {2: f"{abs(n):b}", 8: f"{abs(n):o}", 10: str(abs(n)), 16: f"{abs(n):x}"}[base]
    if verb == "X":
        digits = digits.upper()
    if prec >= 0:
        digits = digits.rjust(prec, "0") if prec or n else ""
    if "#" in flags:
        digits = {2: "0b", 8: "0", 16: "0x" if verb == "x" else "0X"}.get(base, "") + digits
    if verb == "O":
        digits = "0o" + digits
    return _sign(digits, n < 0, flags)


def _format_float_verb(f: float, verb: str, flags: str, prec: int) -> str:
    if verb == "v":
        text = format_float(abs(f), "g", prec, v_mode=prec < 0)
    elif verb in "eEfFgG":
        p = prec if prec >= 0 else (-1 if verb in "gG" else 6)
        text = format_float(abs(f), verb if verb != "F" else "f", p)
    else:
        return _bad(verb, f)
    negative = math.copysign(1, f) < 0 and not math.isnan(f)
    if math.isinf(f):
        text = "Inf"
    return _sign(text, negative, flags)


def _format_str(s: str, verb: str, flags: str, prec: int) -> str:
    if prec >= 0 and verb in "svq":
        s = s[:prec]
    if verb in "sv":
        return s
    if verb == "q":
        if "#" in flags and "`" not in s and all(c == "\t" or c.isprintable() for c in s):
            return "`" + s + "`"
        return go_quote(s, ascii_only="+" in flags)
    if verb in "xX":
        data = s.encode()
        if prec >= 0:
            data = data[:prec]
        parts = [f"{b:02x}" if verb == "x" else f"{b:02X}" for b in data]
        prefix = ("0x" if verb == "x" else "0X") if "#" in flags else ""
        if " " in flags:
            return " ".join(prefix + p for p in parts)
        return prefix + "".join(parts)
    return _bad(verb, s)


def _pad(text: str, width: int, flags: str, arg: Any, verb: str) -> str:
    if width < 0 or len(text) >= width:
        return text
    if "-" in flags:
        return text + " " * (width - len(text))
    numeric = isinstance(arg, int | float) and not isinstance(arg, bool) and verb not in "cqU"
    if "0" in flags and (numeric or isinstance(arg, str)) and not (
        isinstance(arg, float) and not math.isfinite(arg)
    ):
        if numeric and text[:1] in "+- ":
            return text[0] + text[1:].rjust(width - 1, "0")
        return text.rjust(width, "0")
    return text.rjust(width)
