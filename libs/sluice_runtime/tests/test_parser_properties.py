"""Hypothesis properties of the parsers that read users' input.

Each parser either answers or raises its one documented error, whose message
is what ends up in a condition; any other exception would be a traceback in
a controller's log and a reconcile that never says what is wrong.
"""

from __future__ import annotations

import base64
import io
import tarfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sluice_api.meta import format_duration, parse_duration
from sluice_runtime.artifacts.fetching import ArtifactError, extract_tarball
from sluice_runtime.artifacts.ignoring import IgnoreRules, InvalidIgnorePattern
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.kubeconfigs import KubeconfigError

T = TypeVar("T")


def outcome(call: Callable[[], T], refusal: type[Exception]) -> tuple[T | None, str]:
    """What `call` answers, or the message of its documented refusal (never empty);
    any other exception propagates and fails the property."""
    try:
        return call(), ""
    except refusal as error:
        message = str(error)
    assert message, f"{refusal.__name__} without a message"
    return None, message


PROPERTIES = settings(max_examples=300, deadline=None)

# -- durations -------------------------------------------------------------------------

go_duration = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 10_000).map(str), st.decimals(0, 1000, places=3).map(str)),
        st.sampled_from(["ns", "us", "µs", "ms", "s", "m", "h"]),
    ),
    min_size=1,
    max_size=4,
).map(lambda parts: "".join(n + u for n, u in parts))


@PROPERTIES
@given(text=st.one_of(st.text(max_size=30), go_duration))
@example(text="1e308h")
@example(text="9" * 400 + "h")
def test_a_duration_parses_or_is_refused_by_name(text: str) -> None:
    value, refusal = outcome(lambda: parse_duration(text), ValueError)
    assert isinstance(value, timedelta) or f"invalid duration {text!r}" in refusal


@PROPERTIES
@given(micros=st.integers(min_value=-(10**15), max_value=10**15))
def test_a_formatted_duration_parses_back_to_itself(micros: int) -> None:
    value = timedelta(microseconds=micros)
    assert parse_duration(format_duration(value)) == value


# -- kubeconfigs -----------------------------------------------------------------------

KEYS = [
    "server", "certificate-authority-data", "certificate-authority", "insecure-skip-tls-verify",
    "tls-server-name", "proxy-url", "token", "tokenFile", "username", "password",
    "client-certificate-data", "client-key-data", "client-key", "exec", "auth-provider",
    "command", "args", "env", "apiVersion", "name", "value",
]  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=20),
    st.just("https://127.0.0.1:6443"), st.just(base64.b64encode(b"pem").decode()),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
named = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", 1, None]), "cluster": values, "user": values}
)
kubeconfig_docs = st.fixed_dictionaries(
    {},
    optional={
        "current-context": st.sampled_from(["a", "b", "", 7]),
        "contexts": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["a", "b", None]),
                                   "context": st.dictionaries(st.sampled_from(["cluster", "user", "namespace"]),
                                                              st.sampled_from(["a", "b", None, 3, ["a"]]))}),
            max_size=3,
        ) | values,
        "clusters": st.lists(named, max_size=3) | values,
        "users": st.lists(named, max_size=3) | values,
    },
)  # fmt: skip


@PROPERTIES
@given(
    text=st.one_of(st.text(max_size=200), kubeconfig_docs.map(yaml.safe_dump)),
    allow_exec=st.booleans(),
    allow_insecure_tls=st.booleans(),
)
@example(text="a: &x [*x]", allow_exec=False, allow_insecure_tls=False)
@example(
    text="clusters: [{name: a, cluster: {server: 'https://x'}}]\ncontexts: [{name: a, context: {cluster: a}}]\ncurrent-context: a\n",
    allow_exec=False,
    allow_insecure_tls=False,
)
def test_a_kubeconfig_parses_or_is_refused_by_name(
    text: str, allow_exec: bool, allow_insecure_tls: bool
) -> None:
    credentials, refusal = outcome(
        lambda: kubeconfigs.parse(
            text, allow_exec=allow_exec, allow_insecure_tls=allow_insecure_tls
        ),
        KubeconfigError,
    )
    assert refusal or credentials.server.startswith("https://")


