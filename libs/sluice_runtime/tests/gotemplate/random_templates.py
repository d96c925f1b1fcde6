"""Random templates from a small grammar of pipelines, functions and control structures.

The differential suite renders them with Go and Python too: hand-written
cases cover what someone thought of, these cover combinations nobody did.
"""

from __future__ import annotations

import random
from typing import Any

DATA: dict[str, Any] = {
    "s": "hello",
    "e": "",
    "i": 42,
    "z": 0,
    "f": 3.5,
    "t": True,
    "no": False,
    "n": None,
    "l": [1, 2, 3],
    "sl": ["b", "a"],
    "el": [],
    "m": {"a": 1, "b": "x", "c": {"d": [1, "y"]}},
    "em": {},
}
OPERANDS = [
    ".s",
    ".e",
    ".i",
    ".z",
    ".f",
    ".t",
    ".no",
    ".n",
    ".l",
    ".sl",
    ".el",
    ".m",
    ".em",
    ".m.a",
    ".m.c",
    ".m.c.d",
    ".nope",
    "$",
    "$.s",
    "1",
    "-2",
    "0",
    "1.5",
    '"a"',
    '""',
    "true",
    "false",
    "nil",
    "'x'",
    ".",
    "$x",
]
FUNCS1 = [
    "len",
    "not",
    "print",
    "println",
    "html",
    "js",
    "urlquery",
    "upper",
    "lower",
    "quote",
    "squote",
    "toString",
    "int",
    "float64",
    "empty",
    "toJson",
    "toYaml",
    "first",
    "last",
    "rest",
    "reverse",
    "uniq",
    "compact",
    "trim",
    "title",
    "b64enc",
    "sortAlpha",
    "typeOf",
    "kindOf",
    "toStrings",
    "add1",
    "ceil",
    "floor",
    "base",
    "toRawJson",
    "list",
    "cat",
    'default "d"',
    "ternary 1 2",
    "index",
    "slice",
    'printf "%v"',
    'printf "%d"',
    'printf "%s|%q"',
    'join ","',
    "has 1",
    'contains "l"',
    "hasKey",
    "get",
    "eq 1",
    'ne "a"',
    "lt 1",
    "and 1",
    "or 0",
    "add 1",
    "sub 1",
    "mul 2",
    "max 1",
    "min 5",
    'dict "k"',
    "append",
    "without",
    "repeat 2",
    "trunc 2",
    "indent 2",
    "nindent 2",
    'replace "l" "L"',
    'splitList "l"',
    "until",
    "seq",
    'plural "a" "b"',
]


def operand(r: random.Random, depth: int) -> str:
    if depth < 2 and r.random() < 0.25:
        return "(" + pipeline(r, depth + 1) + ")"
    return r.choice(OPERANDS)


def command(r: random.Random, depth: int) -> str:
    if r.random() < 0.4:
        return operand(r, depth)
    f = r.choice(FUNCS1)
    n = r.choice([0, 1, 1, 2])
    return " ".join([f] + [operand(r, depth) for _ in range(n)])


def pipeline(r: random.Random, depth: int = 0) -> str:
    cmds = [command(r, depth)]
    for _ in range(r.choice([0, 0, 1, 2])):
        f = r.choice(FUNCS1)
        cmds.append(" ".join([f] + [operand(r, depth) for _ in range(r.choice([0, 1]))]))
    return " | ".join(cmds)


def template(r: random.Random) -> str:
    parts = ["{{$x := .m}}"]
    for _ in range(r.randint(1, 3)):
        k = r.random()
        p = pipeline(r)
        if k < 0.5:
            parts.append("{{" + p + "}}")
        elif k < 0.65:
            parts.append("{{if " + p + "}}T{{else}}F{{end}}")
        elif k < 0.8:
            parts.append("{{range $i, $v := " + p + "}}[{{$i}}={{$v}}]{{else}}E{{end}}")
        else:
            parts.append("{{with " + p + "}}<{{.}}>{{end}}")
        parts.append(r.choice(["", " ", "\n", "-"]))
    return "".join(parts)


def generate(seed: int, count: int) -> list[dict[str, Any]]:
    r = random.Random(seed)
    return [
        {"template": template(r), "data": DATA, "missingkey": r.choice(["error", "default"])}
        for _ in range(count)
    ]


