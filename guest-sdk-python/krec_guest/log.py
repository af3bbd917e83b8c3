"""Logging into the host's log, tagged with the guest's name and the current request.

``krec_guest.log.info("…")``, or Python's ``logging`` (records at INFO and above reach the
host by default: the SDK installs a handler on the root logger).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Optional

from .context import Host

_host: Optional[Host] = None


@contextlib.contextmanager
def installed(host: Host) -> Iterator[None]:
    """Send log lines to ``host`` while the block runs."""
    global _host
    before, _host = _host, host
    try:
        yield
    finally:
        _host = before


def log(level: str, message: str) -> None:
    """Write ``message`` at ``level`` (``trace``, ``debug``, ``info``, ``warn``, ``error``); lines
    written outside a call from the host are dropped."""
    if _host is not None:
        _host.log(level, message)


def trace(message: str) -> None:
    """Log very detailed tracing."""
    log("trace", message)


def debug(message: str) -> None:
    """Log detail useful when debugging."""
    log("debug", message)


def info(message: str) -> None:
    """Log normal progress."""
    log("info", message)


def warn(message: str) -> None:
    """Log something unexpected that was handled."""
    log("warn", message)


def error(message: str) -> None:
    """Log a failure."""
    log("error", message)


class HostHandler(logging.Handler):
    """A ``logging`` handler writing records into the host's log."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            level = "error"
        elif record.levelno >= logging.WARNING:
            level = "warn"
        elif record.levelno >= logging.INFO:
            level = "info"
        else:
            level = "debug"
        try:
            log(level, self.format(record))
        except Exception:  # noqa: BLE001 - logging never fails the caller
            self.handleError(record)


def forward_logging() -> None:
    """Forward the root logger's records (INFO and above) to the host, once."""
    root = logging.getLogger()
    if not any(isinstance(h, HostHandler) for h in root.handlers):
        root.addHandler(HostHandler())
        if root.level == logging.WARNING:
            root.setLevel(logging.INFO)
