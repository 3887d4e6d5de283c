"""``crate-export`` (`crate_nn.export`): ours → safetensors → ours for every registered family, ours → another
codebase's format → ours for every format we write, bit-identical (``torch.equal`` and the dtype of every tensor);
what a format cannot hold, and bad arguments, are one line naming the argument and write nothing."""
import dataclasses

import pytest
import torch
from _models import library_families

import crate_nn
from crate_nn.export import foreign, main
from crate_nn.models.dino_head import DINO, DINOConfig
from crate_nn.models.language import BERTClassifierConfig
from crate_nn.models.registry import build_model
from crate_nn.official import crate_nn_to_official
from crate_nn.preprocessing import Preprocessing

TEXT = dict(dim=12, heads=3, depth=1, vocab_size=20, block_size=6)
IMAGE = dict(image_size=8, patch_size=4, dim=8, depth=2, heads=2)
EVERY_FAMILY = {
    "classifier": lambda: crate_nn.create_model("crate_tiny", **IMAGE, num_classes=3),
    "dino": lambda: DINO(DINOConfig(**IMAGE, out_dim=16, hidden_dim=12, bottleneck_dim=4)),
    "gpt": lambda: crate_nn.create_model("crate_gpt_small", **TEXT),
    "bert": lambda: crate_nn.create_model("crate_bert_base", **TEXT),
    "bert_classifier": lambda: build_model(BERTClassifierConfig(**TEXT, num_labels=3)),
    "mae": lambda: crate_nn.create_model("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4),
}
EVERY_FOREIGN = {  # each format we write: a model it holds
    "official-classifier": lambda: crate_nn.create_model("crate_tiny", **IMAGE, num_classes=3),
    "crate-alpha": lambda: crate_nn.create_model("crate_alpha_b16", **IMAGE, num_classes=3),
    "official-mae": EVERY_FAMILY["mae"],
    "crate-lm": EVERY_FAMILY["gpt"],
    "nanogpt": lambda: crate_nn.create_model("gpt_small", **TEXT),
    "crate-alpha-jax": lambda: crate_nn.create_model("crate_alpha_b16", **IMAGE, num_classes=3, head_norm_eps=1e-6),
    "timm": lambda: crate_nn.create_model("vit_small", **IMAGE, num_classes=3, patch_embed="conv", norm_eps=1e-6),
    "dino": lambda: dino_backbone(crate_nn.create_model("vit_small", **IMAGE, num_classes=8, patch_embed="conv",
                                                        norm_eps=1e-6)),
}
SUFFIX = {"crate-alpha-jax": ".npz"}  # the others are torch files


def dino_backbone(model):
    """A ViT whose classifier is the identity, as a DINO backbone's model has (its output is the normed class
    token)."""
    with torch.no_grad():
        model.head.fc.weight.copy_(torch.eye(model.config.dim))
        model.head.fc.bias.zero_()
    return model


def seeded(build):
    torch.manual_seed(0)
    return build().double()


def assert_bit_identical(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key, value in sa.items():
        assert sb[key].dtype == value.dtype and torch.equal(sb[key], value), key


def test_every_family_and_every_format_is_covered():
    assert set(EVERY_FAMILY) == library_families()
    assert set(EVERY_FOREIGN) == set(foreign())


@pytest.mark.parametrize("family", EVERY_FAMILY)
def test_ours_to_safetensors_to_ours_is_bit_identical(family, tmp_path, capsys):
    model = seeded(EVERY_FAMILY[family])
    model.preprocessing = Preprocessing(tokenizer="bytes") if "gpt" in family or "bert" in family else Preprocessing(
        mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), image_size=8, patch_size=model.config.patch_size)
    crate_nn.save(tmp_path / "ours.pt", model)
    assert main([str(tmp_path / "ours.pt"), str(tmp_path / "m.safetensors")]) == 0
    assert capsys.readouterr().out.startswith(f"{tmp_path / 'm.safetensors'}: safetensors, a {family} model (")
    assert main([str(tmp_path / "m.safetensors"), str(tmp_path / "back.pt")]) == 0
    back = crate_nn.load(tmp_path / "back.pt")
    assert type(back) is type(model) and back.config == model.config
    assert back.preprocessing == model.preprocessing  # carried by both of our formats
    assert_bit_identical(back, model)


@pytest.mark.parametrize("format", EVERY_FOREIGN)
def test_ours_to_their_format_to_ours_is_bit_identical(format, tmp_path):
    model = seeded(EVERY_FOREIGN[format])
    crate_nn.save(tmp_path / "ours.pt", model)
    theirs = tmp_path / ("theirs" + SUFFIX.get(format, ".pth"))
    assert main([str(tmp_path / "ours.pt"), str(theirs), "--format", format]) == 0
    assert crate_nn.checkpoint.sniff(theirs) == foreign()[format].name
    # their files do not fix the heads, but crate-lm's and nanoGPT's model_args and CRATE-α's JAX arrays do
    heads = [] if format in ("crate-lm", "nanogpt", "crate-alpha-jax") else ["--heads", str(model.config.heads)]
    assert main([str(theirs), str(tmp_path / "back.pt"), *heads]) == 0
    back = crate_nn.load(tmp_path / "back.pt")
    assert type(back) is type(model)
    assert dataclasses.replace(back.config, dim_head=None) == dataclasses.replace(model.config, dim_head=None)
    assert_bit_identical(back, model)


def test_the_overcomplete_crate_lm_round_trips_its_transposed_dictionary(tmp_path):
    model = seeded(lambda: crate_nn.create_model("crate_gpt_overcomplete", **TEXT))
    crate_nn.save(tmp_path / "ours.pt", model)
    assert main([str(tmp_path / "ours.pt"), str(tmp_path / "lm.pt"), "--format", "crate-lm"]) == 0
    assert main([str(tmp_path / "lm.pt"), str(tmp_path / "back.pt")]) == 0
    assert_bit_identical(crate_nn.load(tmp_path / "back.pt"), model)


@pytest.mark.parametrize("build, argv, message", [
    (EVERY_FOREIGN["official-classifier"], ["out.pt", "--format", "official-mae"],
     "format: official-mae holds mae models; this is a classifier model"),
    (lambda: crate_nn.create_model("crate_tiny", **IMAGE, num_classes=3, pool="mean"),
     ["out.pt", "--format", "official-classifier"],
     "format: official-classifier cannot hold this model's options {'pool': ('mean', 'cls')} (ours, as read back)"),
    (EVERY_FOREIGN["crate-alpha"], ["out.pt", "--format", "official-classifier"],
     "format: official-classifier cannot hold this model: these parameters have no counterpart in the authors' "
     "format: ['encoder.layers.0.ista.out_weight', 'encoder.layers.1.ista.out_weight']"),
    (EVERY_FAMILY["gpt"], ["out.pt", "--format", "nanogpt"], "format: nanogpt cannot hold this model: to_nanogpt: "
     "nanoGPT's GPT has MHSA + MLP layers"),
    (EVERY_FOREIGN["official-classifier"], ["out.pt", "--format", "safetensors"],
     "output: --format safetensors writes a .safetensors file, not 'out.pt'"),
    (EVERY_FOREIGN["official-classifier"], ["out.safetensors", "--format", "crate-lm"],
     "output: --format crate-lm writes a torch file, not 'out.safetensors'"),
    (EVERY_FOREIGN["official-classifier"], ["ours.pt"], "output: 'ours.pt' is the input file"),
])
def test_what_cannot_be_written_is_one_line_naming_the_argument(build, argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    crate_nn.save("ours.pt", seeded(build))
    assert main(["ours.pt", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"crate-export: {message}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.pt"]  # nothing written


def test_their_file_without_its_heads_and_a_missing_file_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    crate_nn.save("ours.pt", seeded(EVERY_FOREIGN["official-classifier"]))
    assert main(["ours.pt", "theirs.pth", "--format", "official-classifier"]) == 0
    assert main(["theirs.pth", "back.pt"]) == 2
    # the options spelled as this command takes them (they read "heads=… or a registered name=…", keywords of
    # crate_nn.load, on a command line whose flags are --heads and --name)
    assert capsys.readouterr().err == ("crate-export: checkpoint: 'theirs.pth' (authors' CRATE classifier): heads "
                                       "cannot be inferred from the tensors; pass --heads K or a registered --name "
                                       "NAME\n")
    assert main(["absent.pt", "back.pt"]) == 2
    assert capsys.readouterr().err == "crate-export: checkpoint: 'absent.pt' does not exist or is not a file\n"


def test_gray_images_and_the_mae_loss_survive_their_formats(tmp_path):
    gray = seeded(lambda: crate_nn.create_model("crate_tiny", **IMAGE, num_classes=3, in_channels=1))
    crate_nn.save(tmp_path / "gray.pt", gray)
    assert main([str(tmp_path / "gray.pt"), str(tmp_path / "gray.pth"), "--format", "official-classifier"]) == 0
    # their files fix P²·C, not C: the channels are given back, like the heads
    assert_bit_identical(crate_nn.load(tmp_path / "gray.pth", heads=2, in_channels=1), gray)
    mae = seeded(lambda: crate_nn.create_model("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=1, heads=4,
                                               norm_pix_loss=True))
    crate_nn.save(tmp_path / "mae.pt", mae)
    assert main([str(tmp_path / "mae.pt"), str(tmp_path / "mae.pth"), "--format", "official-mae"]) == 0
    assert crate_nn.load(tmp_path / "mae.pth", heads=4).config.norm_pix_loss  # FAIR-MAE's args.norm_pix_loss


KEEPS = ("official-classifier", "official-mae", "crate-lm", "nanogpt", "timm")
"""The formats whose files hold entries beside the weights, where crate-export keeps the preprocessing."""


@pytest.mark.parametrize("format", EVERY_FOREIGN)
def test_their_formats_keep_the_preprocessing_where_they_have_room_and_say_so_where_not(format, tmp_path, capsys):
    model = seeded(EVERY_FOREIGN[format])
    channels = getattr(model.config, "in_channels", 3)
    model.preprocessing = Preprocessing(tokenizer="bytes") if model.family == "gpt" else Preprocessing(
        mean=(0.25,) * channels, std=(0.5,) * channels, image_size=8, patch_size=model.config.patch_size)
    crate_nn.save(tmp_path / "ours.pt", model)
    theirs = tmp_path / ("theirs" + SUFFIX.get(format, ".pth"))
    assert main([str(tmp_path / "ours.pt"), str(theirs), "--format", format]) == 0
    line = capsys.readouterr().out.strip()
    heads = {} if format in ("crate-lm", "nanogpt", "crate-alpha-jax") else {"heads": model.config.heads}
    back = crate_nn.load(theirs, **heads)
    if format in KEEPS:
        assert back.preprocessing == model.preprocessing and line.endswith(", its preprocessing kept"), line
    else:
        assert back.preprocessing is None
        assert line.endswith(f"; {format} has no place for its preprocessing: give it back as --mean 0.25 0.25 0.25 "
                             "--std 0.5 0.5 0.5"), line
    assert_bit_identical(back, model)


def test_the_authors_classifier_with_its_preprocessing_is_their_training_scripts_layout(tmp_path):
    """Their training script saves ``{"epoch", "arch", "state_dict", …}``: a file with the preprocessing beside the
    weights is that layout, whose ``state_dict`` their model loads; without a preprocessing, the bare state dict."""
    model = seeded(EVERY_FOREIGN["official-classifier"])
    crate_nn.save(tmp_path / "plain.pt", model)
    model.preprocessing = Preprocessing(mean=(0.5,) * 3, std=(0.25,) * 3, image_size=8, patch_size=4)
    crate_nn.save(tmp_path / "recorded.pt", model)
    for name in ("plain", "recorded"):
        assert main([str(tmp_path / f"{name}.pt"), str(tmp_path / f"{name}.pth"), "--format",
                     "official-classifier"]) == 0
    plain, recorded = (torch.load(tmp_path / f"{n}.pth", weights_only=True) for n in ("plain", "recorded"))
    assert set(recorded) == {"state_dict", "preprocessing"} and recorded["preprocessing"] == {
        "mean": [0.5] * 3, "std": [0.25] * 3, "image_size": 8, "patch_size": 4}
    assert recorded["state_dict"].keys() == plain.keys() == crate_nn_to_official(model.state_dict()).keys()
