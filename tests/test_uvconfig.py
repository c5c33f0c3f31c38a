"""uv runs with the system's certificates and the operator's index settings
(steps/run/uvconfig.py), checked on the environment the runner builds and with the real uv
against a local index."""

from __future__ import annotations

import http.server
import os
import sys
import threading
from pathlib import Path
from typing import ClassVar

import pytest

from steps.core.errors import InputError
from steps.core.rootfs import RootFS
from steps.formats.plan import Action
from steps.run.runner import CARRIED, Runner, carried_environment
from steps.run.uvconfig import uv_environment

PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"
MIRROR = "https://mirror.corp/simple"


def _root(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_system_certificates_unless_the_operator_chose(tmp_path):
    assert uv_environment({}, tmp_path) == {"UV_SYSTEM_CERTS": "true"}
    assert "UV_SYSTEM_CERTS" not in uv_environment({"UV_SYSTEM_CERTS": "false"}, tmp_path)
    assert "UV_SYSTEM_CERTS" not in uv_environment({"UV_NATIVE_TLS": "1"}, tmp_path)


def test_pips_index_becomes_uvs_when_uv_has_none(tmp_path):
    root = _root(
        tmp_path,
        {
            "etc/pip.conf": "[global]\nindex-url = https://mirror.corp/simple\n"
            "extra-index-url = https://a.corp/simple\n  https://b.corp/simple\n"
        },
    )
    env = uv_environment({}, root)
    assert env["UV_DEFAULT_INDEX"] == "https://mirror.corp/simple"
    assert env["UV_INDEX"] == "https://a.corp/simple https://b.corp/simple"
    # PIP_INDEX_URL wins over pip.conf, as it does for pip
    assert (
        uv_environment({"PIP_INDEX_URL": "https://env.corp/simple"}, root)["UV_DEFAULT_INDEX"]
        == "https://env.corp/simple"
    )
    # uv's own settings win: a UV_* index (uv reads it itself), or the system's uv.toml (which
    # mlsetup reads for it: it runs uv with --no-config)
    assert "UV_DEFAULT_INDEX" not in uv_environment({"UV_INDEX_URL": "https://u/simple"}, root)
    _root(tmp_path, {"etc/uv/uv.toml": '[[index]]\nurl = "https://uv.corp/simple"\n'})
    assert uv_environment({}, root) == {
        "UV_SYSTEM_CERTS": "true",
        "UV_INDEX": "https://uv.corp/simple",  # not the default: PyPI stays, as uv has it
    }


def test_the_systems_uv_toml_gives_uv_its_indexes_as_uv_would_take_them(tmp_path):
    mirror = "https://mirror.corp/simple"
    cases = {
        f'[[index]]\nurl = "{mirror}"\ndefault = true\n': (mirror, None),
        f'index-url = "{mirror}"\nextra-index-url = ["https://a.corp/simple"]\n': (
            mirror,
            "https://a.corp/simple",
        ),
        f'[pip]\nindex-url = "{mirror}"\n': (mirror, None),
        # an explicit index serves only packages pinned to it: a pip-style install has none
        f'[[index]]\nname = "x"\nurl = "{mirror}"\nexplicit = true\n': (None, None),
        'cache-dir = "/var/cache/uv"\n': (None, None),  # no index: pip's, if any, then PyPI
    }
    for n, (text, (default, extra)) in enumerate(cases.items()):
        root = _root(tmp_path / str(n), {"etc/uv/uv.toml": text})
        env = uv_environment({}, root)
        assert (env.get("UV_DEFAULT_INDEX"), env.get("UV_INDEX")) == (default, extra), text
    # uv takes the first system file that exists, XDG's before /etc/uv's
    root = _root(
        tmp_path / "both",
        {
            "etc/xdg/uv/uv.toml": f'index-url = "{mirror}"\n',
            "etc/uv/uv.toml": 'index-url = "https://other.corp/simple"\n',
        },
    )
    assert uv_environment({}, root)["UV_DEFAULT_INDEX"] == mirror
    # beside pip.conf: uv's own file is the one uv would have read
    _root(root, {"etc/pip.conf": "[global]\nindex-url = https://pip.corp/simple\n"})
    assert uv_environment({}, root)["UV_DEFAULT_INDEX"] == mirror


def _refusal(root: Path) -> InputError:
    with pytest.raises(InputError) as caught:
        uv_environment({}, root)
    assert caught.value.kind == "settings"
    return caught.value


# Each form of a system setting file root cannot use (issue 33, hole 3): made at `path`.
def _link(path: Path) -> None:
    (path.parent / "real.toml").write_text('index-url = "https://mirror.corp/simple"\n')
    path.symlink_to("real.toml")


def _foreign(path: Path) -> None:
    path.write_text('[global]\nindex-url = "https://evil.corp/simple"\n')
    os.chown(path, 1001, 1001)


UNUSABLE = {
    "a symlink": (_link, "is a symbolic link"),
    "over 64 KiB": (lambda p: p.write_text("#" * (65 * 1024)), "is larger than 65536 bytes"),
    "binary": (lambda p: p.write_bytes(b"\x7fELF\0\0\1"), "is binary"),
    "not UTF-8": (lambda p: p.write_bytes(b"index-url = \xff\n"), "is not UTF-8 text"),
    "a FIFO": (os.mkfifo, "is not a regular file (a FIFO)"),  # and the read does not block
    "a directory": (Path.mkdir, "is not a regular file (a directory)"),
    "an ordinary account's": (_foreign, "belongs to uid 1001, not root"),
}


@pytest.mark.parametrize("form", list(UNUSABLE))
@pytest.mark.parametrize("name", ["etc/uv/uv.toml", "etc/xdg/uv/uv.toml", "etc/pip.conf"])
def test_a_system_setting_file_root_cannot_use_is_exit_2_naming_it(
    tmp_path: Path, name: str, form: str
):
    if form == "an ordinary account's" and os.geteuid() != 0:
        pytest.skip("gives a file to another account")
    make, why = UNUSABLE[form]
    path = tmp_path / name
    path.parent.mkdir(parents=True)
    make(path)
    assert str(_refusal(tmp_path)).startswith(f"{path}: {why}")


def test_a_broken_setting_is_exit_2_naming_the_file_and_key(tmp_path):
    for name, text, named in (
        ("etc/uv/uv.toml", f'[[index]]\nurl = "{MIRROR}"\n[[index', "is not valid TOML"),
        ("etc/uv/uv.toml", '[[index]]\nurl = "--extra-index-url=evil"\n', "index[0].url = "),
        ("etc/xdg/uv/uv.toml", '[pip]\nindex-url = "pypi"\n', 'pip.index-url = "pypi"'),
        ("etc/pip.conf", "not an ini file", "is not a pip configuration file"),
        ("etc/pip.conf", "[global]\nindex-url = --extra-index-url=evil\n", "[global] index-url"),
        ("etc/pip.conf", "[global]\nindex-url = https://x\u0000y\n", "is binary"),
    ):
        root = _root(tmp_path / str(abs(hash(text))), {name: text})
        assert str(_refusal(root)).startswith(f"{root / name}: {named}"), text
    # a broken file beside the one uv takes is refused too: it is the operator's mistake
    root = _root(
        tmp_path / "beside",
        {"etc/xdg/uv/uv.toml": f'index-url = "{MIRROR}"\n', "etc/uv/uv.toml": "[[index"},
    )
    assert "etc/uv/uv.toml: is not valid TOML" in str(_refusal(root))


def test_proxies_and_index_settings_are_carried_across_the_detached_start():
    operator = {
        "ALL_PROXY": "socks5://p:1080",
        "UV_DEFAULT_INDEX": "https://m/simple",
        "PIP_INDEX_URL": "https://m/simple",
        "UV_SYSTEM_CERTS": "false",
        "SSH_AUTH_SOCK": "x",
    }
    carried = carried_environment(operator)
    assert "ALL_PROXY" in CARRIED and "SSH_AUTH_SOCK" not in carried
    assert {k: carried[k] for k in operator if k != "SSH_AUTH_SOCK"} == {
        k: v for k, v in operator.items() if k != "SSH_AUTH_SOCK"
    }


class _Index(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self):
        self.seen.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_real_uv_asks_the_mirror_from_pip_conf(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/simple"
        root = _root(tmp_path / "root", {"etc/pip.conf": f"[global]\nindex-url = {url}\n"})
        runner = Runner(RootFS(root), lambda event: None, base_path=PATH, environ={"PATH": PATH})
        action = Action(
            id="venv.probe",
            kind="resolve",
            title="resolve through the operator's mirror",
            argv=[
                "uv",
                "pip",
                "install",
                "--dry-run",
                "--python",
                sys.executable,
                "mlsetup-no-such-package",
            ],
            env={"UV_CACHE_DIR": str(tmp_path / "cache"), "UV_OFFLINE": "0"},
        )
        env = runner.environment(action, None)
        assert env["UV_SYSTEM_CERTS"] == "true" and env["UV_DEFAULT_INDEX"] == url
        result = runner.run(action, tmp_path / "log")
        assert result.exit_code != 0  # the package does not exist on the mirror
        assert any(p.startswith("/simple/mlsetup-no-such-package") for p in _Index.seen), (
            _Index.seen,
            result.tail,
        )
    finally:
        server.shutdown()
