"""Builds cannot read or reach anything outside their artifact (issue: tenant escapes).

Each escape is a kustomization a tenant's committer could push: kustomize's
builtin plugin configs load `files:`, `envs:` and `path:` from anywhere and
fetch URLs, and the reference check cannot see them all. With Landlock the
kernel refuses the reads and connections; without it the configs are
refused up front. Either way the build fails, the message says which mode
held it, and neither the "controller's token" nor the loopback service's
contents reach the output.
"""

from __future__ import annotations

import base64
import secrets
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice_api.kustomize import KustomizationSpec
from sluice_envtest.harness import condition
from sluice_envtest.pytest_plugin import Cluster
from sluice_runtime import confining
from sluice_runtime.building import (
    BuildError,
    Kustomize,
    Sandbox,
    build,
    choose_sandbox,
    find_kustomize,
)
from sluice_runtime.building.running import run
from sluice_runtime.kube.errors import NotFound
from sluice_runtime.kube.resources import SECRET

from .conftest import CONFIG_MAP, KUSTOMIZATION, Delivery, Flags, make_tenant

landlock = pytest.mark.skipif(
    confining.landlock_abi() < confining.MIN_ABI, reason="the kernel has no Landlock ABI 4"
)


@pytest.fixture(scope="module")
def kustomize() -> Kustomize:
    return find_kustomize()


