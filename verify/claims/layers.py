"""\"Layers decrease R^c\" (Sec. 4.2, Figs. 14–15; paper-notes check 2.24), measured on
(a) an ideal unrolled CRATE (crate_theory) whose every layer uses the true subspaces of synthetic mixture data, and
(b) a CRATE trained with the ``digits`` preset of crate_nn versus its own random initialisation, under both
    measurement protocols of ``crate_nn.measure_layers`` (paper: R^c(Z^{ℓ+1/2} | U^ℓ); official: per-head unit-norm
    codes of U^ℓ* LN(Z^ℓ), ε² = 0.01).

The trained checkpoint (and its initialisation) is cached in ``verify.context.cache_dir()/verify`` (keyed by the
preset's configuration and the seed) and re-trained when absent: the digits preset's own 30 epochs, ≈ 10 s on one
CPU core, in both modes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

import crate_nn
from crate_nn.data import DeviceTransform, build_dataset
from crate_nn.engine import train
from crate_nn.tasks import get_preset
from crate_theory import CrateLayerParams, coding_rate, compression_rate, crate_forward, layer_norm, project_onto_bases
from crate_theory.synthetic import normalize_columns, orthonormal_bases, sample_tokens
from verify import plots
from verify.context import cache_dir
from verify.registry import Result, claim

# ----------------------------------------------------------------------------------------------------------------
# (a) the ideal unrolled CRATE
# ----------------------------------------------------------------------------------------------------------------


def _decreases_layer_by_layer(values) -> tuple[float, bool]:
    """(fraction of consecutive layers where the value decreases, whether the last is below the first)."""
    steps = np.diff(np.asarray(values, dtype=float))
    return float(np.mean(steps < 0)), bool(values[-1] < values[0])


DECREASE_RULE = "`holds` when ≥ 3/4 of consecutive layers decrease and the last layer is below the first " \
                "(the papers: decreasing \"in most cases\")"


def _ideal_crate(ctx):
    """Trace of an unrolled CRATE (crate_theory.crate_forward, default wiring with LayerNorms) whose layers all use
    the data's true subspaces U, the paper's tied output map β[U_1 … U_K] (36) with temperature 1 (35), and ISTA
    (η = λ = 0.1) with the subspace-aligned orthogonal dictionary D = [U_1 … U_K]."""
    d, n, K, depth = ctx.pick((32, 64, 4, 8), (128, 196, 8, 12))
    U = orthonormal_bases(K, d, d // K, seed=ctx.rng)
    tokens = sample_tokens(U, n, ctx.rng, sigma=0.1)
    D = U.transpose(1, 0, 2).reshape(d, d)
    eps = 1.0
    trace = crate_forward(tokens.Z, [CrateLayerParams(U=U, D=D) for _ in range(depth)], eps=eps, temperature=1.0)
    paper = [compression_rate(half, U, eps) for half in trace.halves]
    official = [sum(coding_rate(normalize_columns(A), 0.1) for A in project_onto_bases(layer_norm(Z), U))
                for Z in trace.inputs]
    sparsity = [float(np.mean(out != 0)) for out in trace.outputs]
    return paper, official, sparsity


@claim(
    id="2.24-ideal-compression",
    tags=("layers", "ideal"),
    reference="004 Sec. 2.5, eq. (45), Fig. 14 (the unrolled-optimisation claim)",
    statement="An ideal unrolled CRATE — every layer with the data's true subspaces (paper's MSSA (35)–(36)) and a "
              "subspace-aligned ISTA dictionary — decreases R^c(Z^{ℓ+1/2} | U) layer by layer",
    measures="R^c(Z^{ℓ+1/2} | U) per layer (paper protocol, ε = 1) on mixture tokens; also the scale-free official "
             "protocol (in the data)",
    expected=f"{DECREASE_RULE}. Expected to fail (found by measuring, then explained): the tokens already lie on "
             "the subspaces, and the implemented layer Z + MSSA(LN(Z)) has no (1 − κβ) shrink (27), so each layer "
             "adds in-subspace mass and the unnormalised R^c grows; the scale-free measure stays within a few %",
    expected_verdict="fails",
)
def ideal_compression(ctx) -> Result:
    paper, official, sparsity = _ideal_crate(ctx)
    fraction, lower = _decreases_layer_by_layer(paper)
    figure = plots.per_layer(ctx.figure_path("per-layer"), {"R^c(Z^{ℓ+1/2}) (paper)": {"ideal CRATE": paper},
                                                            "R^c official protocol": {"ideal CRATE": official},
                                                            "‖Z^{ℓ+1}‖₀/(dn)": {"ideal CRATE": sparsity}},
                             title="ideal unrolled CRATE with the true subspaces")
    verdict = "holds" if fraction >= 0.75 and lower else "fails"
    return Result(f"R^c {paper[0]:.1f} → {paper[-1]:.1f} ({fraction:.0%} of steps down); official "
                  f"{official[0]:.1f} → {official[-1]:.1f}", verdict,
                  {"paper": paper, "official": official, "fraction_decreasing": fraction}, [figure])


@claim(
    id="2.24-ideal-sparsity",
    tags=("layers", "ideal"),
    reference="004 Sec. 2.4, eq. (44), Fig. 14 (right)",
    statement="The same ideal unrolled CRATE makes the tokens sparser layer by layer (‖Z^{ℓ+1}‖₀/(dn) decreases)",
    measures="fraction of non-zero entries of the ISTA output per layer",
    expected=DECREASE_RULE,
    expected_verdict="holds",
)
def ideal_sparsity(ctx) -> Result:
    _, _, sparsity = _ideal_crate(ctx)
    fraction, lower = _decreases_layer_by_layer(sparsity)
    verdict = "holds" if fraction >= 0.75 and lower else "fails"
    return Result(f"non-zeros {sparsity[0]:.3f} → {sparsity[-1]:.3f} ({fraction:.0%} of steps down)", verdict,
                  {"sparsity": sparsity, "fraction_decreasing": fraction})


# ----------------------------------------------------------------------------------------------------------------
# (b) a CRATE trained on digits vs its random initialisation
# ----------------------------------------------------------------------------------------------------------------
PROTOCOLS = ("paper", "official")


def _preset():
    return get_preset("digits", progress=False, measure_epochs=())


def _digits_run(seed: int, torch_seed: int, folder: Path) -> tuple[str, str]:
    """Paths (init, trained) of the digits preset trained from a saved random initialisation, cached in ``folder``
    (trained when absent; the trained file is renamed into place last, so its presence marks a complete entry)."""
    init_path, trained_path = folder / "init.pt", folder / "trained.pt"
    if not trained_path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        config = dataclasses.replace(_preset(), seed=seed)
        torch.manual_seed(torch_seed)
        init = crate_nn.create_model(config.model, **{**config.model_args, "image_size": config.image_size,
                                                      "num_classes": 10, "in_channels": 1})
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            crate_nn.save(Path(tmp) / "init.pt", init)
            config = dataclasses.replace(config, output_dir=str(Path(tmp) / "run"), init_from=str(Path(tmp) / "init.pt"))
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                result = train(config)
            os.replace(Path(tmp) / "init.pt", init_path)
            shutil.copyfile(result.checkpoint, Path(tmp) / "trained.pt")
            os.replace(Path(tmp) / "trained.pt", trained_path)
    return str(init_path), str(trained_path)


def _test_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The 360 held-out digits, normalised as in training, and their labels."""
    config = _preset()
    test = build_dataset("digits", "test", data_dir=None, train=False, image_size=config.image_size,
                         load_size=config.image_size, eval_resize=config.image_size)
    images = torch.stack([test[i][0] for i in range(len(test))])
    labels = torch.as_tensor([int(test[i][1]) for i in range(len(test))])
    return DeviceTransform(config.image_size, config.mean, config.std, train=False)(images), labels


