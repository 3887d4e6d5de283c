"""CRATE-GPT and CRATE-BERT: every registered size (parameter counts, forward/backward), causality and the causal
mask of eq. (87) in both attention paths, tied weights, padding masks, the without-ISTA and tied-overcomplete
variants, GPT-2 initialisation, the measurements on token sequences, and bad input."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import crate_nn
from crate_nn.models import BERTClassifierConfig, BERTConfig, GPTConfig, build_model, create_model, list_models
from crate_nn.models.ista import ISTA
from crate_nn.models.language import sinusoid_table

# Counted from the module structure (models/language.py's table): CRATE-GPT Base 60,699,648 and 12-layer
# overcomplete 81,934,848 as the public crate-lm, GPT-2 124,475,904 as nanoGPT; Table 10 prints 60M / 242M (CRATE-GPT),
# 64M / 124M / 774M (GPT-2), 33M / 61M / 129M (CRATE-BERT) — see the verify claims table10-params-*.
EXPECTED_PARAMETERS = {
    "crate_gpt_small": 35_747_840,
    "crate_gpt_base": 60_699_648,
    "crate_gpt_large": 242_877_440,
    "crate_gpt_overcomplete": 81_934_848,
    "gpt_small": 64_109_568,
    "gpt_base": 124_475_904,
    "gpt_large": 774_090_240,
    "crate_bert_medium": 32_623_705,
    "crate_bert_base": 60_918_873,
    "crate_bert_large": 128_717_913,
    "bert_medium": 51_531_865,
    "bert_base": 124_695_129,
    "bert_large": 355_408_985,
    "tost_gpt_base": 110_292_624,
    "tost_gpt_medium": 304_466_304,
    "tost_gpt_large": 655_987_920,
}
TOST_README = {"tost_gpt_base": 110, "tost_gpt_medium": 304, "tost_gpt_large": 655}
"""ToST's language README: parameters in millions, as nanoGPT prints them (rounded)."""
TINY = dict(dim=24, heads=3, depth=2, vocab_size=40, block_size=12)
VARIANTS = [dict(), dict(attention="mhsa", feedforward="mlp", final_norm=True), dict(feedforward="none"),
            dict(ista="overcomplete", ista_output="tied", final_norm=True),
            dict(attention="tssa", feedforward="mlp", final_norm=True),
            dict(attention="tssa", tssa_membership="energy", mssa_output="tied")]


def tiny(name="crate_gpt_base", **overrides):
    torch.manual_seed(0)
    return create_model(name, **{**TINY, **overrides}).double().eval()


