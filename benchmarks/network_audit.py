"""Time and peak memory of auditing a network (`verify.network`), beside the model's forward pass alone.

    python -m benchmarks.network_audit --out benchmarks/results/cpu/network_audit.json
    python -m benchmarks.network_audit --language --out benchmarks/results/cpu/network_audit_gpt.json
    python -m benchmarks.network_audit --language --init-seeds 3 --out benchmarks/results/cpu/network_audit_gpt_3seeds.json

Image path (default): a CRATE-α B/16 (``crate_alpha_b16``) at random initialisation, written in CRATE-α's torch
format (the stand-in for the published ``crate_alpha_B16.pth``: the same keys and shapes), audited on ``--n`` images
of 224² (smooth random images written as JPEG files, decoded, resized and cropped as real ones are), with the
command's defaults (``--control-n`` 64, 20 initialisation seeds). Language path (``--language``): a CRATE-GPT-base
(``crate_gpt_base``) at random initialisation on ``--n`` windows of 1,024 byte tokens of the Python standard library's
source. Each contender runs in its own process (``--threads`` torch threads), ``--repeats`` times in turn with the
other; a figure is the median. Peak memory is the process's maximum resident set size.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import environment

WORKER = r"""
import json, resource, sys, time
import torch
torch.set_num_threads(int(sys.argv[2]))
kind, rest = sys.argv[1], sys.argv[3:]
start = time.perf_counter()
if kind == "audit":
    from verify import network
    status = network.main(rest)
else:
    import crate_nn
    from crate_nn.data.inputs import folder_images, text_windows
    from verify import checkpoint
    net = checkpoint.load_network(rest[0], "model", name=rest[4] if len(rest) > 4 else None)
    n = int(rest[2])
    if rest[1] == "text":
        inputs = text_windows(net.model, rest[3], n, 0, tokenizer="bytes")
    else:
        inputs = folder_images(net.model, rest[3], n, 0)
    tokens = inputs.tensor.shape[1] if inputs.tensor.ndim == 2 else (net.model.config.image_size // net.model.config.patch_size) ** 2 + 1
    with torch.no_grad():
        for batch in inputs.tensor.split(max(1, checkpoint.BATCH_TOKENS // tokens)):
            net.model(batch)
    status = 0
print(json.dumps({"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time(),
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "status": status}))
"""


def smooth_images(folder: Path, count: int, size: int, seed: int) -> None:
    """``count`` JPEG files of ``size``×(size + 32): random 7×7 colour fields upsampled bicubically (image-like
    spatial correlation, unlike white noise)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        small = Image.fromarray(rng.integers(0, 256, (7, 7, 3), dtype=np.uint8))
        small.resize((size + 32, size), Image.BICUBIC).save(folder / f"image_{i:04d}.jpg", quality=90)


def stdlib_text(path: Path, tokens: int) -> None:
    """At least ``tokens`` bytes of the Python standard library's source, concatenated."""
    import sysconfig

    parts, total = [], 0
    for source in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        text = source.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        total += len(text.encode())
        if total >= tokens:
            break
    path.write_text("".join(parts), encoding="utf-8")


def stand_in(folder: Path, language: bool) -> tuple[str, list[str]]:
    """(the checkpoint, the command's input arguments) of the path measured."""
    import crate_nn
    from crate_nn.export import main as export

    torch.manual_seed(0)
    if language:
        path = folder / "crate_gpt_base.pt"
        crate_nn.save(path, crate_nn.create_model("crate_gpt_base"))
        stdlib_text(folder / "stdlib.txt", 2_000_000)
        return str(path), ["--text", str(folder / "stdlib.txt"), "--tokenizer", "bytes"]
    ours, theirs = folder / "ours.pt", folder / "crate_alpha_B16.pth"
    crate_nn.save(ours, crate_nn.create_model("crate_alpha_b16"))
    if export([str(ours), str(theirs), "--format", "crate-alpha"]) != 0:
        raise SystemExit("crate-export failed")
    ours.unlink()
    smooth_images(folder / "images", 256, 256, 0)
    return str(theirs), ["--images", str(folder / "images"), "--name", "crate_alpha_b16"]


def run(kind: str, args: list[str], threads: int) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKER, kind, str(threads), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["console"] = out.stdout.strip().splitlines()[:-1]
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--language", action="store_true", help="CRATE-GPT-base on text windows")
    parser.add_argument("--n", type=int, default=None, help="inputs (default 256 images, 64 windows)")
    parser.add_argument("--init-seeds", type=int, default=None,
                        help="random initialisations the audit measures (default: the command's, 20)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    n = args.n or (64 if args.language else 256)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        checkpoint, given = stand_in(folder, args.language)
        data = given[1]
        audit_args = [checkpoint, *given, "--n", str(n), "--out", str(folder / "report"),
                      *(["--init-seeds", str(args.init_seeds)] if args.init_seeds is not None else [])]
        forward_args = [checkpoint, "text" if args.language else "images", str(n), data, *given[3:]]
        results = {"forward pass only": [], "audit": []}
        for _ in range(args.repeats):
            results["forward pass only"].append(run("forward", forward_args, args.threads))
            results["audit"].append(run("audit", audit_args, args.threads))
        report = json.loads((folder / "report" / "report.json").read_text())
    rows = [{"contender": name, "seconds": statistics.median(r["seconds"] for r in runs),
             "cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
             "peak_rss_mib": max(r["peak_rss_mib"] for r in runs)} for name, runs in results.items()]
    for row in rows:
        print(f"{row['contender']:<18} {row['seconds']:8.1f} s wall  {row['cpu_seconds']:8.1f} s CPU  "
              f"{row['peak_rss_mib']:8.0f} MiB peak")
    console = results["audit"][-1]["console"]
    print("\n".join(console))
    payload = {"benchmark": "network_audit", "environment": environment(torch.device("cpu")),
               "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "n": n,
               "rows": rows, "console": console,
               "verdicts": {v["id"]: v["verdict"] for v in report["verdicts"]},
               "model": {k: report["model"][k] for k in ("format", "parameters", "layers")},
               "inputs": {k: report["inputs"][k] for k in ("source", "n", "control_n")}, "utc_end": time.time()}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
