"""Loading a checkpoint: the model built on the meta device and given the file's tensors, against building it (with
its random initialisation) and copying them in.

For each size, a checkpoint of our format is written once to a temporary folder, then the contenders run
interleaved (A B A B …; median of the repeats, `benchmarks.common`), each from the payload already in memory (so
the file read, the same for both, is left out): ``meta + assign`` is `crate_nn.weights.build.build_loaded`, what
`crate_nn.load` does; ``build + copy`` is `crate_nn.weights.build.build_then_copy`, what it did before and still does
for a model with a tensor no checkpoint holds. Before timing, both are checked to give the same state dict.

    python -m benchmarks.load --threads 1 --out benchmarks/results/cpu/load.json
"""
from __future__ import annotations

import argparse
import functools
import tempfile
from pathlib import Path

import torch

import crate_nn
from benchmarks import common
from crate_nn.models.registry import get_family
from crate_nn.weights.build import build_loaded, build_then_copy
from crate_nn.weights.ours import read

CONTENDERS = {"meta + assign": build_loaded, "build + copy": build_then_copy}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["crate_tiny", "crate_base", "crate_large"],
                        choices=crate_nn.list_models(family="classifier"))
    common.add_common_args(parser, repeats=7, warmup=1)
    args = parser.parse_args(argv)
    if args.tiny:
        args.models, args.repeats, args.warmup = ["crate_tiny"], 2, 0
    device = common.setup(args)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            path = Path(folder) / f"{name}.pt"
            crate_nn.save(path, crate_nn.create_model(name))
            payload = read(path)
            family = get_family(payload.get("family", "classifier"))
            config, state = family.config_class(**payload["config"]), payload["model"]
            built = {label: fn(family.model_class, config, state) for label, fn in CONTENDERS.items()}
            a, b = (m.state_dict() for m in built.values())
            if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
                raise RuntimeError(f"{name}: the two ways of loading give different state dicts")
            del built, a, b
            timings = common.interleaved(
                {label: functools.partial(fn, family.model_class, config, state) for label, fn in CONTENDERS.items()},
                args.repeats, args.warmup, device)
            fast, slow = timings["meta + assign"], timings["build + copy"]
            rows.append({"model": name, "parameters_M": sum(v.numel() for v in state.values()) / 1e6,
                         "meta_ms": 1e3 * fast.median, "build_ms": 1e3 * slow.median,
                         "speedup": common.paired_ratio(slow, fast),
                         "timings": {label: t.summary() for label, t in timings.items()}})
    columns = [("model", "model", "s"), ("parameters_M", "params (M)", ".1f"), ("meta_ms", "meta + assign (ms)", ".1f"),
               ("build_ms", "build + copy (ms)", ".1f"), ("speedup", "speed-up", ".1f")]
    return common.report("load", device, args, rows, columns,
                         notes=[f"median of {args.repeats} interleaved repeats; the payload is read once, outside "
                                "the timing"])


if __name__ == "__main__":
    main()
