"""The paired model benchmark behind `train_step` and `inference`: model pair, correctness check, FLOPs, driver.

`build_pair` builds the authors' computation (`benchmarks.baseline.Baseline`) with random weights and loads
its state dict — a checkpoint in the authors' format — into ``crate_nn`` with `crate_nn.load_official_checkpoint`,
so both hold the same weights. `max_logit_error` then compares their logits in float64 before anything is timed:
a speed ratio between two models that compute different things would mean nothing.
"""
from __future__ import annotations

import argparse
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from tqdm import tqdm

import crate_nn
from benchmarks import common
from benchmarks.baseline import Baseline, autocast_dtype
from crate_nn.engine.config import COMPILE_MODES
from crate_nn.engine.loop import CUDA_GRAPH_MODES, compile_model
from crate_nn.engine.precision import autocast
from crate_nn.engine.precision import autocast_dtype as precision_dtype

# Model FLOPs of one forward pass for one image (a multiply-add counts 2; LayerNorm, softmax, ReLU, bias
# additions are elementwise and left out, as usual for MFU). The ISTA step is counted with the two d×d
# products per token that eq. (44) needs, so the baseline's third product is not a model FLOP.
FLOPS_FORMULA = (
    "F_fwd = 2·N·(P²C)·d + L·(4·n·d·(Kp) + 4·n²·(Kp) + 4·n·d²) + 2·d·C;  F_train = 3·F_fwd per image  "
    "[N patches, n = N+1 tokens, P²C patch length, d width, L layers, Kp = heads·head_dim, C classes; "
    "per layer: qkv and output maps 2·2·n·d·Kp, scores and attention-weighted sum 2·2·n²·Kp, ISTA 2·2·n·d²; "
    "backward = 2 × forward]"
)

# Tiny sizes for --tiny (CI smoke runs): 32² images, 8² patches -> 17 tokens, d = 32, 2 layers, 2 heads.
TINY_OVERRIDES = dict(image_size=32, patch_size=8, num_classes=10, dim=32, depth=2, heads=2)


