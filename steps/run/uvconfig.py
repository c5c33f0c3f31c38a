"""The environment every `uv` command gets: the system's certificates and the operator's indexes.

uv trusts its own bundled Mozilla roots by default, so behind a TLS-inspecting proxy (common in
companies) it fails with `invalid peer certificate: UnknownIssuer` where apt and curl work.
`UV_SYSTEM_CERTS=true` is uv's `--system-certs` (uv 0.13; https://docs.astral.sh/uv/concepts/
authentication/certificates/), set as a variable so that every uv subcommand gets it.

Index configuration: uv reads its UV_* variables by itself, but mlsetup runs every uv command
with `--no-config` (a user's or a project's uv.toml is not root's to follow), which also keeps
uv from the system's own file, /etc/xdg/uv/uv.toml or else /etc/uv/uv.toml (uv takes the first
that exists: https://docs.astral.sh/uv/concepts/configuration-files/). So mlsetup reads that
file's indexes and gives them to uv as UV_DEFAULT_INDEX / UV_INDEX; without it a mirror set
there would silently become pypi.org. pip's settings (PIP_*, /etc/pip.conf) uv never reads: on a
server whose operator set a PyPI mirror for pip only, uv would go to pypi.org too. So when uv
has no index configured, pip's index-url / extra-index-url become UV_DEFAULT_INDEX / UV_INDEX.
`configured_index` says which default index that is: the stack's resolution then uses it alone
(steps.run.index.index_args), never PyTorch's index or PyPI beside it.

Those files are what root resolves from, so they are read as root reads what it trusts
(steps.core.safefs): no symlink, a regular file of root's (or of the account running mlsetup)
writable by no other account, in directories that are so too, at most CONFIG_LIMIT bytes of
UTF-8 in their format, each index a URL. One that exists but fails any of that is exit 2
(ConfigRefused, naming it), never a silent fall back to PyPI, the dependency confusion a
mirror exists to prevent.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.core.errors import InputError, Refused, show_value
from steps.core.inputfiles import parse_toml
from steps.core.safefs import Untrusted, open_trusted_dir, open_trusted_file, read_fd

CONFIG_LIMIT = 64 * 1024
CERT_VARIABLES = ("UV_SYSTEM_CERTS", "UV_NATIVE_TLS")  # the operator's own choice wins
UV_INDEX_VARIABLES = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL")
# uv's system files: uv.toml in each of XDG_CONFIG_DIRS (default /etc/xdg), then /etc/uv/uv.toml
# (https://docs.astral.sh/uv/concepts/configuration-files/); pip's: /etc/pip.conf, then
# pip.conf in each of XDG_CONFIG_DIRS (https://pip.pypa.io/en/stable/topics/configuration/).
XDG_DEFAULT = "/etc/xdg"


class ConfigRefused(Refused):
    """A system index setting file that exists but cannot be used (exit 2, kind settings)."""

    def __init__(self, path: Path, why: str, fix: str) -> None:
        super().__init__(
            f"{path}: {why}; without it uv would resolve from PyPI, not the index it sets",
            "The system's uv or pip index settings cannot be used as they are, and mlsetup "
            "will not resolve from PyPI in their place.",
            fix,
            kind="settings",
        )


def _xdg_dirs(environ: Mapping[str, str]) -> list[str]:
    """XDG_CONFIG_DIRS' absolute entries (a relative one is ignored, as the spec says)."""
    given = environ.get("XDG_CONFIG_DIRS") or XDG_DEFAULT
    return [d for d in given.split(":") if d.startswith("/")] or [XDG_DEFAULT]


def uv_system_configs(environ: Mapping[str, str] = os.environ) -> list[str]:
    return [f"{d.rstrip('/')}/uv/uv.toml" for d in _xdg_dirs(environ)] + ["/etc/uv/uv.toml"]


def pip_configs(environ: Mapping[str, str] = os.environ) -> list[str]:
    return ["/etc/pip.conf"] + [f"{d.rstrip('/')}/pip/pip.conf" for d in _xdg_dirs(environ)]


def read_system_config(path: Path) -> str | None:
    """The text of the system setting file `path` (None: there is none), read as root reads
    what it trusts; ConfigRefused naming it when it exists but cannot be used."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    owners = {0, os.geteuid()}
    fix = f"sudo rm {path}, or make it a small root-owned file: sudo chown root {path}"
    try:
        dir_fd = open_trusted_dir(path.parent, owners)
        try:
            fd = open_trusted_file(path.name, dir_fd, owners, path)
        finally:
            os.close(dir_fd)
        try:
            data = read_fd(fd, CONFIG_LIMIT, path)
        finally:
            os.close(fd)
    except Untrusted as exc:
        raise ConfigRefused(Path(exc.filename), exc.strerror or "cannot be used", exc.fix) from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigRefused(path, why.removeprefix(f"{path}: "), fix) from None
    if b"\0" in data:
        raise ConfigRefused(path, "is binary (holds NUL bytes), not a setting file", fix)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigRefused(path, f"is not UTF-8 text ({exc.reason})", fix) from None


def uv_environment(environ: Mapping[str, str], root: Path = Path("/")) -> dict[str, str]:
    """Variables to add to a uv command's environment `environ` (nothing it already has).

    `root`: where the machine's /etc is (tests use a temporary root)."""
    env: dict[str, str] = {}
    if not any(k in environ for k in CERT_VARIABLES):
        env["UV_SYSTEM_CERTS"] = "true"
    if any(environ.get(k) for k in UV_INDEX_VARIABLES):
        return env  # uv's own variables: it reads them itself
    system = _uv_system_indexes(root)
    if system.default or system.extra:
        if system.default:
            env["UV_DEFAULT_INDEX"] = system.default
        if system.extra:
            env["UV_INDEX"] = " ".join(system.extra)
        return env
    index = environ.get("PIP_INDEX_URL") or _pip_config(root, "index-url")
    extra = environ.get("PIP_EXTRA_INDEX_URL") or _pip_config(root, "extra-index-url")
    if index and _url(index):
        env["UV_DEFAULT_INDEX"] = index.strip()
    if extra and all(_url(u) for u in extra.split()):
        env["UV_INDEX"] = " ".join(extra.split())
    return env


