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
rather than kustomize's "permission denied".

Where the kernel offers no Landlock (ABI 4, Linux 6.7, is the first that
confines TCP), builds run unconfined and everything that only confinement
would keep inside the artifact is refused instead: every builtin plugin
config (`generators`, `transformers`, `validators`, inline or by file).
The mode in force is chosen at startup (`--build-sandbox`) and named in
every message that a refusal produces.

Like Flux, kustomize runs without load restrictions (an overlay may list
`../common/namespace.yaml`); the artifact root, not the kustomization
directory, is the boundary. Output is read as a stream and the build is
stopped once it passes `max_output` bytes: a small artifact can expand into
gigabytes (patches multiplied over many targets).

Before the build the spec is merged into the kustomization file as Flux's
generator does it, after generating one that lists every manifest when the
directory has none. `commonMetadata` is set on the built objects afterwards,
as Flux does at apply time, so it reaches only each object's own metadata
(never selectors or pod templates).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sluice_api.kustomize import CommonMetadata, KustomizationSpec
from sluice_runtime import confining

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
"""The names kustomize recognizes, in the order it looks for them."""

MIN_KUSTOMIZE_MAJOR = 5
"""Flux builds with kustomize v5; older versions read some fields differently."""

_MAX_MESSAGE = 4000

DEFAULT_MAX_OUTPUT = 64 << 20
"""Bytes of kustomize output past which a build is stopped (`--build-max-output`)."""


class Sandbox(enum.StrEnum):
    """How a build is kept inside its artifact."""

    LANDLOCK = "landlock"
    """Confined by the kernel: reads only the artifact and kustomize, no TCP."""
    REFUSE_PLUGINS = "refuse-plugins"
    """Unconfined; builtin plugin configs, the only way kustomize reads arbitrary
    paths that the reference check cannot see, are refused."""

    def describe(self) -> str:
        if self is Sandbox.LANDLOCK:
            return "build sandbox: landlock (reads limited to the artifact, no network)"
        return (
            "build sandbox: refuse-plugins (this kernel has no Landlock ABI "
            f"{confining.MIN_ABI}, so builds are not confined)"
        )


def choose_sandbox(requested: str = "auto") -> Sandbox:
    """The sandbox for `--build-sandbox` (auto, landlock, refuse-plugins).

    `auto` takes Landlock when the kernel offers it. Raises
    KustomizeUnavailable when `landlock` is asked for and missing, so a
    platform that requires confinement never silently runs without it.
    """
    if requested == Sandbox.REFUSE_PLUGINS:
        return Sandbox.REFUSE_PLUGINS
    abi = confining.landlock_abi()
    if abi >= confining.MIN_ABI:
        return Sandbox.LANDLOCK
    if requested == Sandbox.LANDLOCK:
        raise KustomizeUnavailable(
            f"--build-sandbox=landlock: the kernel's Landlock ABI is {abi}, "
            f"{confining.MIN_ABI} or later (Linux 6.7) is needed"
        )
    return Sandbox.REFUSE_PLUGINS


class BuildError(Exception):
    """The manifests could not be built; the message is meant for the Ready condition."""


class KustomizeUnavailable(Exception):
    """Neither a usable kustomize nor a kubectl with kustomize built in was found."""


# -- reading YAML as Kubernetes does ------------------------------------------

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class ManifestLoader(_BaseLoader):
    """YAML as Kubernetes' Go decoder reads it into plain values.

    PyYAML's safe schema would turn `2024-01-01` into a date, `10:30` into
    630 (base 60) and a bare `=` into an error; Go keeps the first two as
    strings and knows nothing of the third. Everything else (YAML 1.1
    booleans, octal and hex numbers) matches.
    """


