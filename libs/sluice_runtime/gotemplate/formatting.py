"""Go's fmt for template values: Sprint, Sprintln, Sprintf with the common verbs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from sluice_runtime.gotemplate import budgets
from sluice_runtime.gotemplate.literals import go_quote
from sluice_runtime.gotemplate.values import NO_VALUE, type_name, unbox

__all__ = ["format_value", "go_quote", "sprint", "sprintf", "sprintln"]


def format_float(f: float, verb: str = "g", prec: int = -1) -> str:
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
    exp += (
        len(intpart.lstrip("0")) - 1
        if intpart.lstrip("0")
        else -(len(frac) - len(frac.lstrip("0"))) - 1
    )
    return digits.rstrip("0") or "0", exp


def _exp(exp: int, e: str) -> str:
    return f"{e}{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _fix_exp(text: str) -> str:
    return re.sub(r"e([+-])(\d+)$", lambda m: f"e{m.group(1)}{int(m.group(2)):02d}", text)


def format_value(v: Any, verb: str = "v", *, plus: bool = False, sharp: bool = False) -> str:
    """%v (and element-wise other verbs) of one value, without padding."""
    v = unbox(v)
    if isinstance(v, list | tuple | dict):
        # Shared parts print each time they appear: pay for the whole before printing.
        budgets.spend_deep(v)
    return _format_value(v, verb)


def _format_value(v: Any, verb: str = "v") -> str:
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
        return format_float(v, "g", -1)
    if isinstance(v, str):
        return v
    if isinstance(v, list | tuple):
        return "[" + " ".join(_format_value(x, verb) for x in v) + "]"
    if isinstance(v, dict):
        items = sorted(v.items(), key=lambda kv: kv[0])
        return "map[" + " ".join(f"{k}:{_format_value(x, verb)}" for k, x in items) + "]"
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


def sprintf(fmt: str, *args: Any) -> str:
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
            if (
                argi < len(args)
                and isinstance(unbox(args[argi]), int)
                and not isinstance(unbox(args[argi]), bool)
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
                value = unbox(args[argi]) if argi < len(args) else None
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    prec = value
                else:
                    bad += "%!(BADPREC)"
                argi += 1
            else:
                prec = int(prec_s or "0")
        out.append(bad)
        budgets.spend(max(width, prec, 0))  # the padding about to be made
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
        if "-" in flags:
            flags = flags.replace("0", "")  # Go pads with zeros only on the left
        if verb == "v":
            flags = flags.replace("+", "").replace("#", "")  # %+v and %#v are for structs
        out.append(_format_one(arg, verb, Spec(flags, width, prec)))
    if argi < len(args):
        extra = ", ".join(
            "<nil>" if unbox(a) is None else f"{type_name(unbox(a))}={format_value(a)}"
            for a in args[argi:]
        )
        out.append(f"%!(EXTRA {extra})")
    return "".join(out)


@dataclass(frozen=True)
class Spec:
    """One verb's flags, width (-1 for none) and precision (-1 for none)."""

    flags: str
    width: int
    prec: int

    @property
    def zero(self) -> bool:
        return "0" in self.flags


def _pad(text: str, spec: Spec, *, zero: bool = True) -> str:
    """fmt's pad: spaces (or zeros, with the 0 flag) to the width, on the left unless '-'."""
    if spec.width < 0 or len(text) >= spec.width:
        return text
    fill = spec.width - len(text)
    if "-" in spec.flags:
        return text + " " * fill
    return ("0" if zero and spec.zero else " ") * fill + text


def _bad(verb: str, arg: Any, spec: Spec) -> str:
    if arg is None:
        return f"%!{verb}(<nil>)"
    return f"%!{verb}({type_name(arg)}={_format_one(arg, 'v', spec)})"


def _format_one(arg: Any, verb: str, spec: Spec, *, nested: bool = False) -> str:
    if verb == "T":
        if arg is None:
            return _pad("<nil>", spec)
        name = type_name(arg)
        return _pad(name[: spec.prec] if spec.prec >= 0 else name, spec)
    if arg is None:
        # A nil inside a slice or map is an interface{} holding nil: "<nil>" whatever the verb.
        if nested:
            return "<nil>"
        return _pad("<nil>", spec) if verb == "v" else _bad(verb, arg, spec)
    if isinstance(arg, list | tuple):
        # fmt formats (and pads) each element; the brackets are never padded.
        return "[" + " ".join(_format_one(x, verb, spec, nested=True) for x in arg) + "]"
    if isinstance(arg, dict):
        items = sorted(arg.items())
        parts = (
            f"{_format_one(k, verb, spec, nested=True)}:{_format_one(x, verb, spec, nested=True)}"
            for k, x in items
        )
        return "map[" + " ".join(parts) + "]"
    if isinstance(arg, bool):
        return _pad("true" if arg else "false", spec) if verb in "vt" else _bad(verb, arg, spec)
    if isinstance(arg, int):
        return _format_int(arg, verb, spec)
    if isinstance(arg, float):
        return _format_float_verb(arg, verb, spec)
    if isinstance(arg, str):
        return _format_str(arg, verb, spec)
    return _pad(format_value(arg), spec) if verb == "v" else _bad(verb, arg, spec)


