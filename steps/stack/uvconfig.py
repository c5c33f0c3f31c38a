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
(steps.stack.index.index_args), never PyTorch's index or PyPI beside it.
"""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from steps.errors import InputError
from steps.inputs import parse_toml
from steps.safefs import read_bounded

CONFIG_LIMIT = 64 * 1024
CERT_VARIABLES = ("UV_SYSTEM_CERTS", "UV_NATIVE_TLS")  # the operator's own choice wins
UV_INDEX_VARIABLES = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL")
UV_SYSTEM_CONFIGS = ("/etc/xdg/uv/uv.toml", "/etc/uv/uv.toml")
PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf")


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
    """The indexes of the system's uv.toml, the first of UV_SYSTEM_CONFIGS that exists, as uv
    takes it: `[[index]]` entries (the one with `default = true` replaces PyPI; `explicit`
    ones serve only packages pinned to them, which a pip-style install never does) and the
    older `index-url` / `extra-index-url`, at the top or under `[pip]`. An unreadable or
    broken file gives nothing (uv itself would refuse to run with it)."""
    for name in UV_SYSTEM_CONFIGS:
        path = root / name.lstrip("/")
        try:
            text = read_bounded(path, CONFIG_LIMIT).decode("utf-8", "replace")
        except FileNotFoundError:
            continue
        except OSError:
            return Indexes()
        try:
            data = parse_toml(text, str(path))
        except InputError:
            return Indexes()
        return _indexes_of(data)
    return Indexes()


def _indexes_of(data: dict[str, Any]) -> Indexes:
    default: str | None = None
    extra: list[str] = []
    entries = data.get("index")
    for entry in entries if isinstance(entries, list) else []:
        url = entry.get("url") if isinstance(entry, dict) else None
        if not isinstance(url, str) or not _url(url) or entry.get("explicit") is True:
            continue
        if entry.get("default") is True and default is None:
            default = url.strip()
        else:
            extra.append(url.strip())
    pip = data.get("pip")
    for table in (data, pip if isinstance(pip, dict) else {}):
        url = table.get("index-url")
        if default is None and isinstance(url, str) and _url(url):
            default = url.strip()
        more = table.get("extra-index-url")
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


def _url(value: str) -> bool:
    return value.strip().startswith(("https://", "http://", "file://")) and not any(
        c in value.strip() for c in "\0\r\n"
    )


def _pip_config(root: Path, key: str) -> str | None:
    """`key` from the [global] (or [install]) section of the first system pip.conf that has it."""
    for name in PIP_CONFIGS:
        try:
            text = read_bounded(root / name.lstrip("/"), CONFIG_LIMIT).decode("utf-8", "replace")
        except OSError:
            continue
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(text, source=name)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_option(section, key):
                return parser.get(section, key)
    return None
