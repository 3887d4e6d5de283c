"""``make gpu-check``: everything the CUDA path needs checked and measured, in one command on a GPU machine.

    make gpu-check                                                   # every stage, in the order below
    make gpu-check GPU_CHECK_ARGS="--budget 600"                     # what fits in 10 minutes, most important first
    python3 -m benchmarks.gpu_check --only step pipeline             # some stages (a later run adds to the record)
    python3 -m benchmarks.gpu_check --list                           # the stages and their commands
    python3 -m benchmarks.gpu_report [--markdown]                    # the summary again, from the JSON

Stages, in order of importance, each its own process (``python3 -m …``, all benchmarks with ``--device cuda``):

    step       CRATE-Base's training step at 224², batch 256, bf16: torch.compile's default mode (the previous
               best), with bf16 activations, with CUDA graphs (reduce-overhead), with both — side by side with the
               authors' computation and timm's ViT-B/16 (compiled) in one run: images/s, MFU, peak memory
    pipeline   crate-train --preset imagenet end to end from crate-pack shards (threads, worker processes, the main
               process) and from JPEG files, in the step stage's fastest variant, against its bare step
    sizes      crate_tiny / small / large in the default and the fastest variant: images/s, MFU, peak memory
    inference  the evaluation forward pass of every CRATE size (eager): images/s, peak memory
    data       input-pipeline rates: shard reads and JPEG decoding by 0 / 4 / W workers, processes and threads;
               the batched crop against kornia's per-image crop; packing
    tests      ``pytest -m gpu tests/gpu``: every registered model and preset on the GPU
    tasks      every preset's training step
    eager      CRATE-Base eager, with torch.profiler's op tables (what limits the step)
    fusion     the kernels inductor generates for one CRATE layer's step (is the LayerNorm fused with the sum?)
    autotune   CRATE-Base with max-autotune (GEMM search and CUDA graphs; its compilation takes minutes)

The step stage's fastest variant (read from its JSON) is passed on to the pipeline and sizes stages. With ``--budget``
SECONDS a stage that would not fit in what is left is skipped and named (run it later with ``--only``); without it
every stage runs, each under its own time limit. At the end the figures a user plans with — MFU per variant, the
end-to-end fraction, the evaluation rate, peak memory per size, the projected wall time of the 150-epoch imagenet
preset on this machine — are printed (`benchmarks.gpu_report`) and stored in ``gpu_check.json``.

On a machine without a package index (an air-gapped cluster), ``make wheels`` on a machine with one downloads the
wheels the project needs besides PyTorch (kornia, kornia-rs, lion-pytorch) for the GPU machine's Python into
``wheels/``; copy that folder along, and ``gpu_check`` installs the ones missing with ``pip install --no-index``
(``--wheels``; ``--no-install`` uses the packages as they are).

Results: one JSON per benchmark stage and ``gpu_check.json`` (device, driver, CUDA, torch, the command, each
stage's command, status, time and output tail, the summary; a later run adds its stages to the earlier ones)
under ``--out-dir`` (default ``benchmarks/results/gpu``). Exit status: 0 when every stage that ran succeeded, 1
otherwise. Without CUDA the tests stage runs (every GPU test is skipped, with its reason), the benchmarks are
skipped, nothing is written, and the status is 0.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import gpu_report

ROOT = Path(__file__).resolve().parents[1]
STEP_VARIANTS = ("default", "default+bf16-activations", "reduce-overhead", "reduce-overhead+bf16-activations")


@dataclass(frozen=True)
class Stage:
    name: str
    args: tuple[str, ...] | Callable[[], tuple[str, ...]]  # after ``python -m``; a callable is resolved when it runs
    needs_cuda: bool
    minimum_s: int  # with --budget: do not start with less time left than this
    limit_s: int  # the stage's own time limit
    output: str | None = None  # the JSON the stage writes (under --out-dir)

    def command(self) -> tuple[str, ...]:
        return self.args() if callable(self.args) else self.args


def stages(out: Path, workers: int) -> list[Stage]:
    def bench(name: str, *args: str, output: str, minimum_s: int, limit_s: int) -> Stage:
        return Stage(name, ("benchmarks." + args[0], *args[1:], "--device", "cuda", "--out", str(out / output)),
                     True, minimum_s, limit_s, output)

    def best(*args: str, variants: bool = False, **kwargs) -> Stage:
        """A benchmark run in the step stage's fastest variant (resolved when the stage starts)."""
        def resolve() -> tuple[str, ...]:
            mode, activations = gpu_report.best_variant(out)
            if variants:
                chosen = mode + ("+bf16-activations" if activations == "bf16" else "")
                extra = ("--variants", *dict.fromkeys(["default", chosen]))
            else:
                extra = ("--compile", "--compile-mode", mode, "--activations", activations)
            return (*template.args[:-4], *extra, *template.args[-4:])

        template = bench(*args, **kwargs)
        return Stage(template.name, resolve, True, template.minimum_s, template.limit_s, template.output)

    return [
        bench("step", "train_step", "--models", "crate_base", "--batch-size", "256", "--variants", *STEP_VARIANTS,
              "--beside", "vit_base_patch16_224", "--repeats", "20", "--warmup", "5",
              output="train_step_base.json", minimum_s=300, limit_s=900),
        best("pipeline", "pipeline", "--batch-size", "256", "--steps", "64", "--log-every", "8", "--workers",
             str(workers), "--loaders", f"threads:{workers}", f"processes:{workers}", "main",
             output="pipeline.json", minimum_s=240, limit_s=900),
        best("sizes", "train_step", "--models", "crate_tiny", "crate_small", "crate_large", "--batch-size", "256",
             "--repeats", "10", "--warmup", "3", variants=True, output="train_step_sizes.json", minimum_s=240,
             limit_s=1200),
        bench("inference", "inference", "--models", "crate_tiny", "crate_small", "crate_base", "crate_large",
              "--batch-size", "512", output="inference.json", minimum_s=60, limit_s=600),
        bench("data", "data", "--workers", *map(str, sorted({0, 4, workers})), "--loaders", "processes", "threads", "--images",
              "2048", "--batch-size", "256", "--repeats", "2", output="data.json", minimum_s=240, limit_s=900),
        Stage("tests", ("pytest", "-m", "gpu", "tests/gpu", "-q", "-n", "4", "-p", "no:cacheprovider",
                        f"--junitxml={out / 'tests.xml'}"), False, 330, 1800),
        bench("tasks", "task_step", "--batch-size", "256", output="task_step.json", minimum_s=60, limit_s=900),
        bench("eager", "train_step", "--models", "crate_base", "--batch-size", "256", "--variants", "eager",
              "--repeats", "20", "--warmup", "5", "--profile", output="train_step_base_eager.json", minimum_s=45,
              limit_s=600),
        bench("fusion", "fusion", output="fusion.json", minimum_s=60, limit_s=600),
        bench("autotune", "train_step", "--models", "crate_base", "--batch-size", "256", "--variants", "default",
              "max-autotune", "max-autotune+bf16-activations", "--repeats", "20", "--warmup", "5",
              output="train_step_autotune.json", minimum_s=600, limit_s=3600),
    ]


