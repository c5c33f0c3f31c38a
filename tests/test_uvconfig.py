"""uv runs with the system's certificates and the operator's index settings
(steps/stack/uvconfig.py), checked on the environment the runner builds and with the real uv
against a local index."""

from __future__ import annotations

import http.server
import os
import sys
import threading
from pathlib import Path
from typing import ClassVar

from steps.plan import Action
from steps.rootfs import RootFS
from steps.runner import CARRIED, Runner, carried_environment
from steps.stack.uvconfig import uv_environment

PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"


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
        f'[[index]]\nurl = "{mirror}"\ndefault = true\n[[index': (None, None),  # broken
        '[[index]]\nurl = "--extra-index-url=evil"\ndefault = true\n': (None, None),
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
    fifo_root = tmp_path / "fifo"
    (fifo_root / "etc/uv").mkdir(parents=True)
    os.mkfifo(fifo_root / "etc/uv/uv.toml")  # must not block
    assert uv_environment({}, fifo_root) == {"UV_SYSTEM_CERTS": "true"}


def test_a_broken_or_hostile_pip_conf_is_ignored(tmp_path):
    for text in (
        "not an ini file",
        "[global]\nindex-url = --extra-index-url=evil\n",
        "[global]\nindex-url = https://x\u0000y\n",
    ):
        root = _root(tmp_path / str(abs(hash(text))), {"etc/pip.conf": text})
        assert "UV_DEFAULT_INDEX" not in uv_environment({}, root)
    fifo_root = tmp_path / "fifo"
    (fifo_root / "etc").mkdir(parents=True)
    os.mkfifo(fifo_root / "etc/pip.conf")  # must not block
    assert uv_environment({}, fifo_root) == {"UV_SYSTEM_CERTS": "true"}


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