class _Recorder(BaseHTTPRequestHandler):
    requests: list[str]

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        body = b"loopback-secret\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def loopback() -> Iterator[ThreadingHTTPServer]:
    """A loopback HTTP service, standing for the source-controller's artifacts or metrics."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    """A file only the controller may read, like its service-account token."""
    path = tmp_path / "controller" / "token"
    path.parent.mkdir()
    path.write_text(f"controller-token-{secrets.token_hex(8)}\n")
    return path


def spec() -> KustomizationSpec:
    return KustomizationSpec.model_validate(
        {"sourceRef": {"kind": "GitRepository", "name": "s"}, "interval": "5m", "prune": True}
    )


CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  k: v\n"


def secret_generator(files: str) -> str:
    return (
        "apiVersion: builtin\nkind: SecretGenerator\nmetadata:\n  name: leak\n"
        f"files:\n- token={files}\n"
    )


def escapes(token: Path, url: str) -> dict[str, dict[str, str]]:
    """Artifacts (file name -> content) that read `token` or fetch `url` when built unconfined."""

    def kustomization(**fields: Any) -> str:
        return yaml.safe_dump({"resources": ["cm.yaml"], **fields}, sort_keys=False)

    return {
        "inline-generator": {
            "kustomization.yaml": kustomization(generators=[secret_generator(str(token))]),
        },
        "flow-map-generator": {
            "kustomization.yaml": kustomization(
                generators=[
                    "{apiVersion: builtin, kind: SecretGenerator, metadata: {name: leak}, "
                    f"files: [token={token}]}}"
                ]
            ),
        },
        "generator-file": {
            "kustomization.yaml": kustomization(generators=["gen.yaml"]),
            "gen.yaml": secret_generator(str(token)),
        },
        "generator-directory": {
            "kustomization.yaml": kustomization(generators=["gen"]),
            "gen/kustomization.yaml": "resources:\n- secret.yaml\n",
            "gen/secret.yaml": secret_generator(str(token)),
        },
        "configmap-envs": {
            "kustomization.yaml": kustomization(
                generators=[
                    "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata:\n  name: leak\n"
                    f"envs:\n- {token}\n"
                ]
            ),
        },
        "patch-transformer-path": {
            "kustomization.yaml": kustomization(
                transformers=[
                    "apiVersion: builtin\nkind: PatchTransformer\nmetadata:\n  name: p\n"
                    f"path: {token}\ntarget:\n  kind: ConfigMap\n"
                ]
            ),
        },
        "loopback-fetch": {
            "kustomization.yaml": kustomization(generators=[secret_generator(url)]),
        },
    }


CASES = ("inline-generator", "flow-map-generator", "generator-file", "generator-directory",
         "configmap-envs", "patch-transformer-path", "loopback-fetch")  # fmt: skip


def artifact(root: Path, files: dict[str, str]) -> Path:
    root.mkdir()
    for name, text in {"cm.yaml": CM, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@landlock
@pytest.mark.parametrize("case", CASES)
async def test_landlock_keeps_the_build_inside_the_artifact(
    case: str, tmp_path: Path, token: Path, loopback: ThreadingHTTPServer, kustomize: Kustomize
) -> None:
    url = f"http://127.0.0.1:{loopback.server_address[1]}/token"
    root = artifact(tmp_path / "artifact", escapes(token, url)[case])

    with pytest.raises(BuildError) as failed:
        await build(root, spec(), kustomize=kustomize, sandbox=Sandbox.LANDLOCK)

    message = str(failed.value)
    assert "permission denied" in message, message
    assert "build sandbox: landlock" in message, "the status names the mode in force"
    assert token.read_text().strip() not in message
    assert "loopback-secret" not in message
    assert loopback.requests == [], "the loopback service was not reached"  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", [c for c in CASES if c != "patch-transformer-path"] + ["patch"])
async def test_without_landlock_every_plugin_config_is_refused(
    case: str, tmp_path: Path, token: Path, loopback: ThreadingHTTPServer, kustomize: Kustomize
) -> None:
    url = f"http://127.0.0.1:{loopback.server_address[1]}/token"
    files = escapes(token, url)["patch-transformer-path" if case == "patch" else case]
    root = artifact(tmp_path / "artifact", files)

    with pytest.raises(BuildError) as failed:
        await build(root, spec(), kustomize=kustomize, sandbox=Sandbox.REFUSE_PLUGINS)

    message = str(failed.value)
    assert "plugin configs are refused" in message, message
    assert "build sandbox: refuse-plugins" in message
    assert token.read_text().strip() not in message
    assert loopback.requests == []  # type: ignore[attr-defined]


# -- paths kustomize reads that the YAML library shows differently ------------------
#
# Each artifact makes kustomize read `token` (and `other.yaml`, another tenant's
# manifest) outside the artifact through a field that is not a plugin config, by
# writing the path so that PyYAML shows something else than Go's decoders read:
# kustomize cleans a newline like any other character, decodes `!!binary` into the
# path, matches keys case-insensitively with Unicode folding, follows merge keys,
# and joins `link/..` lexically before the system follows `link`. Built
# unconfined, every one of them put the token into a Secret.

SANDBOXES = [
    pytest.param(Sandbox.LANDLOCK, id="landlock", marks=landlock),
    pytest.param(
        Sandbox.LANDLOCK_FILES,
        id="landlock-files",
        marks=pytest.mark.skipif(confining.landlock_abi() < 1, reason="no Landlock"),
    ),
    pytest.param(Sandbox.REFUSE_PLUGINS, id="refuse-plugins"),
]


def path_escapes() -> dict[str, tuple[dict[str, str], str]]:
    """Artifacts (files, and a word of the refusal) whose paths leave through YAML's
    and Go's differences; the artifact is `<tmp>/artifact`, the token
    `<tmp>/controller/token`, beside another tenant's manifest and patch."""
    token = "../controller/token"
    binary = base64.b64encode(token.encode()).decode()

    def generator(entry: str, *, key: str = "secretGenerator", files: str = "files") -> str:
        return f"resources: [cm.yaml]\n{key}:\n- name: leak\n  {files}: [{entry}]\n"

    return {
        "newline-in-quoted-path": (
            {"kustomization.yaml": generator('"x\\n/../../controller/token"')},
            "contains a control or separator character",
        ),
        "newline-in-block-path": (
            {
                "kustomization.yaml": "resources: [cm.yaml]\nsecretGenerator:\n- name: leak\n"
                "  files:\n  - |-\n    x\n    /../../controller/token\n"
            },
            "a path must be written on one line",
        ),
        "binary-tag": (
            {"kustomization.yaml": generator(f"!!binary {binary}")},
            "YAML tags (tag:yaml.org,2002:binary) are refused",
        ),
        "key-in-other-case": (
            {"kustomization.yaml": generator(token, key="SecretGenerator")},
            "spell it 'secretGenerator'",
        ),
        "key-by-unicode-folding": (
            {"kustomization.yaml": generator(token, key="\u017fecretGenerator")},
            "spell it 'secretGenerator'",
        ),
        "nested-key-in-other-case": (
            {"kustomization.yaml": generator(token, files="FILES")},
            "spell it 'files'",
        ),
        "merge-key": (
            {
                "kustomization.yaml": "resources: [cm.yaml]\nsecretGenerator:\n"
                f"- <<: {{files: [{token}]}}\n  name: leak\n"
            },
            "merge keys (<<) are refused",
        ),
        "env-with-newline": (
            {
                "kustomization.yaml": "resources: [cm.yaml]\nconfigMapGenerator:\n- name: leak\n"
                '  env: "x\\n/../../controller/token"\n'
            },
            "contains a control or separator character",
        ),
        "symlink-then-dotdot": (
            # `a` -> `d1/d2`: PyYAML's realpath puts a/../../x inside, kustomize reads ../x.
            {"kustomization.yaml": generator("a/../../controller/token"), "d1/d2/keep": ""},
            "points outside the artifact",
        ),
        "resource-with-newline": (
            {"kustomization.yaml": 'resources: [cm.yaml, "x\\n/../../controller/other.yaml"]\n'},
            "contains a control or separator character",
        ),
        "patch-path-with-newline": (
            {
                "kustomization.yaml": "resources: [cm.yaml]\n"
                'patches:\n- path: "x\\n/../../controller/patch.yaml"\n'
            },
            "contains a control or separator character",
        ),
        "inline-patch-that-is-a-path": (
            {
                "kustomization.yaml": "resources: [cm.yaml]\n"
                'patchesStrategicMerge: ["x\\n/../../controller/patch.yaml"]\n'
            },
            "points outside the artifact",
        ),
    }