def missing_wheels(folder: Path) -> list[Path]:
    """The wheels in ``folder`` whose distribution is not installed (a wheel's name is ``NAME-VERSION-…whl``)."""
    missing = []
    for wheel in sorted(folder.glob("*.whl")):
        try:
            importlib.metadata.version(wheel.name.split("-")[0])
        except importlib.metadata.PackageNotFoundError:
            missing.append(wheel)
    return missing


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "-q", *args], cwd=ROOT, capture_output=True, text=True)


def install(wheels: Path, env: dict) -> dict:
    """Install the missing carried wheels, then the project (editable); fall back to PYTHONPATH for either."""
    record: dict = {"wheels": [w.name for w in missing_wheels(wheels)] if wheels.is_dir() else [], "notes": []}
    if record["wheels"]:
        done = pip(*(str(wheels / name) for name in record["wheels"]))
        if done.returncode:  # e.g. a read-only site-packages: install beside it
            target = Path("/tmp/crate_site")
            done = pip("--target", str(target), *(str(wheels / name) for name in record["wheels"]))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
            record["notes"].append(f"wheels installed with --target {target}")
        if done.returncode:
            record["notes"].append(f"wheel install failed: {done.stderr[-1000:]}")
            record["ok"] = False
            return record
    project = pip("-e", str(ROOT))
    if project.returncode:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        record["notes"].append("the project was not pip-installed (" + project.stderr.strip()[-300:]
                               + "); stages run with PYTHONPATH = the repository")
    record["ok"] = True
    return record


