"""timm's, DINO's and SimDINO's Vision Transformers (``timm/models/vision_transformer.py`` with timm's ``Attention``,
``Mlp`` and ``LayerNorm``; facebookresearch/dino's ``main_dino.py`` and ``vision_transformer.py``; RobinWu218/SimDINO's
``simdino/main_dino.py``): state dicts written here under their key names and in their shapes, with random tensors,
load with `crate_nn.load` and give the outputs of an independent float64 forward written from their computation in
plain tensor operations; a DINO training file gives its teacher (or its student) without the projection head; what
our ViT does not have is refused naming the keys."""
import argparse
import math

import pytest
import torch

import crate_nn
from crate_nn.checkpoint import sniff
from crate_nn.models.registry import model_config
from crate_nn.weights.adapters import vit

D, HEADS, DEPTH, PATCH, IMAGE, CLASSES = 24, 3, 2, 4, 16, 5


def backbone_state(dim=D, depth=DEPTH, patch=PATCH, image=IMAGE, channels=3, mlp_ratio=4, qkv_bias=True, seed=0,
                   dtype=torch.float64, device=None) -> dict[str, torch.Tensor]:
    """timm's ``VisionTransformer`` (``class_token=True``, ``no_embed_class=False``, ``global_pool='token'``) state
    dict without its classifier, keys and shapes from its ``__init__``: the class token and positions (the class
    token's first), the Conv2d patch embedding, per block ``norm1``, ``attn.qkv`` (3d, d), ``attn.proj``, ``norm2``,
    ``mlp.fc1`` (h, d), ``mlp.fc2``; the final ``norm``. LayerNorm affines away from (1, 0), so that a swapped or
    skipped norm shows."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, std=1.0):
        return (std * torch.randn(*shape, generator=g, dtype=torch.float64)).to(dtype)

    def norm(prefix):
        return {prefix + ".weight": 1 + randn(dim, std=0.1), prefix + ".bias": randn(dim, std=0.1)}

    hidden = mlp_ratio * dim
    state = {"cls_token": randn(1, 1, dim), "pos_embed": randn(1, (image // patch) ** 2 + 1, dim, std=0.5),
             "patch_embed.proj.weight": randn(dim, channels, patch, patch, std=(channels * patch * patch) ** -0.5),
             "patch_embed.proj.bias": randn(dim, std=0.1)}
    for i in range(depth):
        b = f"blocks.{i}."
        state.update({**norm(b + "norm1"), b + "attn.qkv.weight": randn(3 * dim, dim, std=dim ** -0.5),
                      **({b + "attn.qkv.bias": randn(3 * dim, std=0.1)} if qkv_bias else {}),
                      b + "attn.proj.weight": randn(dim, dim, std=dim ** -0.5), b + "attn.proj.bias": randn(dim, std=0.1),
                      **norm(b + "norm2"), b + "mlp.fc1.weight": randn(hidden, dim, std=dim ** -0.5),
                      b + "mlp.fc1.bias": randn(hidden, std=0.1),
                      b + "mlp.fc2.weight": randn(dim, hidden, std=hidden ** -0.5), b + "mlp.fc2.bias": randn(dim, std=0.1)})
    state.update(norm("norm"))
    if device is not None:
        state = {k: v.to(device) for k, v in state.items()}
    return state


def timm_state(classes=CLASSES, seed=0, **options) -> dict[str, torch.Tensor]:
    """A timm ViT classifier's state dict: the backbone and ``head`` (C, d)."""
    state = backbone_state(seed=seed, **options)
    g = torch.Generator().manual_seed(seed + 100)
    like = state["norm.weight"]
    dim = like.shape[0]
    return {**state, "head.weight": (torch.randn(classes, dim, generator=g, dtype=torch.float64) * dim ** -0.5).to(like),
            "head.bias": (0.1 * torch.randn(classes, generator=g, dtype=torch.float64)).to(like)}


def _layer_norm(x, state, prefix, eps=1e-6):  # timm's LayerNorm and DINO's partial(nn.LayerNorm, eps=1e-6)
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * state[prefix + ".weight"] + state[prefix + ".bias"]


