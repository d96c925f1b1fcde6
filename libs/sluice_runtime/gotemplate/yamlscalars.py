"""go-yaml v2's scalars: which style a string gets, how it is escaped, folded or blocked.

A port of the decisions libyaml's emitter makes (yaml_emitter_analyze_scalar,
select_scalar_style, the plain/quoted/literal writers) and of go-yaml's
resolve(), which quotes any string that would read back as another type.
"""

from __future__ import annotations

import re

_BOOLS_NULLS = {
    "y",
    "Y",
    "yes",
    "Yes",
    "YES",
    "true",
    "True",
    "TRUE",
    "on",
    "On",
    "ON",
    "n",
    "N",
    "no",
    "No",
    "NO",
    "false",
    "False",
    "FALSE",
    "off",
    "Off",
    "OFF",
    "",
    "~",
    "null",
    "Null",
    "NULL",
    ".nan",
    ".NaN",
    ".NAN",
    ".inf",
    ".Inf",
    ".INF",
    "+.inf",
    "+.Inf",
    "+.INF",
    "-.inf",
    "-.Inf",
    "-.INF",
    "<<",
}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_BASE60 = re.compile(r"[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?")
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:([Tt])(\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})"
    r"| (\d{1,2}):(\d{1,2}):(\d{1,2})(\.\d{1,9})?)?"
)


def _resolves_to_non_string(s: str) -> bool:
    """go-yaml v2's resolve: would this text, written plain, read back as something else?"""
    # go-yaml looks a value up only when its first character hints at a non-string.
    if s == "<<":
        return False
    if s in _BOOLS_NULLS:
        return True
    if not s or s[0] not in "+-.0123456789":
        return False
    if s[0] == ".":
        # strconv.ParseFloat takes underscores between digits.
        if re.search(r"(?<!\d)_|_(?!\d)", s):
            return False
        return _YAML_FLOAT.fullmatch(s.replace("_", "")) is not None
    m = _TIMESTAMP.fullmatch(s)
    if m and 1 <= int(m.group(2)) <= 12 and 1 <= int(m.group(3)) <= 31:
        return True
    plain = s.replace("_", "")
    from sluice_runtime.gotemplate.converting import parse_go_int

    if parse_go_int(plain) is not None or re.fullmatch(r"\+?(0[xX][0-9a-fA-F]+|\d+)", plain):
        return True
    if _YAML_FLOAT.fullmatch(plain):
        return True
    return re.fullmatch(r"-?0b[01]+", plain) is not None


def _printable(c: str) -> bool:
    o = ord(c)
    return (
        o == 0x0A
        or 0x20 <= o <= 0x7E
        or 0xA0 <= o <= 0xD7FF
        or (0xE000 <= o <= 0xFFFD and o != 0xFEFF)
    )  # fmt: skip (go-yaml's is_printable rejects U+0085 and every 4-byte rune)


BREAKS = "\r\n\x85\u2028\u2029"


def _analyze(value: str) -> dict[str, bool]:
    """libyaml's yaml_emitter_analyze_scalar: which styles may write this string."""
    if not value:
        return {"multiline": False, "plain": True, "single": True, "block": False}
    block_ind = value.startswith(("---", "..."))
    line_breaks = special = leading_space = leading_break = False
    trailing_space = trailing_break = break_space = space_break = False
    preceded_ws, prev_space, prev_break = True, False, False
    for i, c in enumerate(value):
        followed_ws = i + 1 >= len(value) or value[i + 1] in " \t"
        if i == 0:
            if c in "#,[]{}&*!|>'\"%@`":
                block_ind = True
            elif c in "?:":
                block_ind = block_ind or followed_ws
            elif c == "-" and followed_ws:
                block_ind = True
        elif c == ":":
            block_ind = block_ind or followed_ws
        elif c == "#" and preceded_ws:
            block_ind = True
        if not _printable(c):
            special = True
        if c == " ":
            leading_space = leading_space or i == 0
            trailing_space = trailing_space or i == len(value) - 1
            break_space = break_space or prev_break
            prev_space, prev_break = True, False
        elif c in BREAKS:
            line_breaks = True
            leading_break = leading_break or i == 0
            trailing_break = trailing_break or i == len(value) - 1
            space_break = space_break or prev_space
            prev_space, prev_break = False, True
        else:
            prev_space = prev_break = False
        preceded_ws = c in " \t" or c in BREAKS
    plain = single = block = True
    if leading_space or leading_break or trailing_space or trailing_break:
        plain = False
    if trailing_space:
        block = False
    if break_space:
        plain = single = False
    if space_break or special:
        plain = single = block = False
    if line_breaks or block_ind:
        plain = False
    return {"multiline": line_breaks, "plain": plain, "single": single, "block": block}


