"""Command line, presets, fine-tuning initialisation, crate-eval with ImageNet-ReaL, and bad arguments."""
import json
import re
from pathlib import Path

import pytest
import torch
from _train_cases import SMALL, TINY_MODEL, fake_imagenet, tiny

import crate_nn
from crate_nn import checkpoint, create_model
from crate_nn.data import DeviceTransform, build_dataset
from crate_nn.engine import train
from crate_nn.evaluate import main as crate_eval
from crate_nn.official import crate_nn_to_official
from crate_nn.tasks import PRESETS, get_preset, list_presets
from crate_nn.train import main, parse_args
from crate_nn.weights import init_from


def test_every_preset_validates_and_documents_its_command():
    for name, make in PRESETS.items():
        config = make()
        config.validate()
        assert config.run.preset == name
        assert "Command" in make.__doc__ and "Expected" in make.__doc__ and "crate-train --preset " + name in make.__doc__


def test_paper_recipe_values_of_the_imagenet_and_finetune_presets():
    imagenet = get_preset("imagenet")
    assert (imagenet.optim.optimizer, imagenet.optim.lr, imagenet.optim.weight_decay, imagenet.schedule.batch_size) == ("lion", 2.4e-4, 0.5, 2048)
    assert (imagenet.schedule.epochs, imagenet.schedule.warmup_epochs, imagenet.loss.label_smoothing) == (150, 5.0, 0.1)
    assert (imagenet.augmentation.augment, imagenet.data.image_size, imagenet.data.eval_resize) == ("rrc_flip", 224, 256)
    finetune = get_preset("finetune")
    assert (finetune.optim.optimizer, finetune.optim.lr, finetune.optim.weight_decay, finetune.schedule.batch_size) == ("adamw", 5e-5, 0.01, 512)
    assert (finetune.augmentation.augment, finetune.augmentation.randaugment_n, finetune.augmentation.randaugment_m, finetune.data.image_size) == (
        "randaugment", 2, 14.0, 224)


EVERY_KIND = [("schedule", "--epochs", "5"), ("network", "--model-args", "patch_size=4", "dim=64", "heads=4", "depth=2",
                                            "pool='mean'"),
              ("optim", "--betas", "0.8", "0.9"), ("run", "--no-progress"), ("optim", "--grad-clip", "1.5"),
              ("schedule", "--max-steps", "7"), ("measure", "--measure-epochs"), ("optim", "--weight-decay-all"),
              ("data", "--test-split", "none"), ("run", "--resume")]
"""A flag of every kind (an integer, a dict, a tuple, an empty tuple, a boolean set and cleared, None), by section."""


def _spelt(dotted: bool) -> list[str]:
    """`EVERY_KIND` as ``--SECTION.FIELD`` flags (``--SECTION.no-FIELD`` for a cleared boolean), or as the flat
    aliases ``--FIELD``."""
    words = []
    for section, flag, *values in EVERY_KIND:
        if dotted:
            flag = f"--{section}.no-{flag[5:]}" if flag.startswith("--no-") else f"--{section}.{flag[2:]}"
        words += [flag, *values]
    return words


@pytest.mark.parametrize("dotted", [True, False], ids=["dotted", "flat aliases"])
def test_command_line_overrides_every_kind_of_field(dotted):
    config = parse_args(["--preset", "digits", *_spelt(dotted)])
    assert config == parse_args(["--preset", "digits", *_spelt(not dotted)])  # a flag and its alias are one flag
    assert config.run.preset == "digits" and config.schedule.epochs == 5 and config.schedule.max_steps == 7
    assert config.network.model_args == {"patch_size": 4, "dim": 64, "heads": 4, "depth": 2, "pool": "mean"}
    assert config.optim.betas == (0.8, 0.9) and config.measure.measure_epochs == () and config.optim.grad_clip == 1.5
    assert config.run.progress is False and config.optim.weight_decay_all is True and config.data.test_split is None
    assert config.run.resume is True and config.optim.lr == get_preset("digits").optim.lr


