"""`verify.hooked`: a Hugging Face transformers ViT, BERT and GPT-2 as the network audit's subject — tiny random-init
stand-ins (d 32, 3 layers: the rows from layer 2 on need 3; 2 heads) saved by the library in its own folder layout.
The hooks see what the library computes (its hidden states rebuilt from them), the audit runs end to end on each,
the random initialisations repeat by seed, and bad folders get one line."""
import json
import sys

import pytest
import torch

import crate_nn
from verify import checkpoint, hooked, network

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "vit": lambda: transformers.ViTConfig(hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                          intermediate_size=64, image_size=32, patch_size=8),
    "bert": lambda: transformers.BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                                            intermediate_size=64, max_position_embeddings=16),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=300, n_embd=32, n_layer=3, n_head=2, n_positions=16,
                                            bos_token_id=None, eos_token_id=None),
}
IDS = {"rc-falls-official", "rc-falls-paper", "rc-below-random-init-official", "rc-below-random-init-paper",
       "joint-random-init", "sparsity-rises", "sparser-than-random-init"}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """The collapse floors go to a per-worker temporary cache (computed once per size there)."""
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def save(folder, kind, seed=0, **changes):
    """A random-init ``kind`` model saved by transformers into ``folder`` (config.json, model.safetensors)."""
    config = CONFIGS[kind]()
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(seed)
    with hooked.quiet():
        getattr(transformers, hooked.FAMILIES[kind].model)(config, **hooked.FAMILIES[kind].kwargs).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {kind: save(root / kind, kind) for kind in CONFIGS}


def batch(kind):
    g = torch.Generator().manual_seed(1)
    return torch.randn(3, 3, 32, 32, generator=g) if kind == "vit" else torch.randint(0, 300, (3, 16), generator=g)


def second_half(block, half):
    """Z^{ℓ+1} rebuilt from Z^{ℓ+1/2} by the block's own feed-forward modules (pre-LN: Z + MLP(LN2(Z)); BERT, post-LN:
    LN(Z + MLP(Z)))."""
    if hasattr(block, "mlp"):  # GPT-2; transformers 5's ViT
        return half + block.mlp((block.ln_2 if hasattr(block, "ln_2") else block.layernorm_after)(half))
    norm = getattr(block, "layernorm_after", None)  # ViT before transformers 5
    return block.output(block.intermediate(norm(half) if norm else half), half)


@pytest.mark.parametrize("kind", CONFIGS)
def test_the_hooks_see_what_the_library_computes(folders, kind):
    net = hooked.load(f"transformers:{folders[kind]}", "model")
    x = batch(kind)
    seen = net.tokens(x)
    with torch.no_grad():
        out = net.model(**{hooked.FAMILIES[kind].inputs: x}, output_hidden_states=True)
        states, depth = out.hidden_states, net.depth
        assert len(seen) == depth == 3 and len(states) == depth + 1
        for i, (t, block) in enumerate(zip(seen, net.blocks)):
            # Z^{ℓ+1}: the very tensor the library returns (GPT-2's last hidden state is after its ln_f)
            if not (kind == "gpt2" and i == depth - 1):
                assert torch.equal(t.output, states[i + 1]), i
            # LN1(Z^ℓ): the block's first LayerNorm of the library's Z^ℓ (BERT, post-LN: Z^ℓ itself)
            path = hooked.FAMILIES[kind].normed[0]
            assert torch.equal(t.normed, block.get_submodule(path)(states[i]) if path else states[i]), i
            # the block's feed-forward half recomputed on the hooked Z^{ℓ+1/2}: the same float32 operations on the same
            # tensors (bitwise equal on this machine), but in another call, where a BLAS may block its sums otherwise:
            # float32 round-off, 2⁻²³ ≈ 1.2e-7 of sums of 64 terms of |Z| ≤ 3 here, well inside 1e-5
            torch.testing.assert_close(second_half(block, t.half), t.output, rtol=1e-5, atol=1e-5)
            # the subspaces are the value projection: the library's value of the normed tokens, its bias taken off
            # ((xWᵀ + b) − b against x Uᵀ: the bias's round-off added and removed, and the sum's order, in float32)
            value = _value(block, kind, t.normed)
            torch.testing.assert_close(t.normed @ t.subspaces.T, value, rtol=1e-5, atol=1e-5)
            assert t.subspaces.shape == (32, 32) and t.heads == 2
        last = {"vit": "layernorm", "gpt2": "ln_f"}.get(kind)  # the final LayerNorm (BERT has none)
        assert torch.equal(getattr(net.model, last)(seen[-1].output) if last else seen[-1].output,
                           out.last_hidden_state)


