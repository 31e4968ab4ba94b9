"""python -m pretrainx.plan --config=configs/NAME.py --topology=v3:4x4 [--phase=N] [--search]
                          [--num_slices=N]

Compiles the real train step of a config (the training code path: same model,
shardings, batch and optimizer) for a TPU topology without a TPU (libtpu's
deviceless ahead-of-time compilation) and prints one JSON object: whether it fits
in HBM, the compiler's memory and FLOP figures, and a step time, MFU and run
length estimated from the compiler's cost model. Estimates, not measurements.

Without --phase every phase is planned; the top-level figures are the first phase's,
`est_days` the whole recipe's.

With --num_slices=N the topology is N such slices joined by the data-center
network (DCN); the mesh is the run's hybrid mesh (mesh.dcn_data / mesh.dcn_fsdp),
and each phase says which collectives cross slices, their bytes per device, and
the seconds they take at the chip's DCN bandwidth (an estimate that assumes no
overlap with compute, so an upper bound on what DCN adds to a step).
"""

import contextlib
import functools
import json
import math
import os
import re

# The plan runs nothing: jax stays on the CPU and libtpu serves only as a compiler.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# libtpu takes a machine-wide lock; a compiler-only use must not fight other processes.
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax  # noqa: E402
from absl import flags  # noqa: E402
from flax import linen as nn  # noqa: E402

from pretrainx import cli, objectives, sharding  # noqa: E402
from pretrainx import config as config_lib  # noqa: E402
from pretrainx.errors import UserError  # noqa: E402
from pretrainx.models import attention, target  # noqa: E402
from pretrainx.plan import dcn_traffic, hlo_bytes, kernel_cost  # noqa: E402
from pretrainx.train import optim, phases as phases_lib, state as state_lib  # noqa: E402
from pretrainx.train import step as step_lib  # noqa: E402
from pretrainx.train.chips import CHIPS, GIB  # noqa: E402

_TOPOLOGY = flags.DEFINE_string("topology", None, "TPU topology, e.g. v3:4x4, v5e:4x4, v4:2x2x2.")
_PHASE = flags.DEFINE_integer("phase", None, "Plan only this phase (1, 2, ...: --describe's).")
_NUM_SLICES = flags.DEFINE_integer("num_slices", 1, "Slices of --topology joined over DCN.")
_DCN_GBPS = flags.DEFINE_float("dcn_gbps_per_chip", None, "DCN bandwidth per chip in Gbit/s "
                               "(default: the chip table's, where Google publishes one).")
_SEARCH = flags.DEFINE_bool("search", False, "Try mesh layouts x attention (XLA or kernels), "
                            "then remat x micro-batches; report the fastest that fits.")

TPU_GENERATIONS = tuple(name for name in CHIPS if name.startswith("v"))
_OOM = re.compile(r"RESOURCE_EXHAUSTED|HbmOom|exceeds available HBM|Ran out of memory",
                  re.IGNORECASE)


@functools.cache
def _cpu_compiler_has_read_its_flags() -> None:
    """One CPU compile a process: XLA:CPU reads XLA_FLAGS at its first."""
    jax.jit(lambda x: x + 1)(jax.device_put(0, jax.devices("cpu")[0])).block_until_ready()


@contextlib.contextmanager
def xla_flags_libtpu_knows():
    """XLA_FLAGS without XLA:CPU's own `--xla_cpu_*` flags while libtpu starts or
    compiles: it reads XLA_FLAGS then and aborts the process on a flag it does not know
    (the tests set `--xla_cpu_use_fusion_emitters=false`). A CPU compile first, so that
    the CPU compiler has read them (once a process) before they leave the environment."""
    flags = os.environ.get("XLA_FLAGS", "")
    kept = " ".join(f for f in flags.split() if not f.startswith("--xla_cpu_"))
    if kept == flags:
        yield
        return
    _cpu_compiler_has_read_its_flags()
    os.environ["XLA_FLAGS"] = kept
    try:
        yield
    finally:
        os.environ["XLA_FLAGS"] = flags


