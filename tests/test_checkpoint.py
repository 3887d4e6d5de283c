"""Checkpoints: the authors' format against an independent forward pass, and our own save/load."""
import errno
import math
import os

import pytest
import torch

import crate_nn
from crate_nn.checkpoint import read
from crate_nn.official import crate_nn_to_official, official_to_crate_nn

# Independent forward pass written from the documented semantics of the authors' code
# (github.com/Ma-Lab-Berkeley/CRATE), with plain tensor operations only.


def _layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def authors_forward(sd, img, heads, eta=0.1, lam=0.1):
    b, c, h, w = img.shape
    size = math.isqrt(sd["to_patch_embedding.2.weight"].shape[1] // c)
    # 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)', one patch at a time
    patches = [
        img[:, :, i * size : (i + 1) * size, j * size : (j + 1) * size].permute(0, 2, 3, 1).reshape(b, -1)
        for i in range(h // size)
        for j in range(w // size)
    ]
    x = torch.stack(patches, dim=1)
    x = _layer_norm(x, sd["to_patch_embedding.1.weight"], sd["to_patch_embedding.1.bias"])
    x = x @ sd["to_patch_embedding.2.weight"].T + sd["to_patch_embedding.2.bias"]
    x = _layer_norm(x, sd["to_patch_embedding.3.weight"], sd["to_patch_embedding.3.bias"])
    x = torch.cat([sd["cls_token"].expand(b, 1, -1), x], dim=1) + sd["pos_embedding"]
    depth = 1 + max(int(k.split(".")[2]) for k in sd if k.startswith("transformer.layers."))
    for i in range(depth):
        pre = f"transformer.layers.{i}."
        y = _layer_norm(x, sd[pre + "0.norm.weight"], sd[pre + "0.norm.bias"])
        codes = y @ sd[pre + "0.fn.qkv.weight"].T
        p = codes.shape[-1] // heads
        outs = []
        for k in range(heads):
            wk = codes[..., k * p : (k + 1) * p]
            dots = wk @ wk.transpose(1, 2) * p**-0.5
            e = torch.exp(dots - dots.max(-1, keepdim=True).values)
            outs.append((e / e.sum(-1, keepdim=True)) @ wk)
        x = x + torch.cat(outs, -1) @ sd[pre + "0.fn.to_out.0.weight"].T + sd[pre + "0.fn.to_out.0.bias"]
        y = _layer_norm(x, sd[pre + "1.norm.weight"], sd[pre + "1.norm.bias"])
        D = sd[pre + "1.fn.weight"]
        x1 = y @ D.T
        x = torch.clamp(y - eta * ((x1 - y) @ D) - eta * lam, min=0.0)
    z = _layer_norm(x[:, 0], sd["mlp_head.0.weight"], sd["mlp_head.0.bias"])
    return z @ sd["mlp_head.1.weight"].T + sd["mlp_head.1.bias"]


def authors_state_dict(dim=12, depth=2, heads=3, patch=4, channels=3, grid=3, classes=4, seed=0):
    """A random state dict in the authors' layout (every LayerNorm affine randomised so swaps would show)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    pd = patch * patch * channels
    sd = {
        "pos_embedding": r(1, grid * grid + 1, dim),
        "cls_token": r(1, 1, dim),
        "to_patch_embedding.1.weight": 1 + 0.1 * r(pd),
        "to_patch_embedding.1.bias": 0.1 * r(pd),
        "to_patch_embedding.2.weight": r(dim, pd, scale=pd**-0.5),
        "to_patch_embedding.2.bias": 0.1 * r(dim),
        "to_patch_embedding.3.weight": 1 + 0.1 * r(dim),
        "to_patch_embedding.3.bias": 0.1 * r(dim),
        "mlp_head.0.weight": 1 + 0.1 * r(dim),
        "mlp_head.0.bias": 0.1 * r(dim),
        "mlp_head.1.weight": r(classes, dim, scale=dim**-0.5),
        "mlp_head.1.bias": 0.1 * r(classes),
    }
    for i in range(depth):
        pre = f"transformer.layers.{i}."
        sd.update({
            pre + "0.norm.weight": 1 + 0.1 * r(dim),
            pre + "0.norm.bias": 0.1 * r(dim),
            pre + "0.fn.qkv.weight": r(dim, dim, scale=dim**-0.5),
            pre + "0.fn.to_out.0.weight": r(dim, dim, scale=dim**-0.5),
            pre + "0.fn.to_out.0.bias": 0.1 * r(dim),
            pre + "1.norm.weight": 1 + 0.1 * r(dim),
            pre + "1.norm.bias": 0.1 * r(dim),
            pre + "1.fn.weight": r(dim, dim, scale=(6 / dim) ** 0.5),
        })
    return sd


def test_official_logits_equal_an_independent_forward_in_float64():
    sd = authors_state_dict()
    img = torch.randn(3, 3, 12, 12, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    model = crate_nn.load_official_checkpoint(sd, heads=3)
    assert model.pos_embed.dtype == torch.float64
    cfg = model.config
    assert (cfg.dim, cfg.depth, cfg.heads, cfg.patch_size, cfg.image_size, cfg.num_classes) == (12, 2, 3, 4, 12, 4)
    ours, theirs = model(img), authors_forward(sd, img, heads=3)
    # Same float64 arithmetic in a different order through 2 layers: observed ~1e-15; the bar is 1e-10.
    assert (ours - theirs).abs().max() < 1e-10
    assert theirs.abs().max() > 0.1  # a non-degenerate comparison


@pytest.mark.parametrize("wrap", ["bare", "state_dict", "model", "module.", "state_dict+module."])
def test_every_wrapper_and_prefix_loads(wrap):
    sd = authors_state_dict(channels=1, patch=2, grid=4, heads=2, dim=8)
    source = {"module." + k: v for k, v in sd.items()} if "module." in wrap else dict(sd)
    if wrap.startswith("state_dict"):
        source = {"epoch": 3, "arch": "CRATE_small", "state_dict": source, "best_acc1": torch.tensor(1.0)}
    elif wrap == "model":
        source = {"model": source}
    model = crate_nn.load_official_checkpoint(source, heads=2, in_channels=1)
    assert (model.config.patch_size, model.config.in_channels, model.config.image_size) == (2, 1, 8)
    img = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    assert (model(img) - authors_forward(sd, img, heads=2)).abs().max() < 1e-10


def test_a_ddp_training_file_loads_from_disk_with_weights_only(tmp_path):
    sd = authors_state_dict()
    # an optimizer state dict as torch.optim writes it (built by hand: importing torch.optim costs seconds here)
    optimizer = {"state": {0: {"momentum_buffer": torch.zeros(2)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    path = tmp_path / "checkpoint.pth.tar"
    torch.save({"epoch": 7, "arch": "CRATE_tiny", "state_dict": {"module." + k: v for k, v in sd.items()},
                "best_acc1": 12.5, "optimizer": optimizer, "scheduler": {"last_epoch": 7}}, path)
    model = crate_nn.load_official_checkpoint(path, heads=3)
    img = torch.randn(1, 3, 12, 12, dtype=torch.float64)
    assert (model(img) - authors_forward(sd, img, heads=3)).abs().max() < 1e-10


def test_registered_name_supplies_the_heads():
    tiny = authors_state_dict(dim=384, depth=12, patch=2, channels=1, grid=2, classes=3)  # crate_tiny's d and L
    model = crate_nn.load_official_checkpoint(tiny, name="crate_tiny", in_channels=1)  # crate_tiny: K = 6
    assert (model.config.heads, model.config.head_dim, model.config.image_size) == (6, 64, 4)
    sd = authors_state_dict()
    with pytest.raises(ValueError, match="the checkpoint has dim=12 but crate_small has dim=576"):
        crate_nn.load_official_checkpoint(sd, name="crate_small")
    with pytest.raises(ValueError, match="heads cannot be inferred"):
        crate_nn.load_official_checkpoint(sd)
    with pytest.raises(ValueError, match="heads=5 does not divide"):
        crate_nn.load_official_checkpoint(sd, heads=5)
    with pytest.raises(ValueError, match="dim=16 contradicts the checkpoint"):
        crate_nn.load_official_checkpoint(sd, heads=3, dim=16)


def test_missing_and_unexpected_keys_are_named():
    sd = authors_state_dict()
    del sd["transformer.layers.1.1.fn.weight"]
    sd["transformer.layers.1.2.fn.bias"] = torch.zeros(12, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"missing keys \['transformer.layers.1.1.fn.weight'\], "
                                         r"unexpected keys \['transformer.layers.1.2.fn.bias'\]"):
        crate_nn.load_official_checkpoint(sd, heads=3)
    with pytest.raises(ValueError, match="missing keys in the authors' checkpoint: \\['pos_embedding'\\]"):
        crate_nn.load_official_checkpoint({k: v for k, v in authors_state_dict().items() if k != "pos_embedding"}, heads=3)


def test_shape_mismatches_are_named():
    sd = authors_state_dict()
    sd["transformer.layers.0.1.fn.weight"] = torch.zeros(12, 11, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"shape mismatch: transformer.layers.0.1.fn.weight: checkpoint \(12, 11\) vs model \(12, 12\)"):
        crate_nn.load_official_checkpoint(sd, heads=3)


def test_other_image_size_resamples_the_position_embedding():
    sd = authors_state_dict()
    model = crate_nn.load_official_checkpoint(sd, heads=3, image_size=20)
    assert model.pos_embed.shape == (1, 26, 12) and model.config.image_size == 20
    torch.testing.assert_close(model.pos_embed[:, 0], sd["pos_embedding"][:, 0], rtol=0, atol=0)
    assert model(torch.randn(1, 3, 20, 20, dtype=torch.float64)).shape == (1, 4)


def test_renaming_round_trips():
    sd = authors_state_dict()
    assert crate_nn_to_official(official_to_crate_nn(sd)).keys() == sd.keys()
    with pytest.raises(ValueError, match=r"unexpected keys in the authors' checkpoint: \['head.weight'\]"):
        official_to_crate_nn({"head.weight": torch.zeros(1)})


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_tiny", image_size=16, patch_size=4, num_classes=3, dim=16, depth=2, heads=4,
                                  pool="mean", ista="soft", lam=2.0, skip="normed").double()
    path = tmp_path / "run" / "last.pt"
    path.parent.mkdir()
    crate_nn.save(path, model, extra={"epoch": 4, "metrics": {"top1": 0.5}, "optimizer": None})
    assert os.listdir(path.parent) == ["last.pt"]  # no temporary file left behind
    raw = read(path)
    assert raw["format"] == "crate_nn" and raw["epoch"] == 4 and raw["metrics"] == {"top1": 0.5}
    assert raw["config"]["ista"] == "soft" and raw["config"]["skip"] == "normed"
    loaded = crate_nn.load(path)
    assert loaded.config == model.config and loaded.pos_embed.dtype == torch.float64
    img = torch.randn(2, 3, 16, 16, dtype=torch.float64)
    torch.testing.assert_close(loaded(img), model(img), rtol=0, atol=0)
    crate_nn.save(path, loaded)  # overwriting is atomic too
    assert os.listdir(path.parent) == ["last.pt"]


def test_a_full_disk_names_the_checkpoint_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", disk_full)
    model = crate_nn.create_model("crate_tiny", image_size=8, patch_size=4, num_classes=2, dim=8, depth=1, heads=2)
    with pytest.raises(OSError) as raised:
        crate_nn.save(tmp_path / "last.pt", model)
    assert str(raised.value) == f"checkpoint: cannot write {tmp_path / 'last.pt'}: No space left on device"
    assert raised.value.errno == errno.ENOSPC and os.listdir(tmp_path) == []


def test_save_unwraps_ddp_style_wrappers(tmp_path):
    class Wrapper(torch.nn.Module):  # DistributedDataParallel keeps the model under .module
        def __init__(self, module):
            super().__init__()
            self.module = module

    model = crate_nn.create_model("crate_tiny", image_size=8, patch_size=4, num_classes=2, dim=8, depth=1, heads=2)
    crate_nn.save(tmp_path / "w.pt", Wrapper(model))
    assert set(read(tmp_path / "w.pt")["model"]) == set(model.state_dict())
    with pytest.raises(TypeError, match="CRATEConfig in .config"):
        crate_nn.save(tmp_path / "x.pt", torch.nn.Linear(2, 2))


def test_formats_are_not_confused(tmp_path):
    model = crate_nn.create_model("crate_tiny", image_size=8, patch_size=4, num_classes=2, dim=8, depth=1, heads=2)
    ours = tmp_path / "ours.pt"
    crate_nn.save(ours, model)
    with pytest.raises(ValueError, match="crate_nn checkpoint; load it with crate_nn.load"):
        crate_nn.load_official_checkpoint(ours, heads=2)
    theirs = tmp_path / "theirs.pt"
    torch.save(authors_state_dict(), theirs)
    with pytest.raises(ValueError, match="heads cannot be inferred"):  # sniffed as the authors' format
        crate_nn.load(theirs)
    with pytest.raises(ValueError, match="reserved keys \\['model'\\]"):
        crate_nn.save(ours, model, extra={"model": 1})


def test_a_flipped_byte_in_a_weight_is_an_error_naming_the_file(tmp_path):
    """The checksum written with a checkpoint covers every tensor: one flipped bit of one weight (a DINO-head-sized
    change of 81.3 was loading silently) is refused by read and load; verify=False reads the file for forensics."""
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_tiny", depth=1, num_classes=3)
    with torch.no_grad():
        model.head.fc.bias.copy_(torch.tensor([1.2345, 2.5, -7.0]))
    path = tmp_path / "model.pt"
    crate_nn.save(path, model, {"optimizer": {"state": {0: {"exp_avg": torch.ones(3, dtype=torch.bfloat16)}}}})
    assert read(path)["model"]["head.fc.bias"][0].item() == pytest.approx(1.2345)  # an intact file reads
    data = bytearray(path.read_bytes())
    at = data.find(torch.tensor([1.2345, 2.5, -7.0]).numpy().tobytes())
    assert at > 0  # torch.save stores tensor data uncompressed: the bias's bytes are in the file
    data[at + 3] ^= 0x40  # the exponent's high bit of 1.2345: ×2^±64
    path.write_bytes(bytes(data))
    for reader in (read, crate_nn.load):
        with pytest.raises(ValueError, match=f"checkpoint: '{path}' does not match the checksum written with it"):
            reader(path)
    forensic = crate_nn.load(path, verify=False)
    assert forensic.head.fc.bias[0].item() != pytest.approx(1.2345)
    assert "checksum" not in read(path, verify=False)
