"""The airlock SDK's PEP 517 build backend: standard library only.

Why not setuptools: the SDK must install offline with

    python3 -m venv v && v/bin/pip install --no-build-isolation --no-index ./sdk/python

and with --no-build-isolation the backend must already be inside the new
venv. A venv gets pip and (up to Python 3.11) setuptools, but setuptools
before 70.1 (Debian 12 has 66) cannot build a wheel without the separate
`wheel` package, which no venv has, and Python 3.12's venvs have no
setuptools at all. This backend needs nothing but Python, so the command
above works with every Python the SDK supports (docs/decisions.md).

It builds a pure-Python wheel of everything under src/, an sdist, and an
editable wheel (a .pth file pointing at src/) for `pip install -e`. The
metadata comes from pyproject.toml's [project] table.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"
# Zip entries need a date; a fixed one makes the wheel reproducible.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache", "build", "dist"}


def _project() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    try:
        import tomllib  # Python 3.11+
    except ImportError:
        return _project_fallback(text)
    return tomllib.loads(text)["project"]


def _project_fallback(text: str) -> dict:
    """Reads the [project] table on Python 3.10, which has no tomllib: only
    `key = "string"` and `key = ["string", ...]` entries, which is all this
    project's table uses."""
    out: dict = {}
    section = None
    pending = ""
    for line in text.splitlines():
        s = line.strip()
        if pending:
            pending += " " + s
        elif s.startswith("["):
            section = s.strip("[] ")
            continue
        elif section == "project" and "=" in s and not s.startswith("#"):
            pending = s
        else:
            continue
        key, _, value = pending.partition("=")
        if value.count("[") > value.count("]"):
            continue
        try:
            out[key.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"pyproject.toml [project] {key.strip()}: this backend reads only strings and lists of strings on Python 3.10") from None
        pending = ""
    return out


def _names() -> tuple[str, str]:
    p = _project()
    name = re.sub(r"[-_.]+", "_", p["name"]).lower()
    return name, p["version"]


def _metadata() -> bytes:
    p = _project()
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
    ]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    for c in p.get("classifiers", []):
        lines.append(f"Classifier: {c}")
    for d in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {d}")
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str):
        with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
            body = f.read()
        lines.append("Description-Content-Type: text/markdown" if readme.endswith(".md") else "Description-Content-Type: text/plain")
    return ("\n".join(lines) + "\n\n" + body).encode()


def _wheel_file() -> bytes:
    return f"Wheel-Version: 1.0\nGenerator: airlock_build\nRoot-Is-Purelib: true\nTag: {TAG}\n".encode()


def _package_files() -> list[tuple[str, str]]:
    """(path in the wheel, path on disk) of every file under src/."""
    src = os.path.join(ROOT, "src")
    out = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for fn in sorted(filenames):
            if fn.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(dirpath, fn)
            out.append((os.path.relpath(full, src).replace(os.sep, "/"), full))
    return out


def _zipinfo(name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=time.gmtime(max(EPOCH, 315532800))[:6])
    zi.external_attr = 0o644 << 16
    zi.compress_type = zipfile.ZIP_DEFLATED
    return zi


def _write_wheel(wheel_directory: str, files: list[tuple[str, bytes]]) -> str:
    name, version = _names()
    dist_info = f"{name}-{version}.dist-info"
    files = files + [(f"{dist_info}/METADATA", _metadata()), (f"{dist_info}/WHEEL", _wheel_file())]
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{name}-{version}-{TAG}.whl"
    tmp = os.path.join(wheel_directory, filename + ".tmp")
    with zipfile.ZipFile(tmp, "w") as zf:
        for path, data in files:
            zf.writestr(_zipinfo(path), data)
    os.replace(tmp, os.path.join(wheel_directory, filename))
    return filename


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# The PEP 517 and PEP 660 hooks.


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version = _names()
    dist_info = f"{name}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    for fn, data in (("METADATA", _metadata()), ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, dist_info, fn), "wb") as f:
            f.write(data)
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(path, _read(full)) for path, full in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name, _ = _names()
    pth = (os.path.join(ROOT, "src") + "\n").encode()
    return _write_wheel(wheel_directory, [(f"__editable__.{name}.pth", pth)])


def build_sdist(sdist_directory, config_settings=None):
    name, version = _names()
    base = f"{name}-{version}"
    members: list[tuple[str, bytes]] = [(f"{base}/PKG-INFO", _metadata())]
    for top in ("pyproject.toml", "README.md"):
        members.append((f"{base}/{top}", _read(os.path.join(ROOT, top))))
    for sub in ("build_backend", "src", "tests", "examples"):
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, sub)):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
            for fn in sorted(filenames):
                if fn.endswith((".pyc", ".pyo")):
                    continue
                full = os.path.join(dirpath, fn)
                members.append((f"{base}/" + os.path.relpath(full, ROOT).replace(os.sep, "/"), _read(full)))
    filename = f"{base}.tar.gz"
    tmp = os.path.join(sdist_directory, filename + ".tmp")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for path, data in members:
            ti = tarfile.TarInfo(path)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, EPOCH
            tf.addfile(ti, io.BytesIO(data))
    os.replace(tmp, os.path.join(sdist_directory, filename))
    return filename