# -- archives --------------------------------------------------------------------------

member_names = st.one_of(
    st.text(alphabet="ab./-_", min_size=1, max_size=12),
    st.sampled_from(["../x", "/etc/passwd", "a/../../b", ".", "a//b", "a/", "\x00", "é"]),
)
members = st.lists(
    st.tuples(
        member_names,
        st.sampled_from([tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE,
                         tarfile.FIFOTYPE, tarfile.CHRTYPE]),
        st.one_of(member_names, st.just("")),
        st.binary(max_size=64),
        st.integers(0, 0o7777),
    ),
    max_size=6,
)  # fmt: skip


def tarball(entries: list[tuple[str, bytes, str, bytes, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, type_, link, data, mode in entries:
            info = tarfile.TarInfo(name)
            info.type = type_
            info.mode = mode
            info.linkname = link
            info.size = len(data) if type_ == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if type_ == tarfile.REGTYPE else None)
    return out.getvalue()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    blob=st.one_of(
        members.map(tarball),
        st.binary(max_size=512),
        members.map(tarball).flatmap(
            lambda b: st.integers(1, max(1, len(b) - 1)).map(lambda n: b[:n])
        ),
    )
)
@example(blob=b"")
def test_an_archive_unpacks_inside_or_is_refused_whole(blob: bytes, tmp_path: Path) -> None:
    case = tmp_path / f"case-{len(list(tmp_path.iterdir()))}"
    case.mkdir()
    archive = case / "a.tar.gz"
    archive.write_bytes(blob)
    dest = case / "out"
    _, refusal = outcome(
        lambda: extract_tarball(archive, dest, max_size=1 << 20, max_members=100), ArtifactError
    )
    if refusal:
        assert not dest.exists() or not any(dest.iterdir()), "a refused archive wrote files"
        return
    root = dest.resolve()
    for path in dest.rglob("*"):
        assert path.resolve().is_relative_to(root) or path.is_symlink()
        if path.is_symlink():
            assert path.resolve().is_relative_to(root)


# -- .sourceignore ---------------------------------------------------------------------

ignore_lines = st.lists(
    st.one_of(
        st.text(max_size=20),
        st.text(alphabet="*?[]!/\\#ab-^ ", max_size=12),
        st.sampled_from(["[z-a]", "**/", "!", "\\", "a/**/b", "[[:alpha:]]", "[", "***"]),
    ),
    max_size=8,
).map("\n".join)


@PROPERTIES
@given(spec=st.one_of(st.none(), ignore_lines), sourceignore=ignore_lines,
       paths=st.lists(st.text(alphabet="ab/.*[", min_size=1, max_size=10), max_size=5))  # fmt: skip
@example(spec="[z-a]", sourceignore="", paths=[])
def test_ignore_rules_answer_or_are_refused_by_name(
    spec: str | None, sourceignore: str, paths: list[str]
) -> None:
    rules, refusal = outcome(lambda: IgnoreRules(spec_ignore=spec), InvalidIgnorePattern)
    if rules is None:
        assert "spec.ignore" in refusal
        return
    # A .sourceignore is the repository's, not the user's spec: bad lines are skipped.
    rules.add_sourceignore("sub", sourceignore)
    for path in paths:
        assert rules.ignored(path, is_dir=False) in (True, False)
        assert rules.ignored(f"sub/{path}", is_dir=True) in (True, False)


@pytest.mark.parametrize("text", [pytest.param("[z-a]", id="reversed-range")])
def test_a_bad_spec_ignore_names_its_line(text: str) -> None:
    with pytest.raises(InvalidIgnorePattern, match=r"\[z-a\]"):
        IgnoreRules(spec_ignore=text)
