"""The layer-wise family (verify.layerwise): one naming function over every row, and one decision whose verdict flips
with the numbers for every rule, quantity and unit of replication — a network over its inputs, one network against a
population of seeds, the audit's runs paired by seed or two populations of runs (Welch)."""
import numpy as np
import pytest

from verify import checkpoint, layerwise
from verify.joint import Sizes
from verify.layerwise import Control, Object, Row, Sample, Seeds, decide
from verify.registry import all_claims
from verify.statistics import compare

THIS = checkpoint.THIS
RANDOM = Control("random", "random init")
RUN = Control("init", "run init")


def _layers(*columns, n=40, noise=0.01, seed=0):
    """(n, L) per-input values: column ℓ's mean is ``columns[ℓ]``, with Gaussian noise."""
    rng = np.random.default_rng(seed)
    return np.array(columns, dtype=float)[None, :] + noise * rng.standard_normal((n, len(columns)))


def alone(measure, values) -> Sample:
    return Sample({measure: values}, None, "alone", "inputs")


def paired(measure, this, other) -> Sample:
    k = len(other)
    return Sample({measure: this[:k]}, {measure: other}, "paired", f"{k} inputs, paired (one network)")


def population(measure, this, seeds) -> Sample:
    """This network's mean against each seed's (the checkpoint's unit against random initialisations)."""
    return Sample({measure: this.mean(0, keepdims=True)}, {measure: np.stack([s.mean(0) for s in seeds])},
                  "population", f"{len(seeds)} initialisation seeds")


# --------------------------------------------------------------------------------------------- names
def test_the_registered_rows_keep_their_ids_and_the_network_rows_state_their_claim():
    registered = {c.id: c for c in all_claims() if c.measure.__qualname__ == c.id}
    assert {"fig15-digits-official", "fig15-digits-epoch1-sparsity", "fig15-dino-compression-paper-short",
            "fig15-gpt-joint", "sec4.2-mae-sparsity", "fig26-digits-vit-sparsity"} <= set(registered)
    assert len(registered) == 26  # every family row of the audit: digits 4, figures 7, DINO 7, GPT 4, MAE 4
    assert {c.module for c in registered.values()} == {"digits", "figures", "dino", "language", "mae"}
    names = [layerwise.name(r) for r in checkpoint.rows([RANDOM, RUN, Control("network", "ViT-S/16")],
                                                         [True, True, False])]
    assert names == ["rc-falls-official", "rc-falls-paper", "rc-below-random-init-official",
                     "rc-below-random-init-paper", "joint-random-init", "rc-below-run-init-official",
                     "rc-below-run-init-paper", "joint-run-init", "sparsity-rises", "sparser-than-random-init",
                     "sparser-than-run-init", "fig26-compression-vs-vit-s-16", "fig26-sparsity-vs-vit-s-16"]
    epoch = Object("epoch 30", model="epoch 30", prefix="fig15-digits")
    assert layerwise.name(Row(epoch, "paper", Control("epoch", "epoch 1", word="end"), "every")) == "fig15-digits-end-paper"


def test_a_row_is_refused_when_its_parts_do_not_fit():
    with pytest.raises(ValueError, match="quantity: expected one of"):
        Row(THIS, "effective rank", RANDOM, "every")
    with pytest.raises(ValueError, match="rule: expected one of"):
        Row(THIS, "official", RANDOM, "most layers")
    with pytest.raises(ValueError, match="a control is for the rules comparing with one"):
        Row(THIS, "official", None, "every")
    with pytest.raises(ValueError, match="kind: expected one of"):
        Control("teacher", "DINO")
    with pytest.raises(ValueError, match="names the subject that supplies its numbers"):
        layerwise.register(Row(THIS, "official", RANDOM, "every"), module="x", reason="")


# --------------------------------------------------------------------------------------------- decisions
def test_a_fall_from_layer_2_flips_with_the_trend():
    falls = Row(THIS, "official", None, "falls")
    assert decide(falls, alone("official", _layers(5.0, 4.0, 3.0, 2.0))).verdict == "holds"
    # layer 1 is not part of the claim: a rise from layer 1 to 2 does not decide it
    assert decide(falls, alone("official", _layers(1.0, 4.0, 3.0, 2.0))).verdict == "holds"
    assert decide(falls, alone("official", _layers(5.0, 2.0, 3.0, 4.0))).verdict == "fails"
    assert decide(falls, alone("official", _layers(5.0, 2.0, 2.0, 2.0, noise=1.0))).verdict == "inconclusive"
    with pytest.raises(ValueError, match="model: 2 layers; .* needs at least 3"):
        decide(falls, alone("official", _layers(5.0, 4.0)))


def test_below_a_control_needs_every_layer():
    below = Row(THIS, "paper", RUN, "every")
    control = _layers(5.0, 5.0, 5.0, n=20, seed=1)  # one network: over the inputs, paired
    assert decide(below, paired("paper", _layers(4.0, 4.0, 4.0), control)).verdict == "holds"
    assert decide(below, paired("paper", _layers(4.0, 6.0, 4.0), control)).verdict == "fails"
    seeds = [_layers(5.0 + d, 5.0 + d, 5.0 + d, n=20, seed=s) for s, d in enumerate((0.0, 0.1, -0.1))]
    found = decide(Row(THIS, "paper", RANDOM, "every"), population("paper", _layers(4.0, 4.0, 4.0)[:20], seeds))
    assert found.verdict == "holds" and found.data["per_layer"][0]["paired"] is False


