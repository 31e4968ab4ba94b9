"""The optimizer from `config.optimizer`: each optimizer.name registered here beside its
code (a new optimizer is one function and its `@optimizer(...)` line), the schedules in
train/schedules.py; accumulation, EMA, frozen parameters and layer-wise rates wrap
whichever it is."""

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pretrainx import phasing
from pretrainx.errors import UserError
from pretrainx.train import schedules


def advance_schedules(opt_state):
    """The optimizer state with every learning-rate schedule's counter one step on and
    nothing else changed: what a skipped (non-finite) step does, so that the schedule
    keeps following the run's step while the moments and Adam's bias-correction count
    stay as they were."""
    def bump(node):
        if isinstance(node, optax.ScaleByScheduleState):
            return node._replace(count=optax.safe_int32_increment(node.count))
        return node
    return jax.tree_util.tree_map(bump, opt_state,
                                  is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState))


def schedule_steps(opt_state) -> list:
    """The counters of the optimizer's learning-rate schedules (for tests and checks)."""
    nodes = jax.tree_util.tree_leaves(
        opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState))
    return [n.count for n in nodes if isinstance(n, optax.ScaleByScheduleState)]


def scale_by_adam_uncorrected(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Adam's direction without bias correction, m / (sqrt(v) + eps), as
    google-research/bert's AdamWeightDecayOptimizer (and ELECTRA's copy of it) computes
    it: the first steps move 3x further than corrected Adam's at b2 = 0.999, which the
    recipes' warmup absorbs. The state is optax's ScaleByAdamState, so a checkpoint
    restores whichever way `optimizer.bias_correction` is set."""
    def init(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros,
                                      nu=jax.tree_util.tree_map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g),
                                    state.nu, grads)
        updates = jax.tree_util.tree_map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
        return updates, optax.ScaleByAdamState(
            count=optax.safe_int32_increment(state.count), mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def scale_by_stable_adam(b1: float, b2: float, eps: float, weight_decay: float,
                         mask) -> optax.GradientTransformation:
    """StableAdamW (Wortsman et al. 2023, algorithm 2), ModernBERT's optimizer: AdamW whose
    step on each tensor (decoupled decay included) is divided by max(1, RMS of
    g^2 / max(v_hat, eps^2)), AdaFactor's update clipping, in place of gradient clipping.
    Multiply by the learning rate after it. `mask(params)`: the tensors that decay."""
    def init(params):
        zeros = lambda: jax.tree_util.tree_map(jnp.zeros_like, params)  # noqa: E731
        return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros(), nu=zeros())

    def update(grads, state, params=None):
        count = optax.safe_int32_increment(state.count)
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g),
                                    state.nu, grads)
        c1 = 1 - b1 ** count.astype(jnp.float32)
        c2 = 1 - b2 ** count.astype(jnp.float32)

        def one(g, m, v, p, decays):
            v_hat = v / c2
            rms = jnp.sqrt(jnp.mean(jnp.square(g) / jnp.maximum(v_hat, eps * eps)))
            step = (m / c1) / (jnp.sqrt(v_hat) + eps)
            if decays and weight_decay:
                step = step + weight_decay * p
            return step / jnp.maximum(1.0, rms)

        updates = jax.tree_util.tree_map(one, grads, mu, nu, params, mask(params))
        return updates, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(init, update)


def _scale_by_adam(opt_cfg):
    if opt_cfg.bias_correction:
        return optax.scale_by_adam(b1=opt_cfg.b1, b2=opt_cfg.b2, eps=opt_cfg.eps)
    return scale_by_adam_uncorrected(opt_cfg.b1, opt_cfg.b2, opt_cfg.eps)


def decay_mask(params):
    """Weight decay on matrices only: not on LayerNorm scales or biases (as BERT)."""
    def keep(path, leaf):
        # The last dict key names the parameter (boxed params add attribute keys after it).
        names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
        return not (names[-1] in ("bias", "scale", "mlm_bias") or leaf.ndim < 2)
    return jax.tree_util.tree_map_with_path(keep, params)


class AccumulateState(NamedTuple):
    inner: optax.OptState
    grads: optax.Updates  # summed since the last update
    count: jax.Array  # micro-batches summed
    every: jax.Array  # micro-batches an update takes now (the step's clock sets it)


def accumulating(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` applied to the mean gradient of `every` micro-batches (steps), where `every`
    is state that the host may change between steps (the batch-size ramps of the
    crammed BERT and ModernBERT, train/ramp.py); between updates the parameters stay
    as they are."""
    def init(params):
        return AccumulateState(tx.init(params), jax.tree_util.tree_map(jnp.zeros_like, params),
                               jnp.zeros([], jnp.int32), jnp.ones([], jnp.int32))

    def update(grads, state, params=None):
        summed = jax.tree_util.tree_map(jnp.add, state.grads, grads)
        count = state.count + 1

        def emit():
            mean = jax.tree_util.tree_map(lambda g: g / count.astype(g.dtype), summed)
            updates, inner = tx.update(mean, state.inner, params)
            zeros = jax.tree_util.tree_map(jnp.zeros_like, summed)
            return updates, AccumulateState(inner, zeros, jnp.zeros_like(count), state.every)

        def hold():
            zeros = jax.tree_util.tree_map(jnp.zeros_like, grads)
            return zeros, AccumulateState(state.inner, summed, count, state.every)

        return jax.lax.cond(count >= state.every, emit, hold)

    return optax.GradientTransformation(init, update)


