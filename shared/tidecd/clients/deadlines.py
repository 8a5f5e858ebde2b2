"""Deadlines of outside calls. Object store calls: how long one GCS request may wait, how
long a failing call is retried (google-cloud-storage's own Retry and backoff), and the budget a caller that
must answer quickly (the webhook, the api) gives all the store calls made in its context. Kubernetes API calls: the
timeout of each one, derived from what is left of the deadline of the reconcile step that makes it (within
a floor and a ceiling), or a fixed one outside a step (api reads, the CLI), so that an API server that hangs
(paused, overloaded, a network that drops packets) ends the step within its budget instead of holding it
for minutes (`clients.transport` sends each call with it).

The budget and the deadline live in context variables, so they follow the call (its thread or task)
without being passed through every layer between the entry point and the client; threads a call starts get
none of them unless it hands them a copy of its context (`in_context`, as the step's pool does).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tidecd.base.errors import ConfigError

STORE_TIMEOUT = 5.0  # seconds one GCS request may wait (connect, and each read of the answer)
STORE_RETRY_DEADLINE = 10.0  # seconds a failing call is retried, with backoff, before StoreUnavailable
_BACKOFF = (0.1, 2.0, 2.0)  # first delay, largest delay, multiplier (jittered by google.api_core)
API_TIMEOUT = 30.0  # seconds one Kubernetes API call may take outside a step (api reads, the CLI, the image tick)
API_TIMEOUT_FLOOR = 2.0  # the least a call in a step is given, even at or past its deadline
API_TIMEOUT_CEILING = 60.0  # the most a call in a step is given, whatever its budget (a step's lease is 60 s)

T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")


def env_seconds(name: str, default: float, env: Mapping[str, str] | None = None) -> float:
    """A positive number of seconds from the environment (`default` when unset); anything else is one
    clear ConfigError naming the variable."""
    raw = (os.environ if env is None else env).get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected a number of seconds") from None
    if not 0 < value < 3600:
        raise ConfigError(f"{name}={raw!r}: expected more than 0 and less than 3600 seconds")
    return value


@dataclass(frozen=True)
class Deadlines:
    """How long one store call may take: per request, and retrying in all."""

    timeout: float = STORE_TIMEOUT
    retry_deadline: float = STORE_RETRY_DEADLINE

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Deadlines:
        return cls(timeout=env_seconds("TIDECD_STORE_TIMEOUT", STORE_TIMEOUT, env),
                   retry_deadline=env_seconds("TIDECD_STORE_RETRY_DEADLINE", STORE_RETRY_DEADLINE, env))


class Budget:
    """The seconds store calls may still take in one context (one webhook delivery, one api answer).

    Each call is given at most what is left (as its request timeout and its retry deadline) and is charged
    what it took; with nothing left a call fails at once with StoreUnavailable. `failed_only` charges only
    calls that failed: a healthy but busy answer is never cut short, a store that hangs costs it once."""

    def __init__(self, seconds: float, what: str, *, failed_only: bool = False) -> None:
        self.seconds, self.what, self.failed_only = seconds, what, failed_only
        self._spent = 0.0
        self._lock = threading.Lock()

    def left(self) -> float:
        with self._lock:
            return self.seconds - self._spent

    def charge(self, seconds: float, *, failed: bool) -> None:
        if failed or not self.failed_only:
            with self._lock:
                self._spent += seconds

    def exhausted(self) -> str:
        """The message of the StoreUnavailable a call meets when nothing is left."""
        return f"the object store did not answer within {self.what} ({self.seconds:g} s)"


_BUDGET: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("tidecd_store_budget", default=None)


def current_budget() -> Budget | None:
    """The budget of the context the caller runs in (None: no bound beyond the calls' own deadlines)."""
    return _BUDGET.get()


def budget(seconds: float, what: str, *, failed_only: bool = False) -> contextlib.AbstractContextManager[Budget]:
    """Bound the time store calls made in this block (this thread or task) take together; see `Budget`."""
    return _holding(_BUDGET, Budget(seconds, what, failed_only=failed_only))


@contextlib.contextmanager
def _holding(var: contextvars.ContextVar[V | None], value: V) -> Iterator[V]:
    """`var` is `value` in this block (this thread or task), and what it was after it."""
    token = var.set(value)
    try:
        yield value
    finally:
        var.reset(token)


@dataclass(frozen=True)
class CallOptions:
    """What one google-cloud-storage call is given: `timeout=` and `retry=` (None: a single attempt)."""

    timeout: float
    retry: Any
    conditional_retry: Any  # for writes and deletes: retried only with a generation precondition


def call_options(deadlines: Deadlines, left: float | None = None) -> CallOptions:
    """google-cloud-storage's DEFAULT_RETRY (its transient errors: 408, 429, 5xx, resets, timeouts) with our
    deadline and backoff; conditional writes use the library's ConditionalRetryPolicy, which retries only
    calls that carry `if_generation_match`. `left`: what the context's budget still allows."""
    # lazy: cold start (google.cloud only when GCS or Pub/Sub is used)
    from google.cloud.storage.retry import DEFAULT_RETRY, ConditionalRetryPolicy, is_generation_specified

    timeout, deadline = deadlines.timeout, deadlines.retry_deadline
    if left is not None:
        timeout, deadline = min(timeout, left), min(deadline, left)
    retry = DEFAULT_RETRY.with_deadline(deadline).with_delay(*_BACKOFF)
    return CallOptions(timeout, retry, ConditionalRetryPolicy(retry, is_generation_specified, ["query_params"]))


@dataclass(frozen=True)
class ApiTimeouts:
    """How long one Kubernetes API call may take: `fixed` outside a step; in a step what is left of its
    deadline, but at least `floor` (a call the step makes at its deadline, such as its last health read, is
    not failed before it could be answered) and at most `ceiling`."""

    fixed: float = API_TIMEOUT
    floor: float = API_TIMEOUT_FLOOR
    ceiling: float = API_TIMEOUT_CEILING

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.ceiling:
            raise ConfigError(f"TIDECD_API_TIMEOUT_FLOOR={self.floor:g} and TIDECD_API_TIMEOUT_CEILING="
                              f"{self.ceiling:g}: the floor must be more than 0 and at most the ceiling")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiTimeouts:
        return cls(fixed=env_seconds("TIDECD_API_TIMEOUT", API_TIMEOUT, env),
                   floor=env_seconds("TIDECD_API_TIMEOUT_FLOOR", API_TIMEOUT_FLOOR, env),
                   ceiling=env_seconds("TIDECD_API_TIMEOUT_CEILING", API_TIMEOUT_CEILING, env))

    def timeout(self, left: float | None) -> float:
        """The timeout of one call, `left` being what its step's deadline still allows (None: no step)."""
        if left is None:
            return self.fixed
        return min(max(left, self.floor), self.ceiling)


class ApiDeadline:
    """A step's deadline for its Kubernetes API calls (monotonic `at`), and the servers that let one of its
    calls time out: the step's later calls to such a server fail at once (`clients.transport.send`), those
    its pool had queued too, so a server that hangs costs the step one timeout, not one per call."""

    def __init__(self, at: float) -> None:
        self.at = at
        self._hung: set[str] = set()
        self._lock = threading.Lock()

    def left(self, now: float | None = None) -> float:
        return self.at - (time.monotonic() if now is None else now)

    def timed_out(self, server: str) -> None:
        with self._lock:
            self._hung.add(server)

    def hung(self, server: str) -> bool:
        with self._lock:
            return server in self._hung


_DEADLINE: contextvars.ContextVar[ApiDeadline | None] = contextvars.ContextVar("tidecd_api_deadline", default=None)


def api_deadline(seconds: float) -> contextlib.AbstractContextManager[ApiDeadline]:
    """The Kubernetes API calls made in this block (this thread or task, and the work it hands on with
    `in_context`) are given what is left of `seconds` from now (`ApiTimeouts.timeout`). A reconcile step
    runs under its budget."""
    return _holding(_DEADLINE, ApiDeadline(time.monotonic() + seconds))


def current_api_deadline() -> ApiDeadline | None:
    """The deadline of the context the caller runs in (None outside a step)."""
    return _DEADLINE.get()


def api_time_left(now: float | None = None) -> float | None:
    """Seconds until the context's API deadline (negative once past it; None outside a step)."""
    deadline = _DEADLINE.get()
    return None if deadline is None else deadline.left(now)


def in_context(fn: Callable[[T], R]) -> Callable[[T], R]:
    """`fn`, run in a copy of the caller's context wherever it is called: a pool thread running it keeps the
    caller's deadline and budget. (A copy per call: one context cannot be entered by two threads at once.)"""
    context = contextvars.copy_context()

    def run(item: T) -> R:
        return context.copy().run(fn, item)

    return run