def test_a_network_inside_the_seeds_spread_is_not_below_them():
    # each input says "below" the pooled seeds (−0.3 with noise 0.01), but the seeds themselves spread by ±3: over
    # the seeds, the unit of a population of random networks, the interval straddles 0
    seeds = [_layers(c, c, c, n=20, seed=s) for s, c in enumerate((2.0, 5.0, 8.0))]
    assert decide(Row(THIS, "official", RANDOM, "every"),
                  population("official", _layers(4.7, 4.7, 4.7)[:20], seeds)).verdict == "inconclusive"


def test_a_refutation_of_one_layer_among_several_is_read_at_its_share_of_the_level():
    """Five seeds paired; layer 3's difference +0.3 with a standard deviation of 0.2 over the seeds: its 95% interval,
    ±t₄(0.975)·0.2/√5 = ±0.248, lies above 0; at 1 − 0.05/3, ±t₄(0.99167)·0.2/√5 = ±0.354, it does not. Alone it
    refutes the claim; as one of three layers it leaves it undecided. Holding needs no share: the same layers below
    0 hold at 95%."""
    wobble = np.array([0.2, -0.2, 0.2, -0.2, 0.0])  # mean 0, standard deviation 0.2
    init = np.full((5, 3), 60.0)
    trained = init + np.array([-1.0, -1.0, 0.3]) + np.outer(wobble, [0.1, 0.1, 1.0])
    subject = Seeds({"trained": {"official": trained}, "init": {"official": init}})
    three = Row(Object("trained"), "official", Control("init", "init"), "every")
    last = subject.sample(three).this["official"][:, 2] - init[:, 2]
    assert last.mean() > 0 and compare(last, direction="below").verdict == "fails"
    assert decide(three, subject.sample(three)).verdict == "inconclusive"
    assert decide(three, subject.sample(three)).data["union"] == 3
    lower = Seeds({"trained": {"official": init - 1 + np.outer(wobble, [0.1] * 3)}, "init": {"official": init}})
    assert decide(three, lower.sample(three)).verdict == "holds"


def test_sparsity_exempts_the_last_layer():
    rises = Row(THIS, "sparsity", None, "falls17")
    assert decide(rises, alone("sparsity", _layers(0.6, 0.5, 0.4, 0.9))).verdict == "holds"
    assert decide(rises, alone("sparsity", _layers(0.4, 0.5, 0.6, 0.3))).verdict == "fails"
    sparser = Row(THIS, "sparsity", RUN, "footnote17")
    control = _layers(0.5, 0.5, 0.5, n=20, seed=1)
    result = decide(sparser, paired("sparsity", _layers(0.4, 0.4, 0.9), control))
    assert result.verdict == "holds" and "footnote 17" in result.measured and result.data["decided_layers"] == [1, 2]
    assert decide(sparser, paired("sparsity", _layers(0.4, 0.6, 0.4), control)).verdict == "fails"
    dense = decide(rises, alone("sparsity", np.ones((5, 3))))
    assert dense.verdict == "inconclusive" and "residual stream" in dense.measured


def _joint(specific, alignment, spread, n=30, seed=0):
    rng = np.random.default_rng(seed)
    values = {"specific": specific, "alignment": alignment, "spread": spread, "rate_reduction": 1.0,
              "nonnegative": 0.0}
    return {k: np.full((n, 3), v) + (1e-3 * rng.standard_normal((n, 3)) if k != "nonnegative" else 0)
            for k, v in values.items()}


def test_the_joint_row_tells_compression_from_collapse_and_exempts_the_last_layer():
    sizes = Sizes(32, 17, 2)
    row = Row(THIS, "joint", RUN, "footnote17")
    control = _joint(1.0, 0.5, 1.0, seed=1)

    def judged(this):
        return decide(row, Sample(this, control, "paired", "30 inputs", sizes))

    assert judged(_joint(0.9, 0.7, 1.0)).verdict == "holds"
    collapsed = judged(_joint(0.9, 0.7, 0.5))
    assert collapsed.verdict == "fails" and collapsed.labels == "layer 1 collapse, layer 2 collapse, layer 3 collapse"
    assert judged(_joint(1.1, 0.3, 1.0)).verdict == "fails"
    last_collapses = _joint(0.9, 0.7, 1.0)
    last_collapses["spread"][:, -1] = 0.5
    found = judged(last_collapses)
    assert found.verdict == "holds" and found.labels.endswith("layer 3 collapse") and "(footnote 17, apart)" in \
        found.measured and found.data["union"] == 3  # one layer decided, three ways to refute it