def set_clock(opt_state, schedule_step, every=None):
    """The optimizer state with every learning-rate schedule at `schedule_step` (and an
    accumulating optimizer's `every` set): what the train step does with the clock the
    host passes it (train/step.py), so that a wall-clock budget and a batch-size ramp
    steer the optimizer without writing into its state from outside the step."""
    def schedule(node):
        if isinstance(node, optax.ScaleByScheduleState):
            return node._replace(count=jnp.asarray(schedule_step, jnp.int32))
        return node

    def accumulation(node):
        if isinstance(node, AccumulateState):
            return node._replace(every=jnp.asarray(every, jnp.int32))
        return node

    state = jax.tree_util.tree_map(
        schedule, opt_state, is_leaf=lambda x: isinstance(x, optax.ScaleByScheduleState))
    if every is None:
        return state
    return jax.tree_util.tree_map(accumulation, state,
                                  is_leaf=lambda x: isinstance(x, AccumulateState))


def clock(opt_state, step):
    """The step the learning-rate schedules read: their counter (a wall-clock budget
    sets it), or `step` for an optimizer without one."""
    counts = schedule_steps(opt_state)
    return counts[0] if counts else step


class EmaParamsState(NamedTuple):
    """A moving average of the parameters (optimizer.ema_decay): float32, from zero, and
    the updates it has seen, which its bias correction reads."""
    count: jax.Array
    ema: Any


def ema_of_params(decay: float) -> optax.GradientTransformation:
    """Last in a chain, where `params + updates` is the step's new parameters: keeps
    decay x ema + (1 - decay) x them. It starts at zero and is read divided by
    1 - decay^count (Adam's bias correction), so the average is over the parameters of
    the updates made, none of it on the random initial ones (which an average started
    from them keeps decay^t of: 8% after 2,500 steps at 0.999). In the optimizer state it
    is sharded like the parameters, saved with every checkpoint, kept by a non-finite
    (skipped) step, and moved only by real updates of an accumulating optimizer."""
    def init(params):
        return EmaParamsState(count=jnp.zeros([], jnp.int32), ema=jax.tree_util.tree_map(
            lambda p: jnp.zeros(jnp.shape(p), jnp.float32), params))

    def update(updates, state, params=None):
        new = jax.tree_util.tree_map(
            lambda e, p, u: decay * e + (1.0 - decay) * (p + u).astype(jnp.float32),
            state.ema, params, updates)
        return updates, EmaParamsState(optax.safe_int32_increment(state.count), new)

    return optax.GradientTransformation(init, update)


