"""One way in: ``init_from`` (every task's ``--init-from``) and the command lines read every format `crate_nn.load`
reads, through `crate_nn.weights.read_state` (a CRATE-α file that ``crate_nn.load`` read was refused by
``--init-from`` as "missing keys in the authors' checkpoint: ['to_patch_embedding.2.weight']")."""
import argparse
import json

import pytest
import torch
from _train_cases import tiny

import crate_nn
from crate_nn import segment
from crate_nn.engine import train
from crate_nn.loading import load_model
from crate_nn.official import crate_nn_to_crate_alpha, crate_nn_to_official_mae
from crate_nn.weights import POLICIES, init_from

ALPHA = dict(image_size=8, patch_size=4, dim=16, depth=2, heads=2)


def crate_alpha_file(tmp_path, num_classes=3):
    """A CRATE-α PyTorch file (their key names, DDP's ``module.`` prefix) and the model it holds."""
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_alpha_b16", **ALPHA, num_classes=num_classes)
    path = tmp_path / "crate_alpha_B16.pth"
    torch.save({f"module.{k}": v for k, v in crate_nn_to_crate_alpha(model.state_dict()).items()}, path)
    return path, model


def test_init_from_a_crate_alpha_file(tmp_path):
    path, source = crate_alpha_file(tmp_path)
    target = crate_nn.create_model("crate_alpha_b16", **ALPHA, num_classes=5)
    assert init_from(target, str(path)) == ["head.fc.weight", "head.fc.bias"]  # 3 classes there, 5 here
    assert all(torch.equal(target.state_dict()[k], v) for k, v in source.state_dict().items() if "head.fc" not in k)


def test_crate_train_init_from_a_crate_alpha_file(tmp_path):
    path, _ = crate_alpha_file(tmp_path)
    sizes = {k: v for k, v in ALPHA.items() if k != "image_size"}  # the image size comes from the data
    config = tiny(tmp_path / "run", model="crate_alpha_b16", model_args=sizes, init_from=str(path),
                  synthetic_classes=4, max_steps=2)
    assert train(config).steps == 2
    assert json.loads((tmp_path / "run" / "config.json").read_text())["reinitialised_from_init"] == [
        "head.fc.weight", "head.fc.bias"]


def test_init_from_the_authors_crate_mae_gives_its_encoder_to_a_classifier(tmp_path):
    torch.manual_seed(0)
    mae = crate_nn.create_model("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4)
    torch.save({"model": crate_nn_to_official_mae(mae.state_dict())}, tmp_path / "checkpoint-799.pth")
    # their files fix K·p: the adapter records p = 4 (dim_head), which the encoder's options then state
    classifier = crate_nn.create_model("crate_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4, dim_head=4,
                                       num_classes=3, patch_embed="conv", lam=0.5, pool="mean")
    assert init_from(classifier, str(tmp_path / "checkpoint-799.pth")) == ["head.fc.weight", "head.fc.bias"]
    encoder = crate_nn.load(tmp_path / "checkpoint-799.pth", heads=4).classifier_state_dict(classifier.config)
    assert torch.equal(encoder["encoder.layers.1.ista.weight"], mae.encoder.layers[1].ista.weight)
    assert all(torch.equal(classifier.state_dict()[k], v) for k, v in encoder.items())


def test_what_init_from_cannot_use_is_one_line_naming_the_file(tmp_path):
    path, _ = crate_alpha_file(tmp_path)
    gpt = crate_nn.create_model("crate_gpt_small", dim=12, heads=3, depth=1, vocab_size=20, block_size=6)
    with pytest.raises(ValueError, match=rf"init_from: '{path}' holds a 'classifier' model \(CRATE-α\), not a gpt "
                                         r"model \(gpt\) or a bert model \(bert\) or a bert_classifier model"):
        init_from(gpt, str(path))
    mae = crate_nn.create_model("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4)
    assert "mae" not in POLICIES
    with pytest.raises(ValueError, match="init_from: a mae model does not start from a file"):
        init_from(mae, str(path))
    with pytest.raises(ValueError, match=r"init_from: '.*absent.pt' does not exist or is not a file"):
        init_from(crate_nn.create_model("crate_alpha_b16", **ALPHA, num_classes=3), str(tmp_path / "absent.pt"))


def test_the_command_lines_read_every_format(tmp_path):
    """crate-eval and crate-segment (`crate_nn.loading.load_model`, ``--model``/``--heads``) read a CRATE-α file as
    crate_nn.load does (crate-eval used to take the authors' classifier format only); a family the command cannot
    use is refused naming it."""
    path, source = crate_alpha_file(tmp_path)
    model, train_config = load_model(str(path), heads=2)
    assert train_config == {} and all(torch.equal(model.state_dict()[k], v) for k, v in source.state_dict().items())
    args = argparse.Namespace(checkpoint=str(path), model=None, heads=2, image_size=None, device="cpu")
    backbone, _, size = segment.load_backbone(args)
    assert size == 8 and torch.equal(backbone.pos_embed, source.pos_embed)
    with pytest.raises(ValueError, match=r"holds a 'classifier' model \(CRATE-α\), not a causal LM \(gpt\)"):
        load_model(str(path), heads=2, families={"gpt": "a causal LM"})
