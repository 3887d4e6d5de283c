"""CRATE-α (UCSC-VLAA/CRATE-alpha, torch_inference/model/crate_alpha.py): the registered sizes' parameter counts, and
a CRATE-α-format state dict loaded by `crate_nn.load` giving the logits of an independent float64 forward written
from that file's computation (below, on their key names, in plain tensor operations)."""
import pytest
import torch
import torch.nn.functional as F
from _published import CRATE_ALPHA, cached_files

import crate_nn
from crate_nn.checkpoint import sniff
from crate_nn.official import crate_nn_to_crate_alpha, load_crate_alpha
from crate_nn.weights.keys import state_dict_of
from crate_nn.weights.reading import local_path


def their_forward(sd: dict, images: torch.Tensor, heads: int, depth: int, eta=0.1, lmbda=0.1) -> torch.Tensor:
    """CRATE-α's forward: Conv2d stem, [CLS] + positions, per layer x += MSSA(LN(x)) (qkv tied, scale p^-1/2,
    bias-free to_out), x += ISTA(LN(x)) with z1 = ReLU(η Dᵀx − ηλ), z2 = ReLU(z1 − η Dᵀ(D z1 − x) − ηλ), D1 z2;
    head LN (ε 1e-5) + Linear on the class token; layer LNs ε 1e-6."""
    x = F.conv2d(images, sd["conv1.weight"], sd["conv1.bias"], stride=sd["conv1.weight"].shape[-1])
    x = x.flatten(2).transpose(1, 2)
    x = torch.cat([sd["cls_token"].expand(len(x), -1, -1), x], 1) + sd["pos_embedding"]
    d = x.shape[-1]
    for i in range(depth):
        p = f"transformer.layers.{i}."
        y = F.layer_norm(x, (d,), sd[p + "0.norm.weight"], sd[p + "0.norm.bias"], 1e-6)
        w = (y @ sd[p + "0.fn.qkv.weight"].T).unflatten(-1, (heads, -1)).transpose(1, 2)  # (B, K, n, p)
        attn = torch.softmax(w @ w.transpose(-1, -2) * w.shape[-1] ** -0.5, -1)
        x = x + (attn @ w).transpose(1, 2).flatten(2) @ sd[p + "0.fn.to_out.0.weight"].T
        y = F.layer_norm(x, (d,), sd[p + "1.norm.weight"], sd[p + "1.norm.bias"], 1e-6)
        D, D1 = sd[p + "1.fn.D"], sd[p + "1.fn.D1"]  # (d, m)
        z1 = F.relu(eta * y @ D - eta * lmbda)
        z2 = F.relu(z1 - eta * (z1 @ D.T - y) @ D - eta * lmbda)
        x = x + z2 @ D1.T
    cls = F.layer_norm(x[:, 0], (d,), sd["mlp_head.0.weight"], sd["mlp_head.0.bias"], 1e-5)
    return cls @ sd["mlp_head.1.weight"].T + sd["mlp_head.1.bias"]


@pytest.mark.parametrize("name, count", [("crate_alpha_b16", 72_328_936), ("crate_alpha_l14", 253_650_920),
                                         ("crate_alpha_b32", 73_985_512), ("crate_alpha_b8", 72_338_152)])
def test_registered_sizes_count_as_computed_from_crate_alphas_modules(name, count):
    # B/16: 12 layers × (2 LN of 2·768 + qkv and to_out 768² each + D and D1 768·3072 each) + Conv2d(3, 768, 16)
    # + 197 positions + [CLS] + head LN and Linear(768, 1000) = 72,328,936 (L/14 likewise with d 1024, 24 layers)
    with torch.device("meta"):
        model = crate_nn.create_model(name)
    assert sum(p.numel() for p in model.parameters()) == count


def test_a_crate_alpha_file_loads_and_gives_their_logits(tmp_path):
    torch.manual_seed(0)
    ours = crate_nn.create_model("crate_alpha_b16", image_size=32, patch_size=8, dim=24, depth=2, heads=3,
                                 num_classes=5).double()
    theirs = crate_nn_to_crate_alpha(ours.state_dict())
    with torch.no_grad():  # randomised LayerNorm affines so that swapped norms would show
        for k, v in theirs.items():
            if "norm" in k or "mlp_head.0" in k:
                v.copy_(1 + 0.1 * torch.randn_like(v) if k.endswith("weight") else 0.1 * torch.randn_like(v))
    path = tmp_path / "crate_alpha_B16.pth"
    torch.save({f"module.{k}": v for k, v in theirs.items()}, path)
    assert sniff(path) == "CRATE-α"
    with pytest.raises(ValueError, match="heads cannot be inferred"):
        crate_nn.load(path)
    model = crate_nn.load(path, heads=3).eval()
    assert model.config.head_norm_eps == 1e-5 and model.config.norm_eps == 1e-6
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        # float64 throughout: the two differ only by the order of the products (≈ 1e-15 relative)
        torch.testing.assert_close(model(images), their_forward(theirs, images, heads=3, depth=2), rtol=1e-12,
                                   atol=1e-12)
    direct = load_crate_alpha(theirs, heads=3)  # the in-memory dict, no module. prefix
    assert all(torch.equal(direct.state_dict()[k], v) for k, v in model.state_dict().items())


def test_a_wrong_crate_alpha_file_is_named():
    torch.manual_seed(0)
    ours = crate_nn.create_model("crate_alpha_b16", image_size=32, patch_size=8, dim=24, depth=2, heads=3)
    theirs = crate_nn_to_crate_alpha(ours.state_dict())
    with pytest.raises(ValueError, match=r"the checkpoint contradicts crate_alpha_l14"):
        load_crate_alpha(theirs, name="crate_alpha_l14")
    broken = {k: v for k, v in theirs.items() if k != "transformer.layers.1.1.fn.D1"}
    with pytest.raises(ValueError, match=r"missing keys \['transformer.layers.1.1.fn.D1'\]"):
        load_crate_alpha(broken, heads=3)


def test_published_torch_weights_give_their_logits():
    """Regression against real weights: the smallest of CRATE-α's published PyTorch files in the local Hugging Face
    cache (skipped, naming the repository, when it holds none)."""
    name = cached_files(CRATE_ALPHA, "torch", r"crate_alpha_(B16|L14)\.pth")[0]
    state = state_dict_of(torch.load(local_path(name), map_location="cpu", weights_only=True))
    dim = state["conv1.weight"].shape[0]
    heads = {768: 12, 1024: 16}[dim]  # B and L: the tensors fix K·p only (crate_alpha_b16: 12, crate_alpha_l14: 16)
    model = crate_nn.load(name, heads=heads).double().eval()
    side = model.config.image_size
    images = torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    depth = model.config.depth
    with torch.no_grad():
        # their stored values, both sides in float64 (the order of the sums differs: ≈ 1e-13 at these depths)
        torch.testing.assert_close(model(images), their_forward({k: v.double() for k, v in state.items()}, images,
                                                                heads=heads, depth=depth), rtol=1e-9, atol=1e-9)