PRINTF_ARGS = [
    "1",
    "-42",
    "0",
    "3.14159",
    "-0.5",
    "1e21",
    "1e-7",
    "100000.0",
    '"str"',
    '""',
    '"é\\t"',
    "true",
    ".n",
    ".l",
    ".m",
    ".sl",
    "'a'",
    "255",
    ".f",
    "123456789.0",
    ".el",
]
# The '#' flag (alternate float forms, Go syntax for %#v) is not reproduced.
PRINTF_FLAGS = ["", "-", "+", " ", "0", "-0", "+0", "08", " 0"]
PRINTF_VERBS = "vdsqtfFeEgGxXobcU%T"
PRINTF_DATA: dict[str, Any] = {
    "n": None,
    "l": [1, "a", None, 2.5],
    "m": {"k": 1, "j": "v"},
    "sl": ["x", "y"],
    "f": 0.1,
    "el": [],
}


def generate_printf(seed: int, count: int) -> list[dict[str, Any]]:
    """printf calls with random verbs, flags, widths, precisions (some from * arguments)."""
    r = random.Random(seed)
    cases = []
    for _ in range(count):
        fmt = ""
        args = []
        for _ in range(r.randint(1, 3)):
            w = r.choice(["", "5", "10", "1", "*"])
            p = r.choice(["", "", ".2", ".0", ".5", ".*"])
            fmt += "%" + r.choice(PRINTF_FLAGS) + w + p + r.choice(PRINTF_VERBS)
            fmt += r.choice(["", "|", " "])
            if w == "*":
                args.append(r.choice(["3", "-4", '"x"']))
            if p == ".*":
                args.append(r.choice(["2", '"y"']))
            args.append(r.choice(PRINTF_ARGS))
        if r.random() < 0.2:
            args.append(r.choice(PRINTF_ARGS))
        template = "{{printf " + '"' + fmt + '" ' + " ".join(args) + "}}"
        cases.append({"template": template, "data": PRINTF_DATA, "missingkey": "error"})
    return cases


YAML_ATOMS: list[Any] = [
    "",
    " ",
    "a",
    "yes",
    "No",
    "null",
    "~",
    "1",
    "1.0",
    "-1",
    "0x1",
    "1e5",
    ".5",
    "2024-01-01",
    "12:30",
    "a: b",
    "a:b",
    "- a",
    "#x",
    "x #y",
    "'q'",
    '"d"',
    "é",
    "tab\t",
    "line\nbreak",
    "end\n",
    "\n",
    "  lead",
    "trail  ",
    "x" * 90,
    "word " * 20,
    "a,b",
    "[x]",
    "{y}",
    "*a",
    "&b",
    "!t",
    "%p",
    "@x",
    "`b`",
    "|",
    ">",
    "?",
    ":",
    "-",
    "---",
    "...",
    "<<",
    "=",
    "ok",
    "on",
    "OFF",
    "Y",
    "n",
    "true",
    "False",
    ".inf",
    ".NaN",
    "+1",
    "0o7",
    "0b1",
    "1_000",
    "1:2:3",
    "v1.2.3",
    "https://x.y/z?a=b",
    "\r",
    "ctrl\x07",
    "\u2028",
    "😀",
    "\ufeff",
    "a\\b",
    "mixed 'quote\" chars",
    "key: value # comment",
    "  ",
    "x\n  y\n",
    "\ttab",
    " \n ",
    "trailing space \nnext",
]
# Keys go-yaml orders consistently: its key order is not transitive between keys that mix
# digits and letters at the same place ("1e+21", "12:30"), and Go's map order is random.
YAML_KEYS = ["a", "b", "B", "a2", "a10", "_x", "1", "2", "10", "yes", "x y", "é", "k-1", "null"]
YAML_KEYS += ["on", "", "a: b", "line\nbreak", "k" * 130, "#x", "- a", "'q'", '"d"']


def _yaml_value(r: random.Random, depth: int) -> Any:
    k = r.random()
    if depth > 3 or k < 0.5:
        a = r.random()
        if a < 0.6:
            return r.choice(YAML_ATOMS)
        if a < 0.75:
            return r.choice([0, 1, -5, 2**53, 10**20, 1.5, -0.25, 1e-7, 1e21, 3.0, 0.1])
        if a < 0.85:
            return r.choice([True, False, None])
        return r.choice(YAML_ATOMS) + r.choice(YAML_ATOMS)
    if k < 0.75:
        return [_yaml_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {r.choice(YAML_KEYS): _yaml_value(r, depth + 1) for _ in range(r.randint(0, 4))}


def generate_yaml(seed: int, count: int) -> list[dict[str, Any]]:
    """toYaml of random nested data made of strings YAML treats specially."""
    r = random.Random(seed)
    return [
        {"template": "{{toYaml .v}}", "data": {"v": _yaml_value(r, 0)}, "missingkey": "error"}
        for _ in range(count)
    ]
