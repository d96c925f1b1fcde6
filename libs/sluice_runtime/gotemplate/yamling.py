"""Flux Operator's extra template functions: toYaml and slugify.

toYaml is sigs.k8s.io/yaml's Marshal: the value goes through Go's JSON
encoder (so numbers that print as integers become integers), then go-yaml
v2's emitter writes it: map keys in go-yaml's natural order, sequences not
indented under their key, and each string in the first style libyaml allows
(plain, single-quoted, double-quoted; literal for multi-line text), long lines
folded at a space past column 80 as go-yaml does by default. slugify
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

from sluice_runtime.gotemplate.errors import FuncError
from sluice_runtime.gotemplate.formatting import format_float
from sluice_runtime.gotemplate.functions import ANY, GoFunc
from sluice_runtime.gotemplate.sprig_json import to_json
from sluice_runtime.gotemplate.yamlscalars import BREAKS, line_end, scalar


def _wrap64(n: int) -> int:
    return (n + 2**63) % 2**64 - 2**63


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
            an = _wrap64(an * 10 + int(a[ai]))  # Go's int64 wraps on long digit runs
            ai += 1
        bi = i
        while bi < len(b) and b[bi].isdigit():
            bn = _wrap64(bn * 10 + int(b[bi]))
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
        return scalar(v, indent, key=False, column=column)
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
            if "\n" in k or "\r" in k or any(c in BREAKS for c in k) or len(k.encode()) > 128:
                # libyaml writes a multi-line or long key as a complex key: "? key" then ": value".
                text = scalar(k, indent + 2, key=False, complex_key=True, column=indent + 2)
                out.append(lead + "? " + text + line_end(text))
                head = pad + ":"
                column = indent + 2
                complex_key = True
            else:
                complex_key = False
                key_text = scalar(k, indent, key=True)
                head = lead + key_text + ":"
                column = indent + len(key_text) + 2
            value = v[k]
            leaf = _leaf(value, indent + 2, column)
            if leaf is not None:
                out.append(head + " " + leaf + line_end(leaf))
            elif complex_key:
                # After a complex key the collection starts on the ":" line, as after "- ".
                out.append(head + " ")
                _emit(value, indent + 2, out, first_inline=True)
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
                out.append(head + leaf + line_end(leaf))
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
        return leaf + line_end(leaf)
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
    if not slug.isascii():
        # Imported here: text_unidecode reads its whole transliteration table
        # (about 5 MiB resident) when imported, and ASCII, which it leaves as
        # it is, is what almost every slug holds.
        from text_unidecode import unidecode

        slug = unidecode(unicodedata.normalize("NFC", slug))
    slug = slug.lower()
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
