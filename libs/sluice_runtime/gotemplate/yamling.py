"""Flux Operator's extra template functions: toYaml and slugify.

toYaml is sigs.k8s.io/yaml's Marshal: the value goes through Go's JSON
encoder (so numbers that print as integers become integers), then go-yaml
v2's emitter writes it: map keys in go-yaml's natural order, sequences not
indented under their key, and each string in the first style libyaml allows
(plain, single-quoted, double-quoted; literal for multi-line text). slugify
is gosimple/slug's Make with Flux Operator's settings (at most 63
characters, cut at a word boundary).
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from typing import Any

from text_unidecode import unidecode

from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import format_float
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.sprig_json import to_json

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
        return _YAML_FLOAT.fullmatch(s) is not None
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


_BREAKS = "\r\n\x85\u2028\u2029"


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
        elif c in _BREAKS:
            line_breaks = True
            leading_break = leading_break or i == 0
            trailing_break = trailing_break or i == len(value) - 1
            space_break = space_break or prev_space
            prev_space, prev_break = False, True
        else:
            prev_space = prev_break = False
        preceded_ws = c in " \t" or c in _BREAKS
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


def _escape(c: str) -> str:
    if c in _ESCAPES:
        return "\\" + _ESCAPES[c]
    if not _printable(c) or c == "\ufeff":
        o = ord(c)
        return f"\\x{o:02X}" if o <= 0xFF else f"\\u{o:04X}" if o <= 0xFFFF else f"\\U{o:08X}"
    return c


WIDTH = 80  # go-yaml v2 folds long lines at spaces past this column


def _folded(s: str, style: str, column: int, indent: int, allow_breaks: bool) -> str:
    """libyaml's plain, single- and double-quoted writers: fold at a space past WIDTH."""
    quote = {"plain": "", "single": "'", "double": '"'}[style]
    out = [quote]
    col = column + len(quote)
    spaces = False
    last = len(s) - 1
    for i, c in enumerate(s):
        nxt = s[i + 1] if i < last else ""
        if c == " ":
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
            continue
        text = _escape(c) if style == "double" else ("''" if c == "'" and style == "single" else c)
        out.append(text)
        col += len(text)
        spaces = False
    out.append(quote)
    return "".join(out)


def _scalar(s: str, indent: int, *, key: bool, complex_key: bool = False, column: int = 0) -> str:
    analysis = _analyze(s)
    if complex_key and "\n" not in s:
        key = True
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
    hint = "2" if s[0] == " " or s[0] in _BREAKS else ""
    if s[-1] not in _BREAKS:
        chomp = "-"
    elif len(s) == 1 or s[-2] in _BREAKS:
        chomp = "+"
    else:
        chomp = ""
    pad = " " * indent
    breaks = True
    text: list[str] = []
    for c in s:
        if c in _BREAKS:
            text.append("\n")
            breaks = True
        else:
            if breaks:
                text.append(pad)
                breaks = False
            text.append(c)
    body = "".join(text)
    # The caller ends the node with a newline; a kept (+) final break is that newline.
    return "|" + hint + chomp + "\n" + (body[:-1] if body.endswith("\n") else body)


def _key_less(a: str, b: str) -> bool:
    """go-yaml v2's keyList.Less for two string keys: letters before digits, numbers by value."""
    for i in range(min(len(a), len(b))):
        if a[i] == b[i]:
            continue
        al, bl = a[i].isalpha(), b[i].isalpha()
        if al and bl:
            return a[i] < b[i]
        if al or bl:
            return bl
        an = bn = 0
        if a[i] == "0" or b[i] == "0":
            j = i - 1
            while j >= 0 and a[j].isdigit():
                if a[j] != "0":
                    an = bn = 1
                    break
                j -= 1
        ai = i
        while ai < len(a) and a[ai].isdigit():
            an = an * 10 + int(a[ai])
            ai += 1
        bi = i
        while bi < len(b) and b[bi].isdigit():
            bn = bn * 10 + int(b[bi])
            bi += 1
        if an != bn:
            return an < bn
        if ai != bi:
            return ai < bi
        return a[i] < b[i]
    return len(a) < len(b)


