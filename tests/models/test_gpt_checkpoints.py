"""crate-lm (the public CRATE-GPT) and nanoGPT checkpoints: files in their format — ``{'model', 'model_args', …}``,
``_orig_mod.`` prefixes, causal-mask buffers, their key names — load into CRATEGPT with logits equal to an
independent float64 forward written here from their layer semantics (crate-lm's model code), round-trip
through `to_crate_lm`, and bad files are refused by name."""
import math

import pytest
import torch
import torch.nn.functional as F
from _published import cached_checkpoints_of

from crate_nn.official import load_gpt_checkpoint, to_crate_lm
from crate_nn.official.gpt import load_causal_lm
from crate_nn.weights.keys import state_dict_of

V, BLOCK, D, HEADS, LAYERS = 37, 10, 12, 3, 2


def _ln(x, state, prefix):
    return F.layer_norm(x, (x.shape[-1],), state[prefix + ".weight"], state[prefix + ".bias"], 1e-5)


def _causal_attention(q, k, v, heads):
    b, t, d = q.shape
    q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
    att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).tril().logical_not(), float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(b, t, d)


def reference_forward(state, idx, heads, kind):
    """Their forward, from the raw tensors: kind 'crate' (crate.py), 'overcomplete' (crate_overcomplete.py) or
    'gpt2' (nanoGPT's model.py)."""
    state = {k: v.double() for k, v in state.items()}
    x = state["transformer.wte.weight"][idx] + state["transformer.wpe.weight"][: idx.shape[1]]
    dim, layers = x.shape[-1], 1 + max(int(k.split(".")[2]) for k in state if k.startswith("transformer.h."))
    for i in range(layers):
        p = f"transformer.h.{i}."
        if kind == "gpt2":
            q, k, v = (_ln(x, state, p + "ln_1") @ state[p + "attn.c_attn.weight"].T
                       + state[p + "attn.c_attn.bias"]).split(dim, dim=-1)
            x = x + _causal_attention(q, k, v, heads) @ state[p + "attn.c_proj.weight"].T + state[p + "attn.c_proj.bias"]
            h = F.gelu(_ln(x, state, p + "ln_2") @ state[p + "mlp.c_fc.weight"].T + state[p + "mlp.c_fc.bias"])
            x = x + h @ state[p + "mlp.c_proj.weight"].T + state[p + "mlp.c_proj.bias"]
            continue
        w = _ln(x, state, p + "prenorm_1") @ state[p + "attn.c_attn.weight"].T  # q = k = v
        x = x + _causal_attention(w, w, w, heads) @ state[p + "attn.c_proj.weight"].T + state[p + "attn.c_proj.bias"]
        y, W = _ln(x, state, p + "prenorm_2"), state[p + "ista.weight"]
        if kind == "crate":  # ReLU(x + η(x W − x Wᵀ W) − ηλ), W square
            x = torch.relu(y + 0.1 * (y @ W - (y @ W.T) @ W) - 0.01)
        else:  # W (4d, d): z₁ = ReLU(η y Wᵀ − ηλ), z₂ = ReLU(z₁ + η(y Wᵀ − z₁ W Wᵀ) − ηλ), output z₂ W
            z1 = torch.relu(0.1 * (y @ W.T) - 0.01)
            z2 = torch.relu(z1 + 0.1 * (y @ W.T - (z1 @ W) @ W.T) - 0.01)
            x = z2 @ W
    if "transformer.ln_f.weight" in state:
        x = _ln(x, state, "transformer.ln_f")
    return x @ state["transformer.wte.weight"].T


