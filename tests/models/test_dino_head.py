"""CRATE-DINO's networks: the heads against their formulas (eq. 75 and DINO's head), the student/teacher pair,
the centre of older weights set aside, the teacher as a backbone (eq. 80) and the checkpoint round trip."""
import pytest
import torch
import torch.nn.functional as F

import crate_nn
from crate_nn import checkpoint
from crate_nn.models.dino_head import DINO, DINOConfig, DINOHead, PaperHead

TINY = dict(image_size=8, patch_size=4, dim=16, depth=2, heads=2, in_channels=1, dynamic_img_size=True,
            out_dim=32, hidden_dim=24, bottleneck_dim=8)


def tiny_dino(**overrides) -> DINO:
    torch.manual_seed(0)
    return DINO(DINOConfig(**{**TINY, **overrides}))


def test_paper_head_is_equation_75_in_float64():
    torch.manual_seed(1)
    head = PaperHead(6, 6).double()
    z = torch.randn(5, 6, dtype=torch.float64)
    (w1, b1), (w2, b2) = [(m.weight, m.bias) for m in head.mlp if isinstance(m, torch.nn.Linear)]
    w3, b3 = head.last_layer.weight, head.last_layer.bias
    expected = (w3 @ torch.relu(w2 @ torch.relu(w1 @ z.T + b1[:, None]) + b2[:, None]) + b3[:, None]).T
    torch.testing.assert_close(head(z), expected, rtol=1e-12, atol=1e-12)  # same products, summed in another order


@pytest.mark.parametrize("norm_last_layer", [True, False])
def test_dino_head_is_its_formula(norm_last_layer):
    """V̂ normalize(MLP(z)) with V̂ = g ⊙ V / ‖V‖ (rows); g starts at 1 and is frozen when norm_last_layer."""
    torch.manual_seed(2)
    head = DINOHead(12, 40, hidden_dim=20, bottleneck_dim=6, layers=3, norm_last_layer=norm_last_layer).double()
    layer = head.last_layer
    assert torch.equal(layer.weight_g, torch.ones(40, 1, dtype=torch.float64))
    assert layer.weight_g.requires_grad is not norm_last_layer
    with torch.no_grad():
        layer.weight_g.uniform_(0.5, 2.0)
    z = torch.randn(7, 12, dtype=torch.float64)
    linears = [m for m in head.mlp if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(12, 20), (20, 20), (20, 6)]
    h = z
    for i, m in enumerate(linears):
        h = h @ m.weight.T + m.bias
        h = F.gelu(h) if i < 2 else h
    h = h / h.norm(dim=1, keepdim=True)
    weight = layer.weight_g * layer.weight_v / layer.weight_v.norm(dim=1, keepdim=True)
    torch.testing.assert_close(head(z), h @ weight.T, rtol=1e-12, atol=1e-12)


def test_dino_head_initialisation():
    torch.manual_seed(3)
    head = DINOHead(256, 64, hidden_dim=512, bottleneck_dim=128)
    first = head.mlp[0]
    assert torch.equal(first.bias, torch.zeros(512))
    # N(0, 0.02²) truncated at ±2 (absolute, as DINO's timm call: no truncation in effect); 131,072 draws give the
    # standard deviation to ±0.2% (one standard error), the bound is 5% wide
    assert abs(first.weight.std().item() - 0.02) < 0.001
    one = DINOHead(10, 5, layers=1)
    assert [type(m).__name__ for m in one.mlp] == ["Linear"] and one.mlp[0].out_features == 256


def test_config_prototypes_and_bad_values():
    assert DINOConfig(**{**TINY, "out_dim": None}).prototypes == 65536
    assert DINOConfig(**{**TINY, "out_dim": None, "projection": "paper"}).prototypes == 16  # K = d in (75)
    with pytest.raises(ValueError, match="projection must be one of"):
        DINOConfig(**{**TINY, "projection": "mlp"})
    with pytest.raises(ValueError, match="out_dim must be a positive integer"):
        DINOConfig(**{**TINY, "out_dim": 0})