def _measurements(ctx) -> dict:
    """The digits measurements for this context's seed (shared by the 2.24-digits claims within one process)."""
    key = hashlib.sha1(json.dumps(dataclasses.asdict(_preset()), sort_keys=True, default=str).encode()).hexdigest()[:10]
    folder = cache_dir() / "verify" / f"digits-{key}-seed{ctx.seed}"
    return _digits_measurements(ctx.seed, ctx.torch_seed_for("2.24-digits"), folder)


@functools.lru_cache(maxsize=4)
def _digits_measurements(seed: int, torch_seed: int, folder: Path) -> dict:
    """Per-layer R^c (both protocols) and sparsity of the trained model and of its initialisation, test accuracy.

    The digits preset's own schedule (30 epochs, ≈ 10 s on one core) is used in both modes: the picture is
    transient under shorter schedules — after 8–15 epochs (seeds 0–2) the paper-protocol R^c of the last layer is
    still at or above the initialisation's, while the official protocol is already below it at every layer.
    """
    init_path, trained_path = _digits_run(seed, torch_seed, folder)
    images, labels = _test_digits()
    models = {"random init": crate_nn.load(init_path).eval(), "trained": crate_nn.load(trained_path).eval()}
    out = {"compression": {}, "sparsity": {}, "cache": str(Path(trained_path).parent)}
    with torch.no_grad():
        for protocol in PROTOCOLS:
            out["compression"][protocol] = {}
            for name, model in models.items():
                m = crate_nn.measure_layers(model, images, protocol=protocol)
                out["compression"][protocol][name] = [s.mean for s in m.compression]
                out["sparsity"][name] = [s.mean for s in m.sparsity]
        out["test_accuracy"] = float((models["trained"](images).argmax(-1) == labels).float().mean())
    return out