@dataclass(frozen=True)
class Indexes:
    default: str | None = None  # replaces PyPI
    extra: tuple[str, ...] = ()  # searched before the default, as uv's `index` entries are


def _uv_system_indexes(root: Path) -> Indexes:
    """The indexes of the system's uv.toml, the first of `uv_system_configs` that exists, as
    uv takes it: `[[index]]` entries (the one with `default = true` replaces PyPI; `explicit`
    ones serve only packages pinned to them, which a pip-style install never does) and the
    older `index-url` / `extra-index-url`, at the top or under `[pip]`. Every one that exists
    must be usable (ConfigRefused), the first one counts."""
    found: Indexes | None = None
    for name in uv_system_configs():
        path = root / name.lstrip("/")
        text = read_system_config(path)
        if text is None:
            continue
        try:
            data = parse_toml(text, str(path))
        except InputError as exc:
            why = str(exc).removeprefix(f"{path}: ")
            raise ConfigRefused(path, f"is {why}", f"sudoedit {path}") from None
        indexes = _indexes_of(data, path)
        found = found or indexes
    return found or Indexes()


def _indexes_of(data: dict[str, Any], path: Path) -> Indexes:
    default: str | None = None
    extra: list[str] = []
    entries = data.get("index")
    for n, entry in enumerate(entries if isinstance(entries, list) else []):
        url = entry.get("url") if isinstance(entry, dict) else None
        _check_url(url, path, f"index[{n}].url")
        if not isinstance(url, str) or not _url(url) or entry.get("explicit") is True:
            continue
        if entry.get("default") is True and default is None:
            default = url.strip()
        else:
            extra.append(url.strip())
    pip = data.get("pip")
    for prefix, table in (("", data), ("pip.", pip if isinstance(pip, dict) else {})):
        url = table.get("index-url")
        if url is not None:
            _check_url(url, path, f"{prefix}index-url")
        if default is None and isinstance(url, str) and _url(url):
            default = url.strip()
        more = table.get("extra-index-url")
        for n, u in enumerate(more if isinstance(more, list) else []):
            _check_url(u, path, f"{prefix}extra-index-url[{n}]")
        if isinstance(more, list):
            extra += [u.strip() for u in more if isinstance(u, str) and _url(u)]
    return Indexes(default, tuple(dict.fromkeys(extra)))


def configured_index(environ: Mapping[str, str], root: Path = Path("/")) -> str | None:
    """The default index the operator configured for uv (UV_DEFAULT_INDEX, its older name
    UV_INDEX_URL) or for pip (PIP_INDEX_URL, pip.conf's index-url), as uv gets it from
    `uv_environment`; None: uv's own default, PyPI."""
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if value := environ.get(name, "").strip():
            return value
    return uv_environment(environ, root).get("UV_DEFAULT_INDEX")


def _check_url(value: object, path: Path, key: str) -> None:
    """ConfigRefused naming `key` of `path` unless `value` is an index URL."""
    if not (isinstance(value, str) and _url(value)):
        raise ConfigRefused(
            path,
            f"{key} = {show_value(value)}: allowed: an https://, http:// or file:// URL",
            f"sudoedit {path}",
        )


def _url(value: str) -> bool:
    return value.strip().startswith(("https://", "http://", "file://")) and not any(
        c in value.strip() for c in "\0\r\n"
    )


def _pip_config(root: Path, key: str) -> str | None:
    """`key` from the [global] (or [install]) section of the first system pip.conf that has it;
    every one that exists must be usable (ConfigRefused)."""
    found: str | None = None
    for name in pip_configs():
        path = root / name.lstrip("/")
        text = read_system_config(path)
        if text is None:
            continue
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text, source=str(path))
        except configparser.Error as exc:
            why = f"is not a pip configuration file: {str(exc).splitlines()[0]}"
            raise ConfigRefused(path, why, f"sudoedit {path}") from None
        for section in ("global", "install"):
            if found is None and parser.has_option(section, key):
                found = parser.get(section, key)
                urls = found.split() or [found]
                for url in urls:
                    _check_url(url, path, f"[{section}] {key}")
    return found
