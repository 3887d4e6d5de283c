"""`crate_nn.load` reads every checkpoint format the package knows, telling them apart from the file
(`crate_nn.checkpoint.sniff`): ours (torch and safetensors), the authors' CRATE classifier and CRATE-MAE, crate-lm,
nanoGPT, and another codebase's safetensors file by its keys; an unrelated, an ambiguous and a truncated file are
refused in one line naming the file."""
import argparse

import pytest
import torch

import crate_nn
from crate_nn.checkpoint import sniff
from crate_nn.official import crate_nn_to_official, crate_nn_to_official_mae, to_crate_lm
from crate_nn.official.gpt import NANOGPT_KEYS


def small(name: str, **extra):
    torch.manual_seed(0)
    return crate_nn.create_model(name, **extra).double().eval()


def same_outputs(a, b, x) -> None:
    with torch.no_grad():
        out_a, out_b = a(x), b(x)
    out_a = out_a if isinstance(out_a, torch.Tensor) else out_a.logits
    out_b = out_b if isinstance(out_b, torch.Tensor) else out_b.logits
    torch.testing.assert_close(out_a, out_b, rtol=0, atol=0)  # the same tensors, the same operations


def test_ours_loads_and_refuses_overrides(tmp_path):
    model = small("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=8, depth=1, heads=2)
    crate_nn.save(tmp_path / "ours.pt", model)
    assert sniff(tmp_path / "ours.pt") == "crate_nn"
    same_outputs(crate_nn.load(tmp_path / "ours.pt"), model, torch.randn(2, 3, 8, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"holds its whole config; got overrides \['heads'\]"):
        crate_nn.load(tmp_path / "ours.pt", heads=2)


def test_the_authors_classifier_needs_its_heads_and_then_gives_the_same_logits(tmp_path):
    model = small("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=8, depth=2, heads=2)
    path = tmp_path / "crate-demo.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in crate_nn_to_official(model.state_dict()).items()}}, path)
    assert sniff(path) == "authors' CRATE classifier"
    with pytest.raises(ValueError, match="heads cannot be inferred from the tensors; pass heads="):
        crate_nn.load(path)
    same_outputs(crate_nn.load(path, heads=2), model, torch.randn(2, 3, 8, 8, dtype=torch.float64))


def test_the_authors_mae_file_with_its_args(tmp_path):
    model = small("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4)
    path = tmp_path / "checkpoint-799.pth"
    torch.save({"model": crate_nn_to_official_mae(model.state_dict()), "epoch": 799,
                "args": argparse.Namespace(norm_pix_loss=False)}, path)
    assert sniff(path) == "authors' CRATE-MAE"
    loaded = crate_nn.load(path, heads=4)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())


def test_crate_lm_and_nanogpt(tmp_path):
    crate = small("crate_gpt_small", dim=12, heads=3, depth=2, vocab_size=20, block_size=6)
    torch.save({"model": to_crate_lm(crate), "model_args": {"n_head": 3}}, tmp_path / "crate-lm.pt")
    assert sniff(tmp_path / "crate-lm.pt") == "crate-lm"
    idx = torch.randint(0, 20, (2, 6))
    same_outputs(crate_nn.load(tmp_path / "crate-lm.pt"), crate, idx)
    gpt = small("gpt_small", dim=12, heads=3, depth=2, vocab_size=20, block_size=6)
    state = {k: v for k, v in gpt.state_dict().items() if k != "lm_head.weight"}
    torch.save({"model": NANOGPT_KEYS.to_theirs(state, "nanoGPT")}, tmp_path / "nanogpt.pt")
    assert sniff(tmp_path / "nanogpt.pt") == "nanoGPT"
    same_outputs(crate_nn.load(tmp_path / "nanogpt.pt", heads=3), gpt, idx)


def test_unknown_ambiguous_and_truncated_files_are_refused_naming_the_file(tmp_path):
    torch.save({"encoder.weight": torch.zeros(2), "fc.bias": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"other.pt: no known checkpoint format .*keys begin \['encoder.weight'"):
        crate_nn.load(tmp_path / "other.pt")
    both = {"to_patch_embedding.2.weight": torch.zeros(1), "transformer.layers.0.0.fn.qkv.weight": torch.zeros(1),
            "transformer.wte.weight": torch.zeros(1), "transformer.h.0.ln_1.weight": torch.zeros(1)}
    torch.save(both, tmp_path / "both.pt")
    with pytest.raises(ValueError, match="both.pt: ambiguous, its keys fit authors' CRATE classifier and nanoGPT"):
        crate_nn.load(tmp_path / "both.pt")
    torch.save({"x": 1}, tmp_path / "not-tensors.pt")
    with pytest.raises(ValueError, match="not-tensors.pt: not a state dict of a known format"):
        sniff(tmp_path / "not-tensors.pt")
    whole = (tmp_path / "other.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match="cut.pt.*not a readable torch checkpoint"):
        crate_nn.load(tmp_path / "cut.pt")


def test_building_on_meta_keeps_ties_and_falls_back_for_tensors_no_checkpoint_holds(tmp_path):
    from crate_nn.checkpoint import build_loaded, build_then_copy

    gpt = small("crate_gpt_small", dim=12, heads=3, depth=1, vocab_size=20, block_size=6)
    state = gpt.state_dict()
    loaded = build_loaded(type(gpt), gpt.config, state)
    assert loaded.lm_head.weight is loaded.wte.weight  # tied again after the assignment
    assert not any(t.is_meta for t in (*loaded.parameters(), *loaded.buffers()))
    assert loaded.wte.weight.dtype == torch.float64
    sinusoidal = small("crate_gpt_small", dim=12, heads=3, depth=1, vocab_size=20, block_size=6, pos_embed="sinusoid")
    rebuilt = build_loaded(type(sinusoidal), sinusoidal.config, sinusoidal.state_dict())  # a non-persistent buffer
    assert torch.equal(rebuilt.sinusoid, sinusoidal.sinusoid) and not rebuilt.sinusoid.is_meta
    plain = build_then_copy(type(gpt), gpt.config, state)
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in loaded.state_dict().items())


@pytest.mark.parametrize("name, extra", [
    ("crate_tiny", dict(image_size=8, patch_size=4, num_classes=3, dim=8, depth=1, heads=2)),
    ("crate_mae_tiny", dict(image_size=8, patch_size=2, dim=16, depth=1, heads=4)),
    ("crate_gpt_small", dict(dim=12, heads=3, depth=1, vocab_size=20, block_size=6)),  # tied wte / lm_head
    ("crate_bert_base", dict(dim=12, heads=3, depth=1, vocab_size=20, block_size=6)),
])
def test_safetensors_round_trip_is_bit_identical_for_every_family(tmp_path, name, extra):
    model = small(name, **extra)
    path = tmp_path / "model.safetensors"
    crate_nn.save(path, model)
    assert sniff(path) == "crate_nn (safetensors)"
    back = crate_nn.load(path)
    assert type(back) is type(model) and back.config == model.config
    assert back.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(back.state_dict()[k], v) and back.state_dict()[k].dtype == v.dtype
               for k, v in model.state_dict().items())
    if name == "crate_gpt_small":
        assert back.lm_head.weight is back.wte.weight


def test_a_safetensors_file_of_another_codebase_is_told_by_its_keys(tmp_path):
    from safetensors.torch import save_file

    model = small("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=8, depth=2, heads=2)
    save_file(crate_nn_to_official(model.state_dict()), str(tmp_path / "theirs.safetensors"))
    assert sniff(tmp_path / "theirs.safetensors") == "authors' CRATE classifier"
    back = crate_nn.load(tmp_path / "theirs.safetensors", heads=2)
    assert back.preprocessing is None  # another codebase's file records none
    same_outputs(back, model, torch.randn(2, 3, 8, 8, dtype=torch.float64))


def test_safetensors_refuses_extras_overrides_and_unknown_files(tmp_path):
    from safetensors.torch import save_file

    model = small("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=8, depth=1, heads=2)
    with pytest.raises(ValueError, match=r"extra: a .safetensors file holds weights only"):
        crate_nn.save(tmp_path / "m.safetensors", model, extra={"epoch": 3})
    crate_nn.save(tmp_path / "m.safetensors", model)
    with pytest.raises(ValueError, match=r"holds its whole config; got overrides \['heads'\]"):
        crate_nn.load(tmp_path / "m.safetensors", heads=2)
    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match=r"other.safetensors: no known checkpoint format .*keys begin \['w'\]"):
        crate_nn.load(tmp_path / "other.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="junk.safetensors' is not a readable safetensors file"):
        crate_nn.load(tmp_path / "junk.safetensors")


def test_safetensors_without_the_package_names_the_extra(tmp_path, monkeypatch):
    from crate_nn import extras

    monkeypatch.setattr(extras, "available", lambda package: package != "safetensors")
    model = small("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=8, depth=1, heads=2)
    with pytest.raises(ValueError, match=r"path: a .safetensors file needs the safetensors package: pip install "
                                         r"'crate-whitebox\[safetensors\]'"):
        crate_nn.save(tmp_path / "m.safetensors", model)
    assert not (tmp_path / "m.safetensors").exists()


def test_create_model_with_a_checkpoint_loads_it_strictly(tmp_path):
    from crate_nn.preprocessing import Preprocessing

    sizes = dict(image_size=8, patch_size=4, num_classes=3, dim=8, depth=2, heads=2)
    model = small("crate_tiny", **sizes)
    model.preprocessing = Preprocessing(mean=(0.5,) * 3, std=(0.25,) * 3, image_size=8, patch_size=4)
    crate_nn.save(tmp_path / "ours.pt", model)
    torch.save(crate_nn_to_official(model.state_dict()), tmp_path / "theirs.pth")
    for name in ("ours.pt", "theirs.pth"):  # the authors' loader is given the config's heads
        built = crate_nn.create_model("crate_tiny", checkpoint=tmp_path / name, **sizes)
        assert built.config == crate_nn.model_config("crate_tiny", **sizes) and built.pos_embed.dtype == torch.float64
        assert all(torch.equal(built.state_dict()[k], v) for k, v in model.state_dict().items())
        assert built.preprocessing == (model.preprocessing if name == "ours.pt" else None)
    gpt = small("crate_gpt_small", dim=12, heads=3, depth=1, vocab_size=20, block_size=6)
    crate_nn.save(tmp_path / "gpt.safetensors", gpt)
    tied = crate_nn.create_model("crate_gpt_small", checkpoint=tmp_path / "gpt.safetensors", dim=12, heads=3, depth=1,
                                 vocab_size=20, block_size=6)
    assert tied.lm_head.weight is tied.wte.weight and torch.equal(tied.wte.weight, gpt.wte.weight)
    with pytest.raises(ValueError, match=r"checkpoint: .*ours.pt does not fit 'crate_tiny': the checkpoint does not "
                                         r"match the model: missing keys \[\], unexpected keys \['encoder.layers.1"):
        crate_nn.create_model("crate_tiny", checkpoint=tmp_path / "ours.pt", **{**sizes, "depth": 1})
    with pytest.raises(ValueError, match=r"ours.pt does not fit 'crate_tiny': shape mismatch: cls_token: checkpoint "
                                         r"\(1, 1, 8\) vs model \(1, 1, 16\)"):
        crate_nn.create_model("crate_tiny", checkpoint=tmp_path / "ours.pt", **{**sizes, "dim": 16})