def ema_of(opt_state, decay: float):
    """The bias-corrected parameter average in an optimizer state (a live one, or a
    checkpoint's restored without a target, where it is a dict of "count" and "ema"),
    or None when the state holds none."""
    nodes = jax.tree_util.tree_leaves(opt_state, is_leaf=lambda x: isinstance(x, EmaParamsState))
    found = [(n.count, n.ema) for n in nodes if isinstance(n, EmaParamsState)]
    stack = [opt_state]
    while stack and not found:
        node = stack.pop()
        if isinstance(node, dict):
            if set(node) == {"count", "ema"}:
                found = [(node["count"], node["ema"])]
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    if not found:
        return None
    count, ema = found[0]
    correction = 1.0 - decay ** max(int(count), 1)
    return jax.tree_util.tree_map(lambda e: np.asarray(e, np.float32) / correction, ema)


def make_optimizer(opt_cfg, total_steps: int, frozen: tuple = (),
                   ema_decay: float = 0.0, schedule=None) -> optax.GradientTransformation:
    """AdamW (decoupled decay, masked), T5's Adafactor (factored second moments,
    no momentum, decay 0.8, updates clipped at RMS 1 and scaled by parameter RMS),
    ELMo's Adagrad, or ALBERT's LAMB (layer-wise trust ratio, You et al. 2020).

    `frozen`: paths (tuples of keys) of parameter subtrees that never move and hold no
    optimizer state (a distillation's teacher): optax.multi_transform sends them to
    set_to_zero, the rest (clipping included) to the recipe's optimizer. `ema_decay` > 0
    (a pretraining run's optimizer.ema_decay) keeps an average of the trained parameters
    (ema_of_params). `schedule`: the run's learning rate by step where its phases
    give it in segments (train/phases.learning_rate); else opt_cfg's over total_steps."""
    schedule = schedule or schedules.learning_rate_schedule(opt_cfg, total_steps)
    tx = _recipe_optimizer(opt_cfg, schedule)
    if ema_decay:
        tx = optax.chain(tx, ema_of_params(float(ema_decay)))
    if int(opt_cfg.accumulate_to) > 1 or opt_cfg.batch_ramp:
        tx = accumulating(tx)  # train/ramp.py sets how many steps an update takes
    if not frozen:
        return tx

    def labels(params):
        def label(path, _):
            keys = tuple(getattr(k, "key", k) for k in path)
            return "frozen" if any(keys[:len(f)] == tuple(f) for f in frozen) else "trained"
        return jax.tree_util.tree_map_with_path(label, params)

    return optax.multi_transform({"trained": tx, "frozen": optax.set_to_zero()}, labels)


def layerwise(tx: optax.GradientTransformation, scales, unfreeze_at) -> optax.GradientTransformation:
    """`tx` with a learning-rate factor per parameter (`scales`, a tree of floats: ULMFiT's
    and ELECTRA's layer-wise decay) and a step from which each parameter trains
    (`unfreeze_at`, a tree of ints: ULMFiT's gradual unfreezing). Before that step a
    parameter's gradient is zeroed (its Adam moments stay 0) and so is its update (no
    weight decay either): it stays bit-identical. The step count is a schedule's
    counter in the state: a restored state goes on where it was, and a skipped
    (non-finite) step advances it as it advances the learning rate."""
    tree = jax.tree_util

    def init(params):
        return (tx.init(params), optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32)))

    def update(grads, state, params=None):
        inner, counter = state
        count = counter.count
        live = tree.tree_map(lambda at: count >= at, unfreeze_at)
        grads = tree.tree_map(lambda g, on: jnp.where(on, g, jnp.zeros_like(g)), grads, live)
        updates, inner = tx.update(grads, inner, params)
        updates = tree.tree_map(
            lambda u, k, on: jnp.where(on, u * jnp.asarray(k, u.dtype), jnp.zeros_like(u)),
            updates, scales, live)
        return updates, (inner, optax.ScaleByScheduleState(optax.safe_int32_increment(count)))

    return optax.GradientTransformation(init, update)


