"""SIGTERM and SIGINT stop the audit: within seconds, with no temporary file left, and exit status 128 + the signal.

`on_signals` makes either signal raise `Interrupted` where the audit is (outside a training; during one the
engine finishes its optimizer step and raises `crate_nn.engine.Preempted`, which the audit's cache turns into
`Interrupted`). `Interrupted` is not an ``Exception``: no claim's error handling catches it, every ``finally`` and
context manager on the way out runs (the cache's temporary folders are removed), and the command's entry point
prints one line (`message`) and exits with `status`. Finished runs stay in the cache, so the same command
continues where it stopped.
"""
from __future__ import annotations

import contextlib
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """The audit received ``signum`` (SIGTERM or SIGINT) and is stopping."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = int(signum)


def _raise(signum, frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def on_signals():
    """Within the block (in the main thread; elsewhere nothing changes), SIGTERM and SIGINT raise `Interrupted`;
    the previous handlers are restored on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise) for s in SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def status(stop: BaseException) -> int:
    """The exit status of a command stopped by ``stop`` (`Interrupted`, or a ``KeyboardInterrupt`` — the engine's
    answer to a second signal): 128 + the signal's number."""
    return 128 + getattr(stop, "signum", signal.SIGINT)


def message(command: str, stop: BaseException, cache: str) -> str:
    """The one line a stopped command prints: what stopped it, that finished runs are kept, how to continue."""
    name = signal.Signals(status(stop) - 128).name
    return (f"{command}: stopped by {name}; the runs trained so far are kept in the cache ({cache}): run the same "
            "command again to continue")