def forward_flops(config) -> int:
    """Model FLOPs of one image's forward pass (see FLOPS_FORMULA); ``config`` has CRATEConfig's fields."""
    n_patches = (config.image_size // config.patch_size) ** 2
    n = n_patches + 1
    d, kp = config.dim, config.heads * config.head_dim
    patch_dim = config.patch_size**2 * config.in_channels
    per_layer = 4 * n * d * kp + 4 * n * n * kp + 4 * n * d * d
    return 2 * n_patches * patch_dim * d + config.depth * per_layer + 2 * d * config.num_classes


def build_pair(name: str, device: torch.device, **overrides) -> tuple[nn.Module, Baseline]:
    """(ours, baseline) for the registered model ``name``: the same weights, on ``device``, in float32."""
    config = crate_nn.model_config(name, **overrides)
    baseline = Baseline.from_config(config)
    # No ``name``: the loader infers width, depth, patches and classes from the tensors and checks them against
    # the overrides; the heads are the one thing the tensors do not determine.
    ours = crate_nn.load_official_checkpoint(baseline.state_dict(), **{**overrides, "heads": config.heads})
    return ours.to(device), baseline.to(device)


def max_logit_error(ours: nn.Module, baseline: nn.Module, images: torch.Tensor) -> float:
    """max |logits_ours − logits_baseline| / max |logits_baseline|, both in float64 on the CPU, eval mode."""
    logits = []
    for model in (ours, baseline):
        model64 = copy.deepcopy(model).to("cpu", torch.float64).eval()
        with torch.no_grad():
            logits.append(model64(images.to("cpu", torch.float64)))
    return ((logits[0] - logits[1]).abs().max() / logits[1].abs().max()).item()


# float64 has a unit roundoff of 1.1e-16; ours and the baseline differ only in the order of operations
# (fused vs explicit softmax, two vs three ISTA products), so their logits agree to ~1e-14 relative even after
# 24 layers of LayerNorm (each can amplify a perturbation by ~1/std of its input). A different computation
# (wrong skip, wrong patch order, a weight loaded into the wrong place) gives errors of order 1.
LOGIT_RTOL = 1e-10


def check_images(config) -> torch.Tensor:
    """Random images for `check_pair`: at least 2, and more tokens than d, so that the check runs the folded ISTA
    step crate_nn trains with (`crate_nn.models.ista`)."""
    count = max(2, config.dim // (config.num_patches + 1) + 1)
    return torch.randn(count, config.in_channels, config.image_size, config.image_size)


def check_pair(ours: nn.Module, baseline: nn.Module, images: torch.Tensor) -> float:
    """Raise AssertionError unless ours and the baseline agree in float64 (see LOGIT_RTOL); return the error."""
    error = max_logit_error(ours, baseline, images)
    if not error <= LOGIT_RTOL:
        raise AssertionError(f"ours and the baseline disagree in float64: relative logit error {error:.3e}")
    return error


# ----------------------------------------------------------------------------------------------- driver
# A step factory: (model, images, labels, autocast dtype or None, recipe) -> a closure running one step. The recipe
# is "authors" (the published script's optimizer set-up) or "crate_nn" (crate-train's), see benchmarks.train_step.
StepFactory = Callable[..., Callable[[], None]]

COLUMNS: list[common.Column] = [
    ("model", "model", ""),
    ("batch", "batch", "d"),
    ("baseline_img_s", "baseline img/s", ".1f"),
    ("ours_img_s", "ours img/s", ".1f"),
    ("ratio", "ours/baseline", ".2f"),
    ("ratio_paired", "paired ratio", ".2f"),
    ("ratio_cpu_time", "CPU-time ratio", ".2f"),
    ("baseline_peak_mem_mb", "baseline peak MiB", ".1f"),
    ("ours_peak_mem_mb", "ours peak MiB", ".1f"),
    ("baseline_mfu", "baseline MFU", ".1%"),
    ("ours_mfu", "ours MFU", ".1%"),
    ("beside", "beside", ""),
    ("beside_img_s", "beside img/s", ".1f"),
    ("beside_mfu", "beside MFU", ".1%"),
]


def precision_name(dtype: torch.dtype | None) -> str:
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


BF16_ACTIVATIONS = "+bf16-activations"
VARIANT_MODES = ("eager", *COMPILE_MODES)


@dataclass(frozen=True)
class Variant:
    """How ours runs: eager or ``torch.compile`` in a mode (`crate_nn.engine.loop.compile_model`), with its
    activations in float32 (autocast's) or kept in bfloat16 (``+bf16-activations``: ``crate-train --run.activations
    bf16``). Written ``MODE[+bf16-activations]``, MODE one of `VARIANT_MODES` (``default``: torch.compile's default
    mode)."""

    mode: str
    bf16_activations: bool = False

    @classmethod
    def parse(cls, text: str) -> Variant:
        mode, kept = (text[:-len(BF16_ACTIVATIONS)], True) if text.endswith(BF16_ACTIVATIONS) else (text, False)
        if mode not in VARIANT_MODES:
            raise ValueError(f"--variants: expected MODE[{BF16_ACTIVATIONS}] with MODE one of "
                             f"{', '.join(VARIANT_MODES)}, got {text!r}")
        return cls(mode, kept)

    @property
    def name(self) -> str:
        return self.mode + (BF16_ACTIVATIONS if self.bf16_activations else "")

    @property
    def cuda_graphs(self) -> bool:
        return self.mode in CUDA_GRAPH_MODES

    def prepare(self, model: nn.Module) -> nn.Module:
        """A copy of ``model`` (the same weights; its own compiled code and settings) running this variant."""
        model = copy.deepcopy(model)
        if self.bf16_activations:
            model.keep_activations(torch.bfloat16)
        return model if self.mode == "eager" else compile_model(model, self.mode)


@dataclass(frozen=True)
class Contender:
    """One way of timing ours: the row's key (``ours`` for the first), the autocast dtype and the `Variant`."""

    key: str
    dtype: torch.dtype | None
    variant: Variant


def ours_contenders(device: torch.device, precisions: list[str], variants: list[Variant]) -> list[Contender]:
    """``--precision`` and ``--variants`` as contenders: the first precision in the first variant is ``ours``; each
    further precision (first variant) is ``ours_<fp32|bf16|fp16>`` and each further variant (first precision)
    ``ours_<variant>`` (e.g. ``ours_reduce_overhead_bf16_activations``), timed in the same run."""
    dtypes = [precision_dtype(device, p) for p in precisions]
    names = [precision_name(d) for d in dtypes]
    if len(set(names)) < len(names):
        raise ValueError(f"--precision: {' '.join(precisions)} names a precision twice on {device.type} ({names})")
    if len(set(variants)) < len(variants):
        raise ValueError(f"--variants: {' '.join(v.name for v in variants)} names a variant twice")
    first = variants[0]
    return ([Contender("ours", dtypes[0], first)]
            + [Contender(f"ours_{name}", dtype, first) for name, dtype in zip(names[1:], dtypes[1:])]
            + [Contender("ours_" + re.sub(r"\W+", "_", v.name).strip("_"), dtypes[0], v) for v in variants[1:]])


def contender_columns(key: str) -> list[common.Column]:
    """The table's columns of a further contender of ours (see `ours_contenders`): images/s, MFU, the ratio to the
    baseline and the peak memory."""
    label = key.replace("_", " ")
    return [(f"{key}_img_s", f"{label} img/s", ".1f"), (f"{key}_mfu", f"{label} MFU", ".1%"),
            (f"{key}_ratio", f"{label}/baseline", ".2f"), (f"{key}_peak_mem_mb", f"{label} peak MiB", ".1f")]


def beside_model(name: str, config, device: torch.device) -> nn.Module:
    """timm's model ``name`` (random weights) with CRATE's image size and classes: what a user would otherwise pick."""
    import timm

    return timm.create_model(name, pretrained=False, num_classes=config.num_classes, img_size=config.image_size).to(device)


def marking_steps(step: Callable[[], None]) -> Callable[[], None]:
    """``step`` preceded by a CUDA-graph step boundary (as crate-train marks each micro-batch)."""

    def run() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        step()

    return run


def pair_row(
    name: str, overrides: dict, device: torch.device, args: argparse.Namespace, contenders: list[Contender],
    make_step: StepFactory, flops_per_forward: int,
) -> dict:
    """Build the pair (and timm's ``--beside`` model), check the pair in float64, time ``make_step``'s closures
    interleaved — the baseline, each of ours' ``contenders`` (`ours_contenders`), the beside model (in the first
    contender's precision and compile mode) — measure their memory; count the FLOPs ours and the beside model run
    (`common.counted_flops`)."""
    first = contenders[0]
    ours, baseline = build_pair(name, device, **overrides)
    config = ours.config
    logit_error = check_pair(ours, baseline, check_images(config))
    images = torch.randn(args.batch_size, config.in_channels, config.image_size, config.image_size, device=device)
    labels = torch.randint(0, config.num_classes, (args.batch_size,), device=device)
    models = {"ours": ours}
    if args.beside:
        models["beside"] = beside_model(args.beside, config, device)
    base_dtype = autocast_dtype(device)
    row = {"model": name, "batch": args.batch_size, "beside": args.beside,
           "baseline_precision": precision_name(base_dtype), "ours_precision": precision_name(first.dtype),
           "ours_compiled": first.variant.mode != "eager",
           "compile_mode": None if first.variant.mode == "eager" else first.variant.mode,
           "contenders": {c.key: {"precision": precision_name(c.dtype), "variant": c.variant.name}
                          for c in contenders},
           "float64_logit_rel_error": logit_error, "forward_gflops_per_img": forward_flops(config) / 1e9}
    for key, model in models.items():  # eager, before compiling: what the step multiplies, per image
        def forward(model=model):
            with torch.no_grad(), autocast(device, first.dtype):
                model.eval()(images)
        row[f"{key}_counted_gflops_per_img"] = flops_per_forward * common.counted_flops(forward) / args.batch_size / 1e9
    graphs = device.type == "cuda"
    steps = {"baseline": make_step(baseline, images, labels, base_dtype, "authors")}
    for c in contenders:
        step = make_step(c.variant.prepare(ours), images, labels, c.dtype, "crate_nn")
        steps[c.key] = marking_steps(step) if graphs and c.variant.cuda_graphs else step
    if args.beside:  # timm's model in the first variant's compile mode (its activations are autocast's)
        step = make_step(Variant(first.variant.mode).prepare(models["beside"]), images, labels, first.dtype,
                         "crate_nn")
        steps["beside"] = marking_steps(step) if graphs and first.variant.cuda_graphs else step
    resident = {}  # what each contender keeps allocated between steps: optimizer state, CUDA graphs' memory pools
    for key, fn in steps.items():
        before = common.allocated_bytes(device)
        for _ in range(args.warmup):
            fn()
        after = common.allocated_bytes(device)
        resident[key] = None if before is None else (after - before) / 2**20
    timings = common.interleaved(steps, args.repeats, 0, device)
    memory = {key: common.peak_memory_bytes(fn, device) for key, fn in steps.items()}
    for key in steps:
        row[f"{key}_img_s"] = args.batch_size / timings[key].median
        row[f"{key}_peak_mem_mb"] = memory[key] / 2**20
        row[f"{key}_resident_mb"] = resident[key]
        row[f"{key}_timing"] = timings[key].summary()
    for c in contenders:  # ours' ratios are "ratio", "ratio_paired", ...; a further contender's "ours_bf16_ratio"
        prefix = "" if c.key == "ours" else f"{c.key}_"
        row[f"{prefix}ratio"] = row[f"{c.key}_img_s"] / row["baseline_img_s"]
        row[f"{prefix}ratio_paired"] = common.paired_ratio(timings["baseline"], timings[c.key])
        row[f"{prefix}ratio_cpu_time"] = timings["baseline"].cpu_median / timings[c.key].cpu_median
    if args.profile:
        row["profile"] = {key: common.profile_table(fn, device) for key, fn in steps.items()}
        for key, table in row["profile"].items():
            print(f"{name}, {key}: one step under torch.profiler\n{table}")
    return row


def run_paired(
    benchmark: str, description: str, make_step: StepFactory, flops_per_forward: int,
    default_batch: dict[str, int], argv: list[str] | None,
) -> dict:
    """Parse the command line, run every requested model as a pair, print and write the results.

    ``flops_per_forward`` is how many forward passes' worth of model FLOPs one step costs (3 for training:
    backward = 2 × forward; 1 for inference); it scales `forward_flops` for the MFU.
    """
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{benchmark}", description=description)
    common.add_common_args(parser, repeats=7, warmup=2)
    parser.add_argument("--models", nargs="+", default=crate_nn.list_models(family="classifier"),
                        choices=crate_nn.list_models(family="classifier"))
    parser.add_argument(
        "--batch-size", type=int, default=None,
        help=f"images per step (default {default_batch['cpu']} on CPU, {default_batch['cuda']} on GPU)",
    )
    parser.add_argument("--precision", nargs="+", default=["auto"],
                        help="ours: auto (bf16 on GPU, fp32 on CPU), bf16-if-faster, fp32, bf16, fp16; several: ours "
                             "is timed in each, in the same run (the first is 'ours', the others 'ours_bf16', ...)")
    parser.add_argument("--compile", action="store_true", help="ours (and --beside): torch.compile (crate-train --run.compile)")
    parser.add_argument("--compile-mode", default="default", choices=COMPILE_MODES,
                        help="torch.compile mode with --compile (reduce-overhead: CUDA graphs)")
    parser.add_argument("--variants", nargs="+", default=None, metavar=f"MODE[{BF16_ACTIVATIONS}]",
                        help=f"ours in each of these ways, in the same run (the first is 'ours'); MODE: "
                             f"{', '.join(VARIANT_MODES)}; {BF16_ACTIVATIONS}: crate-train --run.activations bf16. "
                             "Default: --compile/--compile-mode")
    parser.add_argument("--beside", default=None,
                        help="a timm model timed beside in the same run with ours' precision, compilation and "
                             "optimizer, e.g. vit_base_patch16_224 (needs timm)")
    parser.add_argument("--profile", action="store_true", help="print (and store) torch.profiler op tables of one step")
    args = parser.parse_args(argv)
    device = common.setup(args)
    if args.tiny:  # tiny model, one size, batch 4, one repeat after one warm-up
        args.models, args.batch_size, args.repeats, args.warmup = args.models[:1], 4, 1, 1
    if args.batch_size is None:
        args.batch_size = default_batch[device.type]
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    overrides = dict(TINY_OVERRIDES) if args.tiny else {}
    variants = [Variant.parse(v) for v in args.variants or [args.compile_mode if args.compile else "eager"]]
    contenders = ours_contenders(device, args.precision, variants)
    peak = common.peak_bf16_flops(device)
    rows = []
    for name in tqdm(args.models, desc=benchmark, unit="model"):
        row = pair_row(name, overrides, device, args, contenders, make_step, flops_per_forward)
        flops = flops_per_forward * row["forward_gflops_per_img"] * 1e9
        for key in ("baseline", *(c.key for c in contenders)):
            row[f"{key}_mfu"] = None if peak is None else flops * row[f"{key}_img_s"] / peak
        row["ours_hfu"] = None if peak is None else row["ours_counted_gflops_per_img"] * 1e9 * row["ours_img_s"] / peak
        if args.beside:
            row["beside_mfu"] = (None if peak is None else
                                 row["beside_counted_gflops_per_img"] * 1e9 * row["beside_img_s"] / peak)
        rows.append(row)
    notes = [
        f"FLOPs: {FLOPS_FORMULA}; this benchmark counts {flops_per_forward}·F_fwd per image",
        f"MFU = model FLOPs (the formula) × images/s / peak dense bf16 FLOP/s; ours_hfu uses the FLOPs ours "
        f"executes instead (torch.utils.flop_counter on the eager forward at this batch × {flops_per_forward}: the "
        "folded ISTA step runs one token product where the formula counts two); the beside model's MFU uses its "
        "counted FLOPs",
        f"median of {args.repeats} interleaved repeats (baseline, ours, baseline, ...) after {args.warmup} warm-up "
        "steps each; ours/baseline = ratio of the median wall times; paired ratio = median of the per-repeat "
        "ratios of adjacent runs; CPU-time ratio = ratio of the median process CPU times (steadier on a shared "
        "CPU); peak memory = bytes allocated during one step above the level before it; resident (GPUs) = bytes "
        "a contender keeps allocated between steps after its warm-up (optimizer state; CUDA graphs' memory pools, "
        "which hold the activations of the captured steps): a step's memory beyond the weights is their sum",
    ]
    if peak is None:
        notes.append("MFU: not reported (CPU, or a GPU missing from benchmarks.common.PEAK_BF16_FLOPS)")
    columns = COLUMNS + [column for c in contenders[1:] for column in contender_columns(c.key)]
    return common.report(benchmark, device, args, rows, columns, notes, extra={"flops_formula": FLOPS_FORMULA})
