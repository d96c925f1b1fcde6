"""Go's string literals: strconv.Unquote for template constants, strconv.Quote for %q."""

from __future__ import annotations

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
        elif ascii_only and ord(c) >= 0x80 or not is_print(c):
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
