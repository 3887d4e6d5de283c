"""crate_nn.models.tssa: the linear path against the explicit (n × n) path, causality, the membership Π and the maps,
padding masks, bf16 autocast, every backbone that takes ``attention=``, and bad options."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import crate_nn
from crate_nn.models import BlockConfig
from crate_nn.models.blocks import build_attention
from crate_nn.models.dino_head import DINO, DINOConfig
from crate_nn.models.tssa import TSSA

# float64, O(10) terms per sum, summed in another order by the two paths (running sums vs a matrix product):
# agreement ~1e-16 relative; 1e-12 leaves room.
PATHS = 1e-12


def block(d=12, heads=3, p=4, seed=0, **options) -> TSSA:
    torch.manual_seed(seed)
    module = TSSA(d, heads, p, **options).double()
    with torch.no_grad():
        module.temperature.uniform_(0.3, 3.0)  # away from the initial 1, so a mix-up of heads would show
    return module


options = dict(
    membership=st.sampled_from(["normalized", "energy"]),
    output=st.sampled_from(["free", "tied"]),
    causal=st.booleans(),
    scale=st.sampled_from([None, 0.1, 5.0]),
)


@given(**options, n=st.integers(1, 9), batch=st.integers(1, 3), padded=st.booleans(), seed=st.integers(0, 2**16))
def test_linear_path_equals_explicit_path(membership, output, causal, scale, n, batch, padded, seed):
    """Outputs and gradients (inputs and every parameter) of the two paths agree in float64, with and without a
    padding mask."""
    tssa = block(seed=seed, membership=membership, output=output, causal=causal, scale=scale, step=0.7)
    x = torch.randn(batch, n, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    mask = None
    if padded:
        mask = torch.ones(batch, n, dtype=torch.bool)
        mask[0, n // 2 + 1:] = False  # the first sequence is padded at the end; every row keeps a real token
    results = []
    for fused in (True, False):
        tssa.fused_attn = fused
        tssa.zero_grad()
        xg = x.clone().requires_grad_()
        out = tssa(xg, mask)
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        results.append([out, xg.grad] + [p.grad for p in tssa.parameters()])
    for linear, explicit in zip(*results):
        torch.testing.assert_close(linear, explicit, rtol=PATHS, atol=PATHS)


@pytest.mark.parametrize("membership", ["normalized", "energy"])
@pytest.mark.parametrize("fused", [True, False])
@given(t=st.integers(0, 9), seed=st.integers(0, 2**16))
def test_causal_block_leaks_nothing_from_later_tokens(membership, fused, t, seed):
    """Changing token t+1 … n leaves the outputs at positions ≤ t bit-for-bit unchanged (both paths)."""
    tssa = block(seed=seed, membership=membership, causal=True)
    tssa.fused_attn = fused
    x = torch.randn(2, 10, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    changed = x.clone()
    changed[:, t + 1:] += torch.randn(2, 9 - t, 12, dtype=torch.float64)
    torch.testing.assert_close(tssa(changed)[:, : t + 1], tssa(x)[:, : t + 1], rtol=0, atol=0)
    if t < 9:
        assert (tssa(changed)[:, t + 1] - tssa(x)[:, t + 1]).abs().max() > 1e-9


def test_maps_and_memberships():
    """Π rows are distributions over the K groups; the maps are row-stochastic weights π_j over the tokens seen
    (lower-triangular when causal), equal to Π normalised over the seen tokens."""
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    for causal in (False, True):
        tssa = block(causal=causal)
        pi = tssa.memberships(x)
        assert pi.shape == (2, 3, 6)
        torch.testing.assert_close(pi.sum(1), torch.ones(2, 6, dtype=torch.float64), rtol=0, atol=1e-15)
        _, maps = tssa.forward_with_attention(x)
        assert maps.shape == (2, 3, 6, 6)
        torch.testing.assert_close(maps.sum(-1), torch.ones(2, 3, 6, dtype=torch.float64), rtol=0, atol=1e-15)
        seen = torch.ones(6, 6, dtype=torch.float64).tril() if causal else torch.ones(6, 6, dtype=torch.float64)
        expected = seen * pi[:, :, None, :]
        torch.testing.assert_close(maps, expected / expected.sum(-1, keepdim=True), rtol=1e-14, atol=0)
        assert not causal or (maps.triu(1) == 0).all()


def test_padding_is_invisible():
    """A padded sequence's real tokens get what they get alone (bidirectional and causal)."""
    for causal in (False, True):
        tssa = block(causal=causal, output="tied")
        short = torch.randn(1, 4, 12, dtype=torch.float64)
        padded = torch.cat([short, 100 * torch.randn(1, 3, 12, dtype=torch.float64)], dim=1)
        mask = torch.tensor([[True] * 4 + [False] * 3])
        for fused in (True, False):
            tssa.fused_attn = fused
            torch.testing.assert_close(tssa(padded, mask)[:, :4], tssa(short), rtol=1e-13, atol=1e-15)