def _value(block, kind, z):
    """The library's value projection of ``z``, bias off, computed by its own module (GPT-2's fused c_attn split)."""
    if kind == "gpt2":
        attn = block.attn.c_attn
        return attn(z)[..., 64:] - attn.bias[64:]
    module = hooked._first(block, hooked.FAMILIES[kind].value)
    return module(z) - module.bias


@pytest.mark.parametrize("kind", CONFIGS)
def test_the_audit_runs_end_to_end(folders, tmp_path, kind, capsys):
    if kind == "vit":
        from test_network import write_images

        given = ["--images", str(write_images(tmp_path / "images", 8))]
    else:
        (tmp_path / "book.txt").write_text("the white-box transformer compresses and sparsifies. " * 20)
        given = ["--text", str(tmp_path / "book.txt"), "--tokenizer", "bytes"]
    out = tmp_path / "out"
    assert network.main([f"transformers:{folders[kind]}", *given, "--n", "6", "--control-n", "4", "--init-seeds", "3",
                         "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"report: {out / 'report.md'}"
    report = json.loads((out / "report.json").read_text())
    assert report["model"]["format"] == f"transformers {hooked.FAMILIES[kind].model}"
    assert report["model"]["config"]["model_type"] == kind and report["model"]["layers"] == 3
    assert {v["id"] for v in report["verdicts"]} == IDS
    assert {v["verdict"] for v in report["verdicts"]} <= {"holds", "fails", "inconclusive"}
    assert report["sizes"]["n"] == (17 if kind == "vit" else 16) and report["sizes"]["heads"] == 2
    rows = (out / "layers.csv").read_text().splitlines()
    assert [r.split(",")[3] for r in rows if r.startswith("this network,official,2,")] == ["", "1", "2"]
    assert {f.split("/")[-1] for f in report["figures"]} >= {"official.png", "paper.png", "heads.png"}
    assert all((out / f).is_file() for f in report["figures"]) and (out / "report.md").is_file()


def test_random_initialisations_repeat_by_seed_and_differ_across_seeds(folders):
    net = hooked.load(f"transformers:{folders['gpt2']}", "model")
    before = torch.random.get_rng_state()
    first, again, other = net.random(1000), net.random(1000), net.random(1001)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global generator is left as it was
    weights = [torch.cat([p.flatten() for p in n.model.parameters()]) for n in (first, again, other)]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])
    assert type(first.model) is type(net.model) and first.model.config.to_dict() == net.model.config.to_dict()
    assert first.label == "random init 1000" and first.seed == 1000


def _broken(tmp_path, what):
    folder = tmp_path / what
    if what == "no weights":
        save(folder, "bert")
        (folder / "model.safetensors").unlink()
    elif what == "garbage weights":
        save(folder, "bert")
        (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    elif what == "no config":
        save(folder, "bert")
        (folder / "config.json").unlink()
    elif what == "broken config":
        save(folder, "bert")
        (folder / "config.json").write_text("{")
    elif what == "too few weights":  # the config asks for 4 layers, the weights hold 3
        save(folder, "gpt2")
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "n_layer": 4}))
    elif what == "another architecture":
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "t5"}))
        (folder / "model.safetensors").write_bytes(b"")
    return f"transformers:{folder}"