_DROPPED_TAGS = {
    "tag:yaml.org,2002:timestamp",
    "tag:yaml.org,2002:value",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
}
ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _DROPPED_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ManifestLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(
        r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0[0-7_]+
        |[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    list("-+0123456789"),
)
ManifestLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(data: str | bytes) -> Any:
    """One YAML document as Kubernetes reads it (see ManifestLoader)."""
    return yaml.load(data, Loader=ManifestLoader)  # noqa: S506 - ManifestLoader is a SafeLoader


def load_yaml_all(data: str | bytes) -> list[Any]:
    """Every document of a YAML stream as Kubernetes reads it, empty ones as None."""
    return list(yaml.load_all(data, Loader=ManifestLoader))


def yaml_problem(error: yaml.YAMLError) -> str:
    """`yaml: line N: <problem>`, the shape of Go's YAML errors that kustomize prints."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem_mark is not None:
        return f"yaml: line {error.problem_mark.line + 1}: {error.problem}"
    return f"yaml: {error}"


# -- finding kustomize --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Kustomize:
    """A kustomize to build with: the standalone binary, or kubectl's built-in copy."""

    executable: str
    version: str
    embedded: bool
    """True for `kubectl kustomize`, False for `kustomize build`."""

    def command(self, directory: Path) -> list[str]:
        verb = "kustomize" if self.embedded else "build"
        # Flux's loader is unrestricted inside the artifact; the artifact
        # boundary is enforced by _check_references before the build.
        return [self.executable, verb, str(directory), "--load-restrictor", "LoadRestrictionsNone"]


@functools.cache
def find_kustomize() -> Kustomize:
    """The kustomize on PATH, else kubectl's; checked once and remembered.

    Raises KustomizeUnavailable when neither exists or neither is v5 or later.
    """
    problems: list[str] = []
    standalone = shutil.which("kustomize")
    if standalone:
        try:
            output = _version_output([standalone, "version"])
            return Kustomize(standalone, _check_version(output, standalone), embedded=False)
        except KustomizeUnavailable as error:
            problems.append(str(error))
    kubectl = shutil.which("kubectl")
    if kubectl:
        try:
            output = _version_output([kubectl, "version", "--client", "-o", "json"])
            try:
                embedded = str(json.loads(output).get("kustomizeVersion") or "")
            except (ValueError, AttributeError):
                embedded = ""
            if not embedded:
                raise KustomizeUnavailable(f"{kubectl} does not report a built-in kustomize")
            return Kustomize(kubectl, _check_version(embedded, kubectl), embedded=True)
        except KustomizeUnavailable as error:
            problems.append(str(error))
    if not problems:
        raise KustomizeUnavailable(
            "neither kustomize nor kubectl is on PATH; install kustomize v5 or kubectl 1.27+"
        )
    raise KustomizeUnavailable("no usable kustomize: " + "; ".join(problems))


def _version_output(command: list[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="kustomize-version-") as home:
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=30,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home},
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise KustomizeUnavailable(f"{command[0]} cannot run: {error}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        raise KustomizeUnavailable(f"'{' '.join(command[1:])}' failed with {command[0]}: {detail}")
    return done.stdout


def _check_version(output: str, executable: str) -> str:
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", output)
    if match is None:
        # A development build without a release number; trust it.
        return output.strip() or "unknown"
    version = f"v{match.group(1)}.{match.group(2)}.{match.group(3)}"
    if int(match.group(1)) < MIN_KUSTOMIZE_MAJOR:
        raise KustomizeUnavailable(
            f"{executable} has kustomize {version}; v{MIN_KUSTOMIZE_MAJOR} or later is required"
        )
    return version


# -- building -----------------------------------------------------------------


async def build(
    root: Path,
    spec: KustomizationSpec,
    *,
    kustomize: Kustomize,
    sandbox: Sandbox | None = None,
    allow_remote_bases: bool = False,
    timeout: float = 120,
    max_output: int = DEFAULT_MAX_OUTPUT,
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
    try:
        directory = await asyncio.to_thread(_prepare, real_root, spec, allow_remote_bases, sandbox)
    except OSError as error:
        where = _relative(real_root, Path(os.path.realpath(error.filename or real_root)))
        raise BuildError(f"cannot read '{where}' in the artifact: {error.strerror}") from None
    if decrypt is not None:
        await decrypt(real_root, await asyncio.to_thread(decryptable_files, real_root, directory))
    output = await _run(
        kustomize,
        directory,
        roots=(given_root, real_root),
        sandbox=sandbox,
        allow_remote_bases=allow_remote_bases,
        timeout=timeout,
        max_output=max_output,
    )
    objects = await asyncio.to_thread(_parse_output, output)
    if spec.common_metadata is not None:
        set_common_metadata(objects, spec.common_metadata)
    return objects


Decrypt = Callable[[Path, list[Path]], Awaitable[object]]
"""Replaces encrypted files among the given ones (under the root) by their plaintext."""


@functools.cache
def default_sandbox() -> Sandbox:
    """The sandbox `auto` chooses on this kernel, looked up once."""
    return choose_sandbox("auto")


def set_common_metadata(objects: list[dict[str, Any]], common: CommonMetadata) -> None:
    """Set `commonMetadata` on each object's own metadata, overriding equal keys (as Flux)."""
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if common.labels:
            meta["labels"] = {**(meta.get("labels") or {}), **common.labels}
        if common.annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **common.annotations}


def _prepare(
    root: Path, spec: KustomizationSpec, allow_remote_bases: bool, sandbox: Sandbox
) -> Path:
    directory = _resolve_path(root, spec.path)
    kfile = kustomization_file(directory)
    if kfile is None:
        kfile = _generate(root, directory)
    _merge(root, directory, kfile, spec)
    _check_references(
        root,
        directory,
        allow_remote_bases=allow_remote_bases,
        refuse_plugins=sandbox is Sandbox.REFUSE_PLUGINS,
    )
    return directory


def _resolve_path(root: Path, path: str | None) -> Path:
    given = path or "./"
    # Flux joins spec.path onto the artifact root, so "/apps" means "<root>/apps".
    candidate = Path(os.path.realpath(root / given.lstrip("/")))
    if not candidate.is_relative_to(root):
        raise BuildError(f"path '{given}' is outside the artifact")
    if not candidate.exists():
        raise BuildError(f"path '{given}' not found in the artifact")
    if not candidate.is_dir():
        raise BuildError(f"path '{given}' is not a directory")
    return candidate


def kustomization_file(directory: Path) -> Path | None:
    """The kustomization file kustomize would read in `directory`, if any."""
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix() or "."
    except ValueError:
        return path.name


# -- generating a kustomization.yaml for plain manifests ----------------------


def _generate(root: Path, directory: Path) -> Path:
    """List every manifest below `directory` in a new kustomization.yaml.

    Flux's rules: files ending in .yaml or .yml, in lexical order, depth
    first; a subdirectory with its own kustomization file is listed as a
    directory and not entered. Sluice also leaves out YAML files in which no
    document has an apiVersion or kind (CI configs, Helm values), where Flux
    fails; a file that does not parse is listed, so kustomize reports the
    syntax error with its file and line.
    """
    resources = list(_scan(root, directory, directory))
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
    }
    kfile = directory / "kustomization.yaml"
    kfile.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return kfile


def _scan(root: Path, base: Path, current: Path) -> Iterator[str]:
    with os.scandir(current) as listing:
        entries = sorted(listing, key=lambda e: e.name)
    for entry in entries:
        path = Path(entry.path)
        if entry.is_dir(follow_symlinks=False):
            if kustomization_file(path) is not None:
                yield path.relative_to(base).as_posix()
            else:
                yield from _scan(root, base, path)
        elif entry.name.endswith((".yaml", ".yml")) and entry.is_file():
            if not Path(os.path.realpath(path)).is_relative_to(root):
                raise BuildError(f"'{_relative(root, path)}' points outside the artifact")
            if _has_manifests(path):
                yield path.relative_to(base).as_posix()


def _has_manifests(path: Path) -> bool:
    try:
        # Bytes, so that PyYAML honours a UTF-16 byte order mark as kustomize does.
        documents = load_yaml_all(path.read_bytes())
    except yaml.YAMLError:
        return True
    return any(
        isinstance(doc, dict) and ("apiVersion" in doc or "kind" in doc) for doc in documents
    )


# -- merging the spec into the kustomization file -----------------------------


def _read_kustomization(root: Path, kfile: Path) -> dict[str, Any]:
    name = _relative(root, kfile)
    if not Path(os.path.realpath(kfile)).is_relative_to(root):
        raise BuildError(f"'{name}' points outside the artifact")
    try:
        document = load_yaml(kfile.read_bytes())
    except yaml.YAMLError as error:
        raise BuildError(f"kustomize build failed: {name}: {yaml_problem(error)}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise BuildError(f"kustomize build failed: {name} is not a mapping")
    return document


def _entries(document: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BuildError(f"kustomize build failed: {where}: '{key}' must be a list")
    return list(value)


def _spec_patches(spec: KustomizationSpec) -> list[dict[str, Any]]:
    """`patches`, then v1beta1/v1beta2's `patchesStrategicMerge` and `patchesJson6902`,
    as kustomize `patches` entries (kustomize tells the two kinds apart by content)."""
    entries: list[dict[str, Any]] = []
    for patch in spec.patches or []:
        entry: dict[str, Any] = {"patch": patch.patch}
        if patch.target is not None:
            entry["target"] = patch.target.model_dump(by_alias=True, exclude_none=True)
        entries.append(entry)
    for document in spec.patches_strategic_merge or []:
        entries.append({"patch": yaml.safe_dump(document, sort_keys=False)})
    for json_patch in spec.patches_json6902 or []:
        operations = [op.model_dump(by_alias=True, exclude_unset=True) for op in json_patch.patch]
        entries.append(
            {
                "patch": yaml.safe_dump(operations, sort_keys=False),
                "target": json_patch.target.model_dump(by_alias=True, exclude_none=True),
            }
        )
    return entries


def _merge(root: Path, directory: Path, kfile: Path, spec: KustomizationSpec) -> None:
    """Apply the spec's kustomize fields to the kustomization file, as Flux's generator does."""
    document = _read_kustomization(root, kfile)
    where = _relative(root, kfile)
    changed = False
    if spec.target_namespace:
        document["namespace"] = spec.target_namespace
        changed = True
    if spec.name_prefix:
        document["namePrefix"] = spec.name_prefix
        changed = True
    if spec.name_suffix:
        document["nameSuffix"] = spec.name_suffix
        changed = True
    if spec.build_metadata:
        options = _entries(document, "buildMetadata", where)
        document["buildMetadata"] = options + [o for o in spec.build_metadata if o not in options]
        changed = True
    spec_patches = _spec_patches(spec)
    if spec_patches:
        document["patches"] = _entries(document, "patches", where) + spec_patches
        changed = True
    if spec.images:
        images = _entries(document, "images", where)
        for image in spec.images:
            entry = image.model_dump(by_alias=True, exclude_none=True)
            # Flux replaces the file's entry for the same image rather than adding a second.
            same = [
                i
                for i, e in enumerate(images)
                if isinstance(e, dict) and e.get("name") == image.name
            ]
            if same:
                images[same[0]] = entry
            else:
                images.append(entry)
        document["images"] = images
        changed = True
    if spec.components:
        components = _entries(document, "components", where)
        for component in spec.components:
            if not _is_remote(component, directory):
                target = _inside(root, directory, component, "spec.components")
                if not target.exists():
                    if spec.ignore_missing_components:
                        continue
                    raise BuildError(
                        f"component '{component}' not found in the artifact "
                        f"(relative to '{_relative(root, directory)}')"
                    )
            components.append(component)
        document["components"] = components
        changed = True
    if changed:
        kfile.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))


# -- keeping the build inside the artifact ------------------------------------

_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_GIT_SHORTHAND = re.compile(r"^(?:git@|git::|gh:)")
_REMOTE_QUERY = re.compile(r"[?&](?:ref|version|submodules|timeout)=")
_HOST_PREFIX = re.compile(r"^[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+(?::\d+)?/")


def _is_remote(entry: str, base: Path) -> bool:
    """Whether kustomize would fetch `entry` over the network (a URL or a git repository)."""
    if _SCHEME.match(entry) or _GIT_SHORTHAND.match(entry) or _REMOTE_QUERY.search(entry):
        return True
    # `github.com/org/repo/path` is a repository unless a local path of that name exists.
    return bool(_HOST_PREFIX.match(entry)) and not (base / entry).exists()


def _inside(root: Path, base: Path, entry: str, where: str) -> Path:
    if entry.startswith("file:"):
        raise BuildError(f"{where}: '{entry}': file URLs are not allowed")
    if os.path.isabs(entry):
        raise BuildError(f"{where}: '{entry}' is an absolute path outside the artifact")
    resolved = Path(os.path.realpath(base / entry))
    if not resolved.is_relative_to(root):
        raise BuildError(f"{where}: '{entry}' points outside the artifact")
    return resolved


_PLUGIN_FIELDS = ("generators", "transformers", "validators")
"""Fields whose entries are plugin configs (inline or by file) that kustomize runs."""
_DIRECTORY_FIELDS = ("resources", "bases", "components", *_PLUGIN_FIELDS)
_FILE_FIELDS = ("crds", "configurations")
_PATH_ITEM_FIELDS = ("patches", "patchesJson6902", "replacements")
_GENERATOR_FIELDS = ("configMapGenerator", "secretGenerator")


def _references(document: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every (field, path) a kustomization file makes kustomize read."""

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, list):
            # Multi-line strings are inline documents, not paths.
            yield from (v for v in value if isinstance(v, str) and "\n" not in v)

    for field in (*_DIRECTORY_FIELDS, *_FILE_FIELDS, "patchesStrategicMerge"):
        for entry in strings(document.get(field)):
            yield field, entry
    for field in _PATH_ITEM_FIELDS:
        for item in document.get(field) or []:
            if isinstance(item, dict) and isinstance(item.get("path"), str):
                yield field, item["path"]
    for field in _GENERATOR_FIELDS:
        for generator in document.get(field) or []:
            if not isinstance(generator, dict):
                continue
            for source in strings(generator.get("files")):
                # `key=path` names the data key after something other than the file.
                yield field, source.split("=", 1)[1] if "=" in source else source
            yield from ((field, env) for env in strings(generator.get("envs")))
            if isinstance(generator.get("env"), str):
                yield field, generator["env"]
    openapi = document.get("openapi")
    if isinstance(openapi, dict) and isinstance(openapi.get("path"), str):
        yield "openapi", openapi["path"]


def _check_references(
    root: Path, directory: Path, *, allow_remote_bases: bool, refuse_plugins: bool = False
) -> None:
    """Refuse references that leave the artifact, and remote ones unless allowed.

    Follows every kustomization reachable from `directory`, so a base or
    component several levels down is held to the same rules; kustomization
    files the build never reads are not judged. With `refuse_plugins`
    (builds not confined), any plugin config is refused: its fields are
    kustomize's to interpret, and only confinement keeps them in bounds.
    """
    pending = [directory]
    seen: set[Path] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        kfile = kustomization_file(current)
        if kfile is None:
            continue  # a directory without one: kustomize reports it
        document = _read_kustomization(root, kfile)
        name = _relative(root, kfile)
        if refuse_plugins:
            for field in _PLUGIN_FIELDS:
                if document.get(field):
                    raise BuildError(
                        f"{name} {field}: plugin configs are refused because builds "
                        f"cannot be confined here ({Sandbox.REFUSE_PLUGINS.describe()})"
                    )
        for field, entry in _references(document):
            where = f"{name} {field}"
            if not entry.startswith("file:") and _is_remote(entry, current):
                if not allow_remote_bases:
                    raise BuildError(
                        f"{where}: remote reference '{entry}' is not allowed; "
                        "only files inside the artifact can be built"
                    )
                continue
            target = _inside(root, current, entry, where)
            if field in _DIRECTORY_FIELDS and target.is_dir():
                pending.append(target)


_DECRYPTED_FIELDS = ("resources", "bases", *_GENERATOR_FIELDS)
"""Where Flux decrypts: Secret manifests among the resources, secretGenerator inputs
(configMapGenerator inputs too, as the same files may feed both)."""


def decryptable_files(root: Path, directory: Path) -> list[Path]:
    """Every local file that a resources or generator entry reachable from `directory` reads.

    Runs after the reference check, so every path is inside `root`.
    """
    files: list[Path] = []
    pending = [directory]
    seen: set[Path] = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        kfile = kustomization_file(current)
        if kfile is None:
            continue
        document = _read_kustomization(root, kfile)
        for field, entry in _references(document):
            if entry.startswith("file:") or _is_remote(entry, current):
                continue
            target = Path(os.path.realpath(current / entry))
            if not target.is_relative_to(root):
                continue
            if field in _DIRECTORY_FIELDS and target.is_dir():
                pending.append(target)
            elif field in _DECRYPTED_FIELDS and target.is_file():
                files.append(target)
    return files


# -- running kustomize --------------------------------------------------------


@contextlib.contextmanager
def _closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for as long as the context lasts."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))  # bound but never listening: connections are refused
        yield int(sock.getsockname()[1])


_PASSED_THROUGH = (
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "SSL_CERT_FILE", "SSL_CERT_DIR",
)  # fmt: skip


def _environment(home: Path, closed_port: int | None) -> dict[str, str]:
    """What kustomize runs with: nothing of the controller's own environment.

    A fresh HOME hides any git, ssh or kubectl configuration; with a closed
    port, HTTP(S) goes to a proxy that refuses and git may use no transport.
    """
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "KUBECONFIG": str(home / "kubeconfig"),
        "LANG": "C.UTF-8",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    if closed_port is None:
        env.update({k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ})
        return env
    proxy = f"http://127.0.0.1:{closed_port}"
    env.update(
        {
            "HTTP_PROXY": proxy,
            "HTTPS_PROXY": proxy,
            "http_proxy": proxy,
            "https_proxy": proxy,
            "ALL_PROXY": proxy,
            "NO_PROXY": "",
            "no_proxy": "",
            "GIT_ALLOW_PROTOCOL": "none",
            "GIT_SSH_COMMAND": "false",
        }
    )
    return env


_REMOTE_SYSTEM = tuple(Path(p) for p in ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc"))
"""What git needs to fetch a remote base: programs, libraries, CA bundles, resolver config."""
_MAX_STDERR = 1 << 20


def _confinement(
    kustomize: Kustomize, root: Path, home: Path, *, allow_remote_bases: bool
) -> confining.Confinement:
    """Reads of the artifact and kustomize itself, nothing else; with remote
    bases, also the system's programs, a private home to clone into, and TCP.

    The controller's own files (its service-account token, its kubeconfig,
    other tenants' work directories) are in none of these.
    """
    executable = Path(os.path.realpath(kustomize.executable))
    if not allow_remote_bases:
        return confining.Confinement(read=(root,), execute=(executable,))
    return confining.Confinement(
        read=(root,),
        execute=(executable, *_REMOTE_SYSTEM),
        write=(home, Path("/dev/null")),
        network=True,
    )


async def _run(
    kustomize: Kustomize,
    directory: Path,
    *,
    roots: tuple[Path, ...],
    sandbox: Sandbox,
    allow_remote_bases: bool,
    timeout: float,
    max_output: int,
) -> bytes:
    with (
        tempfile.TemporaryDirectory(prefix="kustomize-home-") as home,
        _closed_port() as port,
        contextlib.ExitStack() as stack,
    ):
        preexec = None
        if sandbox is Sandbox.LANDLOCK:
            confinement = _confinement(
                kustomize, roots[-1], Path(home), allow_remote_bases=allow_remote_bases
            )
            try:
                preexec = stack.enter_context(confining.confined(confinement))
            except confining.ConfinementError as error:
                raise BuildError(f"cannot confine the build: {error}") from None
        process = await asyncio.create_subprocess_exec(
            *kustomize.command(directory),
            cwd=directory,
            env=_environment(Path(home), None if allow_remote_bases else port),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so git children die with it
            preexec_fn=preexec,
        )
        assert process.stdout is not None and process.stderr is not None
        errors = asyncio.ensure_future(_read_capped(process.stderr, _MAX_STDERR, drain=True))
        try:
            async with asyncio.timeout(timeout):
                stdout = await _read_capped(process.stdout, max_output, drain=False)
                if stdout is None:
                    raise BuildError(
                        f"kustomize output exceeds {_size(max_output)} and was stopped; "
                        "split the Kustomization or raise --build-max-output"
                    )
                stderr = await errors
                await process.wait()
        except TimeoutError:
            raise BuildError(f"kustomize build timed out after {timeout:g}s") from None
        finally:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            errors.cancel()
    if process.returncode != 0:
        message = _failure_message((stderr or b"").decode(errors="replace"), roots, directory)
        if sandbox is Sandbox.LANDLOCK and "permission denied" in message:
            message += f" ({sandbox.describe()})"
        raise BuildError(message)
    return stdout


async def _read_capped(stream: asyncio.StreamReader, limit: int, *, drain: bool) -> bytes | None:
    """All of `stream` up to `limit` bytes.

    Past the limit: with `drain`, the rest is read and dropped (so the writer
    never blocks on a full pipe) and the first `limit` bytes are returned;
    without, None is returned at once and the caller stops the writer.
    """
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.read(1 << 16):
        if size + len(chunk) > limit:
            if not drain:
                return None
            chunk = chunk[: max(limit - size, 0)]
        size += len(chunk)
        if chunk:
            chunks.append(chunk)
    return b"".join(chunks)


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count} bytes"


_KLOG_QUOTED = re.compile(r'"command failed" err="((?:[^"\\]|\\.)*)"')
_KLOG_BLOCK = re.compile(r'"command failed" err=<\n(.*?)\n\s*>', re.S)
_MALFORMED = re.compile(r"MalformedYAMLError: (yaml: .*?) in File: (\S+)")
_RECURSED = re.compile(r"recursed accumulation of path '([^']+)'")


def _failure_message(stderr: str, roots: tuple[Path, ...], directory: Path) -> str:
    """kustomize's error without kubectl's log framing or the controller's temp paths."""
    message = _kustomize_error(stderr)
    malformed = _MALFORMED.search(message)
    if malformed:
        # kustomize names the file relative to the kustomization that listed it;
        # the chain of bases before it is noise next to the file and line.
        bases = _RECURSED.findall(message, 0, malformed.start())
        listed = (Path(bases[-1]) if bases else directory) / malformed.group(2)
        message = f"{listed}: {malformed.group(1)}"
    for root in sorted({str(r) for r in roots}, key=len, reverse=True):
        message = message.replace(root + "/", "").replace(root, ".")
    message = message.strip()
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "…"
    return f"kustomize build failed: {message}"


def _kustomize_error(stderr: str) -> str:
    quoted = _KLOG_QUOTED.search(stderr)
    if quoted:
        try:
            return str(json.loads(f'"{quoted.group(1)}"'))
        except ValueError:
            return quoted.group(1)
    block = _KLOG_BLOCK.search(stderr)
    if block:
        return "\n".join(line.removeprefix("\t") for line in block.group(1).splitlines())
    lines = [line for line in stderr.splitlines() if not line.startswith("# Warning")]
    text = "\n".join(lines).strip()
    return text.removeprefix("Error: ").removeprefix("error: ")


def _parse_output(output: bytes) -> list[dict[str, Any]]:
    try:
        documents = load_yaml_all(output)
    except yaml.YAMLError as error:
        raise BuildError(f"kustomize output is not valid YAML: {yaml_problem(error)}") from None
    objects: list[dict[str, Any]] = []
    for document in documents:
        if document is None:
            continue
        meta = document.get("metadata") if isinstance(document, dict) else None
        if (
            not isinstance(document, dict)
            or not document.get("apiVersion")
            or not document.get("kind")
            or not isinstance(meta, dict)
            or not meta.get("name")
        ):
            snippet = json.dumps(document, default=str)[:200]
            raise BuildError(
                f"failed to decode Kubernetes apiVersion, kind and name from: {snippet}"
            )
        objects.append(document)
    return objects
