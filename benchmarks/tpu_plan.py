"""Our BERT-Base train step vs HuggingFace's Flax BERT, compiled for a TPU slice; and
the planning table of the recipes across today's TPUs.

    python benchmarks/tpu_plan.py [--topology=v3:4x4] [--phase=1|2] [--mesh=data|fsdp]
                                  [--tiny]
    python benchmarks/tpu_plan.py --recipes=bert_base,t5_base \
                                  [--topologies=v3:4x4,v5e:4x4,v6e:4x4,v5p:2x2x4]
                                  [--attention_impl=splash] [--search]

--recipes plans each named config (configs/NAME.py, all its phases) on each topology
with pretrainx.plan.planner and prints one markdown row per phase as it goes, then one JSON
object: step time, est. MFU, GiB per device and days by the compiler's cost model (or
its roofline), and the bound that the compiled program's HBM bytes alone give (see
pretrainx.plan.planner's memory_traffic).

Both steps are compiled deviceless for the same topology, the same global batch
and sequence length, bf16 compute with float32 parameters, AdamW with clipping and
dropout 0.1. HuggingFace's step is data parallel with its MLM head over every
position (as FlaxBertForPreTraining computes it); ours is the training code path
of configs/bert_base.py. Step times are the compiler's cost-model estimates (see
pretrainx.plan.planner), so the ratio compares two estimates made the same way.
Needs libtpu and transformers 4.57 (the last release with Flax models). --tiny
shrinks both models to 1 layer of width 128 and the batch to 8 (the smoke test's
size: it proves the script runs, not a figure).
"""

import argparse
import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from pretrainx import config as config_lib  # noqa: E402
from pretrainx.plan import hlo_bytes
from pretrainx.plan import planner as plan
from pretrainx.config import sibling_config  # noqa: E402

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs")


TINY = {"num_layers": 1, "hidden_size": 128, "num_heads": 2, "mlp_dim": 512}


def hf_step_estimate(topology, batch, seq_len, tiny=False):
    import transformers

    devices, generation, per_chip = plan.topology_devices(topology)
    mesh = Mesh(np.array(devices), ("data",))
    config = transformers.BertConfig()  # bert-base-uncased: L12/H768/A12, vocab 30522
    if tiny:
        config = transformers.BertConfig(
            num_hidden_layers=TINY["num_layers"], hidden_size=TINY["hidden_size"],
            num_attention_heads=TINY["num_heads"], intermediate_size=TINY["mlp_dim"])
    model = transformers.FlaxBertForPreTraining(config, dtype=jnp.bfloat16, _do_init=False)
    params = jax.eval_shape(lambda: model.init_weights(jax.random.PRNGKey(0), (1, seq_len)))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-4, eps=1e-6,
                                                                 weight_decay=0.01))

    def step(params, opt_state, batch, rng):
        def loss_fn(p):
            out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                        params=p, dropout_rng=rng, train=True)
            logits = out.prediction_logits.astype(jnp.float32)
            labels = batch["labels"]
            weights = (labels >= 0).astype(jnp.float32)
            logp = jax.nn.log_softmax(logits)
            nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
            mlm = jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)
            nsp = optax.softmax_cross_entropy_with_integer_labels(
                out.seq_relationship_logits.astype(jnp.float32),
                batch["next_sentence_label"]).mean()
            return mlm + nsp
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    replicated = NamedSharding(mesh, P())
    rows = NamedSharding(mesh, P("data"))
    opt_state = jax.eval_shape(tx.init, params)
    spec = lambda tree, s: jax.tree_util.tree_map(  # noqa: E731
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree)
    shapes = {k: jax.ShapeDtypeStruct((batch, seq_len), jnp.int32, sharding=rows)
              for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
    shapes["next_sentence_label"] = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=rows)
    rng = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=replicated)
    lowered = jax.jit(step, donate_argnums=(0, 1)).lower(
        spec(params, replicated), spec(opt_state, replicated), shapes, rng)
    with plan.xla_flags_libtpu_knows(), hlo_bytes.no_cache_write():
        compiled = lowered.compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    seconds, source = plan._estimate(cost, generation, per_chip,
                                     float(cost["flops"]))
    return {"est_step_seconds": seconds, "estimate": source,
            "flops_per_step": float(cost["flops"]) * len(devices)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="v3:4x4")
    parser.add_argument("--phase", type=int, default=1)
    parser.add_argument("--mesh", choices=("data", "fsdp"), default="data",
                        help="our parallelism: pure data parallel, or FSDP over all devices")
    parser.add_argument("--tiny", action="store_true", help="smoke-test size (no figure)")
    parser.add_argument("--recipes", default="", help="configs to plan, e.g. bert_base,t5_base")
    parser.add_argument("--topologies", default="v3:4x4,v5e:4x4,v6e:4x4,v5p:2x2x4")
    parser.add_argument("--attention_impl", default=None, help="plan with this kernel")
    parser.add_argument("--search", action="store_true", help="plan --search per recipe")
    args = parser.parse_args()
    if args.recipes:
        return recipes_table(args)
    cfg = sibling_config(os.path.join(CONFIGS, "bert.py"), "bert.py", "base")
    if args.mesh == "fsdp":
        cfg.mesh.data, cfg.mesh.fsdp = 1, -1
    if args.tiny:
        cfg.model.update(TINY)
        cfg.global_batch_size = cfg.phase2.global_batch_size = 8  # 2 rows a v5e:2x2 chip
    phase = [p for p in config_lib.phases(cfg) if p.index == args.phase][0]
    ours = plan.plan(cfg, args.topology, phase_index=args.phase)
    theirs = hf_step_estimate(args.topology, phase.global_batch_size, phase.seq_len, args.tiny)
    print(json.dumps({
        "topology": args.topology, "phase": args.phase, "global_batch": phase.global_batch_size,
        "seq_len": phase.seq_len, "ours_mesh": ours["mesh"],
        "ours_est_step_seconds": ours["est_step_seconds"], "ours_estimate": ours["estimate"],
        "hf_flax_est_step_seconds": theirs["est_step_seconds"],
        "hf_flax_estimate": theirs["estimate"],
        "speedup": theirs["est_step_seconds"] / ours["est_step_seconds"],
        "ours_flops_per_step": ours["flops_per_step"],
        "hf_flax_flops_per_step": theirs["flops_per_step"],
        "note": "both step times are compiler cost-model estimates, not measurements",
    }))


