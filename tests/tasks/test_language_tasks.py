"""The language tasks through the engine and the command lines: causal LM (eq. 89) and masked LM (eq. 85) on a
small prepared corpus, exact resume with dynamic masking, GLUE-format fine-tuning, Table 6's evaluation protocol,
generation (top-k = 1 is argmax decoding), crate-sample / crate-eval-lm, the presets' recipes, and bad input."""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import crate_nn
from crate_nn.analysis import has_mssa_layers
from crate_nn.data.corpus import TokenBlocks, load_corpus
from crate_nn.data.documents import find_documents
from crate_nn.data.preparation import prepare
from crate_nn.data.tokenizers import ByteTokenizer
from crate_nn.engine import train
from crate_nn.engine.distributed import context
from crate_nn.evaluate_lm import main as eval_lm_main
from crate_nn.evaluation.language import classification_metrics, lm_loss, spread
from crate_nn.sample import generate
from crate_nn.sample import main as sample_main
from crate_nn.tasks import get_preset
from crate_nn.train import main as train_main

TINY_MODEL = dict(dim=16, heads=2, depth=1)
TINY_RUN = dict(block_size=16, batch_size=4, total_steps=4, warmup_steps=1, eval_every_steps=2, eval_batch_size=2,
                val_batches=2, measure_sequences=0, progress=False, log_every=1)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    """30 small Python-like documents as byte tokens (10% of the tokens held out)."""
    root = tmp_path_factory.mktemp("corpus")
    for i in range(30):
        (root / "src").mkdir(exist_ok=True)
        (root / "src" / f"m{i}.py").write_text("".join(f"def f{j}(x):\n    return x * {i} + {j}\n" for j in range(8)))
    prepare(find_documents([root / "src"]), ByteTokenizer(), root / "tokens", val_fraction=0.1, progress=False)
    return root / "tokens"


def _config(preset, data_dir, out, **overrides):
    return get_preset(preset, data_dir=str(data_dir), output_dir=str(out),
                      **{**TINY_RUN, "model_args": dict(TINY_MODEL), **overrides})


def test_presets_carry_the_papers_recipes():
    gpt = get_preset("gpt_owt")
    assert (gpt.optim.optimizer, gpt.optim.betas, gpt.optim.lr, gpt.optim.lr * gpt.schedule.min_lr_ratio, gpt.optim.weight_decay) == (
        "adamw", (0.9, 0.95), 6e-4, pytest.approx(6e-5), 0.1)
    assert (gpt.schedule.batch_size, gpt.data.block_size, gpt.schedule.total_steps, gpt.schedule.warmup_steps, gpt.schedule.lr_schedule) == (
        384, 1024, 600_000, 2000, "cosine")
    assert (gpt.network.model, gpt.network.model_args["vocab_size"], gpt.optim.grad_clip) == ("crate_gpt_base", 50304, 1.0)
    bert = get_preset("bert_wiki")
    assert (bert.optim.optimizer, bert.optim.betas, bert.optim.lr, bert.optim.weight_decay, bert.schedule.lr_schedule, bert.schedule.min_lr_ratio) == (
        "adamw", (0.9, 0.98), 1e-3, 0.01, "linear", 0.0)
    assert (bert.schedule.batch_size, bert.data.block_size, bert.schedule.total_steps, bert.schedule.warmup_steps, bert.network.model) == (
        8192, 512, 30_000, 1800, "crate_bert_base")
    assert (bert.masking.mask_probability, bert.masking.mask_fraction, bert.masking.random_fraction) == (0.15, 0.8, 0.1)
    for name in ("glue_sst2", "glue_mrpc"):
        glue = get_preset(name)
        assert (glue.optim.lr, glue.schedule.batch_size, glue.data.tokenizer) == (2e-5, 32, "hf:roberta-base")
    assert get_preset("glue_mrpc").schedule.epochs == 5 and get_preset("glue_sst2").schedule.epochs == 3


