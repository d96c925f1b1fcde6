"""Go's literals: strconv.Unquote for template strings, number constants, strconv.Quote."""

from __future__ import annotations

import re

from sluice_runtime.gotemplate import nodes as n

_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_SIMPLE |= {"\\": "\\", "'": "'", '"': '"'}
_ESCAPE = {"\a": r"\a", "\b": r"\b", "\f": r"\f", "\n": r"\n", "\r": r"\r", "\t": r"\t"}
_ESCAPE |= {"\v": r"\v", "\\": "\\\\"}


def _unescape(body: str, quote: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == quote or c == "\n":
            raise ValueError("invalid syntax")
        if c != "\\":
            out.append(c)
            i += 1
            continue
        i += 1
        if i >= len(body):
            raise ValueError("invalid syntax")
        e = body[i]
        if e in _SIMPLE:
            if (e == "'" and quote == '"') or (e == '"' and quote == "'"):
                raise ValueError("invalid syntax")
            out.append(_SIMPLE[e])
            i += 1
        elif e in "xuU":
            size = {"x": 2, "u": 4, "U": 8}[e]
            digits = body[i + 1 : i + 1 + size]
            if len(digits) != size or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError("invalid syntax")
            value = int(digits, 16)
            if e != "x" and (value > 0x10FFFF or 0xD800 <= value < 0xE000):
                raise ValueError("invalid syntax")
            # \xNN is a byte; as text it is the byte's Latin-1 rune only when ASCII.
            out.append(chr(value) if e != "x" or value < 0x80 else bytes([value]).decode("latin-1"))
            i += 1 + size
        elif e in "01234567":
            digits = body[i : i + 3]
            if len(digits) != 3 or any(d not in "01234567" for d in digits):
                raise ValueError("invalid syntax")
            value = int(digits, 8)
            if value > 255:
                raise ValueError("invalid syntax")
            out.append(chr(value))
            i += 3
        else:
            raise ValueError("invalid syntax")
    return "".join(out)


def unquote(text: str) -> str:
    if len(text) < 2 or text[0] != text[-1]:
        raise ValueError("invalid syntax")
    if text[0] == "`":
        if "`" in text[1:-1]:
            raise ValueError("invalid syntax")
        return text[1:-1].replace("\r", "")
    if text[0] == '"':
        return _unescape(text[1:-1], '"')
    if text[0] == "'":
        return unquote_char(text)
    raise ValueError("invalid syntax")


def unquote_char(text: str) -> str:
    if len(text) < 3 or text[0] != "'" or text[-1] != "'":
        raise ValueError(f"malformed character constant: {text}")
    value = _unescape(text[1:-1], "'")
    if len(value) != 1:
        raise ValueError(f"malformed character constant: {text}")
    return value


def go_quote(text: str, *, ascii_only: bool = False) -> str:
    """strconv.Quote (or QuoteToASCII): Go's double-quoted form of a string."""
    out = ['"']
    for c in text:
        if c == '"':
            out.append('\\"')
        elif c in _ESCAPE:
            out.append(_ESCAPE[c])
        elif c < " " or c == "\x7f":
            out.append(f"\\x{ord(c):02x}")
        elif (ascii_only and ord(c) >= 0x80) or not is_print(c):
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def is_print(c: str) -> bool:
    """unicode.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space."""
    import unicodedata

    if c == " ":
        return True
    return unicodedata.category(c)[0] in "LMNPS"


def parse_number(text: str, pos: int, is_char: bool) -> n.NumberNode:
    """Go's parse.newNumber without complex numbers: which of int and float the text is."""
    node = n.NumberNode(pos, text=text)
    if is_char:
        value = ord(unquote_char(text))
        node.is_int = node.is_float = True
        node.int_value, node.float_value = value, float(value)
        return node
    if text.endswith("i"):
        raise ValueError(f"illegal number syntax: {text!r}")
    value_int = _parse_int(text)
    if value_int is not None:
        if -(2**63) <= value_int < 2**63:
            node.is_int = True
            node.int_value = value_int
        node.is_float = True
        node.float_value = float(value_int)
        if not node.is_int and value_int >= 2**64:
            node.is_float = True
        return node
    value_float = _parse_float(text)
    if value_float is None:
        raise ValueError(f"illegal number syntax: {go_quote(text)}")
    node.is_float = True
    node.float_value = value_float
    if value_float == int(value_float) and abs(value_float) < 2**63:
        node.is_int = True
        node.int_value = int(value_float)
    return node


_DEC = re.compile(r"[+-]?(0|[1-9](_?[0-9])*)")
_PREFIXED = re.compile(r"[+-]?0([xX](_?[0-9a-fA-F])+|[oO](_?[0-7])+|[bB](_?[01])+|(_?[0-7])+)")


def _parse_int(text: str) -> int | None:
    if _DEC.fullmatch(text):
        return int(text.replace("_", ""))
    if _PREFIXED.fullmatch(text):
        sign = -1 if text.startswith("-") else 1
        body = text.lstrip("+-").replace("_", "")
        if body[1:2] in ("x", "X"):
            return sign * int(body[2:], 16)
        if body[1:2] in ("b", "B"):
            return sign * int(body[2:], 2)
        if body[1:2] in ("o", "O"):
            return sign * int(body[2:], 8)
        return sign * int(body, 8)
    return None


_FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)")


def _parse_float(text: str) -> float | None:
    if _FLOAT.fullmatch(text):
        value = float(text)
        return value if value not in (float("inf"), float("-inf")) else None
    try:
        if re.fullmatch(r"[+-]?0[xX][0-9a-fA-F.]+[pP][+-]?\d+", text):
            return float.fromhex(text)
    except ValueError:
        return None
    return None
