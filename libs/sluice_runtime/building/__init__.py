"""Building a Kustomization's manifests with kustomize, the way Flux's kustomize-controller does.

It lives in the runtime because two programs need the very same build: the
kustomize-controller, which applies it, and `sluice build`/`sluice diff`,
which show a person what the controller would apply.

Flux links kustomize as a library and gives it a filesystem that cannot
leave the artifact. Sluice runs the kustomize binary (or the copy built into
kubectl) instead, and gets the same guarantee from the kernel: the process
is confined with Landlock (`sluice_runtime.confining`) to reading the
artifact and its own executable, with no TCP at all, so no field of any
kustomize config (a builtin generator's `files:`, a transformer's `path:`,
a URL) can read the controller's token or reach a loopback service.
The kustomization files are also read before the build, so that a
reference leaving the artifact or a remote base gets a precise message
rather than kustomize's "permission denied"; they are read as kustomize's
Go decoders read them (`references`), since on a kernel that cannot
confine the build that check is what keeps it in the artifact.

Where the kernel's Landlock has no TCP rules (ABI 1-3, Linux 5.13-6.6),
reads are still confined and everything that only TCP confinement would
keep in bounds is refused: every builtin plugin config (`generators`,
`transformers`, `validators`, inline or by file). Where there is no
Landlock at all, builds run unconfined with the same refusals. The mode in
force is chosen at startup (`--build-sandbox`) and named in every message
that a refusal produces.

Like Flux, kustomize runs without load restrictions (an overlay may list
`../common/namespace.yaml`); the artifact root, not the kustomization
directory, is the boundary. Output is read as a stream and the build is
stopped once it passes `max_output` bytes: a small artifact can expand into
gigabytes (patches multiplied over many targets). kustomize holds the whole
result before it prints any, so its own memory is bounded too (`max_memory`,
the process's data limit): a 2 kB artifact of nested bases took kustomize
to 763 MiB before its output passed 64 MiB.

Before the build the spec is merged into the kustomization file as Flux's
generator does it, after generating one that lists every manifest when the
directory has none. `commonMetadata` is set on the built objects afterwards,
as Flux does at apply time, so it reaches only each object's own metadata
(never selectors or pod templates).

A directory of plain manifests (no kustomization file anywhere below it)
built for a spec that asks kustomize for nothing is read in this process
instead, with kustomize's result (`plain`); anything it is not sure of
still goes to kustomize.

The package, by concern: `tools` (the sandbox and which kustomize),
`manifests` (YAML as Kubernetes reads it), `kustomizations` (the file a
build reads, generated and merged), `references` (keeping the build inside
the artifact), `running` (the confined kustomize process), `plain` (plain
manifests read without kustomize, with kustomize's result).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sluice_api.kustomize import KustomizationSpec
from sluice_runtime import lanes
from sluice_runtime.building.kustomizations import generate, merge, resolve_path
from sluice_runtime.building.manifests import (
    ManifestLoader,
    load_yaml,
    load_yaml_all,
    parse_output,
    set_common_metadata,
    yaml_problem,
)
from sluice_runtime.building.plain import build_plain
from sluice_runtime.building.references import (
    KUSTOMIZATION_FILES,
    check_references,
    decryptable_files,
    kustomization_file,
    relative,
)
from sluice_runtime.building.running import run
from sluice_runtime.building.tools import (
    MIN_KUSTOMIZE_MAJOR,
    BuildError,
    Kustomize,
    KustomizeUnavailable,
    Sandbox,
    choose_sandbox,
    default_sandbox,
    find_kustomize,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "KUSTOMIZATION_FILES",
    "MIN_KUSTOMIZE_MAJOR",
    "BuildError",
    "Decrypt",
    "Kustomize",
    "KustomizeUnavailable",
    "ManifestLoader",
    "Sandbox",
    "build",
    "choose_sandbox",
    "decryptable_files",
    "default_sandbox",
    "find_kustomize",
    "kustomization_file",
    "load_yaml",
    "load_yaml_all",
    "set_common_metadata",
    "yaml_problem",
]

DEFAULT_MAX_OUTPUT = 64 << 20
"""Bytes of kustomize output past which a build is stopped (`--build-max-output`)."""

DEFAULT_MAX_MEMORY = 512 << 20
"""Bytes of data kustomize may allocate before it is stopped (`--build-max-memory`);
a small build needs under 64 MiB."""


async def build(
    root: Path,
    spec: KustomizationSpec,
    *,
    kustomize: Kustomize,
    sandbox: Sandbox | None = None,
    allow_remote_bases: bool = False,
    timeout: float = 120,
    max_output: int = DEFAULT_MAX_OUTPUT,
    max_memory: int = DEFAULT_MAX_MEMORY,
    decrypt: Decrypt | None = None,
) -> list[dict[str, Any]]:
    """Build `spec.path` of the extracted artifact at `root` into Kubernetes objects.

    `root` must be a private copy: the kustomization file under `spec.path`
    is created or edited in place, and `decrypt` (SOPS) is given every file
    the build reads as a manifest or generator input, to replace encrypted
    ones by their plaintext before kustomize runs. `sandbox` defaults to the
    best this kernel offers. Raises BuildError.
    """
    sandbox = sandbox or default_sandbox()
    given_root = Path(root)
    real_root = Path(os.path.realpath(given_root))
    plain: list[dict[str, Any]] | None = None
    try:
        if decrypt is None:  # SOPS must see the files first: kustomize reads the plaintext
            directory = await lanes.to_thread(resolve_path, real_root, spec.path)
            plain = await lanes.to_thread(
                build_plain, real_root, directory, spec, max_output=max_output
            )
        if plain is None:
            directory = await lanes.to_thread(prepare, real_root, spec, allow_remote_bases, sandbox)
    except OSError as error:
        where = relative(real_root, Path(os.path.realpath(error.filename or real_root)))
        raise BuildError(f"cannot read '{where}' in the artifact: {error.strerror}") from None
    if plain is not None:
        objects = plain
    else:
        if decrypt is not None:
            files = await lanes.to_thread(decryptable_files, real_root, directory)
            await decrypt(real_root, files)
        output = await run(
            kustomize,
            directory,
            roots=(given_root, real_root),
            sandbox=sandbox,
            allow_remote_bases=allow_remote_bases,
            timeout=timeout,
            max_output=max_output,
            max_memory=max_memory,
        )
        objects = await lanes.to_thread(parse_output, output)
    if spec.common_metadata is not None:
        set_common_metadata(objects, spec.common_metadata)
    return objects


Decrypt = Callable[[Path, list[Path]], Awaitable[object]]
"""Replaces encrypted files among the given ones (under the root) by their plaintext."""


def prepare(
    root: Path, spec: KustomizationSpec, allow_remote_bases: bool, sandbox: Sandbox
) -> Path:
    directory = resolve_path(root, spec.path)
    kfile = kustomization_file(directory)
    if kfile is None:
        kfile = generate(root, directory)
    merge(root, directory, kfile, spec)
    check_references(
        root,
        directory,
        allow_remote_bases=allow_remote_bases,
        refusing_plugins=sandbox if sandbox.refuses_plugins else None,
    )
    return directory
