"""The environment every `uv` command gets: the system's certificates and the operator's indexes.

uv trusts its own bundled Mozilla roots by default, so behind a TLS-inspecting proxy (common in
companies) it fails with `invalid peer certificate: UnknownIssuer` where apt and curl work.
`UV_SYSTEM_CERTS=true` is uv's `--system-certs` (uv 0.13; https://docs.astral.sh/uv/concepts/
authentication/certificates/), set as a variable so that every uv subcommand gets it.

Index configuration: uv reads its own (UV_* variables, /etc/uv/uv.toml, /etc/xdg/uv/uv.toml)
by itself, and pip reads PIP_* and /etc/pip.conf. What uv does not read is pip's: on a server
whose operator set a PyPI mirror for pip only, uv would go to pypi.org. So when no uv index is
configured, pip's index-url / extra-index-url become UV_DEFAULT_INDEX / UV_INDEX.
`configured_index` says which default index that is: the stack's resolution then uses it alone
(steps.stack.index.index_args), never PyTorch's index or PyPI beside it.
"""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from pathlib import Path

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
    if any(environ.get(k) for k in UV_INDEX_VARIABLES) or any(
        (root / p.lstrip("/")).exists() for p in UV_SYSTEM_CONFIGS
    ):
        return env  # uv's own configuration: it reads it itself
    index = environ.get("PIP_INDEX_URL") or _pip_config(root, "index-url")
    extra = environ.get("PIP_EXTRA_INDEX_URL") or _pip_config(root, "extra-index-url")
    if index and _url(index):
        env["UV_DEFAULT_INDEX"] = index.strip()
    if extra and all(_url(u) for u in extra.split()):
        env["UV_INDEX"] = " ".join(extra.split())
    return env


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