def environment() -> dict:
    import torch

    from benchmarks.common import environment as bench_environment
    from benchmarks.common import nvidia_driver

    cuda = torch.cuda.is_available()
    env = bench_environment(torch.device("cuda" if cuda else "cpu"))
    env["cuda_available"] = cuda
    if not cuda:
        env["driver"] = nvidia_driver()
    return env


def run_stage(name: str, args: tuple[str, ...], env: dict, timeout: float, output: str | None) -> dict:
    started = time.perf_counter()
    command = [sys.executable, "-m", *args]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        status, rc, text = ("ok" if done.returncode == 0 else "failed"), done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        status, rc = f"timed out after {timeout:.0f} s", None
        text = "".join(part.decode() if isinstance(part, bytes) else (part or "") for part in (err.stdout, err.stderr))
    seconds = time.perf_counter() - started
    print(f"[gpu-check] {name}: {status} in {seconds:.0f} s", flush=True)
    tail = text[-6000:]
    print(tail, flush=True)
    return {"command": " ".join(["python3", "-m", *args]), "status": status, "returncode": rc,
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(seconds, 1), "output": output, "output_tail": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for all stages together: a stage that would not fit is skipped (default: no "
                             "budget, every stage runs under its own limit)")
    parser.add_argument("--wheels", type=Path, default=ROOT / "wheels",
                        help="folder of wheels to install without a package index (make wheels)")
    parser.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                        help="data-loading workers (threads or processes) of the pipeline and data stages")
    parser.add_argument("--only", nargs="+", default=None, help="run only these stages (install always runs)")
    parser.add_argument("--skip", nargs="+", default=[], help="leave these stages out")
    parser.add_argument("--no-install", dest="install", action="store_false",
                        help="use the packages as they are (no wheel or project install)")
    parser.add_argument("--list", action="store_true", help="print the stages and their commands, then exit")
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget <= 0:
        parser.error(f"--budget: expected a positive number of seconds, got {args.budget}")
    started = time.perf_counter()
    plan = stages(args.out_dir, args.workers)
    names = [s.name for s in plan]
    unknown = sorted((set(args.only or []) | set(args.skip)) - set(names))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; the stages are {names}")
    if args.list:
        for s in plan:
            print(f"{s.name:10s} python3 -m {' '.join(s.command())}")
        return 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    summary: dict = {"command": " ".join(["python3", "-m", "benchmarks.gpu_check", *(argv or sys.argv[1:])]),
                     "install": install(args.wheels, env) if args.install else {"ok": True, "notes": ["not asked"]}}
    summary["environment"] = environment()
    cuda = summary["environment"]["cuda_available"]
    if not summary["install"]["ok"]:
        print(json.dumps(summary["install"], indent=2))
        return 1
    if cuda:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    summary["stages"] = {}
    for stage in plan:
        if (args.only and stage.name not in args.only) or stage.name in args.skip:
            continue
        left = None if args.budget is None else args.budget - (time.perf_counter() - started)
        if stage.needs_cuda and not cuda:
            summary["stages"][stage.name] = {"status": "skipped: no CUDA device"}
        elif left is not None and left < stage.minimum_s:
            summary["stages"][stage.name] = {"status": f"skipped: {left:.0f} s of the budget left, the stage needs "
                                                       f"≥ {stage.minimum_s} s (run it with --only {stage.name})"}
        else:
            command = stage.command()
            command = command if cuda else tuple(a for a in command if not a.startswith("--junitxml"))
            limit = stage.limit_s if left is None else min(stage.limit_s, left)
            summary["stages"][stage.name] = run_stage(stage.name, command, env, limit, stage.output)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    statuses = {name: record["status"] for name, record in summary["stages"].items()}
    print("[gpu-check] " + json.dumps(statuses))
    if cuda:  # a later run with --only adds its stages to what an earlier run recorded
        path = args.out_dir / "gpu_check.json"
        earlier = json.loads(path.read_text()).get("stages", {}) if path.is_file() else {}
        kept = {name: record for name, record in earlier.items() if name in names and (
            name not in summary["stages"] or summary["stages"][name]["status"].startswith("skipped"))}
        summary["stages"] = {**summary["stages"], **kept}
        summary["summary"] = gpu_report.summarise(args.out_dir)
        print(gpu_report.render(summary["summary"]))
        path.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"[gpu-check] wrote {path}")
    else:
        print("[gpu-check] no CUDA device: the GPU tests were skipped, nothing was measured or written")
    return 1 if any(s.startswith(("failed", "timed out")) for s in statuses.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