PATH_ESCAPES = tuple(path_escapes())


def escape_artifact(tmp_path: Path, case: str, token: Path) -> tuple[Path, str]:
    files, refusal = path_escapes()[case]
    (token.parent / "other.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\n"
        "data:\n  other-tenant: other-tenant-secret\n"
    )
    (token.parent / "patch.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n"
        "data:\n  other-tenant: other-tenant-secret\n"
    )
    root = artifact(tmp_path / "artifact", files)
    if case == "symlink-then-dotdot":
        (root / "a").symlink_to("d1/d2")
    return root, refusal


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.parametrize("case", PATH_ESCAPES)
async def test_paths_written_to_fool_the_check_are_refused_in_every_mode(
    case: str, sandbox: Sandbox, tmp_path: Path, token: Path, kustomize: Kustomize
) -> None:
    root, refusal = escape_artifact(tmp_path, case, token)

    with pytest.raises(BuildError) as failed:
        await build(root, spec(), kustomize=kustomize, sandbox=sandbox)

    message = str(failed.value)
    assert refusal in message, message
    assert token.read_text().strip() not in message
    assert "other-tenant-secret" not in message


@pytest.mark.parametrize("case", PATH_ESCAPES)
async def test_unchecked_the_same_paths_leak_and_landlock_files_stops_them(
    case: str, tmp_path: Path, token: Path, kustomize: Kustomize
) -> None:
    """Why the check matters, and what backs it: run straight (no check), kustomize
    reads the outside file; with the kernel confining reads, it cannot."""
    root, _ = escape_artifact(tmp_path, case, token)
    secret = token.read_text().strip()
    leaked = base64.b64encode((secret + "\n").encode()).decode()

    output = await run(
        kustomize,
        root,
        roots=(root,),
        sandbox=Sandbox.REFUSE_PLUGINS,
        allow_remote_bases=False,
        timeout=60,
        max_output=1 << 20,
        max_memory=512 << 20,
    )
    shown = output.decode()
    assert leaked in shown or secret in shown or "other-tenant-secret" in shown, shown[:400]

    if confining.landlock_abi() >= 1:
        with pytest.raises(BuildError) as failed:
            await run(
                kustomize,
                root,
                roots=(root,),
                sandbox=Sandbox.LANDLOCK_FILES,
                allow_remote_bases=False,
                timeout=60,
                max_output=1 << 20,
                max_memory=512 << 20,
            )
        assert "permission denied" in str(failed.value), str(failed.value)
        assert "landlock-files" in str(failed.value)


async def test_a_path_that_looks_remote_is_judged_as_the_local_path_kustomize_tries_first(
    tmp_path: Path, token: Path, kustomize: Kustomize
) -> None:
    # `foo.com/../../x` looks like a repository URL, but kustomize first cleans it
    # as a local path, which leaves the artifact; remote bases allowed or not.
    root = artifact(
        tmp_path / "artifact",
        {
            "kustomization.yaml": "resources: [cm.yaml]\nsecretGenerator:\n- name: leak\n"
            "  files: [foo.com/../../controller/token]\n"
        },
    )
    for allow in (False, True):
        with pytest.raises(BuildError, match="points outside the artifact"):
            await build(
                root,
                spec(),
                kustomize=kustomize,
                sandbox=Sandbox.REFUSE_PLUGINS,
                allow_remote_bases=allow,
            )


