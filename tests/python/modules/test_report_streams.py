"""crawl_module loads its operator and module reports from one pickle stream
of the library (Session::ReportsPickle) instead of their JSON texts: the
same objects, type for type, and the texts' path wherever the stream is not
available."""

import json

import pytest
import torch

import torchscan
from tests.python.modules.test_crawl_fast_paths import _rows_case, _same_objects
from torchscan import _layers, flops


@pytest.mark.parametrize("case", ["mobilenet", "failed_and_axes_differ", "tokens", "wide_counts", "handlers"])
def test_pickled_reports_are_the_json_reports_type_for_type(monkeypatch, case):
    model, args, kwargs = _rows_case(case)
    seen = []
    both = flops.FlopScan._both_reports

    def compared(self, handle=0):
        assert handle, "the crawl has a native handle"
        loaded = both(self, handle)
        seen.append((loaded, json.loads(self._session.flop_report()), json.loads(self._session.module_report())))
        return loaded

    monkeypatch.setattr(flops.FlopScan, "_both_reports", compared)
    report = torchscan.crawl_module(model, args=args, **kwargs)
    ((flop, module), flop_text, module_text), = seen
    _same_objects(flop, flop_text, "flop_report")
    _same_objects(module, module_text, "module_report")
    assert report["operator_flops"] is flop
    if case == "wide_counts":
        # 2 * 16 * 2^30 * 2^30 = 2^65 FLOPs for the one linear (FlopCounterMode's
        # convention for a matmul: 2 per multiply-add): past 2^64 - 1, an exact int.
        assert flop["total"]["value"] == 2**65
        assert module["totals"]["macs"]["value"] == 2**64


def test_a_crawl_reads_the_texts_where_the_stream_is_refused(monkeypatch):
    """Without the entry point (or when it refuses), the reports come from
    the JSON texts: the same report."""
    model, args, _ = _rows_case("mobilenet")
    fast = torchscan.crawl_module(model, args=args)
    fast_flops = torchscan.measure_flops(lambda: model(*args))
    monkeypatch.setattr(flops, "_native_reports", lambda handle, which=3: None)
    assert json.dumps(torchscan.crawl_module(model, args=args)) == json.dumps(fast)
    assert json.dumps(torchscan.measure_flops(lambda: model(*args))) == json.dumps(fast_flops)


def test_measure_flops_loads_the_same_report_as_its_text(monkeypatch):
    model, args, _ = _rows_case("wide_counts")
    texts = []
    report = flops.FlopScan.report

    def compared(self):
        loaded = report(self)
        texts.append(json.loads(self._session.flop_report()))
        return loaded

    monkeypatch.setattr(flops.FlopScan, "report", compared)
    got = torchscan.measure_flops(lambda: model(*args))
    _same_objects(got, texts[0], "flop_report")
    assert got["total"]["value"] == 2**65


def test_the_stream_is_refused_for_a_scan_not_stopped_or_gone():
    scan = flops.FlopScan(None, scope="forward")
    handle = scan._session.native_handle()
    assert handle
    scan._session.start()
    try:
        torch.add(torch.ones(2), 1)
        assert _layers._native_reports(handle) is None  # still recording: refused, not half a report
    finally:
        scan._session.stop()
    flop, module = _layers._native_reports(handle)
    assert flop == json.loads(scan._session.flop_report()) and module == json.loads(scan._session.module_report())
    assert _layers._native_reports(handle, 1) == [flop] and _layers._native_reports(handle, 2) == [module]
    assert _layers._native_reports(handle, 0) is None and _layers._native_reports(handle, 4) is None
    del scan
    assert _layers._native_reports(handle) is None  # its handle names no session any more
