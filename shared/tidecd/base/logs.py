"""Logging setup: structured lines on stderr, so command output on stdout stays machine-readable."""

from __future__ import annotations

import logging
import sys

import structlog


def _stderr_logger(*_args: object) -> structlog.PrintLogger:
    """A logger on the stderr of the moment of the call, not of `configure`: a stream swapped in later (a
    test's capture, click's runner) receives the lines, and one closed since is never written to."""
    return structlog.PrintLogger(sys.stderr)


def configure(level: int = logging.INFO) -> None:
    """Not cached on first use: a later `configure` (the CLI's -v, a test's capture) reaches every module's
    logger, also one that has logged already."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.dev.ConsoleRenderer(colors=False) if sys.stderr.isatty() else structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
