"""Does inductor fuse the LayerNorm with the residual sum? The kernels torch.compile generates for one CRATE layer.

One encoder layer's training step (forward, a loss, backward) under bf16 autocast, compiled, with its activations
in float32 (autocast's) and kept in bfloat16 (``--activations bf16``). The kernels of the generated code (Triton
on a GPU, C++ on a CPU) are named after the operations fused into them, so the names answer the question: is the
MSSA block's residual sum ``Z^ℓ + MSSA(LN1(Z^ℓ))`` computed in the kernel of the LayerNorm that follows it (and
the LayerNorm's backward in the kernel that adds the residual's gradient)? Reported per activation dtype: the
number of kernels, the LayerNorm kernels (forward and backward) and whether a forward one also computes the sum.

    python -m benchmarks.fusion --device cuda --out fusion.json
"""
from __future__ import annotations

import argparse
import re

import torch
from torch._inductor.utils import run_and_get_code

from benchmarks import common
from crate_nn.models.blocks import CRATELayer, LayerNorm
from crate_nn.models.config import BlockConfig

KERNEL = re.compile(r"\b((?:triton_[a-z]+|cpp)_fused_\w+?)(?:_\d+)?\b")


def generated_kernels(layer: CRATELayer, tokens: torch.Tensor) -> list[str]:
    """Names of the kernels inductor generates for ``layer``'s forward and backward on ``tokens`` (bf16 autocast
    on their device; the loss is the mean square of the output)."""

    def step() -> None:
        with torch.autocast(tokens.device.type, dtype=torch.bfloat16):
            out = layer(tokens)
        out.float().square().mean().backward()

    torch._dynamo.reset()
    _, code = run_and_get_code(torch.compile(step))
    return sorted({name for text in code for name in KERNEL.findall(text)})


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fusion", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=1, warmup=0)
    parser.add_argument("--model-dim", type=int, default=768, help="d (CRATE-Base: 768)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=197, help="n (224² images, 16² patches, [CLS])")
    args = parser.parse_args(argv)
    if args.tiny:
        args.model_dim, args.heads, args.batch_size, args.tokens = 32, 2, 4, 17
    device = common.setup(args)
    rows = []
    for activations in ("fp32", "bf16"):
        layer = CRATELayer(BlockConfig(dim=args.model_dim, heads=args.heads)).to(device)
        for module in layer.modules():
            if isinstance(module, LayerNorm):
                module.keep_dtype = activations == "bf16"
        dtype = torch.bfloat16 if activations == "bf16" else torch.float32
        tokens = torch.randn(args.batch_size, args.tokens, args.model_dim, device=device, dtype=dtype,
                             requires_grad=True)
        kernels = generated_kernels(layer, tokens)
        forward = [k for k in kernels if "native_layer_norm" in k and "backward" not in k]
        rows.append({"activations": activations, "kernels": len(kernels),
                     "layer_norm_forward": forward,
                     "layer_norm_backward": [k for k in kernels if "native_layer_norm_backward" in k],
                     "sum_fused_with_layer_norm": any("_add_" in f"_{k}_" for k in forward),
                     "all_kernels": kernels})
    columns: list[common.Column] = [
        ("activations", "activations", ""), ("kernels", "kernels", "d"),
        ("sum_fused_with_layer_norm", "sum fused into a LayerNorm kernel", ""),
    ]
    notes = [f"one CRATE layer (d {args.model_dim}, {args.heads} heads), {args.batch_size} × {args.tokens} tokens, "
             "bf16 autocast, forward + backward compiled by torch.compile (default mode)"]
    notes += [f"{row['activations']}: LayerNorm kernels {row['layer_norm_forward']}; backward "
              f"{row['layer_norm_backward']}" for row in rows]
    return common.report("fusion", device, args, rows, columns, notes)


if __name__ == "__main__":
    main()
