"""The qvoice Python package (metadata in pyproject.toml). The version comes from
include/qvoice.h, and the wheel carries build/libqvoice.so.N.N.N as qvoice/libqvoice.so.0 when
make has built it (otherwise the package finds the library through $QVOICE_LIB or the system)."""
import glob
import os
import re
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def header_version():
    with open(os.path.join(HERE, "include", "qvoice.h")) as f:
        return re.search(r'#define QV_VERSION_STRING "([^"]+)"', f.read()).group(1)


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        so = os.path.join(HERE, "build", "libqvoice.so." + header_version())
        if os.path.exists(so):
            shutil.copy(so, os.path.join(self.build_lib, "qvoice", "libqvoice.so.0"))
        else:
            print("setup.py: %s not built (run make): the package will look for libqvoice "
                  "through $QVOICE_LIB or the system" % os.path.relpath(so, HERE))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel holds a native library: tag it for this platform
        return os.path.exists(os.path.join(HERE, "build", "libqvoice.so." + header_version()))


setup(version=header_version(), cmdclass={"build_py": BuildPyWithLib},
      distclass=BinaryDistribution, options={"build": {"build_base": "build/python"}})
