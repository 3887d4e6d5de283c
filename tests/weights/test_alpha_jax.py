"""CRATE-α's JAX checkpoints (UCSC-VLAA/CRATE-alpha, ``models/crate.py`` and ``models/common.py``; ``.npz`` files of
``helpers/utils.py``'s ``save_checkpoint``): files written here in their layout — the flax parameter tree under
``params/`` with ``/``-joined names, the optimizer's arrays beside it — load with `crate_nn.load` and give the logits
of an independent float64 NumPy forward written from their flax modules on their own array names; they go through
the PyTorch port's format and back bit for bit; and damaged or foreign files are refused in one line naming them."""
import dataclasses

import numpy as np
import pytest
import torch
from _published import CRATE_ALPHA, cached_files

import crate_nn
from crate_nn.checkpoint import sniff
from crate_nn.export import main as crate_export
from crate_nn.models.registry import model_config
from crate_nn.weights.adapters import alpha_jax
from crate_nn.weights.reading import local_path

BLOCK = "params/Transformer/encoderblock_{i}/"
ATTN, ISTA = BLOCK + "MultiHeadDotProductSubspaceAttention_0/", BLOCK + "OvercompleteISTABlock_0/"
TINY = dict(image=16, patch=4, channels=3, dim=24, heads=3, depth=2, classes=5)