def _key_cmp(a: str, b: str) -> int:
    return -1 if _key_less(a, b) else (1 if _key_less(b, a) else 0)


def _sorted_keys(keys: list[str]) -> list[str]:
    return sorted(keys, key=functools.cmp_to_key(_key_cmp))


def _leaf(v: Any, indent: int, column: int = 0) -> str | None:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return ".nan"
        if math.isinf(v):
            return ".inf" if v > 0 else "-.inf"
        return format_float(v, "g", -1)
    if isinstance(v, str):
        return _scalar(v, indent, key=False, column=column)
    if isinstance(v, dict) and not v:
        return "{}"
    if isinstance(v, list) and not v:
        return "[]"
    return None


def _emit(v: Any, indent: int, out: list[str], *, first_inline: bool = False) -> None:
    pad = " " * indent
    if isinstance(v, dict):
        for n, k in enumerate(_sorted_keys(list(v))):
            lead = "" if first_inline and n == 0 else pad
            if "\n" in k or "\r" in k or any(c in _BREAKS for c in k) or len(k.encode()) > 128:
                # libyaml writes a multi-line or long key as a complex key: "? key" then ": value".
                text = _scalar(k, indent + 2, key=False, complex_key=True, column=indent + 2)
                out.append(lead + "? " + text + "\n")
                head = pad + ":"
                column = indent + 2
            else:
                key_text = _scalar(k, indent, key=True)
                head = lead + key_text + ":"
                column = indent + len(key_text) + 2
            value = v[k]
            leaf = _leaf(value, indent + 2, column)
            if leaf is not None:
                out.append(head + " " + leaf + "\n")
            elif isinstance(value, dict):
                out.append(head + "\n")
                _emit(value, indent + 2, out)
            else:
                out.append(head + "\n")
                _emit(value, indent, out)
    else:
        for n, item in enumerate(v):
            head = ("" if first_inline and n == 0 else pad) + "- "
            leaf = _leaf(item, indent + 2, indent + 2)
            if leaf is not None:
                out.append(head + leaf + "\n")
            else:
                out.append(head)
                _emit(item, indent + 2, out, first_inline=True)


def _yaml_int(text: str) -> int | float:
    # go-yaml reads an integer that fits in int64 (or uint64) as one, a longer one as a float.
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(text)


def _from_go_json(text: str) -> Any:
    return json.loads(text, parse_float=float, parse_int=_yaml_int)


def to_yaml(v: Any) -> str:
    data = _from_go_json(to_json(v))
    leaf = _leaf(data, 2)
    if leaf is not None:
        return leaf + "\n"
    out: list[str] = []
    _emit(data, 0, out)
    return "".join(out)


def _to_yaml_quiet(v: Any) -> str:
    try:
        return to_yaml(v)
    except FuncError:
        return ""


_EN_SUB = {"&": "and", "@": "at"}


def slugify(s: str, max_length: int = 63) -> str:
    slug = s.strip(" \t\n\r\v\f\x85\xa0")
    slug = "".join(_EN_SUB.get(c, c) for c in slug)
    slug = unidecode(unicodedata.normalize("NFC", slug)).lower()
    slug = re.sub(r"[^a-zA-Z0-9\-_]", "-", slug)
    slug = re.sub(r"-+", "-", slug).strip("-_")
    if len(slug) > max_length:
        cut = slug.rfind("-", 0, max_length + 1)
        slug = slug[:cut] if cut >= 0 else slug[:max_length]
    return slug


EXTRAS: dict[str, GoFunc] = {
    "toYaml": GoFunc(_to_yaml_quiet, (ANY,)),
    "mustToYaml": GoFunc(to_yaml, (ANY,)),
    "slugify": GoFunc(slugify, ("string",)),
}
