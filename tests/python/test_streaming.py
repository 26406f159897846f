"""Streaming scans (scan(streaming=True), ScanOptions::streaming): calls are
folded into the reports' sums whenever nothing is open and then dropped.
The reports must equal those of the same scan holding every call, on every
zoo workload, with module scopes (layer rows and receptive fields), module
labels (by_module) and several folds per workload; memory must not grow
with the calls."""
import json

import pytest
import torch
import torch.nn as nn

import torchscan
from torchscan.flops import FlopScan
from tests.fixtures.zoo import workloads

_ZOO = workloads()


class _Scopes:
    """Module scopes the way crawl_module opens them (a scope per module call,
    closed with its output tensors' identities), for any workload."""

    def __init__(self, session):
        self._session = session
        self._open = []

    def __enter__(self):
        def pre(mod, args):
            self._open.append(self._session.push_module_scope(type(mod).__name__))

        def post(mod, args, out):
            flat = out if isinstance(out, (tuple, list)) else (out,)
            ids = [t._cdata for t in flat if isinstance(t, torch.Tensor)]
            self._session.pop_module_scope(self._open.pop(), False, ids)

        self._hooks = [nn.modules.module.register_module_forward_pre_hook(pre),
                       nn.modules.module.register_module_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for h in self._hooks:
            h.remove()
        return False


def _reports(run, streaming, fold_every, repeats=3):
    torch.manual_seed(0)
    s = FlopScan(modules=True, streaming=streaming, _fold_every=fold_every)
    with s:
        with _Scopes(s._session):
            for _ in range(repeats):
                run()
    scan = s.scan_report()
    assert scan["context"].pop("streaming") is streaming
    return {"flops": s.report(), "module": s.module_report(), "scan": scan,
            "calls": s._session.recorded_calls(), "held": s._session.held_calls()}


@pytest.mark.parametrize("name", sorted(_ZOO))
def test_streaming_reports_equal_full_reports_on_the_zoo(name):
    run = _ZOO[name]
    run()  # warm-up: lazy initialisation (optimizer state, caches) happens outside the scans
    full = _reports(run, False, 4096)
    assert full["held"] == full["calls"] > 0
    # Folding at every moment nothing is open, and every 50 calls.
    for fold_every in (1, 50):
        streamed = _reports(run, True, fold_every)
        for part in ("flops", "module", "scan"):
            assert streamed[part] == full[part], (name, fold_every, part)
        assert streamed["calls"] == full["calls"]
    # Each repeat is a root module call, so only the last one's calls are held.
    assert streamed["held"] < full["calls"]
