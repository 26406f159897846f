"""AOTInductor models inside a scan, and exported programs as the way to count them.

An AOTInductor package (torch._inductor.aoti_compile_and_package, loaded with
torch._inductor.aoti_load_package or torch._inductor.package.load_package)
runs generated C++ kernels that call no ATen operator through the dispatcher,
so a scan would see almost nothing and report a complete, too small, total.
Every Python entry point ends in the run methods of the LibTorch runners
bound in torch._C._aoti (AOTIModelPackageLoader.run / boxed_run, and
AOTIModelContainerRunnerCpu.run for torch._export.aot_load): each run inside
a scan records `torchscan::compiled_region("aotinductor")`, which no view can
value, so the result is partial with a `compiled_region` diagnostic that says
to count the exported program instead. The kernels the model still calls
through the dispatcher (its fallback operators) are counted as usual.

The exported program (torch.export.export) runs its ATen graph through the
dispatcher: `measure_flops(ep)` counts it on the inputs it was exported with.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import torch

from torchscan._library import Session

_BACKEND = "aotinductor"
_RUN_METHODS = ("run", "boxed_run")
_marked = False


def _attach_marks_runs() -> bool:
    """Whether the attach library is preloaded into this process: it
    interposes on LibTorch's runners and marks every run itself (a second
    marker here would count each run twice in the diagnostic)."""
    try:
        return hasattr(ctypes.CDLL(None), "torchscan_attach_marks_aotinductor")
    except OSError:
        return False


def _marking(run):
    @functools.wraps(run)
    def run_and_mark(self, *args, **kwargs):
        if Session.mode_key_included():
            torch.ops.torchscan.compiled_region(_BACKEND)
        return run(self, *args, **kwargs)

    run_and_mark.__torchscan_marks__ = True
    return run_and_mark


def prepare() -> None:
    """Wraps the runner classes once, when torchscan is imported (not at the
    first scan: torch.compile's AOT mode keeps a runner's bound `run`, which
    a later wrap would miss). torch._C._aoti is part of torch._C, so nothing
    is imported for it, and a wrapped run costs one TLS check outside scans."""
    global _marked
    if _marked:
        return
    _marked = True
    aoti = getattr(torch._C, "_aoti", None)
    if aoti is None or _attach_marks_runs():
        return
    for name in dir(aoti):
        cls = getattr(aoti, name)
        if not (isinstance(cls, type) and name.startswith("AOTIModel")):
            continue
        for method in _RUN_METHODS:
            run = cls.__dict__.get(method)
            if run is not None and not getattr(run, "__torchscan_marks__", False):
                setattr(cls, method, _marking(run))


def is_exported_program(obj: Any) -> bool:
    export = getattr(torch, "export", None)
    return export is not None and isinstance(obj, export.ExportedProgram)


def is_aoti_model(obj: Any) -> bool:
    # Checked by name: torch.export.pt2_archive is not imported for this.
    return type(obj).__name__ == "AOTICompiledModel"


def exported_workload(ep, caller: str):
    """A zero-argument workload running `ep` on the inputs it was exported
    with (ExportedProgram.example_inputs: (args, kwargs))."""
    example = getattr(ep, "example_inputs", None)
    if example is None:
        raise ValueError(
            f"torchscan.{caller}: this ExportedProgram carries no example inputs (a program loaded with "
            "torch.export.load may not); pass a workload that runs it instead: "
            f"torchscan.{caller}(lambda: ep.module()(*args))")
    args, kwargs = example
    module = ep.module()
    return lambda: module(*args, **kwargs)


AOTI_HINT = ("an AOTInductor model runs its compiled kernels outside the dispatcher, so only a lower bound "
             "can be counted; count its exported program instead: ep = torch.export.export(model, args), then "
             "torchscan.measure_flops(ep) or crawl_module(ep.module(), args=args)")


prepare()
