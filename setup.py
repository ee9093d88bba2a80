"""Builds the attnscore Python package for pip (pyproject.toml).

The pure-Python files come from python/attnscore/. The extension
attnscore._attnscore and libattnscore are built by CMake, in
BUILD_TEMP/cmake: setuptools keeps that folder (build-pip/ in the checkout)
between builds, so `pip install .` then `pip wheel .` compile once. The
library's SONAME file is copied beside the extension, whose run path is
$ORIGIN (python/CMakeLists.txt, ATTNSCORE_PYTHON_WHEEL): the installed
package needs no PYTHONPATH, LD_LIBRARY_PATH or ldconfig.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    """The version CMakeLists.txt's project() declares."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(attnscore VERSION ([0-9]+\.[0-9]+\.[0-9]+)", text).group(1)


def soname_version(version):
    """The SONAME's version, by CMakeLists.txt's rule: MAJOR.MINOR while the
    major version is 0, else MAJOR."""
    major, minor, _ = version.split(".")
    return f"{major}.{minor}" if major == "0" else major


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = Path(self.build_temp).resolve() / "cmake"
        configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DATTNSCORE_BUILD_TESTS=OFF", "-DATTNSCORE_BUILD_BENCH=OFF",
                     "-DATTNSCORE_BUILD_SERVER=OFF", "-DATTNSCORE_BUILD_PYTHON=ON",
                     "-DATTNSCORE_PYTHON_WHEEL=ON", f"-DPython_EXECUTABLE={sys.executable}"]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "-j", str(os.cpu_count() or 1),
                        "--target", "attnscore_python"], check=True)
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        built = list((build / "python" / "attnscore").glob("_attnscore*.so"))
        if len(built) != 1:
            raise RuntimeError(f"setup.py: want one _attnscore*.so in {build}, found {built}")
        shutil.copy2(built[0], target)
        library = build / f"libattnscore.so.{soname_version(project_version())}"
        shutil.copy2(library, target.parent / library.name)  # the file, not the symlink


setup(
    version=project_version(),
    packages=["attnscore"],
    package_dir={"": "python"},
    ext_modules=[Extension("attnscore._attnscore", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": "build-pip"}},
    zip_safe=False,
)