def their_state(kind, seed=0, masks=True):
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: 0.3 * torch.randn(*shape, generator=g)  # noqa: E731
    wte = r(V, D)
    state = {"transformer.wte.weight": wte, "transformer.wpe.weight": r(BLOCK, D), "lm_head.weight": wte}
    for i in range(LAYERS):
        p = f"transformer.h.{i}."
        if kind == "gpt2":
            state.update({p + "ln_1.weight": 1 + r(D), p + "ln_1.bias": r(D), p + "attn.c_attn.weight": r(3 * D, D),
                          p + "attn.c_attn.bias": r(3 * D), p + "attn.c_proj.weight": r(D, D),
                          p + "attn.c_proj.bias": r(D), p + "ln_2.weight": 1 + r(D), p + "ln_2.bias": r(D),
                          p + "mlp.c_fc.weight": r(4 * D, D), p + "mlp.c_fc.bias": r(4 * D),
                          p + "mlp.c_proj.weight": r(D, 4 * D), p + "mlp.c_proj.bias": r(D)})
        else:
            state.update({p + "prenorm_1.weight": 1 + r(D), p + "prenorm_1.bias": r(D),
                          p + "attn.c_attn.weight": r(D, D), p + "attn.c_proj.weight": r(D, D),
                          p + "attn.c_proj.bias": r(D), p + "prenorm_2.weight": 1 + r(D), p + "prenorm_2.bias": r(D),
                          p + "ista.weight": r(4 * D if kind == "overcomplete" else D, D)})
        if masks:
            state[p + "attn.bias"] = torch.ones(BLOCK, BLOCK).tril().view(1, 1, BLOCK, BLOCK)
    if kind != "crate":
        state.update({"transformer.ln_f.weight": 1 + r(D), "transformer.ln_f.bias": r(D)})
    return state


def their_file(path, kind, compiled=True, **state_options):
    state = their_state(kind, **state_options)
    if compiled:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    args = dict(n_layer=LAYERS, n_head=HEADS, n_embd=D, block_size=BLOCK, bias=True, vocab_size=V, dropout=0.0)
    torch.save({"model": state, "model_args": args, "optimizer": {}, "iter_num": 7, "best_val_loss": 3.0,
                "config": {}}, path)
    return path


@pytest.mark.parametrize("kind", ["crate", "overcomplete", "gpt2"])
def test_their_checkpoints_give_their_logits(tmp_path, kind):
    path = their_file(tmp_path / "ckpt.pt", kind, masks=kind != "overcomplete")  # the flash variant has no masks
    model = load_gpt_checkpoint(str(path)).double().eval()
    cfg = model.config
    assert (cfg.depth, cfg.heads, cfg.dim, cfg.vocab_size, cfg.block_size) == (LAYERS, HEADS, D, V, BLOCK)
    assert cfg.final_norm == (kind != "crate") and model.lm_head.weight is model.wte.weight
    idx = torch.randint(0, V, (3, BLOCK), generator=torch.Generator().manual_seed(1))
    expected = reference_forward(their_state(kind), idx, HEADS, kind)
    torch.testing.assert_close(model(idx), expected, rtol=0, atol=1e-10)  # float64, products in another order


def test_round_trip_through_their_format(tmp_path):
    model = load_gpt_checkpoint(str(their_file(tmp_path / "a.pt", "overcomplete", masks=False)))
    theirs = to_crate_lm(model)
    assert theirs["transformer.h.0.ista.weight"].shape == (4 * D, D)
    assert not any(k.endswith(".attn.bias") for k in theirs)  # crate_overcomplete.py has no mask buffers
    masked = to_crate_lm(model, masks=True)
    assert torch.equal(masked["transformer.h.1.attn.bias"][0, 0], torch.ones(BLOCK, BLOCK).tril())
    original = their_state("overcomplete", masks=False)
    assert set(theirs) == set(original) and all(torch.equal(theirs[k], v) for k, v in original.items())
    standard = to_crate_lm(load_gpt_checkpoint(str(their_file(tmp_path / "c.pt", "crate"))))
    assert set(standard) == set(their_state("crate"))  # crate.py's model holds the mask buffers: added by default
    back = load_gpt_checkpoint({"model": theirs}, heads=HEADS)
    idx = torch.randint(0, V, (2, 5))
    torch.testing.assert_close(back(idx), model(idx), rtol=0, atol=0)  # the same tensors


