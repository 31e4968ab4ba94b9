"""The optimizer as the recipes need it: schedules that follow the run's step, even
across skipped (non-finite) steps."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest
from flax import linen as nn

from pretrainx import config as config_lib
from pretrainx.train import optim, schedules
from pretrainx.train import step as step_lib
from pretrainx.train.state import TrainState

from conftest import tiny_bert_config


class _Linear(nn.Module):
    @nn.compact
    def __call__(self, batch, deterministic=True):
        return {"y": nn.Dense(1)(batch["x"])}


class _Squares:
    """loss = sum of squared outputs: a NaN input makes it non-finite."""

    def loss_sums(self, outputs, batch):
        return {"sq": jnp.sum(jnp.square(outputs["y"]))}

    def normalizers(self, batch):
        return {"n": jnp.ones(())}

    def loss(self, sums, norms):
        return sums["sq"] / norms["n"]

    def metrics(self, sums, norms):
        return {}


def _adam_count(opt_state):
    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByAdamState))
    return [int(n.count) for n in nodes if isinstance(n, optax.ScaleByAdamState)]


def test_a_skipped_step_moves_the_schedule_on_and_nothing_else():
    cfg = config_lib.optimizer_config(1e-2, "warmup_linear", name="adamw", warmup_steps=0,
                                      b1=0.9, b2=0.999, eps=1e-6,
                                      weight_decay=0.0, grad_clip=0.0)
    model, objective = _Linear(), _Squares()
    good = {"x": np.ones((4, 3), np.float32)}
    bad = {"x": np.full((4, 3), np.nan, np.float32)}
    params = model.init(jax.random.key(0), good)["params"]
    tx, schedule = optim.make_optimizer(cfg, 10), schedules.learning_rate_schedule(cfg, 10)
    step = jax.jit(step_lib.make_train_step(model, tx, objective, schedule, 1))
    state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))
    state, _ = step(state, good, jax.random.key(1))
    before = state
    for _ in range(2):
        state, metrics = step(state, bad, jax.random.key(1))
        assert metrics["skipped"] == 1.0
    for a, b in zip(jax.tree_util.tree_leaves(before.params), jax.tree_util.tree_leaves(state.params)):
        assert np.array_equal(a, b)  # the skipped steps changed no parameter
    assert _adam_count(state.opt_state) == [1]  # nor Adam's moments or bias correction
    assert [int(c) for c in optim.schedule_steps(state.opt_state)] == [3] == [int(state.step)]
    # The next update is applied at step 3's learning rate, the one it logs.
    state, metrics = step(state, good, jax.random.key(1))
    assert np.isclose(metrics["learning_rate"], schedule(3))
    adam = optax.adam(1.0, b1=0.9, b2=0.999, eps=1e-6)  # the same direction, at lr 1
    grads = jax.grad(lambda p: objective.loss(objective.loss_sums(
        model.apply({"params": p}, good), good), {"n": 1.0}))(before.params)
    direction, _ = adam.update(grads, adam.update(jax.grad(lambda p: objective.loss(
        objective.loss_sums(model.apply({"params": p}, good), good), {"n": 1.0}))(params),
        adam.init(params))[1])
    expected = jax.tree_util.tree_map(lambda p, d: p + schedule(3) * d, before.params, direction)
    for a, b in zip(jax.tree_util.tree_leaves(expected), jax.tree_util.tree_leaves(state.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_uncorrected_adam_is_google_research_berts_update():
    """AdamWeightDecayOptimizer: m and v as Adam's, no division by 1 - b^t, decay added
    to the direction (masked), all times the learning rate."""
    cfg = config_lib.optimizer_config(0.1, "constant", name="adamw", warmup_steps=0,
                                      b1=0.9, b2=0.999, eps=1e-6,
                                      weight_decay=0.01, grad_clip=0.0,
                                      bias_correction=False)
    params = {"kernel": np.array([[1.0, -2.0]], np.float32), "bias": np.array([0.5], np.float32)}
    grads = [{"kernel": np.array([[0.3, -0.1]], np.float32), "bias": np.array([0.2], np.float32)},
             {"kernel": np.array([[-0.2, 0.4]], np.float32), "bias": np.array([-0.1], np.float32)}]
    tx = optim.make_optimizer(cfg, 10)
    state, p = tx.init(params), params
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(x) for k, x in params.items()}
    expected = dict(params)
    for g in grads:
        updates, state = tx.update(g, state, p)
        p = optax.apply_updates(p, updates)
        for k in params:
            m[k] = 0.9 * m[k] + 0.1 * g[k]
            v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
            step = m[k] / (np.sqrt(v[k]) + 1e-6) + (0.01 * expected[k] if k == "kernel" else 0)
            expected[k] = expected[k] - 0.1 * step
    for k in params:
        np.testing.assert_allclose(p[k], expected[k], rtol=1e-6)


def test_the_recipes_say_whether_adam_is_bias_corrected():
    """Off where the original code has none (google-research/bert and electra), on for
    fairseq's RoBERTa and SpanBERT and the rest."""
    from pretrainx import objectives
    corrected = {name: objectives.default_config(name).optimizer.get("bias_correction", True)
                 for name in ("bert", "electra", "roberta", "spanbert", "albert", "t5",
                              "causal_lm")}
    assert corrected == {"bert": False, "electra": False, "roberta": True, "spanbert": True,
                         "albert": True, "t5": True, "causal_lm": True}


