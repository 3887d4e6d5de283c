"""The error path every command line tool shares (crate-train, crate-eval, crate-eval-lm, crate-sample,
crate-segment, crate-pack, crate-prepare-text, crate-compare, crate-export): an expected failure — bad input, a missing optional
package, a file the operating system refuses, an unreadable image, a loss that stopped being finite — is one line
on stderr, ``<prog>: <what went wrong, naming the argument or file>``, and the tool's exit status; anything else is
a bug and keeps its traceback.

    try:
        result = run(args)
    except cli.EXPECTED as err:
        return cli.fail("crate-eval", err, 2)

Nothing here imports torch: a command whose module imports the rest inside its functions (crate-eval, crate-export)
parses its arguments with `Parser` — whose errors are one line too, ``<prog>: argument --x: …`` — and reads the
``choices`` of a registry (`Choices`) only when an argument needs them, so a mistyped argument is told in well under
a second, not after torch has loaded.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

from .errors import CorruptImageError, NonFiniteLossError

EXPECTED = (ValueError, TypeError, OSError, ImportError, CorruptImageError, NonFiniteLossError)
WORKER_TRACEBACK = "Original Traceback"  # how torch's DataLoader re-raises an exception from a worker process


def one_line(err: BaseException) -> str:
    """The message of ``err`` as one line: the worker's own message for an exception a DataLoader worker raised
    (torch re-raises it with the worker's whole traceback), ``<file>: <reason>`` for an OSError naming a file."""
    text = str(err).strip()
    if WORKER_TRACEBACK in text:
        text = text.splitlines()[-1].split(f"{type(err).__name__}: ", 1)[-1]
    elif isinstance(err, OSError) and err.filename is not None and err.strerror:
        text = f"{err.filename}: {err.strerror}"
    return " ".join(text.split()) or type(err).__name__


def fail(prog: str, err: BaseException, status: int) -> int:
    """Print ``<prog>: <one_line(err)>`` on stderr and return ``status``."""
    print(f"{prog}: {one_line(err)}", file=sys.stderr)
    return status


def table(title: str, rows: Sequence[tuple[str, str, str]]) -> str:
    """``title``, then one aligned line per ``(name, value, what it is)``: the short report an evaluating command
    prints (its ``--json`` gives the same numbers as JSON)."""
    names, values = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    return "\n".join([title, *(f"  {n.ljust(names)}  {v.rjust(values)}  {w}".rstrip() for n, v, w in rows)])


class Parser(argparse.ArgumentParser):
    """argparse's parser whose errors are one line on stderr, ``<prog>: <argparse's message>`` (no usage block:
    ``--help`` prints it), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {' '.join(message.split())}\n")


class Choices(Sequence):
    """An argument's ``choices`` read from ``read()`` when argparse first needs them (checking a value given, or
    ``--help``): a registry's names whose modules import torch."""

    def __init__(self, read: Callable[[], Iterable[str]]) -> None:
        self._read, self._values = read, None

    def _names(self) -> tuple[str, ...]:
        if self._values is None:
            self._values = tuple(self._read())
        return self._values

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, value) -> bool:
        return value in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())
