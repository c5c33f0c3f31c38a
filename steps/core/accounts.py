"""Accounts of the machine being set up: whose venv, who compiles.

On the machine itself (root `/`) they come from NSS (`pwd`), so LDAP, SSSD and other
directory users are found as `getent passwd` finds them. Under another root (a test machine,
a chroot image) this process's NSS speaks for the host, not for that tree: there the tree's
own /etc/passwd is read.
"""

from __future__ import annotations

import pwd
from dataclasses import dataclass

from steps.core.rootfs import RootFS


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str


def lookup_account(fs: RootFS, name: str) -> Account | None:
    """The account called `name` on the target machine, or None."""
    if fs.is_host:
        try:
            entry = pwd.getpwnam(name)
        except (KeyError, ValueError):  # ValueError: a NUL in the name
            return None
        return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    return next((a for a in _passwd(fs) if a.name == name), None)


def account_by_uid(fs: RootFS, uid: int) -> Account | None:
    if fs.is_host:
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return None
        return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    return next((a for a in _passwd(fs) if a.uid == uid), None)


def _passwd(fs: RootFS) -> list[Account]:
    out = []
    for line in (fs.read_text("/etc/passwd") or "").splitlines():
        parts = line.split(":")
        if len(parts) >= 7 and parts[2].isdecimal() and parts[3].isdecimal():
            out.append(Account(parts[0], int(parts[2]), int(parts[3]), parts[5]))
    return out
