"""Get a kube-apiserver and an etcd onto a machine that has no container engine.

No package registry we can reach ships a kube-apiserver binary, so we build
one from Debian bookworm's `kubernetes` source package with Debian's Go 1.19,
all fetched with apt into a private state directory (the system's apt setup
is never touched), and cache the result keyed by version. etcd comes from
Debian's `etcd-server`. Each quirk of the build has a comment where it is
handled.

`KUBEBUILDER_ASSETS`, the envtest convention, short-circuits all of this.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sluice_envtest.debian import (
    BuildError,
    Log,
    PrivateApt,
    cache_root,
)
from sluice_envtest.debian import locked as _locked
from sluice_envtest.debian import run as _run

KUBE_VERSION = "v1.20.2"
# Bumped whenever the recipe below changes what it produces, so caches rebuild.
RECIPE = 3
GO_PACKAGES = ("golang-1.19-go", "golang-1.19-src")
REFLECT2_PACKAGE = "golang-github-modern-go-reflect2-dev"
ETCD_PACKAGE = "etcd-server"

_OPENAPI_TAG = re.compile(r"^\s*//\s*\+k8s:openapi-gen=", re.MULTILINE)
_OPENAPI_EXCLUDED = ("code-generator", "sample-apiserver")


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path


def ensure_binaries(*, log: Log | None = None) -> Binaries:
    """Return usable binaries, building them once per machine when needed."""
    say = log or _stderr
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        found = Binaries(Path(assets) / "kube-apiserver", Path(assets) / "etcd")
        for binary in (found.kube_apiserver, found.etcd):
            if not os.access(binary, os.X_OK):
                raise BuildError(f"KUBEBUILDER_ASSETS={assets} has no executable {binary.name}")
        return found
    target = cache_root() / "envtest" / f"{KUBE_VERSION}-r{RECIPE}"
    wanted = Binaries(target / "kube-apiserver", target / "etcd")
    if _complete(wanted):
        return wanted
    target.mkdir(parents=True, exist_ok=True)
    # Several test sessions or `sluice dev` may start at once on a fresh
    # machine; only one of them builds, the others wait for its result.
    with _locked(target / ".lock"):
        if _complete(wanted):
            return wanted
        say(f"building kube-apiserver {KUBE_VERSION} from Debian sources (once, ~3 min)")
        with tempfile.TemporaryDirectory(prefix="sluice-envtest-", dir=target) as tmp:
            _build(Path(tmp), wanted, say)
    return wanted


def _stderr(message: str) -> None:
    print(f"sluice-envtest: {message}", file=sys.stderr, flush=True)


def _complete(binaries: Binaries) -> bool:
    return all(os.access(b, os.X_OK) for b in (binaries.kube_apiserver, binaries.etcd))


def _build(work: Path, wanted: Binaries, say: Log) -> None:
    apt = PrivateApt(work / "apt")
    say("fetching package lists")
    apt.update()
    debs = work / "debs"
    debs.mkdir()
    say("downloading Go 1.19, reflect2 and etcd packages")
    apt.run("download", *GO_PACKAGES, REFLECT2_PACKAGE, ETCD_PACKAGE, cwd=debs)
    root = work / "root"
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg", "-x", str(deb), str(root)])
    say("downloading the kubernetes source package")
    sources = work / "src"
    sources.mkdir()
    apt.run("source", "--download-only", "kubernetes", cwd=sources)
    tarballs = list(sources.glob("kubernetes_*.orig.tar.gz"))
    if len(tarballs) != 1:
        raise BuildError(f"expected one kubernetes orig tarball, found {tarballs}")

    gopath = work / "gopath"
    tree = gopath / "src" / "k8s.io" / "kubernetes"
    tree.parent.mkdir(parents=True)
    say("unpacking the kubernetes source tree")
    with tarfile.open(tarballs[0]) as archive:
        archive.extractall(tree.parent, filter="tar")
    unpacked = [p for p in tree.parent.iterdir() if p.name.startswith("kubernetes")]
    if len(unpacked) != 1:
        raise BuildError(f"unexpected source layout: {unpacked}")
    unpacked[0].rename(tree)

    # The vendored reflect2 v1.0.1 crashes at run time under Go >= 1.18;
    # Debian's 1.0.2 is API-compatible.
    vendored = tree / "vendor" / "github.com" / "modern-go" / "reflect2"
    shutil.rmtree(vendored)
    shutil.copytree(root / "usr/share/gocode/src/github.com/modern-go/reflect2", vendored)

    _patch_zero_value_check(tree)

    env = {
        "PATH": f"{root / 'usr/lib/go-1.19/bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(work),
        "GOROOT": str(root / "usr/lib/go-1.19"),
        "GOPATH": str(gopath),
        "GOCACHE": str(work / "gocache"),
        # Module mode cannot resolve this tree offline; GOPATH mode with the
        # vendor directory can.
        "GO111MODULE": "off",
        "GOPROXY": "off",
        "CGO_ENABLED": "0",
        "GOFLAGS": "",
    }
    say("generating pkg/generated/openapi (not shipped in the tarball)")
    openapi_gen = work / "openapi-gen"
    _run(
        ["go", "build", "-o", str(openapi_gen), "./vendor/k8s.io/kube-openapi/cmd/openapi-gen"],
        cwd=tree,
        env=env,
    )
    _run(
        [
            str(openapi_gen),
            "--input-dirs",
            ",".join(_openapi_packages(tree)),
            "--output-package",
            "k8s.io/kubernetes/pkg/generated/openapi",
            "-O",
            "zz_generated.openapi",
            "--go-header-file",
            "vendor/k8s.io/code-generator/hack/boilerplate.go.txt",
            "--output-base",
            str(gopath / "src"),
            "--report-filename",
            str(work / "openapi-violations.txt"),
        ],
        cwd=tree,
        env=env,
    )
    say("compiling kube-apiserver")
    major, minor = KUBE_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    # /version is answered from client-go's copy of the version variables,
    # `--version` from component-base's: stamp both, as upstream's build does.
    for package in ("client-go/pkg/version", "component-base/version"):
        prefix = f"k8s.io/kubernetes/vendor/k8s.io/{package}"
        flags += [
            f"-X {prefix}.gitVersion={KUBE_VERSION}",
            f"-X {prefix}.gitMajor={major}",
            f"-X {prefix}.gitMinor={minor}",
            f"-X {prefix}.gitTreeState=clean",
        ]
    ldflags = " ".join(flags)
    built = work / "kube-apiserver"
    _run(
        [
            "go",
            "build",
            "-o",
            str(built),
            "-ldflags",
            ldflags,
            "k8s.io/kubernetes/cmd/kube-apiserver",
        ],
        cwd=tree,
        env=env,
    )
    # Rename into place last so an interrupted build never leaves a binary
    # that looks complete.
    shutil.copy2(root / "usr/bin/etcd", wanted.etcd.with_suffix(".tmp"))
    os.replace(wanted.etcd.with_suffix(".tmp"), wanted.etcd)
    os.replace(built, wanted.kube_apiserver)
    say(f"control plane binaries ready in {wanted.kube_apiserver.parent}")


_ZERO_CHECK = (
    "if data == nil || "
    "reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {"
)
_ZERO_CHECK_FILES = (
    "vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go",
    "vendor/github.com/go-openapi/validate/type.go",
)


def _patch_zero_value_check(tree: Path) -> None:
    """Make CRD validation accept empty strings again under Go >= 1.18.

    The vendored OpenAPI validators decide "this value is null" by comparing
    two reflect.Value structs with DeepEqual, which was never meaningful and,
    since Go 1.18, is true for "" (and 0, false): every custom resource with
    an empty string field (a condition with an empty message) is rejected as
    `must be of type string: "null"`. Upstream later reduced the test to
    `data == nil`, which is what real clusters do; do the same here.
    """
    for rel in _ZERO_CHECK_FILES:
        path = tree / rel
        text = path.read_text()
        if _ZERO_CHECK not in text:
            raise BuildError(f"{rel}: the zero-value check to patch was not found")
        path.write_text(text.replace(_ZERO_CHECK, "if data == nil {"))


def _openapi_packages(tree: Path) -> list[str]:
    """Every Go package carrying a `+k8s:openapi-gen=` tag, as an import path."""
    packages: set[str] = set()
    for top, prefix in (
        (tree / "pkg", "k8s.io/kubernetes/pkg/"),
        (tree / "vendor/k8s.io", "k8s.io/"),
    ):
        for dirpath, _dirs, files in os.walk(top, followlinks=True):
            rel = Path(dirpath).relative_to(top).as_posix()
            if any(part in rel.split("/") for part in _OPENAPI_EXCLUDED):
                continue
            for name in files:
                if not name.endswith(".go"):
                    continue
                text = (Path(dirpath) / name).read_text(errors="replace")
                if _OPENAPI_TAG.search(text):
                    packages.add(prefix + rel if rel != "." else prefix.rstrip("/"))
                    break
    if not packages:
        raise BuildError("no packages tagged for openapi-gen found in the source tree")
    return sorted(packages)
