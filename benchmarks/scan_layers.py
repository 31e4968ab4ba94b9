"""ModernBERT unrolled against scanned (model.scan_layers): compile time, step time and
the losses of the same training steps.

    python benchmarks/scan_layers.py [--depths=22,28] [--windows=3] [--steps=5]

At each depth (22: base's, 28: large's) the ModernBERT quickstart's widths (128 wide, a
32-token window, rows of 128, batches of 8) build the train step twice: layers unrolled,
and scanned in groups of one global and two local layers (the first group and the
remainder unrolled). Both start from the same parameters (the unrolled ones stacked by
interop.stack_layers) and take the same steps on the same batch. Printed: the first
call's seconds (compile and one step), the seconds a step over `--windows` windows of
`--steps` (median, min, max), their ratios, and the largest difference between the two
runs' losses over the first 4 steps, which must stay under 1e-5, and over all (floating
point's last bits, amplified by training). The last line is one JSON object.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import linen as nn  # noqa: E402

from pretrainx import config as config_lib, interop, objectives, sharding  # noqa: E402
from pretrainx.train import optim, schedules, state as state_lib, step as step_lib  # noqa: E402


# Steps over which the two forms' losses must agree to 1e-5: later, the last bits of
# their sums (XLA fuses a scan's body and the unrolled layers differently) are
# amplified by training at the quickstart's 2e-3, and the difference is reported.
EQUAL_STEPS = 4


def _config(depth: int, scan: bool):
    cfg = config_lib.load_file(os.path.join(REPO, "configs", "modernbert_quickstart.py"))
    cfg.update_from_flattened_dict({"model.num_layers": depth, "model.scan_layers": scan,
                                    "global_batch_size": 8, "optimizer.warmup_steps": 1})
    return cfg


def _step(cfg, params=None):
    """(one_step() -> loss, the initial parameters) of cfg on one device."""
    objective = objectives.build(cfg, tokenizer=None)
    phase = config_lib.phases(cfg)[0]
    mesh = sharding.make_mesh(cfg.mesh, jax.devices()[:1])
    rules = sharding.rules_of(cfg)
    tx = optim.make_optimizer(cfg.optimizer, cfg.total_steps)
    state, shardings = state_lib.create_state(objective.model, tx,
                                              objective.example_batch(1, phase), 0, mesh, rules)
    if params is not None:  # the other form's parameters, as this form lays them out
        like = jax.device_get(nn.unbox(state.params))
        state = state.replace(params=jax.device_put(interop.stack_layers(params, like),
                                                    shardings.params))
    rng = np.random.default_rng(0)
    batch = {k: np.asarray(v) for k, v in objective.example_batch(8, phase).items()}
    batch["input_ids"] = rng.integers(5, 4000, batch["input_ids"].shape, dtype=np.int32)
    batch["attention_mask"] = np.ones_like(batch["input_ids"])
    batch["positions"] = np.broadcast_to(np.arange(cfg.seq_len, dtype=np.int32),
                                         batch["input_ids"].shape).copy()
    batch["masked_lm_positions"] = np.sort(rng.choice(cfg.seq_len, (8, 40)), axis=1).astype(
        np.int32)
    batch["masked_lm_ids"] = rng.integers(5, 4000, (8, 40), dtype=np.int32)
    batch["masked_lm_weights"] = np.ones((8, 40), np.float32)
    batch = {k: v for k, v in batch.items() if k in objective.example_batch(1, phase)}
    shard = {k: sharding.batch_sharding(mesh, rules) for k in batch}
    schedule = schedules.learning_rate_schedule(cfg.optimizer, cfg.total_steps)
    train = step_lib.compile_train_step(
        step_lib.make_train_step(objective.model, tx, objective, schedule, 1),
        mesh, rules, shardings, shard)
    holder, on_device = {"state": state, "step": 0}, jax.device_put(batch, shard)
    repl, key = sharding.replicated(mesh), jax.random.key(0)

    def one_step():
        clock = step_lib.clock(holder["step"], 1, repl)
        holder["state"], m = train(holder["state"], on_device, key, clock)
        holder["step"] += 1
        return float(m["loss"])
    return one_step, jax.device_get(nn.unbox(interop.unstack_layers(state.params)))


def measure(depth: int, windows: int, steps: int) -> dict:
    out, losses, params = {}, {}, None
    for scan in (False, True):
        one_step, start = _step(_config(depth, scan), params)
        params = start if params is None else params
        t = time.perf_counter()
        losses[scan] = [one_step()]
        first = time.perf_counter() - t
        per = []
        for _ in range(windows):
            t = time.perf_counter()
            losses[scan] += [one_step() for _ in range(steps)]
            per.append((time.perf_counter() - t) / steps)
        name = "scanned" if scan else "unrolled"
        out[name] = {"first_call_seconds": first, "step_seconds": {
            "median": statistics.median(per), "min": min(per), "max": max(per)}}
        print(f"{depth} layers {name:>8}: first call {first:6.2f} s, a step median "
              f"{statistics.median(per):.4f} s (min {min(per):.4f}, max {max(per):.4f})",
              flush=True)
    out["compile_ratio_scanned_over_unrolled"] = (out["scanned"]["first_call_seconds"]
                                                  / out["unrolled"]["first_call_seconds"])
    out["step_ratio_scanned_over_unrolled"] = (out["scanned"]["step_seconds"]["median"]
                                               / out["unrolled"]["step_seconds"]["median"])
    gap = np.abs(np.subtract(losses[True], losses[False]))
    out["max_loss_difference"] = float(np.max(gap[:EQUAL_STEPS]))
    out["max_loss_difference_all_steps"] = float(np.max(gap))
    print(f"{depth} layers: first call scanned/unrolled "
          f"{out['compile_ratio_scanned_over_unrolled']:.2f}, step "
          f"{out['step_ratio_scanned_over_unrolled']:.2f}; largest loss difference "
          f"{out['max_loss_difference']:.2e} over the first {min(EQUAL_STEPS, gap.size)} steps, "
          f"{out['max_loss_difference_all_steps']:.2e} over all {gap.size}", flush=True)
    assert out["max_loss_difference"] < 1e-5, out["max_loss_difference"]
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--depths", default="22,28")
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    results = {int(d): measure(int(d), args.windows, args.steps) for d in args.depths.split(",")}
    print(json.dumps({"device": jax.devices()[0].platform, "depths": results}))


if __name__ == "__main__":
    main()
