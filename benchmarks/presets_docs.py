"""The times the README and docs quote, written from `benchmarks.presets`' JSON (``python -m benchmarks.presets
--docs [JSON]``): each lies between the markers `verify.documents` keeps, naming this command::

    <!-- generated: times-NAME (python -m benchmarks.presets --docs) -->
    …
    <!-- end: times-NAME -->

`PARTS`: README.md's setup, audit and test times under "Install and run" and its digits time under "Training";
docs/audit.md's quick-audit times; docs/training.md's table of every row. Each time names the machine it was
measured on and the load before it; a row started above the JSON's quiet threshold
(`benchmarks.presets.QUIET_LOAD_PER_CPU` per CPU) is called busy, a row the JSON lacks "not timed yet", with the
command that times it. tests/benchmarks/test_presets.py renders the parts from the committed JSON and fails when a
document says something else.
"""
from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verify.documents import read_part, write_part

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m benchmarks.presets --docs"

Rows = dict[str, dict[str, Any]]


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min`` or ``1.2 h``: how the docs quote a time."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def machine(row: dict[str, Any]) -> str:
    """``2 CPUs (AMD EPYC 7B13)``: the machine a row was measured on."""
    return f"{row['cpus']} CPUs ({row['processor']})"


def measured(row: dict[str, Any] | None) -> bool:
    return row is not None and "failed" not in row


def load(row: dict[str, Any]) -> str:
    """The 1-minute load before → after, and ``busy`` when it was above the quiet threshold before."""
    return f"{row['load_1min_before']:.1f} → {row['load_1min_after']:.1f}" + ("" if row["quiet"] else " (busy)")


def missing(keys: list[str], rows: Rows) -> str:
    """What the docs say of rows the JSON lacks or holds as failed, with the command that measures them."""
    state = "failed" if all(key in rows for key in keys) else "not timed yet"
    return f"{state} (`python -m benchmarks.presets --only {' '.join(keys)}`)"


def phrase(key: str, rows: Rows, cpu: bool = False) -> str:
    """A row's wall time (``cpu``: and its CPU time) as a clause says it, or that it is missing."""
    row = rows.get(key)
    if not measured(row):
        return missing([key], rows)
    return duration(row["wall_s"]) + (f" ({duration(row['cpu_s'])} of CPU time)" if cpu else "")


def measured_on(keys: list[str], rows: Rows) -> str:
    """Where the rows ``keys`` were measured: each machine, and the load before the runs (busy when one started above
    the quiet threshold)."""
    shown = [rows[key] for key in keys if measured(rows.get(key))]
    if not shown:
        return ""
    machines = " and ".join(sorted({machine(row) for row in shown}))
    highest = max(row["load_1min_before"] for row in shown)
    if all(row["quiet"] for row in shown):
        return f"on {machines}, otherwise idle (1-minute load at most {highest:.1f} before a run)"
    return f"on {machines} while other jobs ran (busy: 1-minute load up to {highest:.1f} before a run)"


def prose(text: str, indent: str = "") -> str:
    """A generated paragraph (or list item, its lines after the first indented by ``indent``), wrapped at 120
    columns as the documents are, never inside a `code span`."""
    kept = "`".join(part.replace(" ", "\0") if i % 2 else part for i, part in enumerate(text.split("`")))
    wrapped = textwrap.fill(kept, width=120, subsequent_indent=indent, break_long_words=False,
                            break_on_hyphens=False)
    return wrapped.replace("\0", " ")


# ----------------------------------------------------------------------------------------------- the parts
def install(payload: dict[str, Any], rows: Rows) -> str:
    """README.md, under "Install and run": what the first run of each make target costs, one line each."""
    setup = rows.get("setup", {})
    local = any("find-links" in line or "file://" in line for line in setup.get("pip_config", ()))
    source = "PyTorch from pip's local wheels; a download takes longer" if local else "PyTorch from the package index"
    audit = (f"{phrase('audit-cold', rows)} from a cold cache, {phrase('audit-warm', rows)} once its trained models are "
             "cached")
    keys = ["setup", "audit-cold", "audit-warm", "test", "test-fast"]
    items = [f"`make setup`, which the first `make audit` or `make test` runs (a fresh `.venv`; {source}): "
             f"{phrase('setup', rows)}", f"`make audit`: {audit}", f"`make test`, as CI runs it: {phrase('test', rows)}",
             f"`make test-fast`: {phrase('test-fast', rows)}"]
    return "\n".join([
        *(prose(f"- {item}", indent="  ") for item in items),
        "",
        prose(f"Wall times {measured_on(keys, rows) or 'of no machine yet'}, measured by `python -m benchmarks.presets` "
              "(CPU times, threads and every preset: "
              "[docs/training.md](docs/training.md#how-long-the-built-in-presets-take))."),
    ])


def digits(payload: dict[str, Any], rows: Rows) -> str:
    """README.md, under "Training": the digits preset's time, and with ``--schedule.epochs 15``."""
    keys = ["digits", "digits-epochs15"]
    if not any(measured(rows.get(key)) for key in keys):
        return prose(f"The first is {missing(keys, rows)}.")
    threads = sorted({rows[key]["threads"] for key in keys if measured(rows.get(key))})
    return prose(f"The first takes {phrase('digits', rows, cpu=True)}, with `--schedule.epochs 15` "
                 f"{phrase('digits-epochs15', rows, cpu=True)}, {measured_on(keys, rows)}, "
                 f"{' or '.join(map(str, threads))} torch threads (`python -m benchmarks.presets`; every preset: "
                 "[docs/training.md](docs/training.md#how-long-the-built-in-presets-take)).")


