"""Preprocessing travels with the weights (`crate_nn.preprocessing`): a training run records its mean, std, image
and patch size or its tokenizer; both of our formats keep it; a file written before they did gets it from its
training config; crate-eval, crate-segment and crate-sample use what the file records and fall back to what they
did before for a file that records nothing; for such a file, crate-eval takes --mean, --std and --channels, and
refuses data whose channels do not fit in one line naming them and model.preprocessing."""
import argparse
import dataclasses
import datetime

import numpy as np
import pytest
import torch
from _train_cases import tiny

import crate_nn
from crate_nn import evaluate, segment
from crate_nn.data import transforms
from crate_nn.data.documents import find_documents
from crate_nn.data.images import IMAGENET_MEAN, IMAGENET_STD
from crate_nn.data.preparation import prepare
from crate_nn.data.tokenizers import ByteTokenizer
from crate_nn.data.transforms import DeviceTransform, to_channels
from crate_nn.engine import train
from crate_nn.official import crate_nn_to_official
from crate_nn.preprocessing import ImagePipeline, Preprocessing, from_training, image_pipeline, normalisation
from crate_nn.sample import main as sample_main
from crate_nn.tasks import get_preset

RECORDED = Preprocessing(mean=(0.1, 0.2, 0.3), std=(0.4, 0.5, 0.6), image_size=8, patch_size=4)


def classifier(**extra):
    torch.manual_seed(0)
    return crate_nn.create_model("crate_tiny", **{**dict(image_size=8, patch_size=4, num_classes=3, dim=8, depth=1,
                                                          heads=2), **extra})


def test_a_model_has_none_until_set_and_both_formats_keep_it(tmp_path):
    model = classifier()
    assert model.preprocessing is None and crate_nn.create_model("crate_gpt_small", depth=1).preprocessing is None
    crate_nn.save(tmp_path / "none.pt", model)
    assert crate_nn.load(tmp_path / "none.pt").preprocessing is None
    model.preprocessing = RECORDED
    for name in ("m.pt", "m.safetensors"):
        crate_nn.save(tmp_path / name, model)
        assert crate_nn.load(tmp_path / name).preprocessing == RECORDED
    assert crate_nn.checkpoint.read(tmp_path / "m.pt")["preprocessing"] == {
        "mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6], "image_size": 8, "patch_size": 4}


def test_a_file_written_before_records_gets_its_training_configs(tmp_path):
    model = classifier()
    old = {"format": "crate_nn", "family": "classifier", "config": dataclasses.asdict(model.config), "model": model.state_dict(),
           "train_config": {"mean": [0.5], "std": [0.2], "image_size": 8, "dataset": "mnist5k"}}
    torch.save(old, tmp_path / "old.pt")  # no checksum, no preprocessing: the layout of earlier files
    assert crate_nn.load(tmp_path / "old.pt").preprocessing == Preprocessing(mean=(0.5,), std=(0.2,), image_size=8,
                                                                             patch_size=4)
    assert from_training({"tokenizer": "hf:roberta-base"}, None) == Preprocessing(tokenizer="hf:roberta-base")


def test_bad_records_are_refused_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"mean, std: expected both or neither, one value per channel"):
        Preprocessing(mean=(0.5, 0.5), std=(0.2,))
    model = classifier()
    torch.save({"format": "crate_nn", "family": "classifier", "config": dataclasses.asdict(model.config),
                "model": model.state_dict(), "preprocessing": {"resize": 256}}, tmp_path / "odd.pt")
    with pytest.raises(ValueError, match=r"odd.pt: unknown preprocessing entries \['resize'\]"):
        crate_nn.load(tmp_path / "odd.pt")


