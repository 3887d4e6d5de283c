"""Bit identity across a refactor: one preset of every task trained by two revisions of the code, compared.

    python -m benchmarks.identity BEFORE [AFTER]    # git revisions; AFTER: the working tree when left out

For each preset of `PRESETS` (one per task and objective) each revision trains ``get_preset(name).smoke(steps=…)``
on the CPU with one thread, in a subprocess that imports that revision (a ``git archive`` of it, or the working
tree) and nothing else of this checkout; the final tensors — the model's weights and the task's state (DINO's
centre) — are compared with ``torch.equal`` (a tensor that moved, e.g. from the model into the task, under its new
name) and the final metrics with ``==`` (timings left out). One line per preset; exit status 1 on any difference. Bit identity means something
on one machine and one torch build only: CI never asserts it.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("digits", "tost_digits", "mae_digits", "dino_digits", "simdino_digits", "gpt_stdlib", "bert_stdlib",
           "pairs_stdlib")
"""One preset per task (classification, MAE, DINO, causal and masked LM, sequence classification) and per
objective or attention of a task (SimDINO, ToST)."""
STEPS = 12
TIMING = ("seconds", "throughput", "samples_per_second", "tokens_per_second", "step_seconds")
"""Metric names (substrings) that measure time, not the run."""

WORKER = """
import sys, torch
import crate_nn
assert crate_nn.__file__.startswith(sys.argv[4]), f"imported {crate_nn.__file__}, not the code under {sys.argv[4]}"
torch.set_num_threads(1)
from crate_nn.engine import train
from crate_nn.tasks import get_preset
from crate_nn.checkpoint import read
name, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
config = get_preset(name).smoke(steps=steps, output_dir=out + "/run", curves=False)
result = train(config)
saved = read(result.checkpoint)
tensors = dict(saved["model"])
def flatten(prefix, value):
    if isinstance(value, torch.Tensor):
        tensors[prefix] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}", v)
flatten("task", saved.get("task") or {})
torch.save({"tensors": tensors, "metrics": result.metrics}, out + "/final.pt")
"""


def _source(revision: str | None, folder: Path) -> Path:
    """The code of ``revision`` (None: the working tree) as a folder to import from."""
    if revision is None:
        return ROOT
    target = folder / revision.replace("/", "_")
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "crate_nn"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def _train(source: Path, preset: str, out: Path) -> dict:
    out.mkdir(parents=True)
    env = {"PYTHONPATH": str(source), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", WORKER, preset, str(STEPS), str(out), str(source)], check=True, cwd=out, env=env,
                   capture_output=True)
    return torch.load(out / "final.pt", weights_only=False)


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _moved(a: dict, b: dict) -> dict[str, str]:
    """Tensors held under another name after the refactor (e.g. a buffer that moved from the model into the task's
    state): name in ``a`` → name in ``b``, matched by their last name component where it is unique in both."""
    only_a, only_b = set(a) - set(b), set(b) - set(a)
    leaves_b = {}
    for k in only_b:
        leaves_b.setdefault(_leaf(k), []).append(k)
    return {k: leaves_b[_leaf(k)][0] for k in only_a
            if len(leaves_b.get(_leaf(k), [])) == 1 and sum(_leaf(j) == _leaf(k) for j in only_a) == 1}


def _differences(a: dict, b: dict) -> list[str]:
    """What differs between two runs' final tensors (the model's weights and the task's state) and metrics; a
    tensor that moved (`_moved`) is compared under its new name."""
    moved = _moved(a["tensors"], b["tensors"])
    pairs = {k: k for k in set(a["tensors"]) & set(b["tensors"])} | moved
    out = [f"tensor {k}" for k in sorted(pairs) if not torch.equal(a["tensors"][k], b["tensors"][pairs[k]])]
    out += [f"tensor {k} on one side only" for k in sorted(set(a["tensors"]) ^ set(b["tensors"]))
            if k not in moved and k not in moved.values()]
    metrics = [k for k in sorted(set(a["metrics"]) | set(b["metrics"])) if not any(t in k for t in TIMING)
               and a["metrics"].get(k) != b["metrics"].get(k)]
    return out + [f"metric {k}: {a['metrics'].get(k)} vs {b['metrics'].get(k)}" for k in metrics]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.identity", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", help="git revision trained first")
    parser.add_argument("after", nargs="?", help="git revision to compare (default: the working tree)")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), help=f"default: {' '.join(PRESETS)}")
    parser.add_argument("--out", type=Path, help="also write the verdicts here as JSON")
    args = parser.parse_args(argv)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        sources = {side: _source(rev, Path(tmp)) for side, rev in (("before", args.before), ("after", args.after))}
        for preset in args.presets:
            runs = {side: _train(src, preset, Path(tmp) / side / preset) for side, src in sources.items()}
            differ = _differences(runs["before"], runs["after"])
            moved = _moved(runs["before"]["tensors"], runs["after"]["tensors"])
            rows[preset] = {"identical": not differ, "tensors": len(runs["after"]["tensors"]),
                            "metrics": len(runs["after"]["metrics"]), "moved": moved, "differences": differ}
            print(f"{preset:16s} {'identical' if not differ else 'DIFFERENT'}: {len(runs['after']['tensors'])} "
                  f"tensors, {len(runs['after']['metrics'])} final metrics"
                  + "".join(f"; {k} moved to {v}" for k, v in moved.items()) + (f"; {differ[:3]}" if differ else ""))
    if args.out:
        args.out.write_text(json.dumps({"before": args.before, "after": args.after or "working tree",
                                        "steps": STEPS, "presets": rows}, indent=1) + "\n")
    return 0 if all(r["identical"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
