"""Confining a child process with Landlock: what it may read, execute and connect to.

A tenant's kustomization is data that a real tool (kustomize) interprets,
and that tool can be talked into reading any file the controller can read
(builtin generator configs load `files:` from anywhere) or fetching any URL
the controller can reach. Checking the input for every such field is a race
against the tool's feature list; confining the process is not. Landlock is
the kernel's unprivileged sandbox: a process restricts itself (and every
child it execs) to a set of file hierarchies and TCP ports, and the
restriction cannot be undone. Needing no privilege, it works in a
`restricted` pod.

The ruleset is built in the parent, where a mistake can be reported, and
the child only calls `prctl(PR_SET_NO_NEW_PRIVS)` and
`landlock_restrict_self` between fork and exec (two system calls through
ctypes objects made in the parent, so the child neither imports nor
allocates anything that a parent thread could hold a lock on).

Full confinement needs Landlock ABI 4 (Linux 6.7) or later, the first with
TCP rules: with file rules alone a build could still fetch
`http://127.0.0.1:<port>/` from a loopback service. Older kernels (ABI 1-3,
Linux 5.13-6.6) still confine files, and callers that can keep the network
out another way (by refusing whatever could open a connection) use that;
where `landlock_abi()` is 0, callers fall back to refusing what they would
otherwise confine.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# System call numbers are the same on every architecture Linux added them to
# after the 2019 unification (x86_64, arm64, riscv64, ...).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

MIN_ABI = 4
"""The first ABI that confines TCP as well as files."""

# Filesystem rights, with the ABI that introduced each.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
_FS_ABI1 = (1 << 13) - 1  # execute .. make_sym
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1

_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
"""The rights the kernel accepts on a rule for a single file (the rest concern directories)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class ConfinementError(Exception):
    """The kernel refused to build the sandbox; the message says why."""


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none (or it is disabled)."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION
    )
    return max(int(version), 0)


def _fs_rights(abi: int) -> int:
    rights = _FS_ABI1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


@dataclass(frozen=True, slots=True)
class Confinement:
    """What a confined process may do; everything else is denied.

    `read` and `execute` name files or directories (a directory covers
    everything beneath it). With `network` False no TCP connection or bind
    is possible; UDP is not covered by Landlock, so a name lookup may still
    leave the host, carrying nothing the process could read.
    """

    read: Sequence[Path] = ()
    execute: Sequence[Path] = ()
    write: Sequence[Path] = ()
    network: bool = False


class Ruleset:
    """A built Landlock ruleset; `preexec` applies it in a child before exec."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        # Made here so the child only calls into ready ctypes objects.
        self._restrict_args = (
            ctypes.c_long(_SYS_RESTRICT_SELF),
            ctypes.c_int(fd),
            ctypes.c_uint32(0),
        )
        self._prctl_args = (
            ctypes.c_int(_PR_SET_NO_NEW_PRIVS),
            ctypes.c_ulong(1),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )

    def preexec(self) -> None:
        """Restrict the calling process; meant as `preexec_fn` (runs in the child)."""
        if _prctl(*self._prctl_args) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if _syscall(*self._restrict_args) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def build_ruleset(confinement: Confinement, *, abi: int | None = None) -> Ruleset:
    """A ruleset allowing exactly what `confinement` says. Raises ConfinementError."""
    abi = landlock_abi() if abi is None else abi
    if abi < 1 or (abi < MIN_ABI and not confinement.network):
        needed = 1 if confinement.network else MIN_ABI
        raise ConfinementError(
            f"the kernel's Landlock ABI is {abi}; this confinement needs {needed} or later"
        )
    handled_fs = _fs_rights(abi)
    attr = _RulesetAttr(
        handled_access_fs=handled_fs,
        handled_access_net=_NET_BIND_TCP | _NET_CONNECT_TCP if not confinement.network else 0,
        scoped=_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL if abi >= 6 else 0,
    )
    # The kernel accepts the attribute's size as of the ABI it knows: the
    # filesystem field alone before ABI 4, then the network field, then scopes.
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    fd = int(_syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), size, 0))
    if fd < 0:
        raise ConfinementError(f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        read = FS_READ_FILE | FS_READ_DIR
        write = handled_fs & ~FS_EXECUTE & ~_FS_REFER
        for paths, rights in (
            (confinement.read, read),
            (confinement.execute, read | FS_EXECUTE),
            (confinement.write, read | write),
        ):
            for path in paths:
                _allow(fd, Path(path), rights & handled_fs)
    except BaseException:
        os.close(fd)
        raise
    return Ruleset(fd)


def _allow(ruleset_fd: int, path: Path, rights: int) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # nothing there to allow; denial is the default anyway
    except OSError as error:
        raise ConfinementError(f"cannot open '{path}' for the sandbox: {error.strerror}") from None
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=target)
        done = _syscall(
            ctypes.c_long(_SYS_ADD_RULE),
            ctypes.c_int(ruleset_fd),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(rule),
            ctypes.c_uint32(0),
        )
        if done != 0:
            code = ctypes.get_errno()
            raise ConfinementError(
                f"landlock_add_rule for '{path}': {os.strerror(code) or errno.errorcode[code]}"
            )
    finally:
        os.close(target)


@contextlib.contextmanager
def confined(confinement: Confinement) -> Iterator[Callable[[], None]]:
    """A `preexec_fn` confining a child to `confinement`, valid inside the block."""
    ruleset = build_ruleset(confinement)
    try:
        yield ruleset.preexec
    finally:
        ruleset.close()