def test_fig26_against_another_network_flips():
    this = {"official": _layers(10.0, 8.0, 6.0), **{f"above_{t:g}": _layers(0.2, 0.2, 0.2) for t in (1.0, 0.5, 0.1)}}
    vit = {"official": _layers(10.0, 9.5, 9.0), **{f"above_{t:g}": _layers(0.9, 0.9, 0.9) for t in (1.0, 0.5, 0.1)}}
    against = Control("network", "vit")
    rows = [Row(THIS, "official", against, "further"), Row(THIS, "above", against, "denser")]

    def verdicts(a, b):
        return [decide(r, Sample(a, b, "paired", "40 inputs")).verdict for r in rows]

    assert verdicts(this, vit) == ["holds", "holds"]
    assert verdicts(vit, this) == ["fails", "fails"]


def test_two_populations_of_runs_are_compared_by_welch():
    rng = np.random.default_rng(0)
    subject = Seeds({"trained": {"sparsity": 0.45 + 0.01 * rng.standard_normal((5, 3))},
                     "ViT": {"sparsity": 1.0 - 1e-3 * rng.random((3, 3))}})
    row = Row(Object("CRATE"), "sparsity", Control("network", "ViT"), "every")
    sample = subject.sample(row)
    result = decide(row, sample)
    assert sample.pairing == "welch" and sample.unit == "5 and 3 seeds, independent runs (Welch)"
    assert result.verdict == "holds" and result.headline.label == "CRATE − ViT, layer 1"


# --------------------------------------------------------------------------------------------- the walk to a verdict
def walk(run) -> tuple[list[str], list[str]]:
    """(the verify functions on the stack when `verify.layerwise.decide` is first entered, outermost first; the
    distinct verify functions that returned to one of them before: how often the walk from the arguments to the
    verdict climbed back up) of ``run()``. Class bodies run at import are not part of the walk."""
    import os
    import sys

    root = os.path.dirname(layerwise.__file__) + os.sep
    parents, returned, found, alive = {}, [], {}, []

    def ours(frame) -> bool:
        return frame.f_code.co_filename.startswith(root) and frame.f_code.co_name != "<module>" and not (
            frame.f_back is not None and frame.f_back.f_code.co_name == "<module>")

    def tracer(frame, event, arg):
        if found or event != "call" or not ours(frame):
            return None
        alive.append(frame)  # no frame's id is reused while the walk is recorded
        parent = frame.f_back
        while parent is not None and not ours(parent):
            parent = parent.f_back
        parents[id(frame)] = id(parent) if parent is not None else None
        if frame.f_code is layerwise.decide.__code__:
            stack, f = [], frame
            while f is not None:
                stack += [(id(f), f.f_code.co_name)] if ours(f) else []
                f = f.f_back
            found["stack"] = stack[::-1]
            return None

        def local(frame, event, arg):
            if event == "return" and not found:
                returned.append((id(frame), frame.f_code.co_filename[len(root):] + ":" + frame.f_code.co_name))
            return local
        return local

    if sys.gettrace() is not None:
        pytest.skip("another tracer (coverage, a debugger) is installed")
    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    path = {fid for fid, _ in found["stack"]}
    climbs = list(dict.fromkeys(name for fid, name in returned if parents.get(fid) in path))
    return [name for _, name in found["stack"]], climbs


def test_the_command_reaches_a_verdict_as_directly_as_a_registered_claim(tmp_path, monkeypatch):
    """From the arguments to the one decision function, ``python -m verify.network`` climbs back up no more often
    than ``python -m verify --only`` does for a registered row (its runs constructed here: nothing trains). Measured:
    4 frames and 8 climbs (parse, signals, paths, the subject opened, the report folder taken and entered, its rows,
    the row's sample) against 7 and 11 for the claim; before the family the command climbed 15 times through 5
    frames to its first verdict."""
    import crate_nn
    from verify import digits, network
    from verify.__main__ import main

    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)

    def model():
        values = {k: list(rng.random(3)) for k in ("paper", "official", "sparsity")}
        return {**values, "profile": {m: {"half": list(rng.random(3))} for m in ("specific", "alignment", "spread")}}

    monkeypatch.setattr(digits, "runs", lambda ctx, weight_decay=None: [{"init": model(), "trained": model()}
                                                                        for _ in range(5)])
    torch_model = crate_nn.create_model("crate_tiny", dim=32, depth=3, heads=2, image_size=8, patch_size=4,
                                        num_classes=10, in_channels=1)
    crate_nn.save(tmp_path / "crate.pt", torch_model)
    claim_stack, claim_climbs = walk(lambda: main(["--only", "fig15-digits-official", "--output-dir",
                                                   str(tmp_path / "audit"), "--no-progress"]))
    command_stack, command_climbs = walk(lambda: network.main([
        str(tmp_path / "crate.pt"), "--dataset", "digits", "--mean", "0.5", "--std", "0.5", "--n", "6", "--control-n",
        "4", "--init-seeds", "3", "--out", str(tmp_path / "network")]))
    assert claim_stack[-1] == command_stack[-1] == "decide" and len(command_stack) <= len(claim_stack)
    assert len(command_climbs) <= len(claim_climbs), (command_climbs, claim_climbs)
