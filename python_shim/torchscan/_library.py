"""Loads libtorchscan.so into the running torch and installs the fallback."""

import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _library_path() -> str:
    explicit = os.environ.get("TORCHSCAN_LIBRARY")
    if explicit:
        return explicit
    return os.path.join(_HERE, "_lib", "libtorchscan.so.0")


def load():
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"torchscan: the plugin library is missing at {path}; build it with "
            "`bash tools/setup.sh` from the repository root (or point TORCHSCAN_LIBRARY at it)")
    torch.ops.load_library(path)
    session_cls = torch.classes.torchscan.Session
    built = session_cls.built_against()
    if built != torch.__version__:
        raise ImportError(
            f"torchscan: the plugin was built against torch {built} but torch {torch.__version__} "
            "is loaded; rebuild it with `bash tools/setup.sh`")
    try:
        session_cls.install()
    except RuntimeError as e:
        raise ImportError(str(e).split("\n")[0]) from None
    return session_cls


Session = load()