def their_forward(state: dict, images: torch.Tensor, heads: int) -> torch.Tensor:
    """timm's ``VisionTransformer.forward`` (DINO's is the same up to ``x[:, 0]``) in float64: the stride-P
    convolution as a product of flattened patches, [CLS] prepended then the positions added; per block
    x += proj(attention(LN(x))) with qkv split as (3, K, p) and q scaled by p^(-1/2), x += fc2(GELU(fc1(LN(x))))
    with the erf GELU (``nn.GELU()``); the final ``norm`` over every token, the class token's row; ``head`` when the
    state has one (a DINO backbone has none: the normalised class token is its output)."""
    state = {k: v.double() for k, v in state.items()}
    weight = state["patch_embed.proj.weight"]
    dim, channels, p, _ = weight.shape
    n, _, h, w = images.shape
    patches = images.reshape(n, channels, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(n, -1, channels * p * p)
    x = patches @ weight.reshape(dim, -1).T + state["patch_embed.proj.bias"]
    x = torch.cat([state["cls_token"].expand(n, -1, -1), x], dim=1) + state["pos_embed"]
    depth = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("blocks."))
    for i in range(depth):
        b = f"blocks.{i}."
        y = _layer_norm(x, state, b + "norm1")
        qkv = y @ state[b + "attn.qkv.weight"].T + state.get(b + "attn.qkv.bias", 0)
        q, k, v = qkv.reshape(n, x.shape[1], 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
        scores = (q * (dim // heads) ** -0.5) @ k.transpose(-2, -1)
        attn = torch.exp(scores - scores.amax(-1, keepdim=True))
        attn = attn / attn.sum(-1, keepdim=True)
        out = (attn @ v).transpose(1, 2).reshape(n, x.shape[1], dim)
        x = x + out @ state[b + "attn.proj.weight"].T + state[b + "attn.proj.bias"]
        hidden = _layer_norm(x, state, b + "norm2") @ state[b + "mlp.fc1.weight"].T + state[b + "mlp.fc1.bias"]
        hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))
        x = x + hidden @ state[b + "mlp.fc2.weight"].T + state[b + "mlp.fc2.bias"]
    cls = _layer_norm(x, state, "norm")[:, 0]
    return cls @ state["head.weight"].T + state["head.bias"] if "head.weight" in state else cls


def images(n=3, seed=1) -> torch.Tensor:
    return torch.randn(n, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def outputs(model, x=None) -> torch.Tensor:
    with torch.no_grad():
        return model.double().eval()(images() if x is None else x)


def close(ours, theirs):
    # float64 on both sides from the same tensors: they differ only by the order of the sums (≈ 1e-15)
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


def refused(path, match: str, **options) -> str:
    with pytest.raises(ValueError, match=match) as err:
        crate_nn.load(path, **options)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_timm_state_dict_gives_timms_logits(tmp_path):
    state = timm_state()
    torch.save(state, tmp_path / "vit.pth")
    assert sniff(tmp_path / "vit.pth") == "timm ViT"
    refused(tmp_path / "vit.pth", "heads cannot be inferred from the tensors")
    model = crate_nn.load(tmp_path / "vit.pth", heads=HEADS)
    c = model.config
    assert (c.dim, c.depth, c.heads, c.num_classes, c.mlp_ratio, c.norm_eps, c.pool) == (D, 2, 3, 5, 4.0, 1e-6, "cls")
    close(outputs(model), their_forward(state, images(), HEADS))
    # the reference tells the heads apart: the same tensors split into 6 heads of 4 give other logits
    assert (outputs(crate_nn.load(tmp_path / "vit.pth", heads=6)) - their_forward(state, images(), HEADS)).abs().max() > 1e-3
    refused(tmp_path / "vit.pth", r"the checkpoint contradicts vit_small", name="vit_small")


def test_a_timm_file_without_qkv_biases_and_in_float32(tmp_path):
    state = timm_state(qkv_bias=False, dtype=torch.float32, seed=3)  # timm's qkv_bias=False, as it trains
    torch.save(state, tmp_path / "vit.pth")
    model = crate_nn.load(tmp_path / "vit.pth", heads=HEADS)
    assert model.encoder.layers[1].mhsa.qkv.weight.dtype == torch.float32
    assert torch.equal(model.encoder.layers[1].mhsa.qkv.bias, torch.zeros(3 * D))
    close(outputs(model), their_forward(state, images(), HEADS))  # float32 values, both computed in float64


@pytest.mark.parametrize("extra, absent, named", [
    ({"blocks.0.ls1.gamma": torch.full((D,), 1e-5), "blocks.0.ls2.gamma": torch.full((D,), 1e-5)}, (),
     "blocks.0.ls1.gamma"),  # LayerScale (init_values)
    ({"reg_token": torch.zeros(1, 4, D)}, (), "reg_token"),  # register tokens (reg_tokens=4)
    ({"fc_norm.weight": torch.ones(D), "fc_norm.bias": torch.zeros(D)}, ("norm.weight", "norm.bias"),
     "fc_norm.weight"),  # global_pool='avg': the final norm after the pooling
    ({"norm_pre.weight": torch.ones(D), "norm_pre.bias": torch.zeros(D)}, (), "norm_pre.weight"),  # pre_norm=True
    ({"dist_token": torch.zeros(1, 1, D), "head_dist.weight": torch.zeros(CLASSES, D),
      "head_dist.bias": torch.zeros(CLASSES)}, (), "dist_token"),  # DeiT's distillation token
])
def test_what_our_vit_does_not_have_is_refused_naming_the_keys(tmp_path, extra, absent, named):
    state = {**{k: v for k, v in timm_state().items() if k not in absent}, **{k: v.double() for k, v in extra.items()}}
    torch.save(state, tmp_path / "vit.pth")
    refused(tmp_path / "vit.pth", named)  # without heads= too: the layout is refused first
    refused(tmp_path / "vit.pth", named, heads=HEADS)


def dino_network(seed, prefix="", head=True, dim=D, **options) -> dict[str, torch.Tensor]:
    """``MultiCropWrapper(backbone, DINOHead)``'s state dict: ``backbone.`` + the ViT (its ``head`` an Identity,
    nothing stored) and ``head.`` + DINOHead's 3-layer MLP to a 256-d bottleneck and weight-normalised prototypes
    (``nn.utils.weight_norm``: ``weight_g``, ``weight_v``); ``prefix``: DDP's ``module.`` / compile's ``_orig_mod.``."""
    state = {"backbone." + k: v for k, v in backbone_state(seed=seed, dim=dim, **options).items()}
    if head:
        g = torch.Generator().manual_seed(seed + 200)
        sizes = [(32, dim), (32, 32), (16, 32)]  # hidden_dim 2048, bottleneck_dim 256 in DINO: shrunk here
        for j, (out, inp) in zip((0, 2, 4), sizes):
            state[f"head.mlp.{j}.weight"] = torch.randn(out, inp, generator=g, dtype=torch.float64)
            state[f"head.mlp.{j}.bias"] = torch.zeros(out, dtype=torch.float64)
        state["head.last_layer.weight_g"] = torch.ones(40, 1, dtype=torch.float64)
        state["head.last_layer.weight_v"] = torch.randn(40, 16, generator=g, dtype=torch.float64)
    return {prefix + k: v for k, v in state.items()}


def dino_checkpoint(student_prefix="module.", teacher_prefix="", arch="vit_small", **options) -> dict:
    """Their ``main_dino.py``'s ``save_dict``: the student (behind DDP), the teacher (not: a ViT has no batch norms),
    the optimizer's state, the epoch, the run's ``args`` and the loss's centre; distinct student and teacher."""
    return {"student": dino_network(0, student_prefix, **options), "teacher": dino_network(1, teacher_prefix, **options),
            "optimizer": {"state": {}, "param_groups": [{"lr": 5e-4, "weight_decay": 0.04, "params": [0, 1, 2]}]},
            "epoch": 100, "args": argparse.Namespace(arch=arch, patch_size=PATCH, out_dim=40, momentum_teacher=0.996),
            "dino_loss": {"center": torch.zeros(1, 40)}, "fp16_scaler": {"scale": 65536.0, "_growth_tracker": 3}}


def backbone_of(network: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """What their ``load_pretrained_weights`` loads: ``module.``/``_orig_mod.``/``backbone.`` removed; the DINOHead's
    keys left aside (``strict=False``)."""
    state = {k.replace("_orig_mod.", "").replace("module.", ""): v for k, v in network.items()}
    return {k.removeprefix("backbone."): v for k, v in state.items() if k.startswith("backbone.")}


def test_a_dino_training_checkpoint_gives_its_teacher_or_its_student(tmp_path):
    checkpoint = dino_checkpoint()
    torch.save(checkpoint, tmp_path / "checkpoint.pth")
    assert sniff(tmp_path / "checkpoint.pth") == "DINO / SimDINO ViT"
    teacher = crate_nn.load(tmp_path / "checkpoint.pth", heads=HEADS)  # args.arch is vit_small, this is smaller
    assert teacher.config.num_classes == D and teacher.config.norm_eps == 1e-6
    assert torch.equal(teacher.head.fc.weight, torch.eye(D, dtype=teacher.head.fc.weight.dtype))
    close(outputs(teacher), their_forward(backbone_of(checkpoint["teacher"]), images(), HEADS))
    student = crate_nn.load(tmp_path / "checkpoint.pth", heads=HEADS, checkpoint_key="student")
    close(outputs(student), their_forward(backbone_of(checkpoint["student"]), images(), HEADS))
    assert (outputs(student) - outputs(teacher)).abs().max() > 1e-3  # two networks, not one read twice
    refused(tmp_path / "checkpoint.pth", r"checkpoint_key: expected one of \['teacher', 'student'\], got 'model'",
            heads=HEADS, checkpoint_key="model")


def test_a_simdino_checkpoint_behind_torch_compile(tmp_path):
    checkpoint = dino_checkpoint(student_prefix="_orig_mod.module.", teacher_prefix="_orig_mod.")
    torch.save(checkpoint, tmp_path / "checkpoint.pth")
    close(outputs(crate_nn.load(tmp_path / "checkpoint.pth", heads=HEADS)),
          their_forward(backbone_of(checkpoint["teacher"]), images(), HEADS))
    close(outputs(crate_nn.load(tmp_path / "checkpoint.pth", heads=HEADS, checkpoint_key="student")),
          their_forward(backbone_of(checkpoint["student"]), images(), HEADS))


def test_dinos_published_backbone_and_one_without_qkv_biases(tmp_path):
    for bias in (True, False):  # vit_small/base set qkv_bias=True; VisionTransformer's own default is False
        state = backbone_state(qkv_bias=bias, seed=5, dtype=torch.float32)  # dino_deitsmall16_pretrain.pth's layout
        torch.save(state, tmp_path / "dino_pretrain.pth")
        assert sniff(tmp_path / "dino_pretrain.pth") == "DINO / SimDINO ViT"
        model = crate_nn.load(tmp_path / "dino_pretrain.pth", heads=HEADS)
        close(outputs(model), their_forward(state, images(), HEADS))
    refused(tmp_path / "dino_pretrain.pth", "checkpoint_key='student': the file holds one network", heads=HEADS,
            checkpoint_key="student")


def test_dinov2_keys_are_refused_naming_them(tmp_path):
    state = {**backbone_state(), "mask_token": torch.zeros(1, D), "register_tokens": torch.zeros(1, 4, D),
             "blocks.0.ls1.gamma": torch.ones(D), "blocks.0.ls2.gamma": torch.ones(D)}
    torch.save(state, tmp_path / "dinov2_vits14_reg4_pretrain.pth")
    for options in ({}, {"heads": HEADS}):  # refused for its layout, not for the heads it lacks
        message = refused(tmp_path / "dinov2_vits14_reg4_pretrain.pth", "DINOv2", **options)
        assert "mask_token" in message and "register_tokens" in message


@pytest.mark.parametrize("arch, name", [("vit_small", "vit_small"), ("deit_small", "vit_small"),
                                        ("vit_base", "vit_base"), ("vit_tiny", "vit_tiny")])
def test_the_heads_of_a_dino_file_come_from_its_args(arch, name):
    registered = model_config(name)  # meta tensors: the registered size's layout without its numbers
    network = _meta_network(registered.dim, registered.depth)
    config, _ = vit.dino_to_ours({"student": {"module." + k: v for k, v in network.items()}, "teacher": network,
                                  "args": argparse.Namespace(arch=arch)})
    assert (config.heads, config.dim, config.depth, config.num_classes) == (registered.heads, registered.dim,
                                                                             registered.depth, registered.dim)


def _meta_network(dim, depth, patch=16, image=224):
    """``backbone.`` + a DINO ViT's keys as meta tensors in their shapes (`backbone_state`'s layout)."""
    shapes = {"cls_token": (1, 1, dim), "pos_embed": (1, (image // patch) ** 2 + 1, dim),
              "patch_embed.proj.weight": (dim, 3, patch, patch), "patch_embed.proj.bias": (dim,),
              "norm.weight": (dim,), "norm.bias": (dim,)}
    for i in range(depth):
        b = f"blocks.{i}."
        shapes.update({b + "norm1.weight": (dim,), b + "norm1.bias": (dim,), b + "attn.qkv.weight": (3 * dim, dim),
                       b + "attn.qkv.bias": (3 * dim,), b + "attn.proj.weight": (dim, dim), b + "attn.proj.bias": (dim,),
                       b + "norm2.weight": (dim,), b + "norm2.bias": (dim,), b + "mlp.fc1.weight": (4 * dim, dim),
                       b + "mlp.fc1.bias": (4 * dim,), b + "mlp.fc2.weight": (dim, 4 * dim), b + "mlp.fc2.bias": (dim,)})
    return {"backbone." + k: torch.empty(s, device="meta") for k, s in shapes.items()}
