"""Kineto's own log lines around torch.profiler's start and stop, kept off
the terminal."""

from __future__ import annotations

import os
import sys


class ProfilerNoise:
    """Around torch.profiler's start and stop: Kineto's native code logs
    "USDT: ... profiler_start" / "profiler_stop" lines straight to fd 2,
    past sys.stderr. They are captured and dropped; anything else written
    meanwhile is written back to stderr."""

    def __enter__(self):
        import tempfile

        self._saved = None
        try:
            sys.stderr.flush()
            self._capture = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._capture.fileno(), 2)
        except (OSError, ValueError, AttributeError):  # no fd 2 (an embedded interpreter): nothing to hide
            self._restore()
        return self

    def _restore(self) -> bytes:
        if self._saved is None:
            return b""
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = None
        self._capture.seek(0)
        text = self._capture.read()
        self._capture.close()
        return text

    def __exit__(self, *exc):
        try:
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        kept = [line for line in self._restore().splitlines(keepends=True) if not line.startswith(b"USDT:")]
        if kept:
            os.write(2, b"".join(kept))
        return False