def topology_devices(name: str, num_slices: int = 1):
    """(devices, chip generation, devices per chip) of a TPU topology (`num_slices`
    of them, joined over DCN), deviceless."""
    generation = name.split(":")[0].lower()
    if generation not in TPU_GENERATIONS or ":" not in name:
        raise UserError(f"--topology={name!r}: expected GEN:AxB[xC] with GEN one of "
                        f"{', '.join(TPU_GENERATIONS)}, e.g. v3:4x4 or v4:2x2x2")
    try:
        from jax.experimental import topologies
        extra = {"num_slices": num_slices} if num_slices > 1 else {}
        with xla_flags_libtpu_knows():
            topo = topologies.get_topology_desc(platform="tpu", topology_name=name, **extra)
    except Exception as e:  # no libtpu, or a name it does not know
        raise UserError(f"--topology={name}: cannot build it ({cli.first_line(e)}); "
                        "is libtpu installed (pip install 'pretrainx[tpu]')?") from None
    devices = list(topo.devices)
    chips = {(sharding.slice_of(d),) + tuple(getattr(d, "coords", (i,)))
             for i, d in enumerate(devices)}
    return devices, generation, max(len(devices) // max(len(chips), 1), 1)


def _oom_bytes(message: str):
    """The compiler's figure from an out-of-memory message, when it gives one."""
    m = re.search(r"([\d.]+)([KMG])i?B?\s*(?:of|exceeds)", message)
    if not m:
        return None
    return int(float(m.group(1)) * {"K": 1024, "M": 1024 ** 2, "G": GIB}[m.group(2)])


def _estimate(cost, generation, devices_per_chip, model_flops_device, micro_batches=1):
    """Step seconds from the cost model, or a roofline when it answers nonsense."""
    chip = CHIPS[generation]
    peak_dev = chip.peak_flops / devices_per_chip
    bw_dev = chip.hbm_bandwidth / devices_per_chip
    flops = float(cost.get("flops", 0.0))
    if micro_batches > 1:
        # The micro-batches are a lax.scan: its body (one micro-batch's forward and
        # backward) is costed once, so its bytes and time would be 1/k of the step's.
        return None, (f"none: the compiler's cost analysis counts the loop over "
                      f"{micro_batches} micro-batches once; plan with micro_batches=1 for "
                      "a step time (micro-batching saves memory, not time)")
    if flops < 0.5 * model_flops_device:
        # XLA costs a while loop's body once, whatever its trip count.
        return None, ("none: the compiler's cost analysis counts a loop body once "
                      "(model.scan_layers=True); plan with --config.model.scan_layers=False "
                      "for a step time")
    bytes_accessed = float(cost.get("bytes accessed", 0.0))
    roofline = max(flops / peak_dev, bytes_accessed / bw_dev, model_flops_device / peak_dev)
    optimal = cost.get("optimal_seconds")
    # A lower bound that beats the roofline (or is negative, as v5e's is) is not a model.
    if optimal is not None and math.isfinite(optimal) and optimal >= 0.5 * roofline > 0:
        return float(optimal), "cost_model.optimal_seconds"
    return roofline, "roofline: max(flops / peak, bytes accessed / HBM bandwidth)"


def _dcn(compiled_text, n_slices, generation, devices_per_chip, gbps_per_chip) -> dict:
    """What crosses slices per step, and its seconds at the DCN bandwidth."""
    per_chip = gbps_per_chip * 1e9 / 8 if gbps_per_chip else CHIPS[generation].dcn_bandwidth
    collectives = dcn_traffic.cross_slice(compiled_text, n_slices)
    network = sum(c["network_bytes"] for c in collectives.values())
    seconds = network / (per_chip / devices_per_chip) if per_chip else None
    return {"collectives": collectives, "network_bytes_per_device": network,
            "gbps_per_chip": per_chip and per_chip * 8 / 1e9, "est_seconds": seconds,
            **({} if per_chip else {"why_no_seconds": f"no published DCN bandwidth for "
                                    f"{generation}; pass --dcn_gbps_per_chip"})}


def plan_phase(cfg, phase, devices, generation, devices_per_chip, dcn_gbps=None) -> dict:
    phase = config_lib.phase_at(cfg, phase.start)  # of cfg as given (a search's variant)
    objective = objectives.build(phase.cfg, tokenizer=None)  # a named phase's own model
    model, o = objective.model, cfg.optimizer
    mesh = sharding.make_mesh(cfg.mesh, devices)
    rules = sharding.rules_of(cfg)
    dp = sharding.data_parallel_size(mesh, rules)
    if phase.global_batch_size % (dp * cfg.micro_batches):
        raise UserError(f"{phase.prefix}global_batch_size={phase.global_batch_size} does not "
                        f"divide over {cfg.micro_batches} micro-batches x {dp} data-parallel "
                        "devices" + ("; with fewer sequences than devices, split the model too "
                                     "(e.g. --config.mesh.tensor=2)"
                                     if phase.global_batch_size < dp else ""))
    tx = optim.make_optimizer(o, cfg.total_steps, getattr(objective, "frozen", ()), o.ema_decay)
    abstract = state_lib.abstract_state(model, tx, objective.example_batch(1, phase))
    zero = bool(cfg.mesh.shard_optimizer)
    shardings = state_lib.state_shardings(abstract, mesh, rules, zero)
    state = jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                   nn.unbox(abstract), shardings)
    batch_sharding = sharding.batch_sharding(mesh, rules)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=batch_sharding)
             for k, v in objective.example_batch(phase.global_batch_size, phase).items()}
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=sharding.replicated(mesh))
    clock = {k: jax.ShapeDtypeStruct((), v.dtype, sharding=key.sharding)
             for k, v in step_lib.clock(0).items()}
    schedule = phases_lib.learning_rate(cfg)
    step = step_lib.compile_train_step(
        step_lib.make_train_step(model, tx, objective, schedule, cfg.micro_batches,
                                 state_lib.zero_of(abstract, shardings, mesh, rules, zero)),
        mesh, rules, shardings, {k: batch_sharding for k in batch})

    chip_peak = CHIPS[generation].peak_flops
    hbm = CHIPS[generation].hbm_bytes // devices_per_chip
    n = len(devices)
    model_flops = objective.flops_per_token(phase) * phase.global_batch_size * phase.seq_len
    out = {"phase": phase.index, "name": phase.label, "global_batch": phase.global_batch_size,
           "per_device_batch": phase.global_batch_size / n, "seq_len": phase.seq_len,
           "steps": phase.end - phase.start, "remat": cfg.model.remat,
           "micro_batches": cfg.micro_batches, "hbm_bytes_per_device": hbm,
           "params": state_lib.count_params(abstract),
           "model_flops_per_step": model_flops}
    try:
        with attention.recording() as kernel_calls:
            lowered = step.lower(state, batch, key, clock)
        with xla_flags_libtpu_knows():
            compiled, program = hlo_bytes.compile_with_text(lowered)
    except Exception as e:  # XlaRuntimeError and friends
        message = str(e)
        if not _OOM.search(message):
            raise
        out.update(fits=False, per_device_bytes=_oom_bytes(message),
                   compiler_message=cli.first_line(e)[:300])
        return out
    memory = compiled.memory_analysis()
    per_device = int(memory.argument_size_in_bytes + memory.temp_size_in_bytes
                     + memory.output_size_in_bytes - memory.alias_size_in_bytes)
    cost = compiled.cost_analysis()
    cost = dict(cost[0] if isinstance(cost, (list, tuple)) else (cost or {}))
    kernels = None
    if kernel_calls:  # the cost model counts a Mosaic kernel as nothing: add its work
        kernels = kernel_cost.kernel_work(kernel_calls.values(), phase.global_batch_size,
                                          cfg.model.remat, generation, devices_per_chip, n)
        cost["flops"] = float(cost.get("flops", 0.0)) + kernels["flops_per_device"]
        cost["bytes accessed"] = (float(cost.get("bytes accessed", 0.0))
                                  + kernels["bytes_per_device"])
        out["attention_kernels"] = kernels
    seconds, source = _estimate(cost, generation, devices_per_chip, model_flops / n,
                                cfg.micro_batches)
    if seconds or cfg.micro_batches > 1:
        chip = CHIPS[generation]
        out["memory_traffic"] = hlo_bytes.of_text(
            program, float(cost.get("bytes accessed", 0.0)), float(cost.get("flops", 0.0)),
            model_flops / n, chip.peak_flops / devices_per_chip,
            chip.hbm_bandwidth / devices_per_chip, kernels and kernels["bytes_per_device"],
            chip.clock_hz)
    cycles = out.get("memory_traffic", {}).get("compiler_cycles_seconds")
    if seconds is None and cfg.micro_batches > 1 and cycles and not kernels:
        # the compiler's per-instruction cycles count the loop per iteration
        seconds, source = cycles, (
            f"compiler's cycles: the loop over {cfg.micro_batches} micro-batches counted "
            "per iteration (the cost analysis counts it once, so no roofline)")
    if kernels and seconds and source.startswith("cost_model"):
        seconds += kernels["est_seconds"]
        source += " + attention kernels at the chip's roofline"
    elif kernels and seconds:
        source += " (attention kernels' FLOPs and bytes included)"
    n_slices = len(sharding.slices(devices, cfg.mesh))
    if n_slices > 1:
        out["dcn"] = (_dcn(program, n_slices, generation, devices_per_chip, dcn_gbps)
                      if program is not None else
                      {"est_seconds": None, "note": hlo_bytes.UNPRINTABLE})
        if seconds and out["dcn"]["est_seconds"] is not None:
            out["est_step_seconds_without_dcn"] = seconds
            seconds += out["dcn"]["est_seconds"]
            source += " + DCN transfers at the chip's DCN bandwidth, not overlapped"
    out.update(
        fits=per_device <= hbm, per_device_bytes=per_device,
        per_device_gib=round(per_device / GIB, 2),
        flops_per_step=float(cost.get("flops", float("nan"))) * n,
        est_step_seconds=seconds, estimate=source,
        est_mfu=seconds and model_flops / (seconds * chip_peak * n / devices_per_chip),
        est_days=seconds and seconds * (phase.end - phase.start) / 86400)
    return out


