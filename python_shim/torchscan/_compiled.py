"""torch.compile inside a scan.

Compilation is not the workload: Dynamo traces the function on fake tensors,
then AOTAutograd and Inductor trace it again, all through the dispatcher.
While a compile runs, this thread's recording is paused, so none of it is
counted. The dispatch state itself is left alone: Dynamo's guards compare it
with the state the compiled code later runs in.

Inductor's fused kernels run outside the dispatcher. Each run of an Inductor
graph inside a scan records a `torchscan::compiled_region` marker, which no
view can value: the result is partial, with a `compiled_region` diagnostic,
and the kernels the graph still calls through the dispatcher (mm, convolution)
are counted as usual. Backends that run their graph through the dispatcher
(`eager`, `aot_eager`) are counted like eager code.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading

import torch

from torchscan._library import Session

_inductor_marked = False


def _compile_started(_args) -> None:
    Session.pause_thread_recording()


def _compile_ended(_args) -> None:
    Session.resume_thread_recording()


def _mark_inductor_graphs(_args=None) -> None:
    global _inductor_marked
    output_code = sys.modules.get("torch._inductor.output_code")
    if _inductor_marked or output_code is None:
        return
    graph_cls = output_code.CompiledFxGraph
    run = graph_cls.__call__

    def call_and_mark(self, inputs):
        if Session.mode_key_included():
            torch.ops.torchscan.compiled_region("inductor")
        return run(self, inputs)

    graph_cls.__call__ = call_and_mark
    _inductor_marked = True


def _register(dynamo_callbacks) -> None:
    handler = dynamo_callbacks.callback_handler
    if _compile_started in handler.start_callbacks:
        return  # torch._dynamo.reset() clears them: checked at every scan
    handler.register_start_callback(_compile_started)
    handler.register_end_callback(_compile_ended)
    # Inductor is imported by its first compile, which runs inside the
    # callbacks: mark its graphs from there too.
    handler.register_end_callback(_mark_inductor_graphs)


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Registers the callbacks as soon as Dynamo is imported, for a workload
    that calls torch.compile for the first time inside a scan."""

    def find_spec(self, name, path, target=None):
        if name != _CALLBACK_MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register(module)

        spec.loader.exec_module = exec_then_register
        return spec


_CALLBACK_MODULE = "torch._dynamo.callback"
_import_hook = None
# Scans start in any thread: one registration, one import hook, one marking.
_prepare_lock = threading.RLock()


def prepare() -> None:
    """Called as a scan starts. Costs nothing unless torch.compile is in use:
    Dynamo is never imported here."""
    global _import_hook
    with _prepare_lock:
        dynamo_callbacks = sys.modules.get(_CALLBACK_MODULE)
        if dynamo_callbacks is None:
            if _import_hook is None:
                _import_hook = _RegisterOnImport()
                sys.meta_path.insert(0, _import_hook)
            return
        _register(dynamo_callbacks)
        _mark_inductor_graphs()
