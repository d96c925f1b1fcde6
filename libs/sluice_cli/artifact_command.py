"""`sluice push|pull|tag artifact`, `sluice list artifacts`, `sluice diff artifact`.

The CI side of OCI delivery, with the flags of Flux's commands of the same
names, so a pipeline written for `flux` runs with `sluice` and either tool
reads what the other pushed. Every failure is one line on stderr and a
non-zero exit: 1 for `diff` finding a difference (so CI can skip an
unchanged push) as for an error, as `flux diff artifact` does; the message
tells which.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sluice_cli import artifacts
from sluice_cli.artifacts import ArtifactCommandError, Connection
from sluice_runtime.artifacts.fetching import ArtifactError
from sluice_runtime.oci.artifacts import REPRODUCIBLE_CREATED
from sluice_runtime.oci.registry import Reference, RegistryError

DIFFERENT = 1
FAILED = 1


def register(commands: Any) -> None:
    verbs = {
        "push": ("artifact", "push a directory or file as an OCI artifact", _push_flags, _push),
        "pull": ("artifact", "pull an OCI artifact and unpack it", _pull_flags, _pull),
        "tag": ("artifact", "tag an OCI artifact with another tag", _tag_flags, _tag),
        "list": ("artifacts", "list an OCI repository's artifacts", _list_flags, _list),
    }
    for verb, (noun, help_text, add_flags, run) in verbs.items():
        parser: argparse.ArgumentParser = commands.add_parser(verb, help=help_text)
        kinds = parser.add_subparsers(dest="noun", required=True, metavar="KIND")
        _add(kinds, verb, noun, help_text, add_flags, run)


def add_diff(kinds: Any) -> None:
    """`diff artifact`, a sub-command of the `diff` verb it shares with `diff kustomization`."""
    _add(
        kinds, "diff", "artifact", "compare a directory with a pushed artifact", _diff_flags, _diff
    )


def _add(kinds: Any, verb: str, noun: str, help_text: str, add_flags: Any, run: Any) -> None:
    command = kinds.add_parser(noun, help=help_text)
    command.add_argument("url", help="oci://<host>/<repository>[:tag|@digest]")
    add_flags(command)
    _connection_flags(command)
    command.set_defaults(run=_guarded(f"{verb} {noun}", run))


def _connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--creds",
        help="registry credentials as <username>[:<password>] "
        "(default: the Docker config file's for the registry)",
    )
    parser.add_argument(
        "--ca-file", help="PEM file of the CA that signed the registry's certificate"
    )
    parser.add_argument(
        "--insecure-registry", action="store_true", help="talk to the registry over plain HTTP"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per registry request (default 60)"
    )


def _format_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", dest="output_format", choices=("text", "json"), default="text"
    )


def _push_flags(parser: argparse.ArgumentParser) -> None:
    _format_flag(parser)
    parser.add_argument("--path", required=True, help="directory or file to push")
    parser.add_argument("--source", default="", help="where the content comes from, e.g. a Git URL")
    parser.add_argument(
        "--revision", default="", help="the source's revision, e.g. main@sha1:<hex>"
    )
    parser.add_argument(
        "-a", "--annotations", action="append", default=[], help="extra annotation key=value"
    )
    _ignore_flag(parser)
    parser.add_argument(
        "--reproducible",
        action="store_true",
        help=f"set the created annotation to {REPRODUCIBLE_CREATED}, "
        "so the same tree gives the same digest",
    )


def _ignore_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ignore-paths",
        action="append",
        help="paths to leave out, in .sourceignore (gitignore) syntax; repeat or comma-separate "
        f"(default: {','.join(artifacts.DEFAULT_IGNORE_PATHS)}, as flux's)",
    )


def _pull_flags(parser: argparse.ArgumentParser) -> None:
    # `--output` is the directory here, as in `flux pull artifact`.
    parser.add_argument(
        "-o", "--output", dest="dir", required=True, help="empty or absent directory to unpack into"
    )
    parser.set_defaults(output_format="text")


def _tag_flags(parser: argparse.ArgumentParser) -> None:
    _format_flag(parser)
    parser.add_argument("--tag", dest="tags", action="append", required=True, help="the new tag")


def _list_flags(parser: argparse.ArgumentParser) -> None:
    _format_flag(parser)
    parser.add_argument("--filter-regex", help="only tags matching this regular expression")
    parser.add_argument("--filter-semver", help="only tags in this semver range, e.g. '>=1.0.0'")


def _diff_flags(parser: argparse.ArgumentParser) -> None:
    _format_flag(parser)
    parser.add_argument("--path", required=True, help="directory or file to compare")
    _ignore_flag(parser)


def _guarded(command: str, run: Any) -> Any:
    """Run `run`; a failure is one line naming the command, and exit 1."""

    def guarded(args: argparse.Namespace) -> int:
        try:
            code: int = run(args, Reference.parse(args.url), _connection(args))
            return code
        except (ArtifactCommandError, RegistryError, ArtifactError, ValueError, OSError) as error:
            text = " ".join(str(error).split()) or type(error).__name__
            print(f"sluice {command}: {text}", file=sys.stderr)
            return FAILED

    return guarded


def _connection(args: argparse.Namespace) -> Connection:
    return Connection(
        insecure=args.insecure_registry,
        ca_file=args.ca_file,
        creds=args.creds,
        timeout=args.timeout,
    )


def _annotations(values: list[str]) -> dict[str, str]:
    found = {}
    for value in values:
        key, equals, text = value.partition("=")
        if not equals or not key:
            raise ArtifactCommandError(f"annotation '{value}' is not key=value")
        found[key] = text
    return found


def _push(args: argparse.Namespace, ref: Reference, conn: Connection) -> int:
    pushed = artifacts.push(
        ref,
        Path(args.path),
        source=args.source,
        revision=args.revision,
        annotations=_annotations(args.annotations),
        ignore_paths=artifacts.ignore_paths(args.ignore_paths),
        reproducible=args.reproducible,
        conn=conn,
    )
    if args.output_format == "json":
        # Flux's keys and values, so a script written for `flux push artifact
        # -o json` (`.repository + "@" + .digest` for cosign) reads ours.
        repository = f"{ref.url.host}/{ref.url.repository}"
        printed = {"url": f"oci://{pushed.url}", "repository": repository, "tag": ref.tag}
        print(artifacts.as_json({**printed, "digest": pushed.digest}))
    else:
        print(pushed.url)
    return 0


def _pull(args: argparse.Namespace, ref: Reference, conn: Connection) -> int:
    manifest = artifacts.pull(ref, Path(args.dir), conn=conn)
    notes = manifest.body.get("annotations") or {}
    if args.output_format == "json":
        print(artifacts.as_json({"digest": manifest.digest, "annotations": notes, "dir": args.dir}))
    else:
        print(f"{ref.url.host}/{ref.url.repository}@{manifest.digest} -> {args.dir}")
    return 0


def _tag(args: argparse.Namespace, ref: Reference, conn: Connection) -> int:
    tagged = [artifacts.tag(ref, new, conn=conn) for new in args.tags]
    if args.output_format == "json":
        print(artifacts.as_json([{"tag": t.reference.tag, "digest": t.digest} for t in tagged]))
    else:
        for t in tagged:
            print(f"{t.reference.name} -> {t.digest}")
    return 0


def _list(args: argparse.Namespace, ref: Reference, conn: Connection) -> int:
    listed = artifacts.list_artifacts(
        ref, regex=args.filter_regex, semver=args.filter_semver, conn=conn
    )
    if args.output_format == "json":
        print(artifacts.as_json([entry.as_json() for entry in listed]))
        return 0
    rows = [["ARTIFACT", "DIGEST", "SOURCE", "REVISION"]] + [
        [f"{ref.name}:{e.tag}", e.digest, e.source, e.revision] for e in listed
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _diff(args: argparse.Namespace, ref: Reference, conn: Connection) -> int:
    changed = artifacts.differs(
        ref, Path(args.path), ignore_paths=artifacts.ignore_paths(args.ignore_paths), conn=conn
    )
    if args.output_format == "json":
        print(artifacts.as_json({"changed": changed}))
    elif changed:
        print(f"'{args.path}' differs from {ref.name}", file=sys.stderr)
    else:
        print(f"no changes between '{args.path}' and {ref.name}")
    return DIFFERENT if changed else 0