def test_an_image_training_run_records_its_pipeline(tmp_path):
    config = tiny(tmp_path / "run", max_steps=1, epochs=1, mean=(0.25, 0.5, 0.75), std=(0.5, 0.5, 0.5))
    train(config)
    loaded = crate_nn.load(tmp_path / "run" / "checkpoints" / "last.pt")
    assert loaded.preprocessing == Preprocessing(mean=(0.25, 0.5, 0.75), std=(0.5, 0.5, 0.5), image_size=8,
                                                 patch_size=4)
    assert "preprocessing" in crate_nn.checkpoint.read(tmp_path / "run" / "checkpoints" / "last.pt")


def test_a_language_training_run_records_its_tokenizer(tmp_path):
    (tmp_path / "src").mkdir()
    for i in range(6):
        (tmp_path / "src" / f"m{i}.py").write_text("".join(f"def f{j}(x):\n    return x + {i}\n" for j in range(8)))
    prepare(find_documents([tmp_path / "src"]), ByteTokenizer(), tmp_path / "tokens", val_fraction=0.2, progress=False)
    config = get_preset("gpt_stdlib", data_dir=str(tmp_path / "tokens"), output_dir=str(tmp_path / "run"),
                        model_args=dict(dim=16, heads=2, depth=1), block_size=8, batch_size=2, total_steps=1,
                        warmup_steps=0, eval_every_steps=1, eval_batch_size=2, val_batches=1, measure_sequences=0,
                        progress=False)
    train(config)
    recorded = crate_nn.load(tmp_path / "run" / "checkpoints" / "last.pt").preprocessing
    assert recorded == Preprocessing(tokenizer="bytes")


def test_crate_eval_normalises_as_the_file_records_else_as_imagenet(tmp_path, monkeypatch):
    used = []

    class Recording(transforms.DeviceTransform):
        def __init__(self, image_size, mean, std, **options):
            used.append((tuple(mean), tuple(std)))
            super().__init__(image_size, mean, std, **options)

    monkeypatch.setattr(transforms, "DeviceTransform", Recording)  # crate-eval imports it when it runs
    model = classifier(num_classes=10)
    crate_nn.save(tmp_path / "plain.pt", model)
    model.preprocessing = RECORDED
    crate_nn.save(tmp_path / "recorded.safetensors", model)  # no training config at all: the record alone
    for name in ("recorded.safetensors", "plain.pt"):
        args = evaluate.parse_args([str(tmp_path / name), "--dataset", "synthetic", "--batch-size", "8",
                                    "--num-workers", "0", "--device", "cpu"])
        assert evaluate.run(args)["top1"] >= 0
    assert used == [(RECORDED.mean, RECORDED.std), (IMAGENET_MEAN, IMAGENET_STD)]


def test_crate_segment_normalises_as_the_file_records_else_as_imagenet(tmp_path):
    model = classifier()
    crate_nn.save(tmp_path / "plain.pt", model)
    model.preprocessing = RECORDED
    crate_nn.save(tmp_path / "recorded.pt", model)
    for name, (mean, std) in (("recorded.pt", (RECORDED.mean, RECORDED.std)), ("plain.pt", (IMAGENET_MEAN, IMAGENET_STD))):
        args = argparse.Namespace(checkpoint=str(tmp_path / name), model=None, heads=None, image_size=None,
                                  device="cpu")
        _, transform, _ = segment.load_backbone(args)
        # the transform holds float32 buffers: the recorded float64 values rounded once
        assert transform.mean.flatten().tolist() == pytest.approx(mean, rel=1e-7)
        assert transform.std.flatten().tolist() == pytest.approx(std, rel=1e-7)
    torch.save(crate_nn_to_official(model.state_dict()), tmp_path / "theirs.pth")  # the authors' files record none
    assert normalisation(crate_nn.official.load_official_checkpoint(tmp_path / "theirs.pth", heads=2)) == (
        IMAGENET_MEAN, IMAGENET_STD)


