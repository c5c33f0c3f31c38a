"""uv's index options for the stack, and the mirror's credentials kept off command lines.

Which index uv is given: the one in `torch.index_url`, the default one the operator configured
for uv or pip (`configured`, read by steps.run.uvconfig), or PyPI with PyTorch's own index for
the torch family; never one beside another the operator did not ask for.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from steps.core.machineroot import machine_root
from steps.formats.answers import Answers
from steps.known.knowledge import knowledge
from steps.run.uvconfig import configured_index

# uv takes a named index's credentials from UV_INDEX_<NAME>_USERNAME/_PASSWORD (uv docs,
# "Environment variables"; checked with uv 0.13.9), so they never need to be on a command line,
# which every account can read in /proc/PID/cmdline.
INDEX_NAME = "torch"
INDEX_CREDENTIALS = ("UV_INDEX_TORCH_USERNAME", "UV_INDEX_TORCH_PASSWORD")


@dataclass(frozen=True)
class IndexUrl:
    """An index URL as it may be shown (`public`: no user:password) and the environment that
    gives uv its credentials (`secrets`: empty when the URL had none)."""

    public: str
    secrets: dict[str, str]


def split_credentials(url: str) -> IndexUrl:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return IndexUrl(url, {})
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    public = urlunsplit(parts._replace(netloc=netloc))
    user, password = INDEX_CREDENTIALS
    return IndexUrl(
        public, {user: unquote(parts.username or ""), password: unquote(parts.password or "")}
    )


# uv's and pip's variables that are a secret by name (UV_INDEX_<NAME>_PASSWORD, UV_PUBLISH_TOKEN,
# PIP_CLIENT_CERT's password...), whatever their value
_SECRET_NAME = re.compile(r"^(UV|PIP)_\w*(PASSWORD|TOKEN|USERNAME|CREDENTIAL|AUTH|KEYRING)")
_NAMED = re.compile(r"^[A-Za-z0-9_.-]+=")  # UV_INDEX's "name=url" form


def withhold_credentials(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """`env` for a command root runs as another account, without root's credentials: uv's and
    pip's secret variables left out, every URL in the others and in the proxy variables
    (http_proxy, HTTPS_PROXY, ALL_PROXY, ... in any case) without its user:password (another
    account reads its own processes' environment, /proc/PID/environ). A value whose URL cannot
    be parsed is left out whole. Returns the environment and the names of the variables that
    lost something."""
    kept: dict[str, str] = {}
    withheld: list[str] = []
    for name, value in env.items():
        if name.startswith(("UV_", "PIP_")) and _SECRET_NAME.match(name):
            withheld.append(name)
            continue
        try:
            if is_proxy(name):
                public = _public_proxy(value)
            elif name.startswith(("UV_", "PIP_")):
                public = " ".join(_public(token) for token in value.split())
                public = value if public == " ".join(value.split()) else public
            else:
                public = value
        except ValueError:  # urllib cannot read it (a port of letters): none of it is kept
            withheld.append(name)
            continue
        if public != value:
            withheld.append(name)
        kept[name] = public
    return kept, withheld


def _public(token: str) -> str:
    named = _NAMED.match(token) if "://" in token else None
    prefix = named.group(0) if named and token.index("://") > named.end() else ""
    url = token[len(prefix) :]
    return prefix + split_credentials(url).public if "://" in url else token


def is_proxy(name: str) -> bool:
    """A variable that names a proxy for uv, curl or apt (http_proxy, HTTPS_PROXY, all_proxy)."""
    return name.lower().endswith("_proxy") and name.lower() != "no_proxy"


def _public_proxy(value: str) -> str:
    """A proxy URL without its user:password; curl and uv also take one without a scheme
    ("user:secret@proxy:3128", read as http://)."""
    if "://" in value:
        return split_credentials(value).public
    if "@" not in value:
        return value
    return split_credentials(f"http://{value}").public.removeprefix("http://")


def configured(root: Path | None = None) -> str | None:
    """The default index the operator configured (steps.run.uvconfig), as uv will see it."""
    return configured_index(os.environ, root or machine_root())


def index_args(answers: Answers, build: str, configured: str | None) -> list[str]:
    """uv's index options for this torch build. The index the operator configured is the only
    one, never PyPI beside it: torch.index_url replaces uv's default index (PyPI) unless a
    default is configured for uv or pip (`configured`: UV_DEFAULT_INDEX, pip's index-url, which
    uv reads from its environment); then it is searched first, for every package. With neither,
    PyPI with PyTorch's own index for the torch family (`--torch-backend`). The mirror's
    credentials are left out (`index_secrets` gives them to uv)."""
    url = answers.torch.index_url
    if url == "auto":
        return [] if configured else ["--torch-backend", build]
    index = split_credentials(url.replace("{build}", build))
    named = f"{INDEX_NAME}={index.public}" if index.secrets else index.public
    return ["--index" if configured else "--default-index", named]


def per_build_index(answers: Answers, configured: str | None) -> bool:
    """Whether each torch build has an index of its own (PyTorch's, or a mirror of it with
    "{build}"): a build is then chosen by resolving against its index. Else one index serves
    one torch per release, and its wheel says which build it is."""
    url = answers.torch.index_url
    return "{build}" in url if url != "auto" else configured is None


PYPI = "https://pypi.org/simple"


def local_index(answers: Answers, configured: str | None) -> bool:
    """Whether every index is a directory on this machine (a test's, an offline mirror's)."""

    def local(url: str) -> bool:
        return url.startswith(("/", "file://"))

    url = answers.torch.index_url
    if url == "auto":
        return configured is not None and local(configured)
    return local(url) and (configured is None or local(configured))


def index_label(answers: Answers, build: str, configured: str | None) -> str:
    """The index a resolution used, as a message names it (no credentials)."""
    url = answers.torch.index_url
    default = split_credentials(configured).public if configured else PYPI
    if url == "auto":
        if configured:
            return default
        return f"{PYPI} (torch from {knowledge().torch.index_for(build)})"
    public = split_credentials(url.replace("{build}", build)).public
    return f"{public} (then {default})" if configured and default != public else public


def index_secrets(answers: Answers) -> dict[str, str]:
    """The environment that gives uv the mirror's credentials (empty: none in the URL)."""
    if answers.torch.index_url == "auto":
        return {}
    return split_credentials(answers.torch.index_url).secrets
