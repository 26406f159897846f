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
    try:
        torch.ops.load_library(path)
    except OSError as e:
        raise ImportError(
            f"torchscan: cannot load the plugin library {path}: {e}. It needs the torch it was built against "
            "and Debian's abseil (apt install libabsl20220623)") from None
    session_cls = torch.classes.torchscan.Session
    built = session_cls.built_against()
    if built != torch.__version__:
        raise ImportError(
            f"torchscan: the plugin was built against torch {built} but torch {torch.__version__} "
            f"is loaded; install torch=={built.split('+')[0]} (the {built} build), or rebuild TorchScan against "
            "this torch (`bash tools/setup.sh` in a checkout, `bash tools/build_wheel.sh` for a wheel)")
    try:
        session_cls.install()
    except RuntimeError as e:
        raise ImportError(str(e).split("\n")[0]) from None
    return session_cls


Session = load()