def test_student_and_teacher_start_equal_and_only_the_student_learns():
    model = tiny_dino().train()
    assert not model.teacher.training and model.student.training  # the teacher stays in eval mode
    for (name, s), (_, t) in zip(model.student.state_dict().items(), model.teacher.state_dict().items()):
        assert torch.equal(s, t), name
    assert not any(p.requires_grad for p in model.teacher.parameters())
    student, teacher = model(torch.randn(6, 1, 8, 8), torch.randn(9, 1, 4, 4))  # 2 global + 3 local crops of 3
    assert student.shape == (15, 32) and teacher.shape == (6, 32)
    (student.sum() + teacher.sum()).backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(n.startswith("student.") for n in trainable)
    assert all(p.grad is not None for p in model.student.parameters() if p.requires_grad)
    assert "student.head.last_layer.weight_g" not in trainable  # norm_last_layer: g frozen at 1


def test_weights_with_the_centre_the_model_held_load_and_keep_it_aside(tmp_path):
    """Weights written when the model held DINO's centre (``center``, now the loss's) load strictly, the centre set
    aside as ``legacy_center`` (the DINO task resumes with it); weights without it leave none."""
    model = tiny_dino()
    state = {**model.state_dict(), "center": torch.randn(32)}
    fresh = tiny_dino()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.legacy_center, state["center"])
    crate_nn.save(tmp_path / "dino.pt", model)
    payload = checkpoint.read(tmp_path / "dino.pt")
    payload["model"]["center"] = state["center"]
    checkpoint.atomic_save({**payload, "checksum": checkpoint.payload_digest(payload)},
                                    tmp_path / "old.pt")
    loaded = crate_nn.load(tmp_path / "old.pt")
    assert torch.equal(loaded.legacy_center, state["center"]) and crate_nn.load(tmp_path / "dino.pt").legacy_center is None
    assert "center" not in loaded.state_dict()


def test_the_model_is_its_teacher_backbone_and_survives_a_checkpoint(tmp_path):
    """forward_features / forward_intermediates / encoder are the teacher's (eq. 80): measure_layers, trace and
    pooled_features take the DINO model; crate_nn.load rebuilds student and teacher."""
    model = tiny_dino().eval()
    with torch.no_grad():
        model.teacher.backbone.cls_token.add_(1.0)  # teacher ≠ student
    images = torch.randn(4, 1, 8, 8)
    assert torch.equal(model.forward_features(images), model.teacher.backbone.forward_features(images))
    assert not torch.equal(model.forward_features(images), model.student.backbone.forward_features(images))
    assert model.encoder is model.teacher.backbone.encoder and model.backbone is model.teacher.backbone
    assert len(crate_nn.trace(model, images)) == 2
    assert len(crate_nn.measure_layers(model, images).compression) == 2
    assert model.backbone(images).shape == (4, 16)  # the backbone's classification head is the identity
    crate_nn.save(tmp_path / "dino.pt", model)
    loaded = crate_nn.load(tmp_path / "dino.pt")
    assert isinstance(loaded, DINO) and loaded.config == model.config
    for (name, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert not any(p.requires_grad for p in loaded.teacher.parameters())
    with torch.no_grad():
        assert torch.equal(loaded.forward_features(images), model.forward_features(images))


def test_paper_projection_model():
    model = tiny_dino(projection="paper", out_dim=None)
    student, teacher = model(torch.randn(4, 1, 8, 8))
    assert student.shape == teacher.shape == (4, 16)


def test_token_initialisation():
    """DINO's ViT initialisation of the class token and position embedding (σ = 0.02), or the classifier's N(0, 1)."""
    big = dict(TINY, image_size=64)  # 257 × 16 position entries
    dino, classifier = DINO(DINOConfig(**big)), DINO(DINOConfig(**big, token_init_std=None))
    # 4,112 draws: the standard deviation to ±1.1% (one standard error); bounds of ±10%
    assert abs(dino.student.backbone.pos_embed.std().item() - 0.02) < 0.002
    assert abs(classifier.student.backbone.pos_embed.std().item() - 1.0) < 0.1
    assert torch.equal(dino.teacher.backbone.pos_embed, dino.student.backbone.pos_embed)
    with pytest.raises(ValueError, match="token_init_std must be ≥ 0"):
        DINOConfig(**TINY, token_init_std=-1.0)
