"""A metric over zero samples is no number: evaluating zero readable images or zero masked tokens is an error naming
what was missing, never a loss or an accuracy of 0.0 (a perfect loss to crate-compare and to any script)."""
import numpy as np
import pytest
from _train_cases import SMALL, fake_imagenet, tiny

from crate_nn import create_model
from crate_nn.data.masking import Masking
from crate_nn.data.tokenizers import ByteTokenizer
from crate_nn.engine import distributed, train
from crate_nn.evaluate import main as crate_eval
from crate_nn.evaluation.language import mlm_metrics


def test_crate_eval_over_only_unreadable_images_fails_naming_them(tmp_path, capsys):
    root = fake_imagenet(tmp_path / "data")
    run = train(tiny(tmp_path / "run", dataset="imagenet", data_dir=str(root), **SMALL))
    val = sorted((root / "val").rglob("*.JPEG"))
    for path in val:
        path.write_bytes(b"not an image")
    capsys.readouterr()
    assert crate_eval([run.checkpoint, "--num-workers", "0", "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no metrics printed
    lines = captured.err.strip().splitlines()
    assert all(any(str(path) in line for line in lines) for path in val)  # each unreadable file named
    assert lines[-1].startswith("crate-eval: ") and lines[-1].endswith(
        f"none of its {len(val)} samples could be evaluated ({len(val)} unreadable, named above); a metric over none "
        "is undefined")


def test_masked_lm_metrics_over_no_masked_token_fail():
    tokenizer = ByteTokenizer()
    model = create_model("crate_bert_medium", dim=16, heads=2, depth=1, block_size=8, vocab_size=tokenizer.vocab_size)
    mask = Masking(tokenizer.mask_id, tokenizer.vocab_size, tokenizer.special_ids)
    only_special = np.full(40, tokenizer.eot_id)  # nothing that may be masked
    with pytest.raises(ValueError, match="masked tokens: none of its 5 samples could be evaluated"):
        mlm_metrics(model, only_special, 8, distributed.context("cpu"), mask)
