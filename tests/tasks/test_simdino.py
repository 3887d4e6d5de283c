"""SimDINO's objective (`crate_nn.tasks.simdino`): the coding rate against the float64 reference (`crate_theory`) and
its gradient against eq. (109), the loss against an independent float64 loop written from the public code's
definition, finite values and gradients on degenerate batches in every autocast dtype, the same loss and gradient on
two processes as on one, the collapse monitor, and short runs of the task."""
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _train_cases import torchrun
from hypothesis import given
from hypothesis import strategies as st

from crate_nn import checkpoint
from crate_nn.engine import train
from crate_nn.tasks import get_preset
from crate_nn.tasks.simdino import COLLAPSE_RANK, coding_rate, effective_rank, feature_collapse, simdino_loss
from crate_theory.coding_rate import coding_rate as reference_rate
from crate_theory.coding_rate import coding_rate_grad

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _simdino_processes import one_process  # noqa: E402
from test_dino import tiny  # noqa: E402 (the DINO task's tiny run)

WORKER = Path(__file__).with_name("_simdino_processes.py")


def unit_rows(rng: np.random.Generator, *shape: int) -> np.ndarray:
    x = rng.standard_normal(shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------------------------- the coding rate
@given(seed=st.integers(0, 2**31 - 1), m=st.integers(1, 12), p=st.integers(1, 12), eps=st.floats(0.05, 2.0),
       duplicate=st.booleans())
def test_rate_is_the_float64_reference_and_its_gradient_eq_109(seed, m, p, eps, duplicate):
    """R_ε of the rows W (m, p) is crate_theory's R(Z) of eq. (8) for the tokens Z = Wᵀ (p × m, α = p/(mε²)), at
    m < p, m > p and with every row duplicated; autograd's gradient is eq. (109)'s ∇_Z R transposed."""
    w = np.random.default_rng(seed).standard_normal((m, p))
    if duplicate:
        w = np.concatenate([w, w])
    features = torch.from_numpy(w).requires_grad_(True)
    rate = coding_rate(features, eps)
    rate.backward()
    # Cholesky vs eigenvalues of a Gram matrix, both float64 and well conditioned (eigenvalues of I + αWᵀW ≥ 1)
    assert rate.item() == pytest.approx(reference_rate(w.T, eps), rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(features.grad.numpy(), coding_rate_grad(w.T, eps).T, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", ["fewer_images_than_features", "duplicated", "all_equal", "zero"])
def test_degenerate_batches_give_finite_loss_and_gradients(dtype, case):
    """The failure the public code's users report (NaN from a float32/bf16 Cholesky; SimDINO #20, #43): batches of
    4 images in p = 64 dimensions, every image twice, every feature equal, all-zero features — finite here in every
    dtype the head may output under autocast, at ε = 0.05 (α = p/(mε²) = 6400: ill-conditioned in float32)."""
    rng = np.random.default_rng(0)
    student = torch.from_numpy(unit_rows(rng, 4, 4, 64))
    if case == "duplicated":
        student = student[:, :2].repeat(1, 2, 1)
    elif case == "all_equal":
        student = student[:1, :1].expand(4, 4, 64).clone()
    elif case == "zero":
        student = torch.zeros(4, 4, 64, dtype=torch.float64)
    student = student.to(dtype).requires_grad_(True)
    teacher = student.detach()[:2] + 0
    out = simdino_loss(student, teacher, eps=0.05)
    out.loss.float().backward()
    assert torch.isfinite(out.loss) and torch.isfinite(student.grad).all()


def test_non_finite_features_give_a_nan_loss_not_an_exception():
    """The engine stops a run on a non-finite loss before the update; the rate must hand it a NaN, not raise from a
    failed Cholesky factorisation."""
    w = torch.ones(3, 4)
    w[1, 2] = float("nan")
    assert torch.isnan(coding_rate(w, 0.5))


def test_effective_rank_and_the_collapse_monitor():
    rng = np.random.default_rng(1)
    assert effective_rank(torch.ones(10, 4)).item() == pytest.approx(1.0)  # one line: rank 1
    iso = torch.eye(6).repeat(3, 1)  # 18 features on 6 orthogonal directions, evenly: rank 6
    assert effective_rank(iso).item() == pytest.approx(6.0)
    assert effective_rank(torch.zeros(3, 4)).item() == 0.0
    spread = effective_rank(torch.from_numpy(unit_rows(rng, 200, 16))).item()
    assert 12 < spread <= 16  # random unit features fill most of the space
    assert feature_collapse({"teacher_rank": 1.2, "teacher_rate": 0.3}).startswith("features on about one line")
    assert feature_collapse({"teacher_rank": COLLAPSE_RANK, "teacher_rate": 3.0}) is None


# ----------------------------------------------------------------------------------------------- the loss
def public_definition(student: np.ndarray, teacher: np.ndarray, eps_sq: float, coeff: float, average: bool) -> float:
    """SimDINO's loss as its public code defines it (``MCRLoss``, ``--reduce_cov 1`` on one process), written as
    loops in float64: −coeff · (Σ_{g, v ≠ g} mean_i cos(t_g,i, s_v,i)) / (G·V − G) − γ · mean_g ½ logdet(I + p/(m·eps)
    W_gᵀW_g), γ = (p + m)/(p·m), W_g = (s_g + t_g)/2 (expa_type 1) or s_g (expa_type 0); ``eps_sq`` is its --eps."""
    groups, views = len(teacher), len(student)
    m, p = student.shape[1:]
    total = 0.0
    for g in range(groups):
        for v in range(views):
            if v != g:
                cos = [t @ s / (np.linalg.norm(t) * np.linalg.norm(s)) for t, s in zip(teacher[g], student[v])]
                total += np.mean(cos)
    alignment = total / (groups * views - groups)
    rates = []
    for g in range(groups):
        w = (student[g] + teacher[g]) / 2 if average else student[g]
        rates.append(0.5 * np.linalg.slogdet(np.eye(p) + p / (m * eps_sq) * w.T @ w)[1])
    return -coeff * alignment - (p + m) / (p * m) * np.mean(rates)


@given(seed=st.integers(0, 2**31 - 1), groups=st.integers(1, 3), local=st.integers(0, 3), m=st.integers(1, 9),
       p=st.integers(2, 10), eps_sq=st.floats(0.01, 1.0), coeff=st.floats(0.0, 2.0), average=st.booleans())
def test_loss_is_the_public_definition(seed, groups, local, m, p, eps_sq, coeff, average):
    """ε here is the CRATE paper's: the public --eps is ε², so eps_sq = 0.05 is rate_eps = √0.05."""
    if groups + local < 2:
        local = 1
    rng = np.random.default_rng(seed)
    student, teacher = unit_rows(rng, groups + local, m, p), unit_rows(rng, groups, m, p)
    out = simdino_loss(torch.from_numpy(student), torch.from_numpy(teacher), math.sqrt(eps_sq), coeff,
                       "average" if average else "student")
    # float64 on both sides; Cholesky vs LU log-determinants of matrices with eigenvalues in [1, 1 + p·m/eps_sq]
    assert out.loss.item() == pytest.approx(public_definition(student, teacher, eps_sq, coeff, average),
                                            rel=1e-10, abs=1e-12)


def test_teacher_gets_no_gradient_and_bad_shapes_are_named():
    student = torch.randn(3, 4, 5, requires_grad=True)
    teacher = torch.randn(2, 4, 5, requires_grad=True)
    simdino_loss(student, teacher, 0.5).loss.backward()
    assert teacher.grad is None and student.grad is not None
    with pytest.raises(ValueError, match=r"student, teacher: expected \(V, m, p\) and \(G, m, p\)"):
        simdino_loss(student, torch.randn(4, 4, 5), 0.5)
    with pytest.raises(ValueError, match="no pair of different views"):
        simdino_loss(student[:1], teacher[:1], 0.5)
    with pytest.raises(ValueError, match="expansion_views: expected one of"):
        simdino_loss(student, teacher, 0.5, expansion_views="teacher")
    with pytest.raises(ValueError, match="eps: expected ε > 0"):
        coding_rate(torch.randn(3, 4), 0.0)


def test_two_processes_give_the_one_process_loss_and_gradient(tmp_path):
    """6 images split 3 + 3 over two gloo processes (fewer images per process than the p = 8 features): the loss
    averaged over the processes and the DDP-averaged gradient equal one process's on all 6 images — the covariance
    is summed over the processes before the log-determinant, and M counts every process's images."""
    done = torchrun(str(WORKER), str(tmp_path / "out.pt"), path=(WORKER.parent,))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    loss, grad = torch.load(tmp_path / "out.pt")
    reference_loss, reference_grad = one_process()
    # float64; the sums over processes and over images are ordered differently (~1e-16 relative)
    torch.testing.assert_close(loss, reference_loss, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(grad, reference_grad, rtol=1e-10, atol=1e-13)


# ----------------------------------------------------------------------------------------------- runs
def test_a_run_logs_the_parts_and_monitors_and_saves_a_centreless_model(tmp_path, capfd):
    result = train(tiny(tmp_path, objective="simdino", rate_eps=0.5, epochs=2, test_split="test",
                        pixel_control=True))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "train_loss" in r]
    assert steps and all({"train_alignment", "train_expansion"} <= set(r) for r in steps)
    assert all(r["train_loss"] < 0 for r in steps)  # −c·cos − γR with cosines of nearly equal views > 0
    evaluations = [r for r in records if "teacher_rate" in r]
    assert [r["epoch"] for r in evaluations] == [1.0, 2.0]
    assert all(r["teacher_rate"] > 0 and r["teacher_rank"] >= 1 for r in evaluations)
    assert {"test_knn_top1", "test_raw_pixels_knn_top1"} <= set(result.metrics)
    import crate_nn

    model = crate_nn.load(result.checkpoint)
    assert "center" not in model.state_dict() and model.student.head(torch.randn(2, 16)).shape == (2, 8)  # bottleneck
    assert checkpoint.read(result.checkpoint)["task"] == {"objective": {}}  # SimDINO's loss keeps no state
    assert "collapsed" not in capfd.readouterr().err


def test_a_collapsed_run_warns_once(tmp_path, capfd):
    """Without the expansion term (ε huge: R_ε ≈ 0) and with a large learning rate, alignment alone drives every
    feature to one point; the monitors show rank → 1 and the run warns once."""
    train(tiny(tmp_path, objective="simdino", rate_eps=1e6, lr=0.05, epochs=3, weight_decay=0.0,
               weight_decay_end=0.0))
    warnings = [line for line in capfd.readouterr().err.splitlines() if "the head has collapsed" in line]
    assert len(warnings) == 1 and "features on about one line" in warnings[0]


def test_simdino_config_and_presets():
    with pytest.raises(ValueError, match="projection: the paper head"):
        tiny("unused", objective="simdino", projection="paper").validate()
    with pytest.raises(ValueError, match="rate_eps: expected a positive value"):
        tiny("unused", objective="simdino", rate_eps=0.0).validate()
    digits = get_preset("simdino_digits")
    digits.validate()
    assert digits.distillation.objective == "simdino"
    imagenet = get_preset("simdino_imagenet")
    imagenet.validate()
    assert imagenet.simdino.rate_eps == pytest.approx(math.sqrt(0.05)) and imagenet.crops.local_crops == 10