def test_causal_lm_command_trains_evaluates_measures_and_samples(corpus_dir, tmp_path, capsys):
    """crate-train → metrics, measurements and a checkpoint; crate-sample and crate-eval-lm on that checkpoint."""
    gpt_run = tmp_path / "run"
    assert train_main(["--preset", "gpt_stdlib", "--data-dir", str(corpus_dir), "--output-dir", str(gpt_run),
                       "--model-args", "dim=16", "heads=2", "depth=1", "--block-size", "16", "--batch-size", "4",
                       "--total-steps", "4", "--warmup-steps", "1", "--eval-every-steps", "2", "--eval-batch-size",
                       "2", "--val-batches", "2", "--measure-sequences", "2", "--log-every", "1", "--no-progress"]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (gpt_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evals] == [2, 4]  # every 2 steps, the last one marked final
    assert all(math.isfinite(r["val_loss"]) and r["val_perplexity"] == pytest.approx(math.exp(r["val_loss"]))
               for r in evals)
    assert evals[0]["val_tokens"] == 2 * 2 * 16
    assert {r["step"] for r in records if "train_loss" in r} == {1, 2, 3, 4}
    config = json.loads((gpt_run / "config.json").read_text())
    assert config["layer_measurements"] is True
    assert config["tokenizer"] == "bytes" and config["model_config"]["vocab_size"] == 258
    assert config["total_steps"] == 4 and config["warmup_steps"] == 1
    measured = sorted(p.name for p in (gpt_run / "measurements").iterdir())
    assert measured == ["layers_official.png", "layers_paper.png", "step_0000.json", "step_0004.json"]
    model = crate_nn.load(gpt_run / "checkpoints" / "last.pt")
    assert model.family == "gpt" and model.config.block_size == 16

    checkpoint = str(gpt_run / "checkpoints" / "last.pt")
    assert sample_main([checkpoint, "--prompt", "def ", "--max-new-tokens", "20", "--num-samples", "2",
                        "--device", "cpu"]) == 0
    samples = capsys.readouterr().out.split("\n" + "-" * 40 + "\n")
    assert len(samples) == 2 and all(s.startswith("def ") for s in samples)
    assert eval_lm_main([checkpoint, "--batches", "3", "--batch-size", "2", "--device", "cpu", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["tokens"] == 3 * 2 * 16 and math.isfinite(metrics["loss"])
    assert (metrics["unit"], metrics["split"], metrics["tokenizer"]) == ("nats per token", "val", "bytes")
    assert eval_lm_main([checkpoint, "--batches", "3", "--batch-size", "2", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines() == [  # without --json: a table naming the data, count and units
        f"{checkpoint} on split val of {metrics['source']}: 96 predicted tokens in windows of 16",
        f"  loss        {metrics['loss']:.4f}  cross-entropy, nats per token (bytes tokenizer: nats per byte)",
        f"  perplexity  {metrics['perplexity']:>6.2f}  e^loss"]
    assert sample_main([str(gpt_run / "missing.pt")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert eval_lm_main([checkpoint, "--block-size", "99"]) == 2
    assert "block_size: 99 exceeds" in capsys.readouterr().err


@pytest.mark.parametrize("preset, model", [("gpt_stdlib", "gpt_small"), ("bert_stdlib", "bert_medium")])
def test_standard_baseline_trains_through_the_crate_preset(preset, model, corpus_dir, tmp_path):
    """docs/language.md's baseline command (the CRATE preset with ``--model gpt_small``/``bert_medium``): an MHSA model has
    no U^ℓ to measure R^c with, so the run trains without layer-wise measurements and says so in config.json."""
    run = tmp_path / "run"
    assert train_main(["--preset", preset, "--model", model, "--data-dir", str(corpus_dir), "--output-dir", str(run),
                       "--model-args", "dim=16", "heads=2", "depth=1", "--block-size", "16", "--batch-size", "4",
                       "--total-steps", "2", "--warmup-steps", "1", "--eval-every-steps", "2", "--eval-batch-size", "2",
                       "--val-batches", "1", "--measure-sequences", "2", "--no-progress"]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["layer_measurements"] is False and not (run / "measurements").exists()
    assert not has_mssa_layers(crate_nn.load(run / "checkpoints" / "last.pt"))


def test_lm_loss_is_table6_protocol(corpus_dir):
    """The mean next-token cross-entropy over evenly spread full windows, against a direct computation; a uniform
    model scores log V."""
    tokens = load_corpus(corpus_dir).val
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_gpt_base", **TINY_MODEL, vocab_size=258, block_size=16).double()
    ctx = context("cpu")
    result = lm_loss(model, tokens, 16, ctx, batch_size=3, batches=2, precision="fp32")
    windows = TokenBlocks(tokens, 16, 1)
    chosen = torch.stack([windows[i] for i in spread(len(windows), 6)])
    with torch.no_grad():
        direct = F.cross_entropy(model(chosen[:, :-1]).flatten(0, 1), chosen[:, 1:].flatten()).item()
    assert result["tokens"] == 6 * 16 and result["loss"] == pytest.approx(direct, rel=1e-12)  # float64, reordered
    everything = lm_loss(model, tokens, 16, ctx, batch_size=4, batches=10_000, precision="fp32")
    assert everything["tokens"] == len(windows) * 16  # fewer windows than asked: all of them
    with torch.no_grad():
        model.wte.weight.zero_()
    assert lm_loss(model, tokens, 16, ctx, batches=2)["loss"] == pytest.approx(math.log(258), rel=1e-12)
    assert spread(10, 4) == [0, 2, 5, 7] and spread(3, 5) == [0, 1, 2]


def test_masked_lm_resumes_exactly_with_dynamic_masking(corpus_dir, tmp_path):
    """Masks are drawn from the engine's saved RNG: 2 steps + resume to 4 equals 4 steps straight."""
    straight = train(_config("bert_stdlib", corpus_dir, tmp_path / "a", total_steps=4, eval_every_steps=None))
    interrupted = _config("bert_stdlib", corpus_dir, tmp_path / "b", total_steps=4, eval_every_steps=None)
    train(interrupted.replace(max_steps=2))
    resumed = train(interrupted.replace(resume=True))
    a, b = (crate_nn.checkpoint.read(r.checkpoint)["model"] for r in (straight, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)  # same operations in the same order on a CPU
    assert 0 <= straight.metrics["val_accuracy"] <= 1 and math.isfinite(straight.metrics["val_loss"])
    assert straight.metrics["val_masked"] > 0


def _glue_files(root, pairs: bool):
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, count in (("train.tsv", 24), ("dev.tsv", 10)):
        if pairs:
            rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"] + [
                f"{i % 2}\t{i}\t{i}\tdef f{i}(x):\treturn x + {rng.integers(9)}" for i in range(count)]
        else:
            rows = ["sentence\tlabel"] + [f"{'good' if i % 2 else 'bad'} film number {i}\t{i % 2}" for i in range(count)]
        (root / name).write_text("\n".join(rows) + "\n")
    return root


@pytest.mark.parametrize("pairs", [False, True], ids=["sst2-like", "mrpc-like"])
def test_sequence_classification_fine_tunes_a_pretrained_bert(corpus_dir, tmp_path, pairs):
    pretrained = train(_config("bert_stdlib", corpus_dir, tmp_path / "bert", total_steps=2, eval_every_steps=None))
    data = _glue_files(tmp_path / "glue", pairs)
    columns = ("#1 String", "#2 String") if pairs else ("sentence",)
    config = get_preset("pairs_stdlib", init_from=pretrained.checkpoint, data_dir=str(data), text_columns=columns,
                        label_column="Quality" if pairs else "label", batch_size=8, epochs=1, max_length=16,
                        output_dir=str(tmp_path / "fine"), progress=False)
    result = train(config)
    assert 0 <= result.metrics["val_accuracy"] <= 1 and 0 <= result.metrics["val_f1"] <= 1
    resolved = json.loads((tmp_path / "fine" / "config.json").read_text())
    assert resolved["reinitialised_from_init"] == ["classifier.dense.weight", "classifier.dense.bias",
                                                   "classifier.out.weight", "classifier.out.bias"]
    assert resolved["classes"] == ["0", "1"] and resolved["eval_examples"] == 10
    model = crate_nn.load(result.checkpoint)
    bert = crate_nn.load(pretrained.checkpoint)
    assert model.family == "bert_classifier" and model.config.block_size == bert.config.block_size


def test_classification_metrics():
    metrics = classification_metrics(torch.tensor([1, 1, 0, 0, 1]), torch.tensor([1, 0, 0, 1, 1]), 2)
    assert metrics["accuracy"] == pytest.approx(3 / 5) and metrics["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert "f1" not in classification_metrics(torch.tensor([2]), torch.tensor([2]), 3)


def test_top_k_one_is_deterministic_argmax_decoding():
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_gpt_base", **TINY_MODEL, vocab_size=30, block_size=8).eval()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    first = generate(model, prompt, 12, temperature=0.7, top_k=1, generator=torch.Generator().manual_seed(1))
    second = generate(model, prompt, 12, temperature=2.0, top_k=1, generator=torch.Generator().manual_seed(2))
    greedy = prompt
    with torch.no_grad():
        for _ in range(12):  # the context is cut to the block size (8) as in generate
            greedy = torch.cat([greedy, model(greedy[:, -8:])[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(first, second) and torch.equal(first, greedy) and first.shape == (2, 15)
    sampled = [generate(model, prompt, 12, top_k=5, generator=torch.Generator().manual_seed(s)) for s in (3, 3)]
    assert torch.equal(*sampled)
    for bad in (dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=0), dict(top_k=2.5)):
        with pytest.raises(ValueError, match="temperature|top_k"):
            generate(model, prompt, 2, **bad)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, prompt, -1)


@pytest.mark.parametrize("temperature", [1e-40, 5e-324, 0.0])
def test_a_tiny_or_zero_temperature_is_greedy_decoding(temperature):
    """logits / 1e-40 used to overflow float32 to inf, the softmax to NaN and torch.multinomial to raise; the limit
    T → 0 of the softmax is all the probability on the largest logit, and T = 0 is that limit."""
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_gpt_base", **TINY_MODEL, vocab_size=30, block_size=8).eval()
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    greedy = generate(model, prompt, 12, top_k=1, generator=torch.Generator().manual_seed(1))
    cold = generate(model, prompt, 12, temperature=temperature, top_k=None, generator=torch.Generator().manual_seed(2))
    assert torch.equal(cold, greedy)


def _gpt_checkpoint(path, vocab_size=258):
    torch.manual_seed(0)
    crate_nn.save(path, crate_nn.create_model("crate_gpt_small", **TINY_MODEL, vocab_size=vocab_size, block_size=16))
    return str(path)


def test_eval_lm_reads_the_token_dtype_from_meta_json(corpus_dir, tmp_path, capsys):
    """--dtype uint8 (or a uint16 default) on other ids used to give a loss of garbage: 5.32 instead of 3.35."""
    checkpoint = _gpt_checkpoint(tmp_path / "gpt.pt")
    wide = tmp_path / "wide"
    wide.mkdir()
    np.asarray(load_corpus(corpus_dir).val, dtype=np.uint32).tofile(wide / "val.bin")
    meta = json.loads((corpus_dir / "meta.json").read_text())
    (wide / "meta.json").write_text(json.dumps({**meta, "dtype": "uint32"}))
    common = ["--batches", "3", "--batch-size", "2", "--device", "cpu", "--json"]
    numbers = lambda out: {k: v for k, v in json.loads(out).items() if k in ("loss", "perplexity", "tokens")}  # noqa: E731
    assert eval_lm_main([checkpoint, "--data-dir", str(corpus_dir), *common]) == 0
    expected = numbers(capsys.readouterr().out)
    assert eval_lm_main([checkpoint, "--tokens", str(wide / "val.bin"), *common]) == 0
    assert numbers(capsys.readouterr().out) == expected  # the same ids through the same code: equal to the bit
    assert eval_lm_main([checkpoint, "--tokens", str(wide / "val.bin"), "--dtype", "uint16", *common]) == 2
    assert capsys.readouterr().err == (f"crate-eval-lm: dtype: uint16 contradicts {wide / 'meta.json'}, which records "
                                       "uint32 for val.bin\n")
    for dtype in ("uint8", "int8", "float32"):
        with pytest.raises(SystemExit) as exit_info:
            eval_lm_main([checkpoint, "--tokens", str(wide / "val.bin"), "--dtype", dtype, *common])
        assert exit_info.value.code == 2 and "argument --dtype: invalid choice" in capsys.readouterr().err


def test_eval_lm_names_a_target_id_outside_the_vocabulary(tmp_path, capsys):
    """The last id of the last window is only a target: the model's input check never sees it, and the loss used
    to fail with an IndexError traceback."""
    checkpoint = _gpt_checkpoint(tmp_path / "gpt.pt")
    ids = np.arange(3 * 16 + 1, dtype=np.uint16) % 200
    ids[-1] = 300
    ids.tofile(tmp_path / "val.bin")
    assert eval_lm_main([checkpoint, "--tokens", str(tmp_path / "val.bin"), "--batches", "3", "--batch-size", "1",
                         "--device", "cpu"]) == 2
    assert capsys.readouterr().err == (f"crate-eval-lm: tokens: id 300 at position 48 of {tmp_path / 'val.bin'} is "
                                       "outside the vocabulary [0, 258)\n")


def test_a_single_class_training_file_is_refused(tmp_path, capsys):
    """A TSV whose labels are all one class used to train a one-way head to "accuracy 1.0"."""
    glue = tmp_path / "glue"
    glue.mkdir()
    for name in ("train.tsv", "dev.tsv"):
        (glue / name).write_text("sentence\tlabel\n" + "".join(f"text {i}\t1\n" for i in range(8)))
    assert train_main(["--preset", "pairs_stdlib", "--init-from", "none", "--data-dir", str(glue), "--model-args",
                       "dim=16", "heads=2", "depth=1", "block_size=16", "--max-length", "16", "--batch-size", "4",
                       "--epochs", "1", "--output-dir", str(tmp_path / "run"), "--no-progress"]) == 1
    assert capsys.readouterr().err == (f"crate-train: train_file: {glue / 'train.tsv'} holds one class, ['1']; a "
                                       "classifier needs at least two\n")


def test_bad_language_configs_are_named(corpus_dir, tmp_path):
    with pytest.raises(ValueError, match="block_size: 32 exceeds the model's block_size=16"):
        _config("gpt_stdlib", corpus_dir, tmp_path / "a", block_size=32,
                model_args={**TINY_MODEL, "block_size": 16}).validate()
    with pytest.raises(ValueError, match="model_args: .*is fixed by the task"):
        _config("gpt_stdlib", corpus_dir, tmp_path / "b", model_args={"causal": False}).validate()
    with pytest.raises(ValueError, match="data_dir: .*meta.json.* does not exist"):
        train(_config("gpt_stdlib", tmp_path / "nothing", tmp_path / "c"))
    with pytest.raises(ValueError, match="vocab_size=100 is smaller than the corpus tokenizer's 258"):
        train(_config("gpt_stdlib", corpus_dir, tmp_path / "d", model_args={**TINY_MODEL, "vocab_size": 100}))
    with pytest.raises(ValueError, match="block_size: 5000 .* exceeds the .* tokens of the split"):
        train(_config("gpt_stdlib", corpus_dir, tmp_path / "e", block_size=5000,
                      model_args={**TINY_MODEL, "block_size": 5000}))
    no_mask = tmp_path / "nomask"
    no_mask.mkdir()
    for name in ("train.bin", "val.bin"):
        (no_mask / name).write_bytes((corpus_dir / name).read_bytes())
    meta = json.loads((corpus_dir / "meta.json").read_text())
    (no_mask / "meta.json").write_text(json.dumps({**meta, "mask_id": None}))
    with pytest.raises(ValueError, match="has no <mask> token"):
        train(_config("bert_stdlib", no_mask, tmp_path / "f"))
    with pytest.raises(ValueError, match="not a CRATE-BERT"):
        gpt = train(_config("gpt_stdlib", corpus_dir, tmp_path / "g", total_steps=1, eval_every_steps=None))
        train(get_preset("pairs_stdlib", init_from=gpt.checkpoint, output_dir=str(tmp_path / "h")))