def test_bad_arguments_give_clear_errors(tmp_path, capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit_info:
        main(["--preset", "cifar", "--output-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "invalid choice: 'cifar'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--preset", "digits", "--no-such-flag", "1"])
    assert capsys.readouterr().err == "crate-train: error: unrecognized argument --no-such-flag (see crate-train --help)\n"
    missing = tmp_path / "no-imagenet-here"
    assert main(["--preset", "imagenet", "--data-dir", str(missing), "--output-dir", str(tmp_path / "run"),
                 "--device", "cpu"]) == 1
    assert f"data_dir: the dataset folder '{missing}' does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="preset: expected one of"):
        get_preset("imagenet2")
    with pytest.raises(TypeError, match="^preset 'digits': learning_rate: not a field of ClassificationConfig$"):
        get_preset("digits", learning_rate=1.0)
    with pytest.raises(ValueError, match="lr: expected a positive"):
        train(tiny(tmp_path, lr=0.0))
    with pytest.raises(ValueError, match="optimizer: expected one of lion, adamw"):
        train(tiny(tmp_path, optimizer="sgd"))
    with pytest.raises(ValueError, match="micro_batch_size: 3 does not divide"):
        train(tiny(tmp_path, micro_batch_size=3))
    monkeypatch.setenv("WORLD_SIZE", "3")  # checked before any process group is joined
    with pytest.raises(ValueError, match="batch_size: 8 is not divisible across 3 processes"):
        train(tiny(tmp_path))


def test_finetune_initialisation_reinitialises_the_head_and_resamples_positions(tmp_path):
    source = create_model("crate_tiny", image_size=8, num_classes=10, in_channels=3, **TINY_MODEL)
    crate_nn.save(tmp_path / "pretrained.pt", source)
    official = tmp_path / "official.pth"
    torch.save({"state_dict": {"module." + k: v for k, v in
                               crate_nn_to_official(source.state_dict()).items()}}, official)
    for path in (tmp_path / "pretrained.pt", official):
        target = create_model("crate_tiny", image_size=16, num_classes=5, in_channels=3, **TINY_MODEL)
        head_before = target.head.fc.weight.detach().clone()
        assert init_from(target, str(path)) == ["head.fc.weight", "head.fc.bias"]
        assert torch.equal(target.head.fc.weight, head_before)
        assert torch.equal(target.encoder.layers[1].ista.weight, source.encoder.layers[1].ista.weight)
        # the 2×2 patch grid of 8-pixel images resampled (bicubic, class token kept) to the 4×4 grid of 16 pixels
        assert torch.equal(target.pos_embed, crate_nn.resample_pos_embed(source.pos_embed, (4, 4)))
        assert torch.equal(target.pos_embed[:, 0], source.pos_embed[:, 0])
    with pytest.raises(ValueError, match="init_from: .* does not exist"):
        init_from(target, str(tmp_path / "nothing.pt"))
    wide = create_model("crate_tiny", image_size=8, num_classes=10, in_channels=3, **{**TINY_MODEL, "dim": 32})
    with pytest.raises(ValueError, match="shape"):
        init_from(wide, str(tmp_path / "pretrained.pt"))


def test_finetune_preset_trains_from_a_checkpoint(tmp_path):
    pretrained = train(tiny(tmp_path / "pre", max_steps=2))
    config = get_preset("finetune", dataset="synthetic", synthetic_classes=4, synthetic_samples=16, image_size=8,
                        model="crate_tiny", model_args=dict(TINY_MODEL), init_from=pretrained.checkpoint,
                        batch_size=8, epochs=1, eval_split="val", progress=False, device="cpu", num_workers=0,
                        output_dir=str(tmp_path / "fine"))
    result = train(config)
    saved = json.loads((tmp_path / "fine" / "config.json").read_text())
    assert saved["reinitialised_from_init"] == ["head.fc.weight", "head.fc.bias"]
    assert result.steps == 2 and crate_nn.load(result.checkpoint).config.num_classes == 4


def test_crate_eval_top_k_and_imagenet_real(tmp_path, capsys):
    root = fake_imagenet(tmp_path / "data")
    run = train(tiny(tmp_path / "run", dataset="imagenet", data_dir=str(root), **SMALL))
    # ReaL label sets for val images 1..4 (file numbers), one image without any plausible label
    real = [[0], [1, 0], [], [1]]
    (tmp_path / "real.json").write_text(json.dumps(real))
    capsys.readouterr()
    assert crate_eval([run.checkpoint, "--real-json", str(tmp_path / "real.json"), "--num-workers", "0",
                       "--device", "cpu", "--output", str(tmp_path / "m.json")]) == 0
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert (metrics["dataset"], metrics["split"]) == ("imagenet", "val")
    assert capsys.readouterr().out.splitlines() == [  # a table naming the data, the split, the count and the units
        f"{run.checkpoint} on imagenet, split val: 4 images (0 unreadable, skipped)",
        f"  loss        {metrics['loss']:7.4f}  cross-entropy, nats per image",  # values right-aligned
        f"  top-1       {100 * metrics['top1']:6.2f}%",
        "  top-5       100.00%",
        f"  ReaL top-1  {100 * metrics['real_top1']:6.2f}%  over the 3 images with a plausible label",
        "inputs: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225), recorded in the checkpoint "
        "(model.preprocessing)"]  # what the images were normalised by, and where that came from
    model = crate_nn.load(run.checkpoint).eval()
    val = build_dataset("imagenet", "val", data_dir=str(root), train=False, image_size=16, load_size=20,
                        eval_resize=20)
    images = torch.stack([val[i][0] for i in range(len(val))])
    saved = checkpoint.read(run.checkpoint)["train_config"]
    with torch.no_grad():
        predicted = model(DeviceTransform(16, saved["mean"], saved["std"], train=False)(images))
    predicted = predicted.argmax(-1).tolist()
    labels = [val[i][1] for i in range(len(val))]
    numbers = [int(p.split("_val_")[1][:8]) - 1 for p, _ in val.samples]
    counted = [(predicted[i] in real[numbers[i]]) for i in range(len(val)) if real[numbers[i]]]
    assert metrics["real_images"] == 3 and metrics["real_top1"] == pytest.approx(sum(counted) / 3, abs=1e-12)
    assert metrics["top1"] == pytest.approx(sum(p == y for p, y in zip(predicted, labels)) / 4, abs=1e-12)
    assert metrics["top5"] == 1.0  # two classes: the true one is always among the top 5



@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "0"], "batch_size: expected a value ≥ 1, got 0"),
    (["--model-args", "foo=1"], r"model_args: unknown CRATEConfig option\(s\) \['foo'\]"),
    (["--betas", "0.9"], r"betas: expected 2 values, got 1: \(0.9,\)"),
    (["--crop-scale", "0.5"], r"crop_scale: expected 2 values, got 1"),
    (["--device", "tpu"], "device: expected auto, cpu, cuda, cuda:N or mps, got 'tpu'"),
    (["--mean", "0.5", "0.5"], r"mean, std: expected one value per channel in each, got 2 means"),
    (["--warmup-epochs", "nan"], "warmup_epochs: expected a finite number, got nan"),
    (["--lr", "abc"], "argument --optim.lr/--lr: expected float, got 'abc'"),
    (["--measure-epochs", "31"], r"measure_epochs: \[31\] are after the last epoch \(30\)"),
    (["--dataset", "mnist"], "dataset: expected one of imagenet, imagefolder, cifar10, .*got 'mnist'"),
    (["--model", "gpt2"], "model: expected one of crate_tiny"),
])
def test_bad_flags_give_one_line_naming_the_flag(tmp_path, capsys, flags, message):
    """A value the config refuses, by the flag's alias (and by its dotted flag: `test_dotted_flags_…`)."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--preset", "digits", "--output-dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and re.search(message, err), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("flags, message", [
    (["--crops.local-crop", "3"], r"unrecognized argument --crops\.local-crop \(did you mean --crops\.local-crops "),
    (["--crop.local-crops", "3"], r"unrecognized argument --crop\.local-crops \(did you mean --crops\.local-crops"),
    (["--dino.local-crops", "3"], r"unrecognized argument --dino\.local-crops \(did you mean --crops\.local-crops"),
    (["--crops.local_crops", "3"], r"unrecognized argument --crops\.local_crops \(did you mean --crops\.local-crops"),
    (["--crops.local-crops", "-1"], r"error: local_crops: expected a non-negative value, got -1"),
    (["--crops.local-crops", "two"], r"argument --crops\.local-crops/--local-crops: expected int, got 'two'"),
    (["--crops.no-local-crops"], r"unrecognized argument --crops\.no-local-crops"),
    (["--head.norm-last-layer", "no"], r"unrecognized argument no$"),
    (["--local-crops=3", "--crops.local-crop=4"], r"unrecognized argument --crops\.local-crop \(did you mean"),
])
def test_dotted_flags_unknown_or_misspelt_give_one_line_naming_the_flag(tmp_path, capsys, flags, message):
    """A misspelt or unknown ``--SECTION.FIELD`` (another section's field, an underscore, a boolean's negation of a
    number) exits with status 2 and one line naming it, with the closest flags; no abbreviation is taken for a
    flag."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--preset", "dino_digits", "--output-dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.splitlines()) == 1 and err.endswith(" (see crate-train --help)\n")
    assert re.search(message, err.removesuffix(" (see crate-train --help)\n")), err
    assert not (tmp_path / "checkpoints").exists()