class Optimizer(NamedTuple):
    parts: Callable  # (opt_cfg, schedule) -> [optax transforms], chained after clipping
    needs: tuple  # optimizer keys it reads besides the shared ones (set by its recipes)


OPTIMIZERS: dict = {}


def optimizer(name: str, needs: tuple = ()):
    def register(parts):
        OPTIMIZERS[name] = Optimizer(parts, needs)
        return parts
    return register


@optimizer("adamw")
def _adamw(opt_cfg, schedule):
    """optax.adamw's chain (nested as adamw nests it, so checkpoints restore), with or
    without Adam's bias correction."""
    return [optax.chain(_scale_by_adam(opt_cfg),
                        optax.add_decayed_weights(opt_cfg.weight_decay, mask=decay_mask),
                        optax.scale_by_learning_rate(schedule))]


@optimizer("adafactor")
def _adafactor(opt_cfg, schedule):
    """T5's: factored second moments, no momentum, decay 0.8, updates clipped at RMS 1
    and scaled by the parameter's RMS."""
    return [optax.adafactor(schedule, decay_rate=0.8, clipping_threshold=1.0,
                            multiply_by_parameter_scale=True, momentum=None,
                            weight_decay_rate=opt_cfg.weight_decay or None,
                            weight_decay_mask=decay_mask)]


@optimizer("adagrad", needs=("initial_accumulator",))
def _adagrad(opt_cfg, schedule):
    """ELMo's (bilm-tf: TF Adagrad, accumulators from 1.0)."""
    return [optax.adagrad(schedule, opt_cfg.initial_accumulator, eps=1e-7)]


@optimizer("lamb")
def _lamb(opt_cfg, schedule):
    """optax.lamb's chain, with ALBERT's masks (google-research/albert lamb_optimizer):
    LayerNorm scales and biases get neither weight decay nor the trust ratio. Adam's
    moments as optimizer.bias_correction says (ALBERT's recipe keeps the LAMB paper's
    correction; albert's code has none)."""
    return [_scale_by_adam(opt_cfg),
            optax.add_decayed_weights(opt_cfg.weight_decay, mask=decay_mask),
            optax.masked(optax.scale_by_trust_ratio(), decay_mask),
            optax.scale_by_learning_rate(schedule)]


@optimizer("stable_adamw")
def _stable_adamw(opt_cfg, schedule):
    """ModernBERT's StableAdamW (scale_by_stable_adam)."""
    return [optax.chain(scale_by_stable_adam(opt_cfg.b1, opt_cfg.b2, opt_cfg.eps,
                                             opt_cfg.weight_decay, decay_mask),
                        optax.scale_by_learning_rate(schedule))]


@optimizer("sgd")
def _sgd(opt_cfg, schedule):
    """word2vec.c's plain stochastic gradient descent."""
    return [optax.sgd(schedule)]


def _recipe_optimizer(opt_cfg, schedule) -> optax.GradientTransformation:
    parts = []
    if opt_cfg.grad_clip and opt_cfg.grad_clip > 0:
        parts.append(optax.clip_by_global_norm(opt_cfg.grad_clip))
    parts += OPTIMIZERS[opt_cfg.name].parts(opt_cfg, schedule)
    return optax.chain(*parts)


def check_names(opt_cfg) -> None:
    """optimizer.name and optimizer.schedule are registered ones, each with the keys it
    reads (one line naming the first fault)."""
    if opt_cfg.name not in OPTIMIZERS:
        raise UserError(f"config key 'optimizer.name' is {opt_cfg.name!r}; expected one of "
                        f"{', '.join(OPTIMIZERS)}")
    schedules.check(opt_cfg)
    schedules.require_keys(opt_cfg, "name", OPTIMIZERS[opt_cfg.name].needs)


def check(cfg) -> None:
    """check_names on a run's optimizer keys and on each named phase's."""
    check_names(cfg.optimizer)
    if phasing.named(cfg):
        for phase in phasing.phases(cfg):
            check_names(phase.cfg.optimizer)