def audit(payload: dict[str, Any], rows: Rows) -> str:
    """docs/audit.md: the quick audit's times, cold and warm."""
    keys = ["audit-cold", "audit-warm"]
    if not any(measured(rows.get(key)) for key in keys):
        return prose(f"Its times are {missing(keys, rows)}.")
    return prose(f"A quick audit takes {phrase('audit-cold', rows, cpu=True)} from a cold cache and "
                 f"{phrase('audit-warm', rows, cpu=True)} once they are cached, {measured_on(keys, rows)}, on the one "
                 "torch thread the audit sets (`python -m benchmarks.presets`; "
                 "[training.md](training.md#how-long-the-built-in-presets-take)).")


def _work(row: dict[str, Any]) -> str:
    """What a row's command got through: the steps of a training, the claims of an audit, pytest's summary."""
    if "steps" in row:
        done = f"{row['steps']:,}" if row["steps"] == row["planned_steps"] else (
            f"{row['steps']:,} of {row['planned_steps']:,}")
        return f"{done} steps"
    if "claims" in row:
        return f"{row['claims']:,} claims" + (f", {row['unexpected']} outside their expectation" if row["unexpected"]
                                              else "")
    return row.get("pytest", "–")


def shown(command: dict[str, str]) -> str:
    """A command as the table prints it: ``make test``, with its note (``as CI runs it``) if it has one."""
    return f"`{command['command']}`" + (f", {command['note']}" if command["note"] else "")


def table(payload: dict[str, Any], rows: Rows) -> str:
    """docs/training.md: every row of the catalogue, measured or not, then the machines."""
    machines: dict[tuple, str] = {}
    lines = ["| command | what ran | wall time | CPU time | threads | machine | 1-minute load before → after |",
             "|---|---|---|---|---|---|---|"]
    for command in payload["commands"]:
        row = rows.get(command["key"])
        if not measured(row):
            lines.append(f"| {shown(command)} | {'failed' if row else 'not timed yet'} | | | | | |")
            continue
        name = (row["processor"], row["cpus"], row["torch"], row["python"])
        letter = machines.setdefault(name, chr(ord("A") + len(machines)))
        threads = (f"{row['threads']} × {row['workers']} workers" if "workers" in row else str(row.get("threads", "–")))
        lines.append(f"| {shown(command)} | {_work(row)} | {duration(row['wall_s'])} | {duration(row['cpu_s'])} | "
                     f"{threads} | {letter} | {load(row)} |")
    lines.append("")
    for (processor, cpus, torch, python), letter in machines.items():
        on = [row for row in rows.values() if measured(row) and (row["processor"], row["cpus"], row["torch"],
                                                                 row["python"]) == (processor, cpus, torch, python)]
        days = sorted({row["utc"][:10] for row in on})
        commits = sorted({row["git_commit"] or "?" for row in on})
        lines.append(f"- {letter}: {cpus} CPUs ({processor}); torch {torch}, Python {python}; measured "
                     f"{' to '.join(dict.fromkeys([days[0], days[-1]]))} at commit {', '.join(commits)}")
    lines.append(f"- busy: a 1-minute load above {payload['quiet_load_per_cpu']} per CPU before the run")
    todo = [c["key"] for c in payload["commands"] if not measured(rows.get(c["key"]))]
    if todo:
        lines.append(f"- without a time: {len(todo)} rows (`python -m benchmarks.presets` times those its JSON lacks or "
                     "holds as failed)")
    return "\n".join(lines)


PARTS: dict[str, tuple[str, Callable[[dict[str, Any], Rows], str]]] = {
    "times-install": ("README.md", install),
    "times-digits": ("README.md", digits),
    "times-audit": ("docs/audit.md", audit),
    "times-presets": ("docs/training.md", table),
}
"""Part name → (the document holding it, relative to the repository, and what writes it)."""


def render(payload: dict[str, Any]) -> dict[str, str]:
    """Every part, written from ``payload`` (a parsed JSON of `benchmarks.presets`)."""
    rows = {row["key"]: row for row in payload["rows"]}
    return {name: write(payload, rows) for name, (_, write) in PARTS.items()}


def current(name: str, root: Path = ROOT) -> str:
    """Part ``name`` as its document holds it now."""
    return read_part(root / PARTS[name][0], name, COMMAND)


def update(payload: dict[str, Any], root: Path = ROOT, check: bool = False) -> list[str]:
    """Rewrite every part in its document under ``root`` (with ``check``, leave them); the names of those that
    differed."""
    return [name for name, text in render(payload).items()
            if write_part(root / PARTS[name][0], name, text, COMMAND, check=check)]


def main_update(path: Path) -> dict[str, Any]:
    """``--docs``: read the JSON at ``path`` and rewrite the docs from it (one line on a bad file, exit 2)."""
    try:
        payload = json.loads(path.read_text())
        if payload.get("benchmark") != "presets" or "commands" not in payload:
            raise ValueError("expected the JSON python -m benchmarks.presets writes")
        if payload["tiny"]:
            raise ValueError("a --tiny run's stand-ins are no times for the docs")
        changed = update(payload)
    except (OSError, ValueError, KeyError) as err:
        print(f"presets: --docs {path}: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"rewritten: {', '.join(changed)}" if changed else "every time in the docs is up to date")
    return payload