def test_loading_our_format_and_theirs_by_one_function(tmp_path):
    import crate_nn

    ours = load_gpt_checkpoint(str(their_file(tmp_path / "t.pt", "crate")))
    crate_nn.save(tmp_path / "ours.pt", ours)
    assert torch.equal(load_causal_lm(str(tmp_path / "ours.pt")).wte.weight, ours.wte.weight)
    assert torch.equal(load_causal_lm(str(tmp_path / "t.pt")).wte.weight, ours.wte.weight)
    crate_nn.save(tmp_path / "bert.pt", crate_nn.create_model("crate_bert_base", dim=12, heads=3, depth=1,
                                                              vocab_size=20, block_size=4))
    with pytest.raises(ValueError, match="not a causal LM"):
        load_causal_lm(str(tmp_path / "bert.pt"))


def test_nanogpt_without_biases_loads_zeros(tmp_path):
    state = {k: v for k, v in their_state("gpt2", masks=False).items() if not k.endswith(".bias")}
    model = load_gpt_checkpoint({"model": state, "model_args": {"n_head": HEADS, "bias": False}})
    assert model.encoder.layers[0].mhsa.qkv.bias.abs().max() == 0 and model.norm.bias.abs().max() == 0


def test_bad_files_are_refused_by_name(tmp_path):
    state = their_state("crate")
    with pytest.raises(ValueError, match="heads: the checkpoint has no model_args"):
        load_gpt_checkpoint({"model": state})
    untied = {**state, "lm_head.weight": torch.zeros(V, D)}
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        load_gpt_checkpoint({"model": untied}, heads=HEADS)
    wrong_mask = {**state, "transformer.h.0.attn.bias": torch.ones(1, 1, BLOCK, BLOCK)}
    with pytest.raises(ValueError, match="transformer.h.0.attn.bias: expected the causal mask"):
        load_gpt_checkpoint({"model": wrong_mask}, heads=HEADS)
    missing = {k: v for k, v in state.items() if k != "transformer.h.1.ista.weight"}
    with pytest.raises(ValueError, match="encoder.layers.1.ista.weight"):
        load_gpt_checkpoint({"model": missing}, heads=HEADS)
    extra = {**state, "transformer.h.0.mystery.weight": torch.zeros(2)}
    with pytest.raises(ValueError, match="unexpected keys .*mystery"):
        load_gpt_checkpoint({"model": extra}, heads=HEADS)
    with pytest.raises(ValueError, match="not a crate-lm or nanoGPT checkpoint"):
        load_gpt_checkpoint({"model": {"weight": torch.zeros(2)}}, heads=HEADS)
    with pytest.raises(ValueError, match="checkpoint: .* does not exist"):
        load_gpt_checkpoint(str(tmp_path / "none.pt"))


def test_published_crate_lm_weights_give_their_logits():
    """Regression against real weights: the smallest crate-lm (CRATE-GPT) checkpoint of a repository named *crate*
    in the local Hugging Face cache (skipped, naming what is missing, when there is none)."""
    path = cached_checkpoints_of("crate-lm", "crate")[0]
    payload = torch.load(path, map_location="cpu", weights_only=True)
    state = state_dict_of(payload)
    model = load_gpt_checkpoint(str(path)).double().eval()
    kind = "crate" if "transformer.ln_f.weight" not in state else "overcomplete"
    idx = torch.randint(0, model.config.vocab_size, (1, min(32, model.config.block_size)),
                        generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        # their stored values, both sides in float64 (the order of the sums differs: ≈ 1e-13 at these depths)
        torch.testing.assert_close(model(idx), reference_forward(state, idx, model.config.heads, kind),
                                   rtol=1e-9, atol=1e-9)
