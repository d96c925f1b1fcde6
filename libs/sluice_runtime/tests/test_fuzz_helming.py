"""Fuzz of what the helm-controller decodes from a tenant: release Secrets
(helming.storage.decode_release, release_objects) and `valuesFrom` targetPaths
(helming.values.set_path, typed_value).

Release data is generated as gzip bombs, truncated and concatenated gzip,
deep JSON and plain bytes, each double base64 as the API gives it: decoding
allocates no more than a small multiple of its limit however far the input
would inflate, and refuses with StorageError only. A targetPath sets a value
or is refused with ValuesError, in memory bounded whatever index it names.
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib

from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime.helming.storage import StorageError, decode_release, release_objects
from sluice_runtime.helming.values import ValuesError, set_path, typed_value

LIMIT = 256 << 10
# bytes(out) copies what was inflated, and json.loads builds objects from it.
MAX_PEAK = 8 * LIMIT + (2 << 20)
MAX_CALLS = 300_000


def encoded(raw: bytes) -> str:
    return base64.b64encode(base64.b64encode(raw)).decode()


releases = st.one_of(
    st.builds(lambda n: gzip.compress(b"\0" * n, 9), st.integers(0, 8 * LIMIT)),
    st.builds(lambda n: gzip.compress(b"[" * n, 9), st.integers(1, 200_000)),
    st.builds(
        lambda doc: gzip.compress(json.dumps(doc).encode()),
        st.fixed_dictionaries({"name": st.text(max_size=8), "version": st.integers(),
                               "manifest": st.text(alphabet="a:- \n[]{}&*", max_size=60)}),
    ),
    st.builds(lambda b, n: gzip.compress(b)[:n], st.binary(max_size=64), st.integers(0, 40)),
    st.builds(lambda a, b: gzip.compress(a) + gzip.compress(b), st.binary(max_size=32), st.binary(max_size=32)),
    st.builds(lambda n: zlib.compress(b"\0" * n), st.integers(0, 4 * LIMIT)),
    st.binary(max_size=128),
    st.just(b"\x1f\x8b"),
)  # fmt: skip


@examples(ci=150)
@given(raw=releases, mangle=st.sampled_from(["", "once", "chars"]))
@example(raw=gzip.compress(b"\0" * (64 * LIMIT), 9), mangle="")
def test_a_release_secret_decodes_within_its_limit_or_is_refused(raw: bytes, mangle: str) -> None:
    data = encoded(raw)
    if mangle == "once":
        data = base64.b64encode(raw).decode()  # base64 once: not as the API gives it
    elif mangle == "chars":
        data = data[:-3] + "*=="
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            release = decode_release(data, limit=LIMIT)
            objects = release_objects(release)
            refusal = ""
        except StorageError as error:
            release, objects, refusal = None, None, str(error)
    assert spent.peak_bytes < MAX_PEAK, f"{spent.peak_bytes} bytes at the peak"
    if release is None:
        assert refusal
        return
    assert isinstance(release, dict) and isinstance(objects, list)
    assert len(json.dumps(release)) <= 6 * LIMIT  # JSON escapes at most 6 bytes per byte


paths = st.one_of(
    st.text(alphabet="ab.[]0129\\", max_size=16),
    st.builds(lambda k, i: f"{k}[{i}]", st.sampled_from(["a", "a.b", ""]), st.integers(0, 10**12)),
    st.builds(lambda i, j: f"a[{i}][{j}].b", st.integers(0, 10**9), st.integers(0, 10**9)),
)


@examples(ci=300)
@given(
    path=paths,
    text=st.text(max_size=12),
    existing=st.sampled_from([{}, {"a": [1]}, {"a": {"b": 1}}, {"a": "x"}]),
)
@example(path="a[100000000]", text="1", existing={})
def test_a_target_path_sets_a_value_or_is_refused(
    path: str, text: str, existing: dict[str, object]
) -> None:
    values = json.loads(json.dumps(existing))
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            set_path(values, path, typed_value(text))
        except ValuesError as error:
            assert path in str(error)  # noqa: PT017
    assert spent.peak_bytes < 2 << 20, f"{spent.peak_bytes} bytes at the peak"
