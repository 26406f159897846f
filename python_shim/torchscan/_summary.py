"""summary() and the readers of saved reports (render_report,
compare_reports): the text table is rendered by the library (reports/render.cc),
the one renderer of the Python API, the command line and C++."""

from __future__ import annotations

import operator
import sys
from typing import Any, Mapping, Optional, Sequence

import torch.nn as nn

__all__ = ["SummaryReport", "compare_reports", "render_report", "summary"]


def _report_json(report, where: str, what: str = "the report") -> str:
    """A report mapping as JSON text for the C++ readers; what cannot be JSON
    (NaN, a tensor, a cycle, absurd nesting) is refused here, by name."""
    import json

    try:
        return json.dumps(report, allow_nan=False)
    except TypeError as e:
        raise TypeError(f"{where}: {what} is not JSON-serializable ({e}); pass the report dict as saved") from None
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{where}: {what} is not valid JSON ({e})") from None


def _compare_json_text(before: str, after: str, before_file: str = "", after_file: str = "") -> str:
    """ReportDiff JSON text of two reports given as JSON text; the file names
    (when known) appear in error messages, with "before"/"after"."""
    from torchscan._library import Session
    from torchscan._scan_diff import compare_if_scan_reports

    # Two C++ scan reports: their rows aggregated across requests (_scan_diff.py).
    scan = compare_if_scan_reports(before, after, before_file, after_file)
    if scan is not None:
        return scan
    return Session.compare_reports(before, after, before_file, after_file)


def _render_json_text(text: str, max_depth: Optional[int] = None, receptive_field: bool = False,
                      file: str = "") -> str:
    """render_report for a report given as JSON text; `file` names it in errors."""
    from torchscan._library import Session
    from torchscan.crawler import _check_max_depth

    _check_max_depth(max_depth, "torchscan.render_report")
    depth = -1 if max_depth is None else min(operator.index(max_depth), 2**31 - 1)  # past any real depth
    return Session.render_report(text, depth, bool(receptive_field), file)


def compare_reports(before: Mapping, after: Mapping) -> dict:
    """ReportDiff of two saved reports of the same kind: two AnalysisReports
    (layer calls matched by path and call index) or two FlopReports (total and
    by_operator). Numeric deltas only when both sides are complete. A report
    that does not match the schema is a ValueError naming the side and field."""
    import json

    where = "torchscan.compare_reports"
    return json.loads(_compare_json_text(_report_json(before, where, "the before report"),
                                         _report_json(after, where, "the after report")))


def render_report(report: Mapping, max_depth: Optional[int] = None, receptive_field: bool = False) -> str:
    """Text rendering of a saved AnalysisReport or FlopReport; measures nothing.
    max_depth: deepest layer depth shown (0: the root only; None, or any depth
    past the deepest layer: every layer); a row at max_depth includes the
    work and parameters of the layers below it, so the rows add up to the
    totals. Parameter counts are exact, bytes in binary units (KiB, MiB).
    receptive_field adds receptive-field, effective-stride and padding columns."""
    from torchscan.crawler import _check_flag

    _check_flag(receptive_field, "receptive_field", "torchscan.render_report")
    return _render_json_text(_report_json(report, "torchscan.render_report"), max_depth, receptive_field)


_SUMMARY = object()  # "as summary() was called"


class SummaryReport(dict):
    """What summary() returns: the AnalysisReport dict crawl_module returns
    (every key, JSON-serialisable as before), whose printed form (str, repr,
    the REPL, a notebook) is its table at the max_depth and receptive_field
    summary() was given. render() takes other ones."""

    def __init__(self, report: Mapping = {}, max_depth: Optional[int] = None, receptive_field: bool = False):
        super().__init__(report)
        self.max_depth = max_depth
        self.receptive_field = receptive_field
        self._built = False  # summary() sets it: the report as crawl_module built it

    def render(self, max_depth: Any = _SUMMARY, receptive_field: Any = _SUMMARY) -> str:
        """The table (render_report) of this report; by default at summary()'s
        max_depth and receptive_field (max_depth=None: every layer)."""
        max_depth = self.max_depth if max_depth is _SUMMARY else max_depth
        receptive_field = self.receptive_field if receptive_field is _SUMMARY else receptive_field
        if self._built:
            # The report summary() built, rendered as it is in memory
            # (_render.py: the library's table without writing the report
            # out as JSON and reading it back); whatever fails there, an
            # edited report included, goes to the library's renderer below.
            from torchscan.crawler import _check_flag, _check_max_depth

            _check_max_depth(max_depth, "torchscan.render_report")
            _check_flag(receptive_field, "receptive_field", "torchscan.render_report")
            try:
                from torchscan._render import render_analysis

                depth = -1 if max_depth is None else min(operator.index(max_depth), 2**31 - 1)
                return render_analysis(self, depth, receptive_field)
            except Exception:  # noqa: BLE001 - the library's renderer says what is wrong
                pass
        return render_report(self, max_depth, receptive_field)

    def __str__(self) -> str:
        return self.render().rstrip("\n")

    def __repr__(self) -> str:
        try:
            return self.render().rstrip("\n")
        except (TypeError, ValueError, RuntimeError) as e:  # edited into something that is no report
            return f"SummaryReport (no table: {str(e).splitlines()[0] if str(e) else type(e).__name__}) " \
                   f"{dict.__repr__(self)}"

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython and Jupyter
        printer.text(repr(self))

    # An edit at the top level makes it a report summary() did not build:
    # rendered by the library's renderer from then on, which validates it.
    def __setitem__(self, key, value) -> None:
        self._built = False
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        self._built = False
        super().__delitem__(key)

    def __ior__(self, other):  # type: ignore[misc]  # dict's own signature
        self._built = False
        return super().__ior__(other)

    def update(self, *args, **kwargs) -> None:
        self._built = False
        super().update(*args, **kwargs)

    def pop(self, *args):
        self._built = False
        return super().pop(*args)

    def popitem(self):
        self._built = False
        return super().popitem()

    def clear(self) -> None:
        self._built = False
        super().clear()

    def setdefault(self, key, default=None):
        self._built = False
        return super().setdefault(key, default)


def summary(module: nn.Module, input_shape: Optional[Sequence] = None, *, max_depth: Optional[int] = None,
            receptive_field: bool = False, verbose: Optional[bool] = None, **crawl_options) -> SummaryReport:
    """One crawl_module forward, returned as a SummaryReport: the report dict,
    printed as its table (max_depth and receptive_field as in render_report:
    rows at max_depth include the layers below them). verbose: print the
    table too; by default it is printed except at the interactive prompt,
    which shows the returned report (printing it there would show it twice)."""
    from torchscan.crawler import _check_flag, _check_max_depth, crawl_module

    _check_max_depth(max_depth, "torchscan.summary")  # before the model runs
    _check_flag(receptive_field, "receptive_field", "torchscan.summary")
    if verbose is not None:
        _check_flag(verbose, "verbose", "torchscan.summary")
    report = SummaryReport(crawl_module(module, input_shape, **crawl_options), max_depth, receptive_field)
    report._built = True
    text = report.render()  # a report the renderer refuses is an error here, not at the prompt
    if verbose or (verbose is None and not hasattr(sys, "ps1")):
        print(text)
    return report
