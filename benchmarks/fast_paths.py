"""Fast paths of crate_nn, each measured against the form it replaced and the baseline in the same run.

The one so far is the **folded ISTA step**, now crate_nn's (`crate_nn.models.ista.ISTA.gradient_step`). Eq. (44)
in rows, ``ReLU(y + η(y − yDᵀ)D − ηλ)``, is linear in y before the ReLU:

    y + η(y − yDᵀ)D = y + y N,    N = η(D − DᵀD)   (d×d, formed once per forward: 2d³ FLOPs)

so one token GEMM (``y + y @ N``, the identity added at y's precision) replaces the two of the
earlier crate_nn and the authors' three; the backward pass needs two token GEMMs instead of four. It pays when the
number of tokens B·n exceeds d, and crate_nn uses it exactly then. The variant "ours, two-product ISTA" is a copy
of the crate_nn model whose ISTA blocks are given back the two-product step (`with_two_product_ista`), so the
gain stays measurable; every variant is checked against the baseline in float64 before timing.

    python -m benchmarks.fast_paths --mode train --models crate_tiny crate_base --batch-size 16
"""
from __future__ import annotations

import argparse
import copy
import types

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import crate_nn
from benchmarks import common
from benchmarks.inference import make_eval_step
from benchmarks.models import TINY_OVERRIDES, build_pair, check_images, check_pair
from benchmarks.train_step import make_train_step

TWO_PRODUCTS = "ours, two-product ISTA"


def two_product_step(self: crate_nn.ISTA, y: torch.Tensor) -> torch.Tensor:
    """y + η(y − yDᵀ)D with two token products, whatever the number of tokens (crate_nn before the fold)."""
    return y + self.eta * ((y - F.linear(y, self.weight)) @ self.weight)


def with_two_product_ista(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose ISTA blocks take the gradient step of eq. (44) with two token products."""
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, crate_nn.ISTA):
            module.gradient_step = types.MethodType(two_product_step, module)
    return model


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fast_paths", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=5, warmup=1)
    parser.add_argument("--models", nargs="+", default=["crate_tiny", "crate_base"], choices=crate_nn.list_models())
    parser.add_argument("--mode", choices=("train", "inference"), default="train")
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args(argv)
    if args.tiny:
        args.models, args.batch_size, args.repeats, args.warmup = args.models[:1], 4, 1, 1
    device = common.setup(args)
    make_step = make_train_step if args.mode == "train" else make_eval_step
    rows = []
    for name in tqdm(args.models, desc="fast_paths", unit="model"):
        ours, baseline = build_pair(name, device, **(TINY_OVERRIDES if args.tiny else {}))
        unfolded = with_two_product_ista(ours)
        config = ours.config
        check = check_images(config)
        errors = {"ours": check_pair(ours, baseline, check), TWO_PRODUCTS: check_pair(unfolded, baseline, check)}
        images = torch.randn(args.batch_size, config.in_channels, config.image_size, config.image_size, device=device)
        labels = torch.randint(0, config.num_classes, (args.batch_size,), device=device)
        models = {"baseline": baseline, TWO_PRODUCTS: unfolded, "ours": ours}
        steps = {key: make_step(model, images, labels, None, "authors") for key, model in models.items()}
        timings = common.interleaved(steps, args.repeats, args.warmup, device)
        for key, timing in timings.items():
            rows.append({
                "model": name, "mode": args.mode, "batch": args.batch_size, "variant": key,
                "img_s": args.batch_size / timing.median,
                "ratio_vs_baseline": timings["baseline"].median / timing.median,
                "ratio_cpu_time_vs_baseline": timings["baseline"].cpu_median / timing.cpu_median,
                "ratio_vs_two_products": timings[TWO_PRODUCTS].median / timing.median,
                "float64_logit_rel_error": errors.get(key),  # None for the baseline itself
                "timing": timing.summary(),
            })
    columns: list[common.Column] = [
        ("model", "model", ""), ("mode", "mode", ""), ("batch", "batch", "d"), ("variant", "variant", ""),
        ("img_s", "img/s", ".2f"), ("ratio_vs_baseline", "× baseline (wall)", ".2f"),
        ("ratio_cpu_time_vs_baseline", "× baseline (CPU time)", ".2f"), ("ratio_vs_two_products", "× two-product", ".2f"),
        ("float64_logit_rel_error", "float64 rel. error", ".1e"),
    ]
    notes = [f"float32; median of {args.repeats} interleaved repeats after {args.warmup} warm-up steps each; every "
             "variant with lion-pytorch's Lion, so that only the model differs"]
    return common.report("fast_paths", device, args, rows, columns, notes)


if __name__ == "__main__":
    main()
