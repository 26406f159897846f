"""Loads libtorchscan.so into the running torch and installs the fallback."""

import ctypes
import importlib.metadata
import os
import re
import warnings
from typing import cast

import torch

from torchscan._native import NativeSession

_HERE = os.path.dirname(os.path.abspath(__file__))

# The torch releases TorchScan builds against. One library serves one
# release (major.minor), in its CPU and its CUDA build.
SUPPORTED_RELEASES = ("2.11", "2.12", "2.13", "2.14", "2.15")
# The release tools/setup.sh builds a checkout against.
CHECKOUT_RELEASE = "2.13"

# bindings.cc writes this into the library, so the release it needs can be
# read when the loader refuses it (before built_against() can be asked).
_MARKER = re.compile(rb"torchscan-built-against-torch=([0-9A-Za-z.+_-]+)\0")


def _library_path() -> str:
    explicit = os.environ.get("TORCHSCAN_LIBRARY")
    if explicit:
        return explicit
    return os.path.join(_HERE, "_lib", "libtorchscan.so.0")


_ENTRY_POINTS: dict = {}  # name -> the C function, or None; each looked up once


def entry_point(name: str):
    """The library's C entry point `name` (integrations/bindings.cc) through
    ctypes, or None where it cannot be reached (its caller then uses the
    custom class's methods). The library is the one torch.ops loaded. PyDLL
    keeps the GIL (the calls are short); no argtypes: ints, bytes and arrays
    pass as C ints and pointers, which is what the functions take, and
    declared conversions would cost more than the calls."""
    if name not in _ENTRY_POINTS:
        fn = None
        try:
            fn = getattr(ctypes.PyDLL(_library_path()), name)
        except (OSError, AttributeError):
            pass
        _ENTRY_POINTS[name] = fn
    return _ENTRY_POINTS[name]


def release(version: str) -> str:
    """'2.15.0+cu132' -> '2.15': the part of a torch version a library is tied to."""
    return ".".join(version.split("+")[0].split(".")[:2])


def built_against_from_file(path: str) -> str:
    """The torch version the library at `path` was built against, read from
    its bytes without loading it; "" when the file has no marker."""
    try:
        with open(path, "rb") as f:
            m = _MARKER.search(f.read())
    except OSError:
        return ""
    return m.group(1).decode() if m else ""


def _in_checkout() -> bool:
    return os.path.exists(os.path.join(_HERE, "..", "..", "tools", "setup.sh"))


def _package_version() -> str:
    """This install's version without its local label ('0.3.0' of '0.3.0+torch2.15')."""
    try:
        return importlib.metadata.version("torchscan-dispatch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return "VERSION"


def fix_command(built: str, loaded: str) -> str:
    """The command that makes this install and the running torch agree."""
    want = release(built)
    if release(loaded) in SUPPORTED_RELEASES and release(loaded) != want:
        if _in_checkout() and release(loaded) == CHECKOUT_RELEASE:
            other = "or rebuild TorchScan against this torch: `bash tools/setup.sh` in the checkout"
        elif _in_checkout():
            other = (f"or build and test TorchScan for torch {release(loaded)} in its own venv: "
                     f"`bash tools/matrix.sh {release(loaded)}` in the checkout")
        else:
            other = (f"or install the TorchScan wheel built for torch {release(loaded)}: "
                     f"`pip install --force-reinstall --find-links DIR 'torchscan-dispatch=={_package_version()}"
                     f"+torch{release(loaded)}'` (DIR: the folder that holds the wheels)")
        return f"`pip install 'torch=={want}.*'` (the release this install was built against), {other}"
    return f"`pip install 'torch=={want}.*'` (the release this install was built against)"


def _describe(built: str, loaded: str) -> str:
    supported = ", ".join(SUPPORTED_RELEASES)
    where = os.path.dirname(torch.__file__)
    if built:
        have = (f"this install was built against torch {built} and loads with torch {release(built)}.x "
                "(CPU or CUDA build)")
    else:
        have = "this install's library names no torch release (not a TorchScan library?)"
    note = "" if release(loaded) in SUPPORTED_RELEASES else f"; torch {release(loaded)} is not a supported release"
    return f"the running torch is {loaded} (from {where}); {have}; TorchScan supports torch {supported}{note}"


def load_error(path: str, loader_message: str, loaded: str = "") -> ImportError:
    """The ImportError for a library the loader refused: the loader's own
    message, the torch found (default: the running one), what this install
    supports, and the fix."""
    loaded = loaded or torch.__version__
    built = built_against_from_file(path)
    message = f"torchscan: cannot load the plugin library {path}: {loader_message.strip()}. "
    message += _describe(built, loaded) + ". "
    if "libabsl" in loader_message:
        message += "Fix: `apt install libabsl20220623` (Debian's abseil), or install a self-contained wheel"
    elif built and release(built) == release(loaded):
        message += ("Fix: reinstall TorchScan for this torch (`bash tools/setup.sh` in a checkout, "
                    "`pip install --force-reinstall` of the wheel otherwise)")
    else:
        message += "Fix: " + (fix_command(built, loaded) if built else "reinstall TorchScan")
    return ImportError(message)


def mismatch_error(built: str, loaded: str = ""):
    """None when a library built against `built` serves torch `loaded` (default:
    the running one; same release, any local build tag such as +cpu or +cu132);
    else the ImportError."""
    loaded = loaded or torch.__version__
    if release(built) == release(loaded):
        return None
    return ImportError(f"torchscan: the plugin was built against torch {built} but {_describe(built, loaded)}. "
                       f"Fix: {fix_command(built, loaded)}")


# PyPI's `torchscan` is another project with the same import name: installed
# into one environment, the two packages overwrite each other's files.
OTHER_DISTRIBUTION = "torchscan"


def other_distribution_warning():
    """The warning text when another distribution also installs `torchscan`; else None."""
    try:
        other = importlib.metadata.distribution(OTHER_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    return (f"torchscan: this is TorchScan (distribution torchscan-dispatch, from {_HERE}), but the distribution "
            f"`{OTHER_DISTRIBUTION}` {other.version}, a different project with the same import name, is also "
            "installed here and may have replaced some of its files. Fix: `pip uninstall torchscan`, then reinstall "
            "TorchScan (`pip install --force-reinstall` of its wheel, or `bash tools/setup.sh` in a checkout)")


def load() -> "type[NativeSession]":
    message = other_distribution_warning()
    if message:
        warnings.warn(message, stacklevel=3)
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"torchscan: the plugin library is missing at {path}; build it with "
            "`bash tools/setup.sh` from the repository root (or point TORCHSCAN_LIBRARY at it)")
    try:
        torch.ops.load_library(path)
    except OSError as e:
        # torch wraps the loader's error ("Could not load this library");
        # the loader's own message (the missing symbol or library) is the cause.
        raise load_error(path, str(e.__cause__ or e)) from None
    session_cls = torch.classes.torchscan.Session
    error = mismatch_error(session_cls.built_against())
    if error is not None:
        raise error
    try:
        session_cls.install()
    except RuntimeError as e:
        raise ImportError(str(e).split("\n")[0]) from None
    return cast("type[NativeSession]", session_cls)


Session = load()
