"""Fuzz of a HelmRepository's index.yaml as the source-controller reads it:
parse_index within index_limits, chart_versions, then select_version.

Indexes are generated real-shaped (entries of versions with urls and
digests) and broken (entries that are strings, numbers, maps; versions that
are not semver; aliases), plus raw YAML-ish text. The only refusals are
InvalidIndex and, for a constraint, InvalidRange or LookupError; the parse
stays within its node limit and a bounded peak allocation.
"""

from __future__ import annotations

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime.versions import InvalidRange
from source_controller.charts import select_version
from source_controller.helmrepository import InvalidIndex, chart_versions, index_limits, parse_index

MAX_SIZE = 64 << 10
MAX_PEAK = 16 * MAX_SIZE + (2 << 20)
MAX_CALLS = 1_000_000

anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
versions = st.one_of(
    st.sampled_from(
        ["1.0.0", "2.1.3-rc.1", "v1.2.3", "1.0", "latest", "", "1.0.0+build", "01.0.0"]
    ),
    anything,
)
entry = st.fixed_dictionaries(
    {"version": versions},
    optional={
        "urls": st.one_of(st.lists(st.text(max_size=10), max_size=2), anything),
        "digest": st.text(max_size=8),
        "name": anything,
    },
)
index = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.one_of(st.just("v1"), anything),
        "entries": st.one_of(
            st.dictionaries(st.sampled_from(["app", "other"]), st.one_of(st.lists(entry, max_size=4), anything), max_size=2),
            anything,
        ),
    },
)  # fmt: skip
constraints = st.sampled_from(
    ["*", ">=1.0.0", "1.x", "~2.1", "^1", ">=1 <2 || 3.x", "!!", "", "1.0.0"]
)


@examples(ci=300)
@given(
    data=st.one_of(
        index.map(lambda i: yaml.safe_dump(i).encode()),
        st.text(alphabet="aev1:-[]{}\n &*!", max_size=80).map(str.encode),
        st.binary(max_size=64),
    ),
    constraint=constraints,
)
@example(data=b"apiVersion: v1\nentries:\n  app: abc\n", constraint="*")
@example(data=b"apiVersion: v1\nentries:\n  app: 5\n", constraint="*")
@example(data=b"apiVersion: v1\nentries:\n  app: [{version: 1.0.0, urls: 7}]\n", constraint="*")
def test_an_index_is_read_or_refused(data: bytes, constraint: str) -> None:
    limits = index_limits(MAX_SIZE)
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            entries = chart_versions(parse_index(data, limits=limits), "app")
        except InvalidIndex as error:
            entries = None
            assert str(error).startswith("index")  # noqa: PT017
    assert spent.peak_bytes < MAX_PEAK, f"{spent.peak_bytes} bytes at the peak"
    if not entries:
        return
    try:
        chosen = select_version(entries, constraint)
    except (InvalidRange, LookupError):
        return
    assert chosen in entries