@landlock
async def test_landlock_still_runs_plugins_that_stay_inside(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    root = artifact(
        tmp_path / "artifact",
        {
            "kustomization.yaml": yaml.safe_dump(
                {"resources": ["cm.yaml"], "generators": [secret_generator("data/token")]}
            ),
            "data/token": "in-artifact\n",
        },
    )

    objects = await build(root, spec(), kustomize=kustomize, sandbox=Sandbox.LANDLOCK)

    [secret] = [o for o in objects if o["kind"] == "Secret"]
    assert secret["data"] == {"token": "aW4tYXJ0aWZhY3QK"}  # base64 of "in-artifact\n"


async def test_build_output_past_the_limit_is_stopped(tmp_path: Path, kustomize: Kustomize) -> None:
    # Small input, large output: one ConfigMap copied by 64 patches' worth of
    # data is over the limit; the build stops instead of reading it all.
    big = "x" * 4096
    manifests = "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\ndata:\n  v: {big}\n"
        for i in range(64)
    )
    root = artifact(tmp_path / "artifact", {"cm.yaml": manifests})

    with pytest.raises(BuildError, match=r"kustomize output exceeds 65536 bytes and was stopped"):
        await build(root, spec(), kustomize=kustomize, max_output=65536)
    assert len(await build(root, spec(), kustomize=kustomize, max_output=1 << 20)) == 64


def nested_bases(levels: int) -> dict[str, str]:
    """A tiny artifact whose build doubles a 40 kB ConfigMap at each of `levels` bases:
    2**levels copies (kustomize holds them all before it prints one)."""
    files = {
        "l0/cm.yaml": CM.replace("k: v", "k: " + "x" * 40_000),
        "l0/kustomization.yaml": "resources:\n- cm.yaml\n",
        "kustomization.yaml": f"resources:\n- l{levels}\n",
    }
    for level in range(1, levels + 1):
        files[f"l{level}/kustomization.yaml"] = "resources:\n- a\n- b\n"
        for side in ("a", "b"):
            files[f"l{level}/{side}/kustomization.yaml"] = (
                f"namePrefix: {side}-\nresources:\n- ../../l{level - 1}\n"
            )
    return files


async def test_build_memory_past_the_limit_is_stopped(tmp_path: Path, kustomize: Kustomize) -> None:
    # 4096 copies: kustomize reaches hundreds of MiB before its output passes
    # the output limit; the data limit stops it first.
    root = artifact(tmp_path / "big", nested_bases(12))
    with pytest.raises(BuildError, match=r"kustomize needed more than 128 MiB of memory"):
        await build(root, spec(), kustomize=kustomize, max_memory=128 << 20)
    # The same shape, small, builds under the default limit.
    small = artifact(tmp_path / "small", nested_bases(2))
    assert len(await build(small, spec(), kustomize=kustomize)) == 4


def test_auto_takes_the_strongest_sandbox_the_kernel_offers() -> None:
    abi = confining.landlock_abi()
    expected = (
        Sandbox.LANDLOCK
        if abi >= confining.MIN_ABI
        else Sandbox.LANDLOCK_FILES
        if abi >= 1
        else Sandbox.REFUSE_PLUGINS
    )
    assert choose_sandbox("auto") is expected
    assert choose_sandbox("refuse-plugins") is Sandbox.REFUSE_PLUGINS
    if abi >= 1:
        assert choose_sandbox("landlock-files") is Sandbox.LANDLOCK_FILES


# -- through the controller, as a tenant ---------------------------------------------


async def _secrets(d: Delivery) -> list[str]:
    listed = await d.kube.list(SECRET, namespace=d.namespace)
    return [s["metadata"]["name"] for s in listed.items]


@pytest.mark.parametrize(
    ("delivery", "expect"),
    [
        pytest.param(
            Flags(kustomize=("--build-sandbox", "landlock")),
            "permission denied",
            id="landlock",
            marks=landlock,
        ),
        pytest.param(
            Flags(kustomize=("--build-sandbox", "landlock-files")),
            "plugin configs are refused",
            id="landlock-files",
            marks=pytest.mark.skipif(confining.landlock_abi() < 1, reason="no Landlock"),
        ),
        pytest.param(
            Flags(kustomize=("--build-sandbox", "refuse-plugins")),
            "plugin configs are refused",
            id="refuse-plugins",
        ),
    ],
    indirect=["delivery"],
)
async def test_a_tenant_build_cannot_read_the_controllers_credentials(
    delivery: Delivery, cluster: Cluster, expect: str
) -> None:
    # The in-process controller's own credentials: the admin kubeconfig it
    # was started with, standing for a pod's service-account token.
    d = delivery
    await make_tenant(d, ["*"], ("configmaps", "secrets"))
    before = await _secrets(d)
    repo = d.repo("escape")
    repo.commit(
        "c",
        files={
            "cm.yaml": CM,
            "kustomization.yaml": yaml.safe_dump(
                {
                    "resources": ["cm.yaml"],
                    "generators": [secret_generator(str(cluster.kubeconfig))],
                }
            ),
        },
    )
    repo.push()
    await d.git_repository("escape")
    await d.kustomization(
        "escape", source="escape", targetNamespace=d.namespace, serviceAccountName="tenant"
    )

    obj = await d.observe.wait_reason(KUSTOMIZATION, "escape", "BuildFailed")

    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert expect in ready["message"], ready["message"]
    assert "build sandbox:" in ready["message"], "the status names the mode in force"
    assert "BEGIN" not in ready["message"] and "client-key" not in ready["message"]
    assert await _secrets(d) == before, "no Secret was generated from the controller's files"
    with pytest.raises(NotFound):
        await d.kube.get(CONFIG_MAP, "app", d.namespace)