def test_crate_sample_takes_the_recorded_tokenizer(tmp_path, capsys):
    torch.manual_seed(0)
    gpt = crate_nn.create_model("crate_gpt_small", dim=16, heads=2, depth=1, vocab_size=257, block_size=8)
    crate_nn.save(tmp_path / "none.pt", gpt)  # saved outside a training run, recording nothing
    assert sample_main([str(tmp_path / "none.pt"), "--prompt", "a", "--max-new-tokens", "2", "--device", "cpu"]) == 2
    assert "tokenizer: " in capsys.readouterr().err
    gpt.preprocessing = Preprocessing(tokenizer="bytes")
    crate_nn.save(tmp_path / "bytes.pt", gpt)
    assert sample_main([str(tmp_path / "bytes.pt"), "--prompt", "a", "--max-new-tokens", "2", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.startswith("a")


# --------------------------------------------------------------------------------------------- a file recording none
def test_image_pipeline_names_the_options_and_model_preprocessing_when_the_channels_do_not_fit():
    rgb, gray = classifier(), classifier(in_channels=1)
    with pytest.raises(ValueError) as raised:
        image_pipeline(rgb, 1, "dataset digits (test split)")
    assert str(raised.value) == (
        "channels: dataset digits (test split) has 1 channel, the model takes 3, and its file records no "
        "preprocessing (model.preprocessing is None); pass --channels 3 to convert the images (gray repeated to RGB); "
        "--mean/--std set their normalisation (ImageNet's otherwise)")
    assert image_pipeline(rgb, 1, "digits", channels=3) == ImagePipeline(
        IMAGENET_MEAN, IMAGENET_STD, 3, "ImageNet's (the checkpoint records none: model.preprocessing is None)")
    gray.preprocessing = Preprocessing(mean=(0.5,), std=(0.25,))
    with pytest.raises(ValueError, match=r"has 3 channels, the model takes 1, and its file records mean \(0.5,\) and "
                                         r"std \(0.25,\); pass --channels 1 to convert the images \(RGB to gray\)$"):
        image_pipeline(gray, 3, "image folder val")
    assert image_pipeline(gray, 3, "val", channels=1).mean == (0.5,)
    with pytest.raises(ValueError, match="channels: --channels 3, but the model takes 1 channel$"):
        image_pipeline(gray, 3, "val", channels=3)


def test_image_pipeline_takes_the_given_the_recorded_then_imagenets_normalisation():
    model = classifier()
    given = image_pipeline(model, 3, "val", mean=(0.5,), std=(0.2,))  # one value stands for every channel
    assert (given.mean, given.std, given.source) == ((0.5,) * 3, (0.2,) * 3, "given (--mean, --std)")
    with pytest.raises(ValueError, match="mean: 2 values, the model takes 3 channels: give 3 \\(or one for all\\)"):
        image_pipeline(model, 3, "val", mean=(0.5, 0.5), std=(0.2, 0.2))
    model.preprocessing = RECORDED
    assert image_pipeline(model, 3, "val").mean == RECORDED.mean
    assert image_pipeline(model, 3, "val", mean=(0.1,), std=(0.3,)).std == (0.3,) * 3  # the options win
    gray = classifier(in_channels=1)  # ImageNet's statistics are for 3 channels: no default for one
    with pytest.raises(ValueError, match=r"records no preprocessing \(model.preprocessing is None\) and ImageNet's mean "
                                         r"and std are for 3 channels, the model takes 1: pass --mean/--std"):
        image_pipeline(gray, 1, "digits")


def test_a_batch_of_other_channels_than_the_normalisation_is_refused_not_broadcast():
    """A gray batch normalised by three means used to broadcast to three channels silently (crate-eval fed a
    3-channel model gray digits that way, with no word of it)."""
    transform = DeviceTransform(8, IMAGENET_MEAN, IMAGENET_STD, train=False)
    with pytest.raises(ValueError, match="images have 1 channel, the normalisation \\(mean, std\\) 3 values each"):
        transform(torch.zeros(2, 1, 8, 8, dtype=torch.uint8))
    gray = torch.randint(0, 256, (2, 1, 8, 8), dtype=torch.uint8)
    out = DeviceTransform(8, (0.0,) * 3, (1.0,) * 3, train=False, channels=3)(gray)
    assert torch.equal(out, (gray.float() / 255).expand(-1, 3, -1, -1))  # the gray channel repeated, exactly


def test_rgb_to_gray_is_pillows_luma():
    from PIL import Image

    rgb = np.random.default_rng(0).integers(0, 256, (6, 7, 3), dtype=np.uint8)
    ours = to_channels(torch.from_numpy(rgb).permute(2, 0, 1)[None].double(), 1)[0, 0].numpy()
    theirs = np.asarray(Image.fromarray(rgb).convert("L"), dtype=np.float64)
    # Pillow rounds its luma to integers (fixed-point weights): within one grey level
    np.testing.assert_allclose(ours, theirs, atol=1.0)


def test_crate_eval_converts_channels_only_when_asked_and_says_what_it_fed(tmp_path, capsys):
    crate_nn.save(tmp_path / "rgb.pt", classifier(num_classes=10))
    common = [str(tmp_path / "rgb.pt"), "--dataset", "digits", "--device", "cpu", "--num-workers", "0"]
    assert evaluate.main(common) == 2
    err = capsys.readouterr().err
    assert err.startswith("crate-eval: channels: dataset digits (val split) has 1 channel, the model takes 3, and its "
                          "file records no preprocessing (model.preprocessing is None); pass --channels 3") and \
        err.count("\n") == 1
    assert evaluate.main([*common, "--channels", "3", "--mean", "0.5", "--std", "0.5"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "inputs: mean (0.5, 0.5, 0.5), std (0.5, 0.5, 0.5), given (--mean, --std); " \
                                   "converted to 3 channels"


def test_crate_eval_refuses_non_finite_weights_and_names_its_own_flags(tmp_path, capsys):
    model = classifier(num_classes=10)
    with torch.no_grad():
        model.head.fc.bias[1] = float("inf")
    crate_nn.save(tmp_path / "inf.pt", model)
    assert evaluate.main([str(tmp_path / "inf.pt"), "--dataset", "synthetic", "--device", "cpu"]) == 2
    assert capsys.readouterr().err == (f"crate-eval: checkpoint: {str(tmp_path / 'inf.pt')!r} holds non-finite weights "
                                       "(NaN or Inf in head.fc.bias); its outputs would be NaN\n")
    torch.save(crate_nn_to_official(classifier().state_dict()), tmp_path / "theirs.pth")
    assert evaluate.main([str(tmp_path / "theirs.pth"), "--dataset", "synthetic"]) == 2
    # crate-eval's flags are --heads and --model (the keywords of crate_nn.load are heads= and name=)
    assert capsys.readouterr().err.endswith("heads cannot be inferred from the tensors; pass --heads K or a registered "
                                            "--model NAME\n")


def test_crate_eval_on_a_file_that_is_not_a_checkpoint_says_so_in_its_own_words(tmp_path, capsys):
    """A pickle torch's safe reader refuses used to be reported with torch's advice to load it with
    weights_only=False (running whatever it holds), cut off mid-sentence."""
    (tmp_path / "notes.txt").write_text("not weights")
    torch.save({"when": datetime.date(2024, 1, 1)}, tmp_path / "data.pkl")  # an object torch does not allow
    assert evaluate.main([str(tmp_path / "notes.txt")]) == 2
    assert capsys.readouterr().err == (f"crate-eval: checkpoint: {str(tmp_path / 'notes.txt')!r} is not a weights file: "
                                       "it begins b'not weights' (a torch file begins with a zip archive's PK or a "
                                       "pickle's \\x80, a .safetensors file with its header's length, an .npz file "
                                       "with PK)\n")
    assert evaluate.main([str(tmp_path / "data.pkl")]) == 2
    err = capsys.readouterr().err
    assert err == (f"crate-eval: checkpoint: {str(tmp_path / 'data.pkl')!r} holds Python objects beyond tensors and "
                   "plain values (datetime.date), which are never unpickled here (unpickling runs code): not a "
                   "weights file this package reads\n")
    assert "weights_only" not in err
