"""Fuzz of kustomization files as the build's reference check reads them
(building.references.read_kustomization, then resolve on every path it accepts).

Generated files put paths (with `..`, newlines, NUL, control and separator
characters, `!!binary` and other tags, block scalars, case-folded and
merge keys, aliases) in every field kustomize reads paths from. Every
refusal is a BuildError naming the file, nothing else escapes, and every
path it accepts either resolves inside the root or is refused by `resolve`
with a BuildError: no path leaves the artifact unrefused. The root holds a
symlink to outside, so a path through it must be refused too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime.building.references import read_kustomization, resolve
from sluice_runtime.building.tools import BuildError

MAX_CALLS = 300_000
MAX_PEAK = 4 << 20

segments = st.sampled_from(
    ["..", ".", "a", "b", "link", "", "x\n", "x\0", "\u2028", " a", "\u017f"]
)
paths = st.one_of(
    st.lists(segments, min_size=1, max_size=5).map("/".join),
    st.sampled_from(
        ["/etc/passwd", "file:///etc", "https://h/x", "a\n/../../..", "~", "link/../.."]
    ),
)
scalar_styles = st.sampled_from(["plain", "single", "double", "literal", "binary", "tagged"])


def written(path: str, style: str) -> str:
    escaped = path.encode("unicode_escape").decode()
    if style == "single":
        return "'" + path.replace("'", "''").replace("\n", "\n\n") + "'"
    if (
        style == "double"
        or any(c in path for c in "\0\n\u2028:#[]{},&*!|>%@`\"'")
        or not path.strip()
    ):
        return '"' + escaped.replace('"', '\\"') + '"'
    if style == "literal":
        return "|\n    " + path
    if style == "binary":
        import base64

        return "!!binary " + base64.b64encode(path.encode()).decode()
    if style == "tagged":
        return "!!str " + path
    return path


fields = st.sampled_from([
    "resources", "bases", "components", "crds", "configurations", "generators", "transformers",
    "patchesStrategicMerge", "Resources", "re\u017fources", "<<",
])  # fmt: skip


@st.composite
def kustomizations(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            field = draw(fields)
            entries = [
                written(draw(paths), draw(scalar_styles)) for _ in range(draw(st.integers(0, 3)))
            ]
            lines.append(f"{field}:" + "".join(f"\n- {e}" for e in entries))
        elif kind == 1:
            gen = draw(st.sampled_from(["secretGenerator", "configMapGenerator"]))
            key = draw(st.sampled_from(["files", "envs", "env"]))
            value = written(draw(paths), draw(scalar_styles))
            prefix = draw(st.sampled_from(["", "k="]))
            body = f"\n    - {prefix}{value}" if key != "env" else f" {value}"
            lines.append(f"{gen}:\n- name: s\n  {key}:{body}")
        elif kind == 2:
            field = draw(st.sampled_from(["patches", "patchesJson6902", "replacements", "openapi"]))
            value = written(draw(paths), draw(scalar_styles))
            lines.append(
                f"{field}:\n  path: {value}" if field == "openapi" else f"{field}:\n- path: {value}"
            )
        else:
            lines.append(
                draw(
                    st.sampled_from(
                        ["a: &x [b]\nresources: *x", "<<: {resources: [x]}", "- x", "[", "{a: 1}"]
                    )
                )
            )
    return "\n".join(lines) + "\n"


def check(root: Path, text: str) -> None:
    kfile = root / "kustomization.yaml"
    kfile.write_text(text, encoding="utf-8", errors="surrogatepass")
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            read = read_kustomization(root, kfile)
            refusal = ""
        except BuildError as error:
            read, refusal = None, str(error)
    assert spent.peak_bytes < MAX_PEAK
    if read is None:
        assert "kustomization.yaml" in refusal, refusal
        return
    for ref in read.references:
        try:
            lexical, _ = resolve(root, root, ref.path, f"kustomization.yaml {ref.field}")
        except BuildError as error:
            assert "kustomization.yaml" in str(error)  # noqa: PT017
            continue
        # What kustomize opens: the lexical path, then whatever symlinks it follows.
        assert Path(lexical).is_relative_to(root), ref
        # Through a symlink to nothing, kustomize opens nothing: only what exists must stay in.
        if os.path.lexists(lexical):
            assert Path(os.path.realpath(lexical)).is_relative_to(root), ref


@examples(ci=300)
@given(text=kustomizations())
@example(text='secretGenerator:\n- name: s\n  files:\n  - "x\\n/../../../token"\n')
@example(text="resources:\n- !!binary Li4vLi4v\n")
@example(text="ReSources:\n- ../x\n")
@example(text="resources:\n- link/../..\n")
def test_a_kustomization_is_read_within_its_root_or_refused_naming_the_file(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        outside = Path(tmp) / "outside"
        outside.mkdir()
        root = Path(tmp) / "root"
        (root / "a").mkdir(parents=True)
        (root / "link").symlink_to(outside)
        check(root.resolve(), text)


@examples(ci=100)
@given(data=st.binary(max_size=200))
def test_any_bytes_are_read_or_refused_naming_the_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        kfile = root / "kustomization.yaml"
        kfile.write_bytes(data)
        try:
            read_kustomization(root, kfile)
        except BuildError as error:
            assert "kustomization.yaml" in str(error)  # noqa: PT017
