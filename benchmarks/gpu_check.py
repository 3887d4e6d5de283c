"""``make gpu-check``: everything the CUDA path needs checked and measured, in one command on a GPU machine.

    make wheels        # once, on a machine with a package registry: the wheels the GPU image lacks → wheels/
    make gpu-check     # on the GPU machine (python3 = the image's CUDA PyTorch), ≤ 10 minutes
    python3 -m benchmarks.gpu_check --only tests train_base          # the same script, some stages
    python3 -m benchmarks.gpu_check --list                           # the stages and their commands

Stages, in order of importance; each runs as its own process under the remaining time budget (``--budget``,
default 560 s of the 10 minutes), and a stage that would not fit is skipped with that reason (run it later with
``--only``):

    install      the wheels carried in ``wheels/`` (kornia, kornia-rs, lion-pytorch) whose distributions are
                 missing, ``pip install --no-index --no-deps --no-build-isolation``; then the project itself
                 (editable, same flags; if that fails the stages run with PYTHONPATH = the repository)
    tests        ``pytest -m gpu tests/gpu``: every registered model and every preset on the GPU
    train_base   CRATE-Base training step at 224², bf16, compiled, batch 256, against the authors' computation
                 (fp16 + GradScaler, as published) and timm's ViT-B/16 in the same run: MFU and ratios
    tasks        the training step of every preset (every task: MAE, DINO, GPT … once merged), units/s and MFU
    pipeline     crate-train --preset imagenet end to end from a synthetic ImageNet-shaped folder packed into
                 shards (Pillow and nvJPEG packing), against the bare step (goal ≥ 0.9)
    train_sizes  crate_tiny / small / large training steps (compiled) against the baseline
    train_eager  CRATE-Base, eager (what --compile adds), with torch.profiler's op tables (what limits the step)
    data         input-pipeline rates per worker count (decode, shard read, augmentation, packing)
    inference    evaluation forward passes of every CRATE size

Measured on an H100 (2026-11-24, 16 cores): tests 318 s, train_base 90, tasks 49, pipeline 106, train_sizes 121,
train_eager 24, data 198 s — about 15 minutes in all, so one 10-minute run leaves the last stages skipped; a
second run with ``--only`` the skipped stages adds them to ``gpu_check.json``.

Results: one JSON per benchmark stage and ``gpu_check.json`` (device, driver, CUDA, torch, the command, each
stage's command, status, time and output tail; a later run adds its stages to the earlier ones) under
``--out-dir`` (default ``benchmarks/results/gpu``).
Exit status: 0 when every stage that ran succeeded, 1 otherwise. Without CUDA the tests stage runs (every GPU
test is skipped, with its reason), the benchmarks are skipped, nothing is written, and the status is 0.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Stage:
    name: str
    args: tuple[str, ...]  # after ``python -m``
    needs_cuda: bool
    minimum_s: int  # do not start with less time left than this
    output: str | None = None  # the JSON the stage writes (under --out-dir)


def stages(out: Path, workers: int) -> list[Stage]:
    def bench(name: str, *args: str, output: str, minimum_s: int) -> Stage:
        return Stage(name, ("benchmarks." + args[0], *args[1:], "--device", "cuda", "--out", str(out / output)),
                     True, minimum_s, output)

    return [
        Stage("tests", ("pytest", "-m", "gpu", "tests/gpu", "-q", "-n", "4", "-p", "no:cacheprovider",
                        f"--junitxml={out / 'tests.xml'}"), False, 60),
        bench("train_base", "train_step", "--models", "crate_base", "--batch-size", "256", "--compile",
              "--beside", "vit_base_patch16_224", "--repeats", "20", "--warmup", "5",
              output="train_step_base.json", minimum_s=150),
        bench("tasks", "task_step", "--batch-size", "256", output="task_step.json", minimum_s=60),
        bench("pipeline", "pipeline", "--batch-size", "256", "--steps", "40", "--workers", str(workers), "--compile",
              output="pipeline.json", minimum_s=150),
        bench("train_sizes", "train_step", "--models", "crate_tiny", "crate_small", "crate_large", "--batch-size",
              "256", "--compile", "--repeats", "10", "--warmup", "3", output="train_step_sizes.json", minimum_s=180),
        bench("train_eager", "train_step", "--models", "crate_base", "--batch-size", "256", "--repeats", "20",
              "--warmup", "5", "--profile", output="train_step_base_eager.json", minimum_s=45),
        bench("data", "data", "--workers", "0", "4", str(workers), "--images", "2048", "--repeats", "2",
              output="data.json", minimum_s=200),
        bench("inference", "inference", "--models", "crate_tiny", "crate_small", "crate_base", "crate_large",
              "--batch-size", "512", output="inference.json", minimum_s=60),
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


def run_stage(stage: Stage, env: dict, timeout: float) -> dict:
    started = time.perf_counter()
    command = [sys.executable, "-m", *stage.args]
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        status, rc, output = ("ok" if done.returncode == 0 else "failed"), done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as err:
        status, rc = "timed out", None
        output = "".join(part.decode() if isinstance(part, bytes) else (part or "")
                         for part in (err.stdout, err.stderr))
    seconds = time.perf_counter() - started
    print(f"[gpu-check] {stage.name}: {status} in {seconds:.0f} s", flush=True)
    tail = output[-6000:]
    print(tail, flush=True)
    return {"command": " ".join(["python3", "-m", *stage.args]), "status": status, "returncode": rc,
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": round(seconds, 1), "output": stage.output, "output_tail": tail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    parser.add_argument("--budget", type=float, default=560.0, help="seconds for all stages together")
    parser.add_argument("--wheels", type=Path, default=ROOT / "wheels", help="folder of carried wheels")
    parser.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                        help="data-loading processes of the pipeline and data stages")
    parser.add_argument("--only", nargs="+", default=None, help="run only these stages (install always runs)")
    parser.add_argument("--skip", nargs="+", default=[], help="leave these stages out")
    parser.add_argument("--no-install", dest="install", action="store_false",
                        help="use the packages as they are (no wheel or project install)")
    parser.add_argument("--list", action="store_true", help="print the stages and their commands, then exit")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    plan = stages(args.out_dir, args.workers)
    names = [s.name for s in plan]
    unknown = sorted((set(args.only or []) | set(args.skip)) - set(names))
    if unknown:
        parser.error(f"unknown stage(s) {unknown}; the stages are {names}")
    if args.list:
        for s in plan:
            print(f"{s.name:12s} python3 -m {' '.join(s.args)}")
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
        left = args.budget - (time.perf_counter() - started)
        if stage.needs_cuda and not cuda:
            summary["stages"][stage.name] = {"status": "skipped: no CUDA device"}
        elif left < stage.minimum_s:
            summary["stages"][stage.name] = {"status": f"skipped: {left:.0f} s of the budget left, the stage needs "
                                                       f"≥ {stage.minimum_s} s (run it with --only {stage.name})"}
        else:
            args_ = stage.args if cuda else tuple(a for a in stage.args if not a.startswith("--junitxml"))
            summary["stages"][stage.name] = run_stage(Stage(stage.name, args_, stage.needs_cuda, stage.minimum_s,
                                                            stage.output), env, left)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    statuses = {name: record["status"] for name, record in summary["stages"].items()}
    print("[gpu-check] " + json.dumps(statuses))
    if cuda:  # a later run with --only adds its stages to what an earlier run recorded
        path = args.out_dir / "gpu_check.json"
        earlier = json.loads(path.read_text()).get("stages", {}) if path.is_file() else {}
        kept = {name: record for name, record in earlier.items() if name not in summary["stages"]
                or summary["stages"][name]["status"].startswith("skipped")}
        summary["stages"] = {**summary["stages"], **kept}
        path.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"[gpu-check] wrote {path}")
    else:
        print("[gpu-check] no CUDA device: the GPU tests were skipped, nothing was measured or written")
    return 1 if any(s in ("failed", "timed out") for s in statuses.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
