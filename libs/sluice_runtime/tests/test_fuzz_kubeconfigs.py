"""Fuzz of tenant kubeconfigs (kube.kubeconfigs.parse), with secrets that must stay secret.

Every secret field of the generated kubeconfigs (tokens, passwords, key and
certificate data, exec env values, a server's user:password) holds a marker
no message may repeat: a refusal is a KubeconfigError that names fields and
entries, never values, and nothing else escapes.
"""

from __future__ import annotations

import base64

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from sluice_envtest.fuzzing import bounded, examples
from sluice_runtime.kube import kubeconfigs
from sluice_runtime.kube.kubeconfigs import KubeconfigError

SECRET = "s3cr3tM4RK"
MAX_CALLS = 200_000
MAX_PEAK = 2 << 20

secret = st.integers(0, 999).map(lambda n: f"{SECRET}{n}")
secret_b64 = secret.map(lambda s: base64.b64encode(s.encode()).decode())
anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
names = st.one_of(st.just("a"), st.sampled_from(["a", "b", "", 1, None, ["a"], {"a": 1}]))
cluster = st.fixed_dictionaries(
    {},
    optional={
        "server": st.one_of(
            st.just("https://127.0.0.1:6443"),
            secret.map(lambda s: f"https://user:{s}@host:6443"),
            secret.map(lambda s: f"http://user:{s}@host"),
            secret.map(lambda s: f"https://{s}@host"),
            anything,
        ),
        "certificate-authority-data": st.one_of(secret_b64, secret),
        "insecure-skip-tls-verify": st.one_of(st.booleans(), anything),
        "proxy-url": st.one_of(
            secret.map(lambda s: f"socks5://u:{s}@p"),
            secret.map(lambda s: f"http://u:{s}@p"),
            anything,
        ),
        "certificate-authority": st.just("/etc/ca"),
        "extensions": anything,
        "as": anything,
    },
)
exec_plugin = st.fixed_dictionaries(
    {},
    optional={
        "command": st.one_of(st.just("cred"), anything),
        "apiVersion": st.one_of(st.just("client.authentication.k8s.io/v1"), anything),
        "args": st.one_of(st.lists(st.text(max_size=4), max_size=2), anything),
        "env": st.one_of(
            st.lists(st.fixed_dictionaries({"name": st.just("K"), "value": secret}), max_size=2),
            anything,
        ),
        "interactiveMode": anything,
    },
)
user = st.fixed_dictionaries(
    {},
    optional={
        "token": secret,
        "username": st.one_of(st.just("me"), anything),
        "password": secret,
        "client-certificate-data": st.one_of(secret_b64, secret),
        "client-key-data": st.one_of(secret_b64, secret),
        "exec": st.one_of(exec_plugin, anything),
        "tokenFile": st.just("/var/run/secrets/kubernetes.io/serviceaccount/token"),
        "auth-provider": anything,
    },
)
kubeconfig = st.fixed_dictionaries(
    {},
    optional={
        "current-context": st.one_of(names, anything),
        "contexts": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"name": names,
                     "context": st.one_of(
                         st.fixed_dictionaries({"cluster": names}, optional={"user": names}), anything)}
                ),
                max_size=2,
            ),
            anything,
        ),
        "clusters": st.one_of(
            st.lists(st.fixed_dictionaries({"name": names, "cluster": st.one_of(cluster, anything)}), max_size=2),
            anything,
        ),
        "users": st.one_of(
            st.lists(st.fixed_dictionaries({"name": names, "user": st.one_of(user, anything)}), max_size=2),
            anything,
        ),
    },
)  # fmt: skip


@examples(ci=500)
@given(
    config=kubeconfig,
    allow_exec=st.booleans(),
    allow_insecure_tls=st.booleans(),
    flow=st.booleans(),
)
@example(config={"current-context": ["a"]}, allow_exec=False, allow_insecure_tls=False, flow=False)
@example(
    config={
        "clusters": [{"name": "a", "cluster": {"server": "https://x"}}],
        "users": [{"name": "a", "user": {"exec": {"command": "c", "env": 5}}}],
        "contexts": [{"name": "a", "context": {"cluster": "a", "user": "a"}}],
    },
    allow_exec=True,
    allow_insecure_tls=False,
    flow=False,
)
@example(
    config={
        "clusters": [{"name": "a", "cluster": {"server": f"https://u:{SECRET}@x",
                                               "proxy-url": f"http://u:{SECRET}@p"}}],
        "contexts": [{"name": "a", "context": {"cluster": "a"}}],
    },
    allow_exec=False,
    allow_insecure_tls=False,
    flow=True,
)  # fmt: skip
def test_a_kubeconfig_is_read_or_refused_without_naming_a_secret(
    config: dict[str, object], allow_exec: bool, allow_insecure_tls: bool, flow: bool
) -> None:
    text = yaml.safe_dump(config, default_flow_style=flow)
    with bounded(max_calls=MAX_CALLS) as spent:
        try:
            credentials = kubeconfigs.parse(
                text, allow_exec=allow_exec, allow_insecure_tls=allow_insecure_tls
            )
            refusal = ""
        except KubeconfigError as error:
            credentials, refusal = None, str(error)
    assert spent.peak_bytes < MAX_PEAK
    if credentials is None:
        assert refusal
        assert SECRET not in refusal, refusal
        return
    assert credentials.server.startswith("https://")
    assert SECRET not in repr(credentials)
