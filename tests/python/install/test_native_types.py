"""The typed description of the plugin's TorchScript class
(torchscan/_native.py) names exactly the methods the bindings define, static
ones as static methods, and the package ships its py.typed marker."""

import inspect
import os
import re

import torch

import torchscan  # noqa: F401  (loads the plugin)
from torchscan._native import NativeSession

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINDINGS = os.path.join(ROOT, "torchscan_dispatch", "integrations", "bindings.cc")


def _bound():
    text = open(BINDINGS).read()
    start = text.index('m.class_<ScriptSession>("Session")')
    block = text[start:text.index(";\n}", start)]
    methods = set(re.findall(r'\.def\(\s*"(\w+)"', block))
    statics = set(re.findall(r'\.def_static\(\s*"(\w+)"', block))
    return methods, statics


def test_every_bound_method_is_typed():
    methods, statics = _bound()
    typed = {name for name, _ in inspect.getmembers(NativeSession) if not name.startswith("_")}
    typed_static = {name for name in typed if isinstance(inspect.getattr_static(NativeSession, name), staticmethod)}
    assert typed == methods | statics
    assert typed_static == statics


def test_the_class_has_those_methods():
    cls = torch.classes.torchscan.Session
    session = cls("workload", False, False, False, 4096, False, True)  # NativeSession.__init__'s arguments
    methods, statics = _bound()
    for name in sorted(methods):
        assert callable(getattr(session, name)), name
    for name in sorted(statics):
        assert callable(getattr(cls, name)), name


def test_py_typed_is_shipped():
    package = os.path.dirname(torchscan.__file__)
    assert os.path.exists(os.path.join(package, "py.typed"))
    assert '"py.typed"' in open(os.path.join(ROOT, "pyproject.toml")).read()