def _bert_params(scan: bool):
    """A tiny BERT's initialised parameters, layers unrolled or stacked by nn.scan."""
    from flax import linen as nn_lib
    from conftest import tiny_bert_config
    from pretrainx import config as config_lib, objectives
    cfg = tiny_bert_config(**{"model.scan_layers": scan})
    objective = objectives.build(cfg, None)
    batch = objective.example_batch(1, config_lib.phases(cfg)[0])
    return nn_lib.unbox(jax.jit(objective.model.init)(jax.random.key(0), batch)["params"])


def _named(tree):
    return {"/".join(k.key for k in path): leaf
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.parametrize("scan", [False, True], ids=["unrolled", "scanned"])
def test_weight_decay_reaches_kernels_and_embeddings_never_norms_or_biases(scan):
    """With zero gradients AdamW's update is the decay alone: -lr x wd x p on what decays
    and exactly 0 on every LayerNorm scale and every bias, stacked (scan) or not."""
    cfg = config_lib.optimizer_config(0.1, "constant", name="adamw", warmup_steps=0,
                                      b1=0.9, b2=0.999, eps=1e-6,
                                      weight_decay=0.01, grad_clip=0.0)
    params = _bert_params(scan)
    tx = optim.make_optimizer(cfg, 10)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    updates, _ = jax.jit(tx.update)(zeros, jax.jit(tx.init)(params), params)
    decayed = {name for name, u in _named(updates).items() if np.abs(u).max() > 0}
    names = set(_named(params))
    assert decayed == {n for n in names if n.endswith(("kernel", "embedding"))}, decayed ^ names
    assert not any(("norm" in n or n.endswith("bias")) for n in decayed)
    for name in decayed:
        np.testing.assert_allclose(_named(updates)[name], -0.1 * 0.01 * _named(params)[name],
                                   rtol=1e-5)


def test_lamb_trust_ratio_skips_norms_and_biases():
    """LAMB (ALBERT): a kernel's update is scaled to lr x ||p|| (the trust ratio); a
    LayerNorm scale's or a bias's is plain Adam's, lr x m / (sqrt(v) + eps)."""
    cfg = config_lib.optimizer_config(0.1, "constant", name="lamb", warmup_steps=0,
                                      b1=0.9, b2=0.999, eps=1e-6,
                                      weight_decay=0.01, grad_clip=0.0)
    params = _bert_params(False)
    grads = jax.tree_util.tree_map(lambda p: 0.5 * jnp.ones_like(p), params)
    tx = optim.make_optimizer(cfg, 10)
    updates, _ = jax.jit(tx.update)(grads, jax.jit(tx.init)(params), params)
    named_u, named_p = _named(updates), _named(params)
    for name, u in named_u.items():
        if name.endswith("kernel"):
            np.testing.assert_allclose(np.linalg.norm(u), 0.1 * np.linalg.norm(named_p[name]),
                                       rtol=1e-4)
        elif name.endswith(("scale", "bias")):  # Adam's first step: m / sqrt(v) = 1
            np.testing.assert_allclose(u, -0.1 * np.ones_like(u), rtol=1e-4)


@pytest.mark.parametrize("kind, expected", [
    # (step 0, end of warmup = step 100, mid-way = step 550, last step = 1000)
    ("bert_linear", [0.0, 1e-3 * (1 - 100 / 1000), 1e-3 * (1 - 550 / 1000), 0.0]),
    ("warmup_linear", [0.0, 1e-3, 1e-3 * 0.5, 0.0]),
    ("cosine", [0.0, 1e-3, 1e-3 * 0.5, 0.0]),
    ("rsqrt", [1e-3, 1e-3, 1e-3 * np.sqrt(100 / 550), 1e-3 * np.sqrt(100 / 1000)]),
    ("constant", [0.0, 1e-3, 1e-3, 1e-3]),
])
def test_schedule_values_at_start_warmup_end_middle_and_last_step(kind, expected):
    """Peak 1e-3, 100 warmup steps, 1,000 steps: bert_linear decays from step 0 under
    the warmup (google-research/bert), warmup_linear and cosine from the warmup's end,
    rsqrt is T5's lr x sqrt(warmup / max(step, warmup))."""
    cfg = ml_collections.ConfigDict(dict(learning_rate=1e-3, warmup_steps=100, schedule=kind))
    schedule = schedules.learning_rate_schedule(cfg, 1000)
    np.testing.assert_allclose([float(schedule(s)) for s in (0, 100, 550, 1000)], expected,
                               rtol=1e-6, atol=1e-12)


def test_the_lamb_recipe_is_the_papers_mixed_batch_run():
    """configs/bert_large_lamb.py: You et al.'s 64k/32k run (7,037 + 1,562 steps), each
    phase warming up again; one LAMB update of a weight matrix and a bias as the paper's
    algorithm 2 computes them (bias-corrected Adam direction plus weight decay, scaled by
    ||w|| / ||direction||; the bias without decay and trust ratio, as BERT excludes)."""
    from conftest import load_config
    from pretrainx import config as config_lib
    from pretrainx.train import phases as phases_lib
    cfg = load_config("bert_large_lamb.py")
    assert (cfg.model.num_layers, cfg.model.hidden_size) == (24, 1024)
    assert [(p.start, p.end, p.global_batch_size, p.seq_len, p.max_predictions)
            for p in config_lib.phases(cfg)] == [(0, 7037, 65536, 128, 20),
                                                (7037, 8599, 32768, 512, 80)]
    lr = phases_lib.learning_rate(cfg)
    peak = 5e-3 * np.sqrt(2)
    np.testing.assert_allclose([lr(0), lr(1407), lr(2815), lr(7037), lr(7037 + 156),
                                lr(7037 + 312), lr(8598)],
                               [0, peak * 1407 / 2815, peak, 0, 2.5e-3, 5e-3, 5e-3 / 1250],
                               rtol=2e-3, atol=1e-9)

    o = cfg.optimizer
    tx = optim.make_optimizer(o, cfg.total_steps, schedule=lambda _: 1e-3)
    w = np.array([[1.0, -2.0], [0.5, 3.0]], np.float32)
    b = np.array([0.2, -0.1], np.float32)
    gw = np.array([[0.3, 0.1], [-0.2, 0.4]], np.float32)
    gb = np.array([0.05, -0.02], np.float32)
    params, grads = {"dense": {"kernel": w, "bias": b}}, {"dense": {"kernel": gw, "bias": gb}}
    updates, _ = jax.jit(tx.update)(grads, jax.jit(tx.init)(params), params)
    scale = min(1.0, o.grad_clip / np.sqrt(np.sum(gw ** 2) + np.sum(gb ** 2)))

    def adam(g):  # step 1, bias-corrected: m / (sqrt(v) + eps) = g / (|g| + eps)
        g = g * scale
        return g / (np.abs(g) + o.eps)

    direction = adam(gw) + o.weight_decay * w
    want_w = -1e-3 * np.linalg.norm(w) / np.linalg.norm(direction) * direction
    np.testing.assert_allclose(updates["dense"]["kernel"], want_w, rtol=1e-5)
    np.testing.assert_allclose(updates["dense"]["bias"], -1e-3 * adam(gb), rtol=1e-5)


def test_an_optimizer_or_schedule_is_one_registration(monkeypatch):
    """optimizer.name and optimizer.schedule are checked against the registries the code
    lives beside: a new one is a function and its decorator, with no list elsewhere to
    extend; an unknown name or a missing key it reads is one line."""
    from pretrainx.errors import UserError
    monkeypatch.setattr(optim, "OPTIMIZERS", dict(optim.OPTIMIZERS))
    monkeypatch.setattr(schedules, "SCHEDULES", dict(schedules.SCHEDULES))
    cfg = tiny_bert_config()
    with cfg.unlocked():
        cfg.optimizer.name, cfg.optimizer.schedule = "sign_sgd", "halving"
    with pytest.raises(UserError, match="'optimizer.name' is 'sign_sgd'; expected one of adamw"):
        optim.check(cfg)
    optim.optimizer("sign_sgd", needs=("sign_scale",))(
        lambda o, schedule: [optax.scale_by_sign(), optax.scale_by_learning_rate(schedule)])
    with pytest.raises(UserError, match="'optimizer.schedule' is 'halving'"):
        optim.check(cfg)
    schedules.schedule("halving")(lambda o, step, peak, warmup, total: peak * 0.5 ** (step / 10))
    with pytest.raises(UserError, match="needs config key 'optimizer.sign_scale'"):
        optim.check(cfg)
    with cfg.unlocked():
        cfg.optimizer.sign_scale, cfg.optimizer.warmup_steps = 1.0, 0
    optim.check(cfg)
    rate = schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    assert float(rate(10)) == pytest.approx(cfg.optimizer.learning_rate * 0.5)
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
    params = {"w": jnp.ones(3)}
    updates, _ = tx.update({"w": jnp.array([2.0, -3.0, 0.0])}, tx.init(params), params)
    assert np.all(np.sign(np.asarray(updates["w"])) == [-1, 1, 0])