@pytest.mark.parametrize(
    "delivery",
    [
        pytest.param(
            Flags(kustomize=("--build-sandbox", mode)),
            id=mode,
            marks=[]
            if mode == "refuse-plugins"
            else [
                landlock
                if mode == "landlock"
                else pytest.mark.skipif(confining.landlock_abi() < 1, reason="no Landlock")
            ],
        )
        for mode in ("landlock", "landlock-files", "refuse-plugins")
    ],
    indirect=["delivery"],
)
async def test_a_newline_in_a_generator_path_does_not_read_the_controllers_credentials(
    delivery: Delivery, cluster: Cluster
) -> None:
    # The reported attack: kustomize cleans `x\n/../..` lexically into a path,
    # which the check used to pass over as an inline document.
    d = delivery
    await make_tenant(d, ["*"], ("configmaps", "secrets"))
    before = await _secrets(d)
    climb = "x\\n/" + "../" * 40 + str(cluster.kubeconfig).lstrip("/")  # `\n` as YAML writes it
    repo = d.repo("newline")
    repo.commit(
        "c",
        files={
            "cm.yaml": CM,
            "kustomization.yaml": (
                f'resources: [cm.yaml]\nsecretGenerator:\n- name: leak\n  files: ["{climb}"]\n'
            ),
        },
    )
    repo.push()
    await d.git_repository("newline")
    await d.kustomization(
        "newline", source="newline", targetNamespace=d.namespace, serviceAccountName="tenant"
    )

    obj = await d.observe.wait_reason(KUSTOMIZATION, "newline", "BuildFailed")

    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert "contains a control or separator character" in ready["message"], ready["message"]
    assert "BEGIN" not in ready["message"] and "client-key" not in ready["message"]
    assert await _secrets(d) == before, "no Secret was generated from the controller's files"


@pytest.mark.parametrize(
    "delivery", [Flags(kustomize=("--build-max-memory", "128Mi"))], indirect=True, ids=["128Mi"]
)
async def test_a_build_past_the_memory_flag_fails_naming_it(delivery: Delivery) -> None:
    d = delivery
    await make_tenant(d, ["*"], ("configmaps",))
    repo = d.repo("nested")
    repo.commit("c", files=nested_bases(12))
    repo.push()
    await d.git_repository("nested")
    await d.kustomization(
        "nested", source="nested", targetNamespace=d.namespace, serviceAccountName="tenant"
    )
    obj = await d.observe.wait_reason(KUSTOMIZATION, "nested", "BuildFailed")
    ready = condition(obj, "Ready")
    assert ready is not None and ready["status"] == "False"
    assert "kustomize needed more than 128 MiB of memory" in ready["message"], ready["message"]
    assert "--build-max-memory" in ready["message"]


@landlock
async def test_a_long_inline_plugin_config_is_read_as_a_document(
    tmp_path: Path, kustomize: Kustomize
) -> None:
    # An inline config is tried as a path first: one longer than a file name may be
    # must not end the build with "File name too long".
    padding = "x" * 400
    generator = (
        "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata:\n  name: long\n"
        f"literals:\n- pad={padding}\n"
    )
    root = artifact(
        tmp_path / "artifact",
        {
            "kustomization.yaml": yaml.safe_dump(
                {"resources": ["cm.yaml"], "generators": [generator]}
            )
        },
    )

    objects = await build(root, spec(), kustomize=kustomize, sandbox=Sandbox.LANDLOCK)

    [generated] = [o for o in objects if o["metadata"]["name"].startswith("long-")]
    assert generated["data"] == {"pad": padding}