def _sign(negative: bool, flags: str) -> str:
    if negative:
        return "-"
    if "+" in flags:
        return "+"
    if " " in flags:
        return " "
    return ""


def _format_int(n: int, verb: str, spec: Spec) -> str:
    if verb == "c":
        return _pad(chr(n) if 0 <= n <= 0x10FFFF else "\ufffd", spec)
    if verb == "q":
        c = chr(n) if 0 <= n <= 0x10FFFF else "\ufffd"
        body = "\\'" if c == "'" else go_quote(c, ascii_only="+" in spec.flags)[1:-1]
        return _pad("'" + body.replace('\\"', '"') + "'", spec)
    if verb == "U":
        text = "U+" + f"{n & (2**64 - 1):X}".rjust(max(spec.prec, 4), "0")
        if "#" in spec.flags and 0 <= n <= 0x10FFFF and chr(n).isprintable():
            text += f" '{chr(n)}'"
        return _pad(text, spec, zero=False)
    base = {"d": 10, "v": 10, "b": 2, "o": 8, "O": 8, "x": 16, "X": 16}.get(verb)
    if base is None:
        return _bad(verb, n, spec)
    digits = {2: f"{abs(n):b}", 8: f"{abs(n):o}", 10: str(abs(n)), 16: f"{abs(n):x}"}[base]
    if verb == "X":
        digits = digits.upper()
    sign = _sign(n < 0, spec.flags)
    if spec.prec == 0 and n == 0:
        return _pad("", spec, zero=False)  # Go prints nothing, not even a sign
    if spec.prec >= 0:
        digits = digits.rjust(spec.prec, "0") if spec.prec or n else ""
    elif spec.zero and spec.width >= 0:
        # Go zero-pads an integer as if it were precision: the sign counts, a 0x prefix not.
        digits = digits.rjust(spec.width - (1 if sign else 0), "0")
    if "#" in spec.flags:
        digits = {2: "0b", 8: "0", 16: "0x" if verb == "x" else "0X"}.get(base, "") + digits
        if base == 8 and digits.startswith("00"):
            digits = digits[1:]
    if verb == "O":
        digits = "0o" + digits
    return _pad(sign + digits, spec, zero=False)


def _format_float_verb(f: float, verb: str, spec: Spec) -> str:
    prec = spec.prec
    if verb == "v":
        text = format_float(abs(f), "g", prec)
    elif verb in "eEfFgG":
        p = prec if prec >= 0 else (-1 if verb in "gG" else 6)
        text = format_float(abs(f), verb if verb != "F" else "f", p)
    elif verb in "xX":
        text = _hex_float(abs(f), prec)
        text = text.upper() if verb == "X" else text
    elif verb == "b":
        mant, exp = math.frexp(abs(f))
        text = f"{int(mant * 2**53)}p{exp - 53:+d}" if f else "0p-1074"
    else:
        return _bad(verb, f, spec)
    if math.isnan(f):
        return _pad(
            ("+" if "+" in spec.flags else " " if " " in spec.flags else "") + "NaN",
            spec,
            zero=False,
        )
    sign = _sign(math.copysign(1, f) < 0, spec.flags)
    if math.isinf(f):
        return _pad(sign + "Inf", spec, zero=False)
    if spec.zero and spec.width > len(sign + text):
        return sign + "0" * (spec.width - len(sign + text)) + text
    return _pad(sign + text, spec)


def _hex_float(f: float, prec: int) -> str:
    """strconv's 'x' format: 0x1.8p+01, the mantissa rounded to prec hex digits."""
    if f == 0:
        return "0x0" + ("." + "0" * prec if prec > 0 else "") + "p+00"
    mant, exp = math.frexp(f)
    frac, exp = round((mant * 2 - 1) * 2**52), exp - 1
    digits = 13
    if 0 <= prec < digits:
        shift = 4 * (digits - prec)
        q, r = divmod(frac, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q % 2):
            q += 1
        if q >> (4 * prec):  # the rounding carried into the leading 1
            q, exp = 0, exp + 1
        frac, digits = q, prec
    text = f"{frac:0{digits}x}" if digits else ""
    if prec < 0:
        text = text.rstrip("0")
    elif prec > digits:
        text += "0" * (prec - digits)
    return "0x1" + ("." + text if text else "") + f"p{'-' if exp < 0 else '+'}{abs(exp):02d}"


def _format_str(s: str, verb: str, spec: Spec) -> str:
    prec = spec.prec
    if verb in "sv":
        return _pad(s[:prec] if prec >= 0 else s, spec)
    if verb == "q":
        s = s[:prec] if prec >= 0 else s
        if "#" in spec.flags and "`" not in s and all(c == "\t" or c.isprintable() for c in s):
            return _pad("`" + s + "`", spec)
        return _pad(go_quote(s, ascii_only="+" in spec.flags), spec)
    if verb in "xX":
        data = s.encode()
        if prec >= 0:
            data = data[:prec]
        parts = [f"{b:02x}" if verb == "x" else f"{b:02X}" for b in data]
        prefix = ("0x" if verb == "x" else "0X") if "#" in spec.flags else ""
        if " " in spec.flags:
            return _pad(" ".join(prefix + p for p in parts), spec)
        return _pad(prefix + "".join(parts) if parts else "", spec)
    return _bad(verb, s, spec)
