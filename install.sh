#!/usr/bin/env bash
# Install mlsetup into an environment of its own and put `mlsetup` on root's PATH.
#
#   ./install.sh            # as root, or a user with sudo (it asks)
#
# Works on a fresh Ubuntu/Debian server without pip (PEP 668): the tool lives in its own venv
# at $MLSETUP_PREFIX (default /opt/mlsetup), linked from /usr/local/bin, which sudo keeps on PATH.
set -euo pipefail

# Root runs this installation's code and build tools: nothing of it may be writable by another
# account, whatever the archive carried (git archive's 0775/0664) or the caller's umask.
umask 022
prefix=${MLSETUP_PREFIX:-/opt/mlsetup}
bindir=${MLSETUP_BINDIR:-/usr/local/bin}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        exec sudo MLSETUP_PREFIX="$prefix" MLSETUP_BINDIR="$bindir" -- "$0" "$@"
    fi
    echo "install.sh: needs root to write $prefix and $bindir; run it as root" >&2
    exit 3
fi

# The system's Python (the one a server keeps); any python3 >= 3.10 otherwise.
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "install.sh: mlsetup needs Python 3.10 or newer (apt-get install python3)" >&2
    exit 1
fi

# Ubuntu and Debian ship venv without ensurepip until python3-venv is installed.
if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    echo "install.sh: installing python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y python3-venv || { apt-get update && apt-get install -y python3-venv; }
fi

echo "install.sh: creating $prefix with $("$python" --version)"
"$python" -m venv --clear "$prefix"
# pip builds a source directory in place (setuptools writes build/ and mlsetup.egg-info/ into
# it), and this runs as root: in the checkout those would be root's, and the next `pip install
# .`, `uv tool install .` or tests/run.sh of its owner would fail on them. So the build reads a
# copy of what the wheel is made of, in a temporary directory of root's, and the checkout stays
# exactly as it was (nothing is written there; `git status --ignored` shows nothing new).
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
tar -C "$src" --exclude=__pycache__ --exclude='*.py[co]' -cf - \
    pyproject.toml README.md LICENSE app steps assets | tar -C "$build" --no-same-owner -xf -
"$prefix/bin/python" -m pip install --quiet --disable-pip-version-check "$build"
chmod -R go-w "$prefix"
mkdir -p "$bindir"
# The link is for people; what mlsetup starts by itself (the detached engine, the resume unit's
# ExecStart) names $prefix/bin/mlsetup, the script beside the interpreter that runs it.
ln -sfn "$prefix/bin/mlsetup" "$bindir/mlsetup"
# Completion and the manual page (generated from the parser by tools/gen_docs.py) go to the
# share directory beside $bindir, where bash-completion, zsh's site-functions and man look for
# /usr/local's: /usr/local/share by default.
share=$(dirname "$bindir")/share
install -D -m 0644 "$src/assets/completion/mlsetup.bash" "$share/bash-completion/completions/mlsetup"
install -D -m 0644 "$src/assets/completion/_mlsetup" "$share/zsh/site-functions/_mlsetup"
install -D -m 0644 "$src/assets/man/mlsetup.1" "$share/man/man1/mlsetup.1"
echo "install.sh: installed $("$prefix/bin/mlsetup" --version) as $bindir/mlsetup"