ROW = "| {recipe} | {topology} | {phase} | {batch} x {seq_len} | {s} | {mfu} | {gib} | {days} | " \
      "{bound} |"


def _fmt(x, digits):
    return "-" if x is None else f"{x:.{digits}f}"


def recipes_table(args):
    """One row per recipe, topology and phase; the last line is the JSON of them all."""
    rows = []
    print("| recipe | slice | phase | batch x length | s/step | est. MFU | GiB/device "
          "| days (recipe) | HBM-bytes bound: MFU, bound by |")
    print("|---|---|---|---|---|---|---|---|---|")
    for recipe in args.recipes.split(","):
        cfg = config_lib.load_file(os.path.join(CONFIGS, f"{recipe}.py"))  # once a recipe
        if args.attention_impl:
            cfg.model.attention_impl = args.attention_impl
        if args.tiny:
            cfg.model.update({k: v for k, v in TINY.items() if k in cfg.model})
            cfg.global_batch_size = 32
            if "phase2" in cfg:
                cfg.phase2.global_batch_size = 32
        for topology in args.topologies.split(","):
            result = plan.plan(cfg, topology, search=args.search)
            for ph in result["phases"]:
                traffic = ph.get("memory_traffic") or {}
                row = {"recipe": recipe, "topology": topology, "phase": ph["phase"],
                       "batch": ph["global_batch"], "seq_len": ph["seq_len"],
                       "fits": ph["fits"], "est_step_seconds": ph.get("est_step_seconds"),
                       "est_mfu": ph.get("est_mfu"), "per_device_gib": ph.get("per_device_gib"),
                       "est_days": result["est_days"], "estimate": ph.get("estimate"),
                       "mfu_bound_hbm_only": traffic.get("mfu_bound_hbm_only"),
                       "bound_hbm_only": traffic.get("bound_hbm_only"),
                       **{k: ph.get(k) for k in ("layout", "attention", "remat",
                                                 "micro_batches") if k in ph}}
                rows.append(row)
                print(ROW.format(
                    recipe=recipe, topology=topology, phase=row["phase"], batch=row["batch"],
                    seq_len=row["seq_len"],
                    s=_fmt(row["est_step_seconds"], 4) + (
                        " (roofline)" if str(row["estimate"]).startswith("roofline") else ""),
                    mfu=_fmt(row["est_mfu"], 3),
                    gib=_fmt(row["per_device_gib"], 1) + ("" if row["fits"] else " (no fit)"),
                    days=_fmt(row["est_days"], 2),
                    bound=f"{_fmt(row['mfu_bound_hbm_only'], 2)}, {row['bound_hbm_only']}"),
                    flush=True)
    print(json.dumps({"rows": rows, "note": "compiler cost-model estimates, not measurements"}))


if __name__ == "__main__":
    main()
