"""Differential cases for toYaml (sigs.k8s.io/yaml: Go's JSON, then go-yaml v2)."""

from __future__ import annotations

from typing import Any

from .cases_core import DATA, case

TRICKY_STRINGS = [
    "plain", "", " lead", "trail ", "yes", "no", "on", "off", "y", "n", "true", "False", "null",
    "~", "123", "-12", "0x1F", "1.5", "1e3", ".5", "+1", "0777", "1_000", "1:20", "12:30:45",
    "2024-01-15", "2024-1-5T10:00:00Z", "2024-13-45", ">=1.0.0-rc.0", "a: b", "a:b", "- x",
    "-x", "#c", "a #c", "a#c", "? q", "?q", ":x", "[a]", "{a}", "a,b", "*ref", "&anc", "!tag",
    "|pipe", ">fold", "'sq'", '"dq"', "%p", "@at", "`bt`", "---", "...", "tab\there",
    "multi\nline", "multi\nline\n", "multi\n\nblank\n", "trailing\n\n", "\nleading",
    " spaced\nlines", "line \nspace", "é unicode ü", "emoji 😀", "ctrl\x01char", "nbsp\xa0x",
    "<html>&amp;", "back\\slash", "quote's", "colon: at end:", "https://example.com/a?b=c#d",
    "oci://ghcr.io/org/app", "6.7.x", "v1.2.3", "1.2.3", ".inf", "-.inf", ".nan", "0b101",
    "-0b11", "0o17", "<<", "=", "a=b", "1e", "e1", "01", "1.", "1.2.3.4", "- ", "a -", "x\r\ny",
]

NUMBERS = [0, 1, -1, 42, 2**40, 1.5, -0.25, 1e21, 1e20, 1e-7, 0.000001, 123456789.125, 3.0]

KEYS = {"b": 1, "a": 2, "a10": 3, "a2": 4, "A": 5, "_x": 6, "1": 7, "10": 8, "2": 9, "": 10,
        "yes": 11, "x y": 12, "é": 13, "a01": 14, "a1": 15, "a001": 16, "z:": 17, "k\nv": 18, "k" * 130: 19}  # fmt: skip

YAML: dict[str, dict[str, Any]] = {
    "yaml-map": case("{{toYaml .m}}"),
    "yaml-list": case("{{toYaml .l}}"),
    "yaml-scalars": case("{{toYaml .s}}|{{toYaml .i}}|{{toYaml .f}}|{{toYaml .t}}|{{toYaml .n}}|{{toYaml .e}}"),
    "yaml-empty": case("{{toYaml .el}}|{{toYaml .em}}|{{toYaml (dict \"a\" .el \"b\" .em)}}"),
    "yaml-nested": case("{{toYaml .nested}}"),
    "yaml-whole-data": case("{{toYaml .}}"),
    "yaml-list-of-lists": case("{{toYaml (list (list 1 2) (list) (list (list 3)) (dict))}}"),
    "yaml-list-of-maps": case("{{toYaml (list (dict \"a\" 1 \"b\" (list 1 2)) (dict \"c\" (dict \"d\" 1)))}}"),
    "yaml-key-order": case("{{toYaml .}}", KEYS),
    "yaml-numbers": case("{{toYaml .}}", {"n": NUMBERS}),
    "yaml-mustToYaml": case("{{mustToYaml .app}}"),
    "yaml-multiline-nested": case("{{toYaml .}}", {"a": {"b": ["x\ny", {"c": "p\nq\n"}]}, "top": "l1\nl2"}),
    "yaml-top-multiline": case("{{toYaml .}}", "top\nlevel\n"),
    "yaml-resourceset": case(
        "spec:\n  layerSelector: {{ .sel | toYaml | nindent 4 }}",
        {"sel": {"mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip", "operation": "copy"}},
    ),
}
for _i, _s in enumerate(TRICKY_STRINGS):
    YAML[f"yaml-string-{_i:02d}"] = case("{{toYaml .}}", {"v": _s, "l": [_s], _s: 1})
del DATA
