"""What a workload measurement is asked and where it runs: the checks of
the caller's arguments (the workload, counts, durations, the device, work
units), the device's synchronisation, and the records of the run's context
and inputs that every BenchmarkReport carries (torchscan.workload).
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
import platform
from collections.abc import Mapping as _MappingABC
from typing import Callable, Optional

import torch

from torchscan.metadata import describe


# ---------------------------------------------------------------- argument checks


def _check_workload(workload, where: str) -> None:
    if not callable(workload):
        raise TypeError(f"{where}(workload): workload must be a zero-argument callable such as "
                        f"lambda: model(x), got {type(workload).__name__}")


def _refuse_unstarted(result, where: str) -> None:
    """A generator or coroutine returned by the workload ran none of its body."""
    if inspect.iscoroutine(result) or inspect.isgenerator(result):
        result.close()
        raise TypeError(f"{where}(workload): workload() returned a {type(result).__name__}, so none of its body "
                        "ran; pass a function that does the work, e.g. lambda: list(gen()) or "
                        "lambda: asyncio.run(coro())")
    if inspect.isasyncgen(result):
        raise TypeError(f"{where}(workload): workload() returned an async generator, so none of its body ran; "
                        "pass a plain function that runs it to the end")


def _int_arg(value, name: str, where: str, minimum: int, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        none = " or None" if allow_none else ""
        raise TypeError(f"{where}: {name} must be an int >= {minimum}{none}, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{where}: {name} must be >= {minimum}, got {value}")
    return int(value)


def _positive_real(value, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: {name} must be a positive number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: {name} must be a positive finite number, got {value}")
    return value


def _device(device, where: str) -> torch.device:
    if device is None:
        return torch.device("cpu")
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"{where}: device must be a string such as 'cpu' or 'cuda:0', or a torch.device; "
                        f"got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"{where}: device {device!r} is not a device name ({e}); use e.g. 'cpu' or 'cuda:0'") \
            from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{where}: device {str(dev)!r} is not available here (torch.cuda.is_available() is "
                             "False); pass device='cpu'")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        elif dev.index >= torch.cuda.device_count():
            raise ValueError(f"{where}: device {str(dev)!r} does not exist ({torch.cuda.device_count()} CUDA "
                             "devices)")
    elif dev.type != "cpu":
        module = getattr(torch, dev.type, None)
        if module is None or not hasattr(module, "synchronize") or not module.is_available():
            raise ValueError(f"{where}: device {str(dev)!r} is not supported or not available; pass 'cpu' or "
                             "'cuda'")
    return dev


def _synchronizer(dev: torch.device) -> Optional[Callable[[], None]]:
    """The explicit synchronisation of the selected device (None for CPU,
    whose work is finished when the call returns)."""
    if dev.type == "cpu":
        return None
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    return getattr(torch, dev.type).synchronize


def _sync_name(dev: torch.device) -> str:
    if dev.type == "cpu":
        return "none (CPU work is complete when the call returns)"
    if dev.type == "cuda":
        return f"torch.cuda.synchronize({str(dev)!r}) before and after every first call and block"
    return f"torch.{dev.type}.synchronize() before and after every first call and block"


def _work_unit(work_units, work_unit, where: str) -> tuple:
    if work_units is None:
        work_units = 1
    elif isinstance(work_units, bool) or not isinstance(work_units, numbers.Real):
        raise TypeError(f"{where}: work_units (work units per workload call, e.g. the batch size) must be a "
                        f"positive number, got {type(work_units).__name__}")
    if not math.isfinite(float(work_units)) or work_units <= 0:
        raise ValueError(f"{where}: work_units must be a positive finite number (work per workload call), "
                         f"got {work_units}")
    if work_unit is None:
        work_unit = "calls" if work_units == 1 else "units"
    if not isinstance(work_unit, str) or not work_unit.strip():
        raise TypeError(f"{where}: work_unit must be a non-empty name such as 'samples' or 'tokens', "
                        f"got {work_unit!r}")
    return (int(work_units) if isinstance(work_units, numbers.Integral) else float(work_units)), work_unit


def _latency_options(where, warmup, min_run_time, number, repeats, device, work_units, work_unit, num_threads,
                     input_kwargs) -> dict:
    if input_kwargs is not None and not isinstance(input_kwargs, _MappingABC):
        raise TypeError(f"{where}: input_kwargs must be a mapping of keyword-argument metadata, "
                        f"got {type(input_kwargs).__name__}")
    units, unit = _work_unit(work_units, work_unit, where)
    return {"warmup": _int_arg(warmup, "warmup", where, 0),
            "min_run_time": _positive_real(min_run_time, "min_run_time", where),
            "number": _int_arg(number, "number", where, 1, allow_none=True),
            "repeats": _int_arg(repeats, "repeats", where, 1, allow_none=True),
            "dev": _device(device, where),
            "num_threads": _int_arg(num_threads, "num_threads", where, 1, allow_none=True),
            "work_units": units, "work_unit": unit}


def _work_unit_record(opts) -> dict:
    return {"name": opts["work_unit"], "units_per_call": opts["work_units"],
            "definition": f"one workload call processes {opts['work_units']} {opts['work_unit']}; throughput is "
                          f"{opts['work_units']} / median latency"}


# ---------------------------------------------------------------- context


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _context(kind: str, dev: torch.device) -> dict:
    import torchscan

    hardware = {"platform": platform.platform(), "machine": platform.machine(), "cpu": _cpu_model(),
                "cpu_count": os.cpu_count(), "device_name": None}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        hardware["device_name"] = props.name
        hardware["device_memory_bytes"] = props.total_memory
        hardware["device_capability"] = f"{props.major}.{props.minor}"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torchscan_version": torchscan.__version__, "torch_version": torch.__version__,
        "python_version": platform.python_version(), "measurement": kind, "device": str(dev),
        "hardware": hardware,
        "software": {"torch_git_version": torch.version.git_version, "torch_debug_build": bool(torch.version.debug),
                     "cuda": torch.version.cuda, "cudnn": cudnn, "mkldnn": torch.backends.mkldnn.is_available(),
                     "python_implementation": platform.python_implementation()},
        "threads": {"torch_num_threads": torch.get_num_threads(),
                    "torch_num_interop_threads": torch.get_num_interop_threads(),
                    "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                    "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS")},
        # The caller's state when the measurement started; the workload owns
        # grad mode, autocast and the rest while it runs.
        "execution_state": {"grad_enabled": torch.is_grad_enabled(),
                            "inference_mode": torch.is_inference_mode_enabled(),
                            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                            "float32_matmul_precision": torch.get_float32_matmul_precision()},
        "timing": None,
        "work_unit": None,
    }


def _inputs(inputs, input_kwargs) -> dict:
    if inputs is None and not input_kwargs:
        return {"source": "none", "args": describe(()), "kwargs": describe({})}
    args = inputs if isinstance(inputs, tuple) else (() if inputs is None else (inputs,))
    return {"source": "caller", "args": describe(args), "kwargs": describe(dict(input_kwargs or {}))}