def their_params(image, patch, channels, dim, heads, depth, classes, seed=0) -> dict[str, np.ndarray]:
    """Random parameters under the names and in the shapes their flax modules create (float32, as they train):
    ``nn.Conv(name="embedding")`` (P, P, C, d) and bias; ``cls`` (1, 1, d); ``pos_embedding`` (1, N+1, d) (``posemb=
    "learn"``, ``cls_token=True``); per ``encoderblock_{i}``: ``LayerNorm_0``, the subspace attention's
    ``DenseGeneral`` ``proj`` (d, K, p) and ``out`` (K, p, d) without biases, ``LayerNorm_1``, the ISTA block's ``D``
    and ``D1`` (d, 4d); ``encoder_norm`` and the ``head`` Dense (d, classes)."""
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return (std * rng.standard_normal(shape)).astype(np.float32)

    def norm(prefix):  # affine parameters away from (1, 0), so that a swapped or skipped norm shows
        return {prefix + "scale": (1 + normal((dim,), 0.1)), prefix + "bias": normal((dim,), 0.1)}

    p = dim // heads
    params = {"params/embedding/kernel": normal((patch, patch, channels, dim), (patch * patch * channels) ** -0.5),
              "params/embedding/bias": normal((dim,), 0.1),
              "params/cls": normal((1, 1, dim), 1.0),
              "params/pos_embedding": normal((1, (image // patch) ** 2 + 1, dim), 0.5),
              **norm("params/encoder_norm/"),
              "params/head/kernel": normal((dim, classes), dim ** -0.5),
              "params/head/bias": normal((classes,), 0.1)}
    for i in range(depth):
        params.update({**norm(BLOCK.format(i=i) + "LayerNorm_0/"), **norm(BLOCK.format(i=i) + "LayerNorm_1/"),
                       ATTN.format(i=i) + "proj/kernel": normal((dim, heads, p), dim ** -0.5),
                       ATTN.format(i=i) + "out/kernel": normal((heads, p, dim), dim ** -0.5),
                       # entries of size d^(-1/2): about half of ReLU(η yD − ηλ) is active
                       ISTA.format(i=i) + "D": normal((dim, 4 * dim), dim ** -0.5),
                       ISTA.format(i=i) + "D1": normal((dim, 4 * dim), dim ** -0.5)})
    return params


def training_state(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``{"params", "opt", "chrono"}`` as their ``main.py`` checkpoints it: Adam's moments (``mu_dtype='bfloat16'``:
    2-byte void, as NumPy stores bfloat16), a step count and an object array — none of which a reader of the
    parameters may touch (the object array cannot even be read without unpickling)."""
    opt = {"opt/0/count": np.array(1000, np.int32),
           "opt/0/mu/head/kernel": np.zeros(params["params/head/kernel"].shape, "V2"),
           "chrono/note": np.array([{"not": "an array"}], dtype=object)}
    return {**params, **opt}


def write(path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` to an open file (given a name, NumPy would append ``.npz``)."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _layer_norm(x, scale, bias, eps=1e-6):  # flax's nn.LayerNorm: ε 1e-6, biased variance
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def _einsum(subscripts, *arrays):  # through BLAS where it can (the published models' sizes)
    return np.einsum(subscripts, *arrays, optimize=True)


def _relu(x):
    return np.maximum(x, 0)


def _float64(array: np.ndarray) -> np.ndarray:
    """An array's values in float64; 2-byte void is bfloat16, the upper half of a float32's bits."""
    if array.dtype.kind == "V":
        return (array.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)


def their_forward(params: dict[str, np.ndarray], images: np.ndarray, eta=0.1, lmbda=0.1) -> np.ndarray:
    """Their ``_Model.__call__`` in float64 NumPy on NHWC ``images``, with their modules' defaults (η = λ = 0.1,
    ``dropout=0``, ``post_norm=False``): the VALID stride-P convolution, the class token prepended and the positions
    added; per block x += out(attention(proj(LN(x)))) with q = k = v = proj, q scaled by p^(-1/2), and
    x += D1 z2 with z1 = ReLU(η Dᵀy − ηλ), z2 = ReLU(z1 − η Dᵀ(D z1 − y) − ηλ) (their einsums "p d, n l p" and
    "d p, n l p"), y = LN(x); ``encoder_norm`` then the class token (``x[:, 0]``) into ``head``."""
    p = {k.removeprefix("params/"): _float64(v) for k, v in params.items() if k.startswith("params/")}
    kernel = p["embedding/kernel"]
    size = kernel.shape[0]
    n, h, w, c = images.shape
    patches = images.reshape(n, h // size, size, w // size, size, c).transpose(0, 1, 3, 2, 4, 5)
    x = _einsum("nhwijc,ijcd->nhwd", patches, kernel) + p["embedding/bias"]
    x = x.reshape(n, -1, x.shape[-1])
    x = np.concatenate([np.tile(p["cls"], (n, 1, 1)), x], axis=1) + p["pos_embedding"]
    depth = 1 + max(int(k.split("/")[1].removeprefix("encoderblock_")) for k in p if k.startswith("Transformer/"))
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        y = _layer_norm(x, p[b + "LayerNorm_0/scale"], p[b + "LayerNorm_0/bias"])
        proj = _einsum("nld,dhk->nlhk", y, p[b + "MultiHeadDotProductSubspaceAttention_0/proj/kernel"])
        logits = _einsum("nqhk,nlhk->nhql", proj / np.sqrt(proj.shape[-1]), proj)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        heads = _einsum("nhql,nlhk->nqhk", weights, proj)
        x = x + _einsum("nqhk,hkd->nqd", heads, p[b + "MultiHeadDotProductSubspaceAttention_0/out/kernel"])
        y = _layer_norm(x, p[b + "LayerNorm_1/scale"], p[b + "LayerNorm_1/bias"])
        D, D1 = p[b + "OvercompleteISTABlock_0/D"], p[b + "OvercompleteISTABlock_0/D1"]
        z1 = _relu(eta * _einsum("pd,nlp->nld", D, y) - eta * lmbda)
        grad = _einsum("pd,nlp->nld", D, _einsum("dp,nlp->nld", D, z1) - y)
        z2 = _relu(z1 - eta * grad - eta * lmbda)
        x = x + _einsum("dp,nlp->nld", D1, z2)
    cls = _layer_norm(x, p["encoder_norm/scale"], p["encoder_norm/bias"])[:, 0]
    return cls @ p["head/kernel"] + p["head/bias"]


def logits(model, images_nchw: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model.double().eval()(images_nchw).numpy()


@pytest.fixture
def npz(tmp_path):
    """(path, their parameters) of a training checkpoint in their layout."""
    params = their_params(**TINY)
    path = tmp_path / "crate_alpha_T4_in1k.npz"
    write(path, training_state(params))
    return path, params


def test_their_file_gives_the_logits_of_their_jax_model(npz):
    path, params = npz
    assert sniff(path) == "CRATE-α (JAX)"
    model = crate_nn.load(path)  # no heads=: the (d, K, p) projection fixes K
    assert (model.config.heads, model.config.head_dim, model.config.depth) == (3, 8, 2)
    assert (model.config.norm_eps, model.config.head_norm_eps, model.config.num_classes) == (1e-6, 1e-6, 5)
    assert all(t.dtype == torch.float32 for t in model.state_dict().values())
    images = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    theirs = their_forward(params, images.permute(0, 2, 3, 1).numpy())  # their model takes NHWC images
    # the same float32 parameters, both sides in float64: they differ only by the order of the sums (≈ 1e-15)
    np.testing.assert_allclose(logits(model, images), theirs, rtol=1e-10, atol=1e-10)
    # the reference tells the head's ε apart: the PyTorch port's 1e-5 moves the logits by ≈ 1e-6
    port = crate_nn.load(path, head_norm_eps=1e-5)
    assert np.abs(logits(port, images) - theirs).max() > 1e-8


def test_an_npz_of_the_parameters_alone_without_a_suffix(tmp_path):
    params = their_params(**TINY, seed=2)
    path = tmp_path / "crate_alpha_B8_in1k"  # some published weights have no suffix
    write(path, {k.removeprefix("params/"): v for k, v in params.items()})
    assert sniff(path) == "CRATE-α (JAX)"
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    # as above: float32 values computed in float64 on both sides
    np.testing.assert_allclose(logits(crate_nn.load(path), images),
                               their_forward(params, images.permute(0, 2, 3, 1).numpy()), rtol=1e-10, atol=1e-10)


def test_npz_to_ours_to_the_pytorch_ports_format_and_back_is_bit_identical(npz, tmp_path, capsys):
    path, params = npz
    ours = crate_nn.load(path)
    port, back = tmp_path / "crate_alpha_port.pth", tmp_path / "back.pt"
    # the port's head LayerNorm has PyTorch's ε 1e-5, the JAX model's flax's 1e-6: the port cannot hold it as it is
    assert crate_export([str(path), str(port), "--format", "crate-alpha"]) == 2
    assert "cannot hold this model's options {'head_norm_eps': (1e-06, 1e-05)}" in capsys.readouterr().err
    assert not port.exists()
    assert crate_export([str(path), str(port), "--format", "crate-alpha", "--option", "head_norm_eps=1e-5"]) == 0
    assert sniff(port) == "CRATE-α"
    assert crate_export([str(port), str(back), "--heads", "3"]) == 0
    again = crate_nn.load(back)
    assert again.config == dataclasses.replace(ours.config, head_norm_eps=1e-5)
    mine, theirs = ours.state_dict(), again.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(theirs[k].dtype == v.dtype and torch.equal(theirs[k], v) for k, v in mine.items())
    # and back to their JAX format: the very arrays of the file
    jax_again = tmp_path / "again.npz"
    assert crate_export([str(path), str(jax_again), "--format", "crate-alpha-jax"]) == 0
    with np.load(jax_again) as written:
        assert sorted(written.files) == sorted(params)
        assert all(np.array_equal(written[k], v) and written[k].dtype == v.dtype for k, v in params.items())


def _bfloat16_bits(array: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 by truncation, as 2-byte void (what ``np.savez`` makes of a JAX bfloat16 array)."""
    return (array.view(np.uint32) >> 16).astype(np.uint16).view("V2")


def test_bfloat16_arrays_come_back_bit_for_bit(tmp_path):
    params = {k: _bfloat16_bits(v) for k, v in their_params(**TINY).items()}
    write(tmp_path / "bf16.npz", training_state(params))
    model = crate_nn.load(tmp_path / "bf16.npz")
    state = model.state_dict()
    assert all(t.dtype == torch.bfloat16 for t in state.values())
    # their names and layout → ours: compare the raw 16-bit patterns of a few arrays
    kernel = params[ATTN.format(i=1) + "proj/kernel"].view(np.int16)
    assert torch.equal(state["encoder.layers.1.mssa.qkv.weight"].view(torch.int16),
                       torch.from_numpy(kernel.reshape(kernel.shape[0], -1).T.copy()))
    d = params[ISTA.format(i=0) + "D1"].view(np.int16)
    assert torch.equal(state["encoder.layers.0.ista.out_weight"].view(torch.int16), torch.from_numpy(d))
    assert torch.equal(state["cls_token"].view(torch.int16), torch.from_numpy(params["params/cls"].view(np.int16)))


def one_line_error(path, match: str) -> str:
    with pytest.raises(ValueError, match=match) as err:
        crate_nn.load(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_a_truncated_file_and_an_object_array_are_one_line_naming_the_file(npz, tmp_path):
    path, params = npz
    data = path.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    one_line_error(tmp_path / "truncated.npz", "not a readable .npz file")
    write(tmp_path / "object.npz", {**params, "params/cls": np.array([None, {"a": 1}], dtype=object)})
    one_line_error(tmp_path / "object.npz", "its array 'params/cls'")


def test_missing_unexpected_and_layerscale_keys_are_named(npz, tmp_path):
    _, params = npz
    D1 = ISTA.format(i=1) + "D1"
    write(tmp_path / "missing.npz", {k: v for k, v in params.items() if k != D1})
    one_line_error(tmp_path / "missing.npz", r"missing keys \['Transformer/encoderblock_1/OvercompleteISTABlock_0/D1'\]")
    mlp = BLOCK.format(i=0) + "MlpBlock_0/Dense_0/kernel"
    write(tmp_path / "unexpected.npz", {**params, mlp: np.zeros((24, 96), np.float32)})
    one_line_error(tmp_path / "unexpected.npz", r"unexpected keys \['Transformer/encoderblock_0/MlpBlock_0/Dense_0")
    # their LayerScale(d, init_values, name='ls1') holds its parameter under its own name: ls1/ls1
    scales = {BLOCK.format(i=i) + f"{ls}/{ls}": np.full(24, 1e-5, np.float32) for i in range(2) for ls in ("ls1", "ls2")}
    write(tmp_path / "layerscale.npz", {**params, **scales})
    message = one_line_error(tmp_path / "layerscale.npz", "unexpected keys")
    assert all(k.removeprefix("params/") in message for k in scales)
    # posemb="sincos2d" stores no pos_embedding (it is computed): refused, not loaded with another embedding
    write(tmp_path / "sincos.npz", {k: v for k, v in params.items() if k != "params/pos_embedding"})
    one_line_error(tmp_path / "sincos.npz", r"missing keys .*'pos_embedding'")


def _registered_shapes(name: str) -> dict[str, torch.Tensor]:
    """Meta tensors of a registered size's parameters in their shapes (written from their flax modules, as in
    `their_params`): the file's layout without its 2·10⁸ numbers."""
    c = model_config(name)
    d, k, n = c.dim, c.heads, (c.image_size // c.patch_size) ** 2
    shapes = {"embedding/kernel": (c.patch_size, c.patch_size, c.in_channels, d), "embedding/bias": (d,),
              "cls": (1, 1, d), "pos_embedding": (1, n + 1, d), "encoder_norm/scale": (d,),
              "encoder_norm/bias": (d,), "head/kernel": (d, c.num_classes), "head/bias": (c.num_classes,)}
    for i in range(c.depth):
        b = BLOCK.format(i=i).removeprefix("params/")
        shapes.update({b + "LayerNorm_0/scale": (d,), b + "LayerNorm_0/bias": (d,), b + "LayerNorm_1/scale": (d,),
                       b + "LayerNorm_1/bias": (d,),
                       b + "MultiHeadDotProductSubspaceAttention_0/proj/kernel": (d, k, d // k),
                       b + "MultiHeadDotProductSubspaceAttention_0/out/kernel": (k, d // k, d),
                       b + "OvercompleteISTABlock_0/D": (d, 4 * d), b + "OvercompleteISTABlock_0/D1": (d, 4 * d)})
    return {"params/" + key: torch.empty(shape, device="meta") for key, shape in shapes.items()}


@pytest.mark.parametrize("name", ["crate_alpha_b8", "crate_alpha_l8"])
def test_the_imagenet_b8_and_l8_layouts_give_the_registered_sizes(name):
    # the B/8 and L/8 ImageNet-1K models exist only as .npz: their layout must read as the registered sizes
    config, state = alpha_jax.to_ours(_registered_shapes(name))
    assert config == model_config(name, head_norm_eps=1e-6)
    assert alpha_jax.to_ours(_registered_shapes(name), name=name)[0] == config
    with torch.device("meta"):
        expected = crate_nn.create_model(name).state_dict()
    assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in expected.items()}
    other = "crate_alpha_l8" if name == "crate_alpha_b8" else "crate_alpha_b8"
    with pytest.raises(ValueError, match=f"the checkpoint contradicts {other}"):
        alpha_jax.to_ours(_registered_shapes(name), name=other)


def test_a_registered_size_written_as_their_npz_reads_back(tmp_path):
    torch.manual_seed(0)  # crate_alpha_b8 shrunk to a few thousand parameters: the path of crate-export and load
    model = crate_nn.create_model("crate_alpha_b8", image_size=16, dim=24, depth=2, heads=3, num_classes=4,
                                  head_norm_eps=1e-6)
    crate_nn.save(tmp_path / "ours.pt", model)
    assert crate_export([str(tmp_path / "ours.pt"), str(tmp_path / "theirs.npz"), "--format", "crate-alpha-jax"]) == 0
    with np.load(tmp_path / "theirs.npz") as written:
        assert written[ATTN.format(i=1) + "proj/kernel"].shape == (24, 3, 8)
        assert written["params/embedding/kernel"].shape == (8, 8, 3, 24)
    back = crate_nn.load(tmp_path / "theirs.npz")
    assert back.config == model.config
    assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())


def test_published_jax_weights_give_the_logits_of_their_jax_model():
    """Regression against real weights: the smallest of CRATE-α's published ``.npz`` files in the local Hugging Face
    cache (skipped, naming the repository, when it holds none)."""
    name = cached_files(CRATE_ALPHA, "jax", r"(?i)(?!.*clip).*\.npz")[0]
    model = crate_nn.load(name)
    side = model.config.image_size
    with np.load(local_path(name), allow_pickle=False) as archive:
        names = [k for k in archive.files if k.startswith("params/")] or archive.files
        params = {k if k.startswith("params/") else "params/" + k: archive[k] for k in names}
    images = torch.randn(1, 3, side, side, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    # their stored values, both sides in float64 (the order of the sums differs: ≈ 1e-13 at these depths)
    np.testing.assert_allclose(logits(model, images), their_forward(params, images.permute(0, 2, 3, 1).numpy()),
                               rtol=1e-9, atol=1e-9)


def test_a_big_endian_file_gives_its_values(npz, tmp_path):
    _, params = npz  # saved on a big-endian machine (or with an explicit dtype): NumPy keeps the byte order
    write(tmp_path / "big-endian.npz", {k: v.astype(v.dtype.newbyteorder(">")) for k, v in params.items()})
    big, little = crate_nn.load(tmp_path / "big-endian.npz").state_dict(), crate_nn.load(npz[0]).state_dict()
    assert all(torch.equal(big[k], v) for k, v in little.items())


def test_create_model_refuses_the_registered_head_where_their_file_fixes_another(tmp_path):
    """The registered crate_alpha_* head LayerNorm has PyTorch's ε 1e-5, their JAX model flax's 1e-6: the tensors'
    shapes cannot show it, so building the registered config around their file would change every logit a little."""
    sizes = dict(image_size=16, dim=24, depth=2, heads=3, num_classes=4)
    torch.manual_seed(0)
    crate_nn.save(tmp_path / "ours.pt", crate_nn.create_model("crate_alpha_b8", **sizes, head_norm_eps=1e-6))
    assert crate_export([str(tmp_path / "ours.pt"), str(tmp_path / "theirs.npz"), "--format", "crate-alpha-jax"]) == 0
    with pytest.raises(ValueError, match=r"theirs.npz \(CRATE-α \(JAX\)\) fixes head_norm_eps=1e-06 where "
                                         r"'crate_alpha_b8' has head_norm_eps=1e-05; pass them to create_model"):
        crate_nn.create_model("crate_alpha_b8", checkpoint=tmp_path / "theirs.npz", **sizes)
    built = crate_nn.create_model("crate_alpha_b8", checkpoint=tmp_path / "theirs.npz", **sizes, head_norm_eps=1e-6)
    assert built.config == crate_nn.load(tmp_path / "theirs.npz").config
