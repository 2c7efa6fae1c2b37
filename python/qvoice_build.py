"""qvoice's PEP 517 build backend (pyproject.toml: backend-path python): writes the wheel and the
sdist itself with the standard library, so `pip install --no-build-isolation .` works on any
Python 3 — also a pyenv or python.org interpreter whose venv has neither `wheel` nor a setuptools
that builds wheels ("invalid command 'bdist_wheel'"). The version comes from include/qvoice.h;
the wheel carries build/libqvoice.so.VERSION as qvoice/libqvoice.so.0 when make has built it
(then it is tagged for this platform), else the package finds libqvoice through $QVOICE_LIB or
the system."""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "qvoice"


def _version():
    with open(os.path.join(HERE, "include", "qvoice.h")) as f:
        return re.search(r'#define QV_VERSION_STRING "([^"]+)"', f.read()).group(1)


def _metadata():
    with open(os.path.join(HERE, "python", "README.md")) as f:
        readme = f.read()
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
            "Summary: Qwen3-TTS-12Hz speech synthesis and voice cloning on the CPU (ctypes over "
            "libqvoice)\nLicense: Apache-2.0\nRequires-Python: >=3.8\n"
            "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            "Description-Content-Type: text/markdown\n\n%s" % (NAME, _version(), readme))


def _files():
    """(path in the wheel, path on disk) of the package, and whether the library is included."""
    pkg = os.path.join(HERE, "python", NAME)
    out = [(NAME + "/" + f, os.path.join(pkg, f)) for f in sorted(os.listdir(pkg))
           if f.endswith(".py")]
    so = os.path.join(HERE, "build", "libqvoice.so." + _version())
    if os.path.exists(so):
        out.append((NAME + "/libqvoice.so.0", so))
    return out, os.path.exists(so)


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (name, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files, native = _files()
    tag = "py3-none-" + (re.sub(r"[-.]", "_", sysconfig.get_platform()) if native else "any")
    dist_info = "%s-%s.dist-info" % (NAME, _version())
    path = os.path.join(wheel_directory, "%s-%s-%s.whl" % (NAME, _version(), tag))
    record = ""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        def add(name, data, mode=0o644):
            nonlocal record
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record += _record_line(name, data)

        for name, disk in files:
            with open(disk, "rb") as f:
                add(name, f.read(), 0o755 if name.endswith(".so.0") else 0o644)
        add(dist_info + "/METADATA", _metadata().encode())
        add(dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: qvoice_build\n"
                                   "Root-Is-Purelib: %s\nTag: %s\n"
                                   % ("false" if native else "true", tag)).encode())
        record += dist_info + "/RECORD,,\n"
        z.writestr(dist_info + "/RECORD", record)
    return os.path.basename(path)


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, _version())
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as t:
        for rel in ["pyproject.toml", "include/qvoice.h", "python/README.md",
                    "python/qvoice_build.py"] + [d for _, d in _files()[0] if d.endswith(".py")]:
            t.add(os.path.join(HERE, os.path.relpath(rel, HERE)), arcname=base + "/" +
                  os.path.relpath(os.path.join(HERE, rel), HERE))
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        t.addfile(info, io.BytesIO(pkg_info))
    return os.path.basename(path)