def test_dotted_flags_and_their_aliases_set_the_same_field():
    dotted = parse_args(["--preset", "dino_digits", "--crops.local-crops", "2", "--dino.teacher-temp", "0.07",
                         "--head.no-norm-last-layer", "--cadence.knn-epochs", "--run.no-progress"])
    flat = parse_args(["--preset", "dino_digits", "--local-crops", "2", "--teacher-temp", "0.07",
                       "--no-norm-last-layer", "--knn-epochs", "--no-progress"])
    assert dotted == flat
    assert (dotted.crops.local_crops, dotted.dino.teacher_temp, dotted.head.norm_last_layer) == (2, 0.07, False)
    assert (dotted.cadence.knn_epochs, dotted.run.progress) == ((), False)
    again = parse_args(["--preset", "dino_digits", "--local-crops", "2", "--crops.local-crops", "3"])
    assert again.crops.local_crops == 3  # one flag: the last value given wins


def test_help_lists_presets_allowed_values_and_data_layouts(capsys):
    with pytest.raises(SystemExit):
        main(["--preset", "digits", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for task, names in list_presets().items():  # every registered preset, grouped under its task
        assert f"{task}: {', '.join(names)}" in out
    assert {"imagenet", "digits", "synthetic"} <= set(list_presets()["classification"])
    assert "ImageNet's val/ must be" in out and "cifar-10-batches-py" in out
    assert "--data.dataset digits dataset layout" in out  # one line per flag, with the preset's value
    for section, choices in (("data", "one of imagenet, imagefolder, cifar10"),
                             ("augmentation", "one of none, flip, shift, rrc_flip, randaugment")):
        with pytest.raises(SystemExit):  # a section's flags in full: their allowed values
            main(["--preset", "digits", "--help", section])
        assert choices in " ".join(capsys.readouterr().out.split())


def test_init_from_a_crate_nn_checkpoint_rebuilds_its_architecture(tmp_path):
    """The fine-tuning preset names crate_base; a crate_nn checkpoint of another size decides the architecture."""
    pretrained = train(tiny(tmp_path / "pre", max_steps=1))
    config = get_preset("finetune", dataset="synthetic", synthetic_classes=4, synthetic_samples=16, image_size=16,
                        init_from=pretrained.checkpoint, batch_size=8, epochs=1, eval_split="val", progress=False,
                        device="cpu", num_workers=0, output_dir=str(tmp_path / "fine"), max_steps=1)
    result = train(config)
    model = crate_nn.load(result.checkpoint)
    assert (model.config.dim, model.config.depth, model.config.image_size, model.config.num_classes) == (16, 2, 16, 4)
    clash = config.replace(output_dir=str(tmp_path / "clash"), model_args={"dim": 32})
    with pytest.raises(ValueError, match=r"model_args: \['dim'\] contradict the architecture stored in init_from"):
        train(clash)


def test_a_single_class_or_empty_training_folder_is_refused(tmp_path, capsys):
    """A training folder with one class used to train a one-way head to "accuracy 1.0"."""
    root = fake_imagenet(tmp_path / "data")
    for split in ("train", "val"):
        for image in (root / split / "n01443537").iterdir():
            image.unlink()
        (root / split / "n01443537").rmdir()
    args = ["--preset", "synthetic", "--dataset", "imagefolder", "--data-dir", str(root), "--image-size", "16",
            "--load-size", "20", "--eval-resize", "20", "--model-args", "patch_size=8", "dim=16", "depth=1", "heads=2",
            "--batch-size", "4", "--epochs", "1", "--device", "cpu", "--no-progress"]
    assert main([*args, "--output-dir", str(tmp_path / "one")]) == 1
    assert capsys.readouterr().err == (f"crate-train: train_split: imagefolder split 'train' of {root} holds one "
                                       "class, ['n01440764']; a classifier needs at least two\n")
    for image in (root / "train" / "n01440764").iterdir():
        image.unlink()
    assert main([*args, "--output-dir", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.startswith(f"crate-train: data_dir: '{root / 'train'}' holds no image files in "
                                              "its class folders ['n01440764']")


def test_crate_eval_refuses_bad_inputs_with_one_line(tmp_path, capsys):
    root = fake_imagenet(tmp_path / "data")
    run = train(tiny(tmp_path / "run", dataset="imagenet", data_dir=str(root), **SMALL))
    common = ["--num-workers", "0", "--device", "cpu"]
    (tmp_path / "short.json").write_text("[[0]]")
    (tmp_path / "dict.json").write_text('{"1": [0]}')
    cases = [
        (["--real-json", str(tmp_path / "short.json")], "real_json: .* has 1 entries but the validation files go up"),
        (["--real-json", str(tmp_path / "dict.json")], "real_json: .* must be a JSON list"),
        (["--real-json", str(tmp_path / "missing.json")], "real_json: .* does not exist"),
        (["--dataset", "synthetic"], None),  # synthetic data, 10 classes, for a 2-class model
    ]
    for flags, message in cases:
        assert crate_eval([run.checkpoint, *common, *flags]) == 2
        err = capsys.readouterr().err
        assert re.search(message or "dataset: 10 classes, but the model predicts 2", err), err
    for content, said in ((b"", "is empty"), (b"hello, I am text", "is not a weights file: it begins b'hello, I am "
                                                                   "text'"),
                          (Path(run.checkpoint).read_bytes()[:1000], "is not a readable torch checkpoint")):
        (tmp_path / "bad.pt").write_bytes(content)
        with pytest.raises(ValueError, match=rf"checkpoint: .*bad\.pt' {re.escape(said)}"):
            crate_nn.load(tmp_path / "bad.pt")
        assert crate_eval([str(tmp_path / "bad.pt"), *common]) == 2
        assert said in capsys.readouterr().err


def test_without_a_preset_crate_train_lists_the_presets_and_starts_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in ([], ["--epochs", "3"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and all(name in err for name in PRESETS)
        assert err.splitlines()[-1] == ("crate-train: error: argument --preset: choose one of the presets above, e.g. "
                                        "--preset digits (a CPU run of seconds) (see crate-train --help)")
    assert list(tmp_path.iterdir()) == []  # no run started
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0 and "--preset NAME" in capsys.readouterr().out