def test_bf16_autocast_keeps_the_statistics_in_float32():
    """Under CPU bf16 autocast the block's output is within bf16 rounding of float32 (the codes and the output map
    run in bf16, the statistics in float32)."""
    torch.manual_seed(0)
    tssa = TSSA(64, 4, 16, causal=True)
    x = torch.randn(2, 512, 64)
    reference = tssa(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = tssa(x)
    assert low.dtype == torch.bfloat16
    # bf16 keeps 8 significant bits (u = 2^-8 = 3.9e-3): two bf16 products (codes, output map) and the cast of the
    # heads, each ≲ u relative; measured 3.1e-3. 3e-2 keeps a margin of ~10; a lost term or a wrong cast is order 1.
    error = ((low.float() - reference).norm() / reference.norm()).item()
    assert error < 3e-2, error


@pytest.mark.parametrize("name, inputs", [
    ("crate_tiny", lambda: torch.randn(2, 3, 16, 16)),
    ("crate_mae_tiny", lambda: torch.randn(2, 3, 16, 16)),
    ("tost_gpt_base", lambda: torch.randint(0, 50, (2, 8))),
    ("crate_bert_base", lambda: torch.randint(0, 50, (2, 8))),
])
def test_every_backbone_takes_tssa(name, inputs):
    """The classifier, the MAE encoder, GPT (causal) and BERT with attention="tssa" run forward and backward with
    every parameter reached; their encoder layers hold TSSA blocks (the MAE decoder keeps MSSA, eq. 64)."""
    small = dict(image_size=16, patch_size=4) if "gpt" not in name and "bert" not in name else dict(
        vocab_size=50, block_size=8)
    torch.manual_seed(0)
    model = crate_nn.create_model(name, attention="tssa", dim=24, heads=3, depth=2, **small)
    assert all(isinstance(layer.attn, TSSA) for layer in model.encoder.layers)
    assert all(layer.attn.causal == ("gpt" in name) for layer in model.encoder.layers)
    outputs = model(inputs())
    loss = sum(o.float().square().mean() for o in (outputs if isinstance(outputs, tuple) else (outputs,))
               if isinstance(o, torch.Tensor) and o.is_floating_point())
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


def test_dino_backbone_takes_tssa():
    torch.manual_seed(0)
    dino = DINO(DINOConfig(attention="tssa", dim=24, heads=3, depth=1, image_size=16, patch_size=4, out_dim=32,
                           hidden_dim=16, bottleneck_dim=8))
    assert isinstance(dino.student.backbone.encoder.layers[0].attn, TSSA)
    assert isinstance(dino.teacher.backbone.encoder.layers[0].attn, TSSA)
    assert dino.forward_features(torch.randn(2, 3, 16, 16)).shape == (2, 17, 24)


@pytest.mark.parametrize("changes, message", [
    (dict(tssa_membership="softmax"), "tssa_membership must be one of"),
    (dict(tssa_step=0.0), "tssa_step must be a positive number"),
    (dict(tssa_temperature="hot"), "tssa_temperature must be a number"),
])
def test_bad_options_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        BlockConfig(attention="tssa", **changes)


def test_config_builds_the_options():
    tssa = build_attention(BlockConfig(dim=12, heads=3, attention="tssa", tssa_membership="energy", tssa_step=0.5,
                                       tssa_temperature=2.0, attn_scale=3.0, mssa_output="tied", causal=True))
    assert (tssa.membership, tssa.step, tssa.scale, tssa.out, tssa.causal) == ("energy", 0.5, 3.0, None, True)
    torch.testing.assert_close(tssa.temperature.data, torch.full((3,), 2.0))
    assert build_attention(BlockConfig(dim=12, heads=3, attention="tssa")).scale == 1.0  # the public code's c