def _curve(values) -> str:
    return "→".join(f"{v:.1f}" for v in values)


def _digits_claim(protocol: str) -> None:
    @claim(
        id=f"2.24-digits-{protocol}",
        tags=("layers", "digits", "nn"),
        reference="004 Sec. 4.2, Fig. 15; " + ("R^c on Z^{ℓ+1/2} as the paper states" if protocol == "paper"
                                               else "the authors' hook protocol (official-implementation.md)"),
        statement="Training lowers the layer-wise compression term: the trained CRATE's R^c lies below its random "
                  f"initialisation's at every layer ({protocol} protocol)",
        measures=f"crate_nn.measure_layers(protocol='{protocol}') on the 360 test digits: digits preset (3 layers) "
                 "vs its saved initialisation",
        expected="`holds` when trained < init at every layer",
        expected_verdict="holds",
    )
    def measure(ctx) -> Result:
        m = _measurements(ctx)
        curves = m["compression"][protocol]
        below = all(t < i for t, i in zip(curves["trained"], curves["random init"]))
        figure = plots.per_layer(ctx.figure_path("per-layer"), {f"R^c ({protocol} protocol)": curves,
                                                                "‖Z^{ℓ+1}‖₀/(dn)": m["sparsity"]},
                                 title=f"digits CRATE vs its initialisation (test accuracy {m['test_accuracy']:.1%})")
        return Result(f"trained {_curve(curves['trained'])} vs init {_curve(curves['random init'])}",
                      "holds" if below else "fails", {"compression": curves, "test_accuracy": m["test_accuracy"],
                                                      "cache": m["cache"]}, [figure])


for _protocol in PROTOCOLS:
    _digits_claim(_protocol)


@claim(
    id="2.24-digits-depth",
    tags=("layers", "digits", "nn"),
    reference="004 Sec. 4.2, Figs. 14–15",
    statement="After training, R^c decreases with depth (layer by layer), while the random initialisation's curve "
              "is flat",
    measures="the trained model's per-layer R^c under both protocols, and the initialisation's (paper protocol)",
    expected="`holds` when every consecutive layer decreases under both protocols. Expected to fail (found by "
             "measuring, seeds 0–2): the 3-layer digits model's profile is set by the architecture — the "
             "initialisation has the same non-flat shape (high, low, higher) as the trained model",
    expected_verdict="fails",
)
def digits_depth(ctx) -> Result:
    m = _measurements(ctx)
    trained = {p: m["compression"][p]["trained"] for p in PROTOCOLS}
    decreasing = all(np.all(np.diff(c) < 0) for c in trained.values())
    init = m["compression"]["paper"]["random init"]
    return Result(f"trained paper {_curve(trained['paper'])}, official {_curve(trained['official'])}; init paper "
                  f"{_curve(init)}", "holds" if decreasing else "fails", {"trained": trained, "init_paper": init})


@claim(
    id="2.24-digits-sparsity",
    tags=("layers", "digits", "nn"),
    reference="004 Sec. 4.2, Fig. 15 (right)",
    statement="Training sparsifies the representations: the trained CRATE's ‖Z^{ℓ+1}‖₀/(dn) lies below its random "
              "initialisation's at every layer",
    measures="fraction of non-zero ISTA outputs per layer on the 360 test digits, trained vs initialisation",
    expected="`holds` when trained < init at every layer. Expected to fail (found by measuring): with ηλ = 0.01 "
             "on LayerNorm-ed inputs the ReLU zeroes about half the entries whatever the weights, and the first "
             "layer of the trained model is slightly denser than at initialisation",
    expected_verdict="fails",
)
def digits_sparsity(ctx) -> Result:
    m = _measurements(ctx)
    s = m["sparsity"]
    below = all(t < i for t, i in zip(s["trained"], s["random init"]))
    return Result(f"trained {'→'.join(f'{v:.3f}' for v in s['trained'])} vs init "
                  f"{'→'.join(f'{v:.3f}' for v in s['random init'])}", "holds" if below else "fails", s)