@pytest.mark.parametrize("what, message", [
    ("absent", "is not a folder"),
    ("no weights", "has no weights (expected model.safetensors or pytorch_model.bin beside config.json)"),
    ("garbage weights", "transformers cannot read its weights"),
    ("no config", "has no config.json"),
    ("broken config", "transformers cannot read its config.json"),
    ("too few weights", "leaves 12 of GPT2Model's tensors unset or of another shape (h.3."),
    ("another architecture", "is a 't5' model; expected one of vit, bert, gpt2"),
])
def test_a_bad_folder_is_one_line(tmp_path, capsys, what, message):
    spec = _broken(tmp_path, what)
    (tmp_path / "book.txt").write_text("text " * 100)
    assert network.main([spec, "--text", str(tmp_path / "book.txt"), "--tokenizer", "bytes"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m verify.network: model: {spec!r}") and message in err and err.count("\n") == 1, err


@pytest.mark.parametrize("arguments, message", [
    (["--window", "17"], "window: 17 exceeds the model's block_size 16"),  # GPT-2's n_positions
    (["--heads", "2"], "is a transformers folder, whose config.json gives its heads; drop --heads"),
    (["--name", "vit_small"], "is a transformers folder, whose config.json gives its heads; drop --name"),
])
def test_text_beyond_the_positions_and_heads_given_are_refused(folders, tmp_path, capsys, arguments, message):
    (tmp_path / "book.txt").write_text("text " * 100)
    assert network.main([f"transformers:{folders['gpt2']}", "--text", str(tmp_path / "book.txt"), "--tokenizer",
                         "bytes", *arguments, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_a_vocabulary_the_tokenizer_overflows_is_refused(tmp_path, capsys):
    spec = f"transformers:{save(tmp_path / 'small', 'gpt2', vocab_size=100)}"
    (tmp_path / "book.txt").write_text("text " * 100)  # bytes up to 120 ('x')
    assert network.main([spec, "--text", str(tmp_path / "book.txt"), "--tokenizer", "bytes"]) == 2
    assert capsys.readouterr().err == ("python -m verify.network: tokenizer: bytes gives ids up to 120, the model's "
                                       "vocabulary has 100\n")


def test_images_for_a_language_model_and_text_for_a_vit_are_refused(folders, tmp_path, capsys):
    (tmp_path / "book.txt").write_text("text " * 100)
    assert network.main([f"transformers:{folders['vit']}", "--text", str(tmp_path / "book.txt"), "--tokenizer",
                         "bytes"]) == 2
    assert "text: the model is not a language model" in capsys.readouterr().err
    assert network.main([f"transformers:{folders['bert']}", "--dataset", "digits"]) == 2
    assert "images, dataset: the model takes text; give --text" in capsys.readouterr().err


def test_without_transformers_one_line_says_how_to_install_it(folders, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)
    (tmp_path / "book.txt").write_text("text " * 100)
    assert network.main([f"transformers:{folders['bert']}", "--text", str(tmp_path / "book.txt")]) == 2
    assert capsys.readouterr().err == ("python -m verify.network: model: a transformers: subject needs the "
                                       "transformers package: pip install 'crate-whitebox[transformers]' (or pip "
                                       "install transformers)\n")


def test_a_transformers_vit_is_figure_26s_control_beside_a_crate(folders, tmp_path):
    """``--against transformers:FOLDER``: the CRATE's Fig. 26 rows against the library's ViT."""
    from test_network import SMALL, write_images

    torch.manual_seed(0)
    crate_nn.save(tmp_path / "crate.pt", crate_nn.create_model("crate_alpha_b16", **SMALL))
    images = write_images(tmp_path / "images", 6)
    args = network.parse_args([str(tmp_path / "crate.pt"), "--images", str(images), "--n", "6", "--control-n", "4",
                               "--init-seeds", "3", "--against", f"transformers:{folders['vit']}", "--against-name",
                               "hf vit"])
    args.progress = False
    subject = checkpoint.open_checkpoint(args)
    assert [(c.label, crate) for c, crate in subject.controls] == [("random init", True), ("hf vit", False)]
    ids = {d.id for d in subject.decide()}
    assert {"fig26-compression-vs-hf-vit", "fig26-sparsity-vs-hf-vit"} <= ids
