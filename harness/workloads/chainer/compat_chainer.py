"""Chainer 7.8.1 (the last release, 2020) on today's NumPy, Python and setuptools.

Importing it breaks on exactly three things, all found by importing and training it here
(Python 3.11, NumPy 2.4) and on the GPU image (Python 3.12, NumPy 2.5, CuPy 14.2):

- ``numpy.sctypes``, removed in NumPy 2.0: ``chainer.functions.array.as_strided`` reads it at
  import and again in its backward. Restored, as NumPy 1.x had it, on the ``numpy`` module.
- ``numpy.distutils``, gone on Python 3.12 (NumPy no longer ships it there), and
- ``pkg_resources``, gone from setuptools 81 on (and absent where setuptools is not installed):
  both are imported only by ``chainer._environment_check``, which runs once during
  ``import chainer`` (a macOS BLAS warning and a version check of optional CuPy/iDeep packages).
  Stand-ins live in ``sys.modules`` only while Chainer imports, so no other library later finds
  a partial ``pkg_resources`` where it expects the real one or none.

Each shim is applied only where what it stands for is missing, and its name is filed with
``harness.measure.instruments.shims`` so that the record's environment says the figure was taken on a patched
library. Nothing else was needed to train the GCN, MLP and CNN of ``harness.workloads.chainer.chainer_nets``.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import sys
import types

from harness.measure.instruments import shims

SCTYPES = "numpy.sctypes"
DISTUTILS = "numpy.distutils"
PKG_RESOURCES = "pkg_resources"
INSTALL = ('chainer 7.8.1 is installed by `python3 -m harness test` (or by hand: '
           'pip install "setuptools<70" wheel && pip install --no-build-isolation chainer==7.8.1 scipy)')


def restore_sctypes(np) -> bool:
    """NumPy 1.x's ``np.sctypes`` where it is missing; True if it was."""
    if "sctypes" in vars(np):  # NumPy 2 answers hasattr() through a __getattr__ that raises
        return False
    np.sctypes = {
        "int": [np.int8, np.int16, np.int32, np.int64],
        "uint": [np.uint8, np.uint16, np.uint32, np.uint64],
        "float": [np.float16, np.float32, np.float64, np.longdouble],
        "complex": [np.complex64, np.complex128, np.clongdouble],
        "others": [bool, object, bytes, str, np.void],
    }
    return True


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def _distutils_stand_in() -> dict[str, types.ModuleType]:
    system_info = types.ModuleType("numpy.distutils.system_info")
    system_info.get_info = lambda name, notfound_action=0: {}  # "no BLAS information": no macOS warning
    distutils = types.ModuleType("numpy.distutils")
    distutils.system_info = system_info
    return {"numpy.distutils": distutils, "numpy.distutils.system_info": system_info}


class DistributionNotFound(Exception):
    pass


class VersionConflict(Exception):
    pass


def _pkg_resources_stand_in() -> dict[str, types.ModuleType]:
    """What ``_environment_check`` calls: require(), get_distribution() and the two errors."""
    mod = types.ModuleType("pkg_resources")

    def get_distribution(requirement: str):
        name = _split(requirement)[0]
        try:
            return types.SimpleNamespace(project_name=name, version=importlib.metadata.version(name))
        except importlib.metadata.PackageNotFoundError:
            raise DistributionNotFound(name) from None

    def require(requirement: str):
        name, spec = _split(requirement)
        dist = get_distribution(name)
        if spec and not _satisfies(dist.version, spec):
            raise VersionConflict(f"{name} {dist.version} does not satisfy {spec}")
        return [dist]

    mod.DistributionNotFound, mod.VersionConflict = DistributionNotFound, VersionConflict
    mod.get_distribution, mod.require = get_distribution, require
    return {"pkg_resources": mod}


def _split(requirement: str) -> tuple[str, str]:
    for i, ch in enumerate(requirement):
        if ch in "<>=!~ ;[":
            return requirement[:i], requirement[i:].strip()
    return requirement, ""


def _satisfies(version: str, spec: str) -> bool:
    try:
        from packaging.specifiers import SpecifierSet
    except ImportError:  # without packaging the check only sees that the package is there
        return True
    return SpecifierSet(spec).contains(version, prereleases=True)


_ABSENT = object()


@contextlib.contextmanager
def import_time_modules(np):
    """Stand-ins for the modules Chainer imports only during its own import, where missing."""
    added: dict[str, types.ModuleType] = {}
    if not _importable(DISTUTILS):
        added.update(_distutils_stand_in())
    if not _importable(PKG_RESOURCES):
        added.update(_pkg_resources_stand_in())
    before = {name: sys.modules[name] for name in added if name in sys.modules}  # e.g. None: "not importable"
    attr_before = vars(np).get("distutils", _ABSENT)
    sys.modules.update(added)
    if DISTUTILS in added:
        np.distutils = added[DISTUTILS]  # `import numpy.distutils.system_info` reads it off numpy
    try:
        yield [name for name in (DISTUTILS, PKG_RESOURCES) if name in added]
    finally:
        for name in added:
            sys.modules.pop(name, None)
        sys.modules.update(before)
        if DISTUTILS in added:
            vars(np).pop("distutils", None)
            if attr_before is not _ABSENT:
                np.distutils = attr_before


def import_chainer():
    """Chainer, imported with the shims it needs here; and the names of the shims applied.

    Raises ImportError, naming the install command, where Chainer is not installed."""
    import numpy as np
    if importlib.util.find_spec("chainer") is None:
        raise ImportError(f"chainer is not installed: {INSTALL}")
    if restore_sctypes(np):
        shims.record(SCTYPES)
    if "chainer" in sys.modules:
        return sys.modules["chainer"], list(shims.applied())
    with import_time_modules(np) as stood_in:
        for name in stood_in:
            shims.record(name)
        chainer = importlib.import_module("chainer")
    return chainer, list(shims.applied())