_ESCAPES = {
    "\0": "0",
    "\a": "a",
    "\b": "b",
    "\t": "t",
    "\n": "n",
    "\v": "v",
    "\f": "f",
    "\r": "r",
    "\x1b": "e",
    '"': '"',
    "\\": "\\",
    "\x85": "N",
    "\xa0": "_",
    "\u2028": "L",
    "\u2029": "P",
}


def _escape(c: str, *, always: bool = False) -> str:
    if c in _ESCAPES:
        return "\\" + _ESCAPES[c]
    if always or not _printable(c) or c == "\ufeff":
        o = ord(c)
        return f"\\x{o:02X}" if o <= 0xFF else f"\\u{o:04X}" if o <= 0xFFFF else f"\\U{o:08X}"
    return c


WIDTH = 80  # go-yaml v2 folds long lines at spaces past this column


def _folded(s: str, style: str, column: int, indent: int, allow_breaks: bool) -> str:
    """libyaml's plain, single- and double-quoted writers: fold at a space past WIDTH."""
    quote = {"plain": "", "single": "'", "double": '"'}[style]
    out = [quote]
    col = column + len(quote)
    spaces = breaks = False
    last = len(s) - 1
    # go-yaml's is_bom looks at the string's first rune, not the current one: a string
    # that starts with a BOM has every rune escaped.
    escape_all = style == "double" and s.startswith("\ufeff")
    for i, c in enumerate(s):
        nxt = s[i + 1] if i < last else ""
        if c == " " and not escape_all:
            inner = style == "plain" or 0 < i < last
            if (
                allow_breaks
                and not spaces
                and col > WIDTH
                and inner
                and (style == "double" or nxt != " ")
            ):
                out.append("\n" + " " * indent)
                col = indent
                if style == "double" and nxt == " ":
                    out.append("\\")
                    col += 1
            else:
                out.append(c)
                col += 1
            spaces = True
            breaks = False
            continue
        if style == "single" and c in BREAKS:
            out.append("\n" + c if c == "\n" and not breaks else c)
            col, breaks, spaces = 0, True, False
            continue
        if breaks:
            out.append(" " * indent)
            col, breaks = indent, False
        if style == "double":
            text = _escape(c, always=escape_all)
        else:
            text = "''" if c == "'" and style == "single" else c
        out.append(text)
        col += len(text)
        spaces = False
    out.append(quote)
    return "".join(out)


def scalar(s: str, indent: int, *, key: bool, complex_key: bool = False, column: int = 0) -> str:
    analysis = _analyze(s)
    if "\n" in s and not key:
        style = "literal"
    elif not _resolves_to_non_string(s) and not _BASE60.fullmatch(s):
        style = "plain"
    else:
        style = "double"
    if key and analysis["multiline"]:
        style = "double"
    if style == "plain" and (not analysis["plain"] or (not s and key)):
        style = "single"
    if style == "single" and not analysis["single"]:
        style = "double"
    if style == "literal" and not analysis["block"]:
        style = "double"
    if style == "literal":
        return _literal(s, indent)
    # Simple keys never fold; values and complex keys do.
    return _folded(s, style, column, indent, allow_breaks=complex_key or not key)


def _literal(s: str, indent: int) -> str:
    hint = "2" if s[0] == " " or s[0] in BREAKS else ""
    if s[-1] not in BREAKS:
        chomp = "-"
    elif len(s) == 1 or s[-2] in BREAKS:
        chomp = "+"
    else:
        chomp = ""
    pad = " " * indent
    breaks = True
    text: list[str] = []
    for c in s:
        if c in BREAKS:
            text.append(c)  # libyaml writes a break other than "\n" as itself
            breaks = True
        else:
            if breaks:
                text.append(pad)
                breaks = False
            text.append(c)
    body = "".join(text)
    # The caller ends the node with a newline (see line_end); a final "\n" is that newline.
    return "|" + hint + chomp + "\n" + (body[:-1] if body.endswith("\n") else body)


def line_end(text: str) -> str:
    """What ends a node's line: nothing after a literal that ends in a break other than "\n"."""
    return "" if text and text[-1] in BREAKS and text[-1] != "\n" else "\n"