def plan(cfg, topology: str, phase_index=None, search=False, num_slices=1,
         dcn_gbps=None) -> dict:
    with target.targeting("tpu"):  # "auto", the kernels and Dense as a TPU run traces them
        return _plan(cfg, topology, phase_index, search, num_slices, dcn_gbps)


def _without_attention_dropout(cfg):
    """A kernel applies no attention dropout, so training refuses it with dropout on;
    a plan (a cost, not a run) proceeds as if the rate were 0 and says so."""
    key = attention.attention_dropout_key(cfg.model)
    if (cfg.model.get("attention_impl", "xla") not in attention.KERNELS
            or not cfg.model.get(key, 0.0)):
        return cfg, None
    rate = cfg.model[key]
    cfg = cfg.copy_and_resolve_references()
    cfg.model[key] = 0.0
    return cfg, (f"planned with model.{key}=0 (the recipe has {rate}): "
                 f"{cfg.model.attention_impl} applies none, and training with it refuses "
                 "the kernel until the rate is 0")


def _plan(cfg, topology, phase_index, search, num_slices, dcn_gbps) -> dict:
    cfg, dropout_note = _without_attention_dropout(cfg)
    objectives.validate(cfg)
    optim.check(cfg)
    if num_slices < 1:
        raise UserError(f"--num_slices={num_slices} must be at least 1")
    devices, generation, per_chip = topology_devices(topology, num_slices)
    phases = config_lib.phases(cfg)
    if phase_index is not None:
        chosen = [p for p in phases if p.index == phase_index]
        if not chosen:
            raise UserError(f"--phase={phase_index}: the config has phases "
                            f"{[p.index for p in phases]}")
        phases = chosen
    one = _search if search else plan_phase
    results = [one(cfg, phase, devices, generation, per_chip, dcn_gbps) for phase in phases]
    mesh = sharding.make_mesh(cfg.mesh, devices)
    dcn = sharding.dcn_sizes(cfg.mesh, num_slices)
    first = results[0]
    return {
        "topology": topology, "slices": num_slices, "devices": len(devices),
        "chips": len(devices) // per_chip, "mesh": dict(mesh.shape),
        **({"dcn_mesh": dcn, "ici_mesh": {a: s // dcn.get(a, 1) for a, s in mesh.shape.items()}}
           if num_slices > 1 else {}),
        "params": first["params"],
        **{k: first.get(k) for k in ("global_batch", "per_device_batch", "seq_len",
                                     "per_device_bytes", "hbm_bytes_per_device",
                                     "flops_per_step", "est_step_seconds", "est_mfu",
                                     "estimate", "remat", "micro_batches")},
        "fits": all(r["fits"] for r in results),
        "est_days": (sum(r["est_days"] for r in results)
                     if all(r.get("est_days") for r in results) else None),
        "phases": results,
        "note": "step time, MFU and days are estimates from the compiler's cost model",
        **({"attention_dropout": dropout_note} if dropout_note else {}),
    }


# What --search tries: mesh layouts within a slice (the DCN factors stay the
# config's), then remat policies x micro-batch counts.
REMATS, MICRO_BATCHES = ("none", "dots", "full"), (1, 2, 4, 8)
LAYOUTS = {"fsdp": {"data": 1, "fsdp": -1, "tensor": 1, "shard_optimizer": False},
           "data": {"data": -1, "fsdp": 1, "tensor": 1, "shard_optimizer": False},
           "zero1": {"data": -1, "fsdp": 1, "tensor": 1, "shard_optimizer": True},
           "fsdp_tensor2": {"data": 1, "fsdp": -1, "tensor": 2, "shard_optimizer": False}}


def _trial(cfg, remat=None, micro=None, layout=None, kernel=False):
    """The config with one search point's choices; a kernel as a TPU run would pick it
    ("auto"), without attention dropout, which no kernel applies."""
    t = cfg.copy_and_resolve_references()
    if remat is not None:
        t.model.remat = remat
    if micro is not None:
        t.micro_batches = micro
    if layout is not None:
        t.mesh.update(LAYOUTS[layout])
    if kernel:
        t.model.attention_impl = "auto"
        t.model[attention.attention_dropout_key(t.model)] = 0.0
    return t


def _search(cfg, phase, devices, generation, per_chip, dcn_gbps=None) -> dict:
    """Fastest point that fits, found in two stages: mesh layout x attention (XLA or
    the TPU kernels) at the config's remat and micro-batches, then remat x
    micro-batches at the best of those. Every tried point is listed."""
    tried = []

    def attempt(point, **choices):
        try:
            result = plan_phase(_trial(cfg, **choices), phase, devices, generation, per_chip,
                                dcn_gbps)
        except UserError:
            return
        result.update(point)
        tried.append(result)

    def best_of(results):
        fitting = [t for t in results if t["fits"]]
        if fitting:  # a micro-batched point's time is the compiler's cycles, another
            # estimate than the others': it wins only where nothing else fits
            return min(fitting, key=lambda t: (t["estimate"].startswith("compiler's cycles"),
                                               t["est_step_seconds"] or math.inf))
        return min(results, key=lambda t: t.get("per_device_bytes") or math.inf)

    kernels = (False, True) if "attention_impl" in cfg.model else (False,)
    for layout in LAYOUTS:
        for kernel in kernels:
            attempt({"layout": layout, "attention": "kernel" if kernel else "xla"},
                    layout=layout, kernel=kernel)
    if not tried:
        raise UserError(f"--search: no mesh layout of {', '.join(LAYOUTS)} divides "
                        f"{phase.prefix}global_batch_size={phase.global_batch_size} here")
    first = best_of(tried)
    layout, kernel = first["layout"], first["attention"] == "kernel"
    for remat in REMATS:
        for micro in MICRO_BATCHES:
            if phase.global_batch_size % micro or (remat, micro) == (
                    first["remat"], first["micro_batches"]):
                continue
            attempt({"layout": layout, "attention": first["attention"]}, remat=remat,
                    micro=micro, layout=layout, kernel=kernel)
    best = dict(best_of(tried))
    if best["attention"] == "kernel":
        best["attention_note"] = ("the kernel runs without attention dropout: train with "
                                  "model.attention_impl=auto and its rate at 0")
    best["search"] = [{k: t.get(k) for k in ("layout", "attention", "remat", "micro_batches",
                                             "fits", "per_device_bytes", "est_step_seconds")}
                      for t in tried]
    return best


def run(argv) -> int:
    cfg = cli.config(argv, example="configs/bert_base.py")
    if not _TOPOLOGY.value:
        raise UserError("--topology is required, e.g. --topology=v3:4x4")
    print(json.dumps(plan(cfg, _TOPOLOGY.value, _PHASE.value, _SEARCH.value, _NUM_SLICES.value,
                          _DCN_GBPS.value)))
    return 0


if __name__ == "__main__":
    cli.main(run)