def tokens(batch=2, length=12, vocab=40, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", list_models(family="gpt") + list_models(family="bert"))
def test_every_registered_language_model_counts_and_trains(name):
    """The parameter count of the registered size; forward/backward at its width with one layer, a short context
    and a small vocabulary (the full depth repeats the same layer; the full vocabulary only widens two matrices)."""
    with torch.device("meta"):
        full = create_model(name)
    assert sum(p.numel() for p in full.parameters()) == EXPECTED_PARAMETERS[name]
    torch.manual_seed(0)
    model = create_model(name, depth=1, block_size=8, vocab_size=64)
    x = tokens(1, 8, 64)
    logits = model(x)
    assert logits.shape == (1, 8, 64) and torch.isfinite(logits).all()
    F.cross_entropy(logits[0], x[0]).backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


def test_every_language_size_is_tested():
    assert set(list_models(family="gpt") + list_models(family="bert")) == set(EXPECTED_PARAMETERS)


@pytest.mark.parametrize("name", sorted(TOST_README))
def test_tost_sizes_reproduce_the_readme_with_the_authors_differences(name):
    """Our ToST-GPT with the public model's differences applied — no biases in Linears and LayerNorms (its train.py
    sets bias=False), LayerScale (2d per layer), a learned per-position bias in Π (K × 1,024 per layer), the
    position embedding left out as nanoGPT prints — gives the README's count within its rounding (±0.5M)."""
    with torch.device("meta"):
        model = create_model(name)
    cfg = model.config
    biases = sum(p.numel() for n, p in model.named_parameters() if n.endswith(".bias"))
    authors = (sum(p.numel() for p in model.parameters()) - biases - model.wpe.weight.numel()
               + cfg.depth * (2 * cfg.dim + cfg.heads * cfg.block_size))
    assert abs(authors / 1e6 - TOST_README[name]) <= 0.5, authors


@pytest.mark.parametrize("variant", VARIANTS, ids=["crate", "standard", "no-ista", "overcomplete", "tost",
                                                    "tssa-energy-tied"])
@pytest.mark.parametrize("fused", [True, False])
@given(t=st.integers(0, 11), seed=st.integers(0, 2**16))
def test_causality_no_output_before_t_depends_on_token_t(variant, fused, t, seed):
    """Changing token t leaves every logit at positions < t unchanged (float64, exactly: the masked keys get
    weight exp(−∞) = 0) and changes the logits at t."""
    model = tiny(**variant)
    for layer in model.encoder.layers:
        layer.attn.fused_attn = fused
    x = tokens(2, 12, seed=seed)
    changed = x.clone()
    changed[:, t] = (changed[:, t] + 1) % 40
    before, after = model(x), model(changed)
    torch.testing.assert_close(after[:, :t], before[:, :t], rtol=0, atol=1e-12)  # rounding of equal sums
    assert (after[:, t] - before[:, t]).abs().max() > 1e-6


@pytest.mark.parametrize("attention", ["mssa", "mhsa"])
def test_causal_mask_is_eq87_in_both_attention_paths(attention):
    """Eq. (87) in the paper's column convention: CausalMask(A)_ij = A_ij for i ≤ j, −∞ otherwise, softmax over
    each column; transposed, it is PyTorch's row softmax under a lower-triangular mask."""
    model = tiny(attention=attention, feedforward="mlp")
    block = model.encoder.layers[0].attn
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    q, k, v = block.qkv_heads(x)
    paper = (k @ q.transpose(-2, -1)) * block.scale  # A[i, j] = ⟨key i, query j⟩
    i, j = torch.meshgrid(torch.arange(7), torch.arange(7), indexing="ij")
    paper = paper.masked_fill(i > j, float("-inf")).softmax(dim=-2)
    _, weights = block.forward_with_attention(x)
    torch.testing.assert_close(weights, paper.transpose(-2, -1), rtol=0, atol=1e-15)  # same sums, reordered
    block.fused_attn = True
    fused = block(x)
    block.fused_attn = False
    torch.testing.assert_close(fused, block(x), rtol=0, atol=1e-12)  # SDPA vs explicit, float64


def test_lm_head_is_the_token_embedding_and_stays_tied():
    model = tiny()
    assert model.lm_head.weight is model.wte.weight
    F.cross_entropy(model(tokens())[0], tokens()[0]).backward()
    assert model.wte.weight.grad is model.lm_head.weight.grad
    bert = tiny("crate_bert_base")
    assert bert.head.decoder.weight is bert.wte.weight


def test_tied_weights_survive_save_and_load(tmp_path):
    model = tiny()
    crate_nn.save(tmp_path / "gpt.pt", model)
    loaded = crate_nn.load(tmp_path / "gpt.pt")
    assert loaded.lm_head.weight is loaded.wte.weight
    torch.testing.assert_close(loaded(tokens()), model(tokens()), rtol=0, atol=0)  # same weights, same ops


def test_uniform_model_has_loss_log_v():
    """With the (tied) output map at zero every logit is 0: the cross-entropy is log V exactly."""
    model = tiny()
    with torch.no_grad():
        model.wte.weight.zero_()
    x = tokens()
    loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
    assert loss.item() == pytest.approx(math.log(40), rel=1e-12)


@pytest.mark.parametrize("attention", ["mssa", "tssa"])
@pytest.mark.parametrize("fused", [True, False])
def test_padding_mask_makes_padded_batches_equal_to_single_sequences(fused, attention):
    """A bidirectional encoder with attention_mask: the real tokens of a padded batch see exactly what they see
    alone, and the classifier pools only real tokens."""
    model = build_model(BERTClassifierConfig(**TINY, num_labels=3, attention=attention)).double().eval()
    for layer in model.encoder.layers:
        layer.attn.fused_attn = fused
    a, b = tokens(1, 5, seed=2), tokens(1, 9, seed=3)
    batch = torch.zeros(2, 9, dtype=torch.int64)
    batch[0, :5], batch[1] = a[0], b[0]
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[0, :5], mask[1] = True, True
    padded = model.forward_features(batch, mask)
    torch.testing.assert_close(padded[0, :5], model.forward_features(a)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(model(batch, mask), torch.cat([model(a), model(b)]), rtol=0, atol=1e-12)


def test_bert_predicts_only_the_selected_positions():
    model = tiny("crate_bert_base")
    x = tokens()
    selected = x % 3 == 0
    torch.testing.assert_close(model(x, selected=selected), model(x)[selected], rtol=0, atol=1e-12)


def test_without_ista_the_layer_is_its_attention_step():
    model = tiny(feedforward="none")
    layer = model.encoder.layers[0]
    assert not hasattr(layer, "norm2") and layer.ffn is None
    z = torch.randn(2, 5, 24, dtype=torch.float64)
    torch.testing.assert_close(layer(z), layer.compress(z), rtol=0, atol=0)


def test_tied_overcomplete_ista_is_crate_lm_two_step_block():
    """z₁ = ReLU(ηD*y − ηλ), z₂ = ReLU(z₁ − ηD*(Dz₁ − y) − ηλ), output D z₂ with one dictionary D (d, m)."""
    torch.manual_seed(0)
    block = ISTA(6, 0.1, 0.1, kind="overcomplete", dict_width=24, tied=True).double()
    assert block.out_weight is None and block.weight.shape == (6, 24)
    y = torch.randn(3, 6, dtype=torch.float64)
    D = block.weight.detach()
    z1 = torch.relu(0.1 * (D.T @ y.T) - 0.01)
    z2 = torch.relu(z1 - 0.1 * D.T @ (D @ z1 - y.T) - 0.01)
    torch.testing.assert_close(block(y), (D @ z2).T, rtol=0, atol=1e-14)  # float64, reordered products
    bound = math.sqrt(6 / 6)  # kaiming-uniform with fan-in d, as crate-lm's (m, d) tensor
    assert D.abs().max() <= bound and D.abs().max() > 0.8 * bound
    with pytest.raises(ValueError, match="ista_output='tied'"):
        GPTConfig(ista_output="tied")
    with pytest.raises(ValueError, match="tied=True"):
        ISTA(6, tied=True)


def test_gpt2_initialisation():
    torch.manual_seed(0)
    model = create_model("crate_gpt_base", depth=4, vocab_size=2000)
    std = lambda t: t.detach().std().item()  # noqa: E731
    # sample standard deviations of ≥ 5·10^5 draws: within 2% of the target (the relative error is ~0.1%)
    assert std(model.wte.weight) == pytest.approx(0.02, rel=0.02)
    assert std(model.encoder.layers[0].mssa.qkv.weight) == pytest.approx(0.02, rel=0.02)
    assert std(model.encoder.layers[0].mssa.out.weight) == pytest.approx(0.02 / math.sqrt(8), rel=0.02)
    assert model.encoder.layers[0].mssa.out.bias.abs().max() == 0
    assert std(model.encoder.layers[0].ista.weight) == pytest.approx(math.sqrt(2 / 768), rel=0.02)  # kaiming


def test_sinusoid_positions():
    table = sinusoid_table(6, 8)
    for t in range(6):
        for i in range(4):
            omega = 10000 ** (-2 * i / 8)
            assert table[t, 2 * i].item() == pytest.approx(math.sin(t * omega), abs=1e-7)  # float32 table
            assert table[t, 2 * i + 1].item() == pytest.approx(math.cos(t * omega), abs=1e-7)
    model = create_model("crate_bert_base", **TINY, pos_embed="sinusoid")
    assert not hasattr(model, "wpe") and "sinusoid" not in model.state_dict()


def test_measurements_run_on_token_sequences():
    model = tiny()
    x = tokens(3)
    traces = crate_nn.trace(model, x, return_attention=True)
    assert len(traces) == 2 and traces[0].attention.shape == (3, 3, 12, 12)
    assert torch.triu(traces[0].attention, diagonal=1).abs().max() == 0  # causal maps
    # the trace takes the explicit attention path, the forward the fused one: float64 rounding apart
    torch.testing.assert_close(traces[-1].output, model.forward_features(x), rtol=0, atol=1e-12)
    stats = crate_nn.measure_layers(model, x, protocol="official")
    assert len(stats.compression) == 2 and all(math.isfinite(s.mean) for s in stats.compression)


def test_configs_refuse_the_wrong_direction():
    with pytest.raises(ValueError, match="causal=False"):
        GPTConfig(causal=False)
    with pytest.raises(ValueError, match="causal=True"):
        BERTConfig(causal=True)
    with pytest.raises(ValueError, match="pos_embed"):
        GPTConfig(pos_embed="rotary")
    with pytest.raises(ValueError, match="vocab_size"):
        GPTConfig(vocab_size=0)


def test_bad_token_input_names_the_problem():
    model = tiny()
    with pytest.raises(ValueError, match=r"tokens: ids must lie in \[0, vocab_size=40\), got ids from 0 to 40"):
        model(torch.tensor([[0, 40]]))
    with pytest.raises(ValueError, match="tokens: ids must lie"):
        model(torch.tensor([[-1, 3]]))
    with pytest.raises(ValueError, match="tokens: sequence length 13 exceeds block_size=12"):
        model(tokens(1, 13))
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        model(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="torch.Tensor"):
        model([[1, 2]])
    bert = build_model(BERTClassifierConfig(**TINY))
    with pytest.raises(ValueError, match="attention_mask: every sequence"):
        bert(tokens(2, 4), torch.tensor([[True] * 4, [False] * 4]))
    with pytest.raises(ValueError, match="attention_mask must be a tensor of the tokens' shape"):
        bert(tokens(2, 4), torch.ones(2, 5, dtype=torch.bool))
