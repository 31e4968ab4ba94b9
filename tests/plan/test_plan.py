"""The planner: deviceless TPU compilation of the real train step (needs libtpu)."""

import os

import pytest

from conftest import TINY_LAYERS, tiny_bert_config, tiny_t5_config

pytest.importorskip("libtpu", reason="libtpu not installed (pip install 'pretrainx[plan]')")

from pretrainx.plan import hlo_bytes  # noqa: E402
from pretrainx.plan import planner as plan


class _Unprintable:
    def as_text(self):
        raise RuntimeError("INTERNAL: RET_CHECK failure")


def tiny_data_parallel(**overrides):
    """The tiny BERT at batch 32, data parallel over every device of the slice."""
    return tiny_bert_config(**{"mesh.data": -1, "global_batch_size": 32, **overrides})


@pytest.fixture(scope="module")
def v5e_tiny_bert():
    """(the plan of the tiny BERT at batch 32, data parallel over v5e:2x2's 4 chips, [(the
    traffic counted from the compile's own dump, the same from jax's printed text of the
    same compiled program)] for each compile): planned once for the tests that read it,
    each libtpu compile being 7-14 s of the suite (never read back from the cache)."""
    real_compile, real_of_text, seen = hlo_bytes.compile_with_text, hlo_bytes.of_text, {}

    def compile_with_text(lowered):
        compiled, text = real_compile(lowered)
        seen.update(dumped=text, printed=compiled.as_text())
        return compiled, text

    def of_text(text, *args, **kwargs):
        counted = real_of_text(text, *args, **kwargs)
        if text is not None and text is seen.get("dumped"):
            seen.setdefault("pairs", []).append(
                (counted, real_of_text(seen["printed"], *args, **kwargs)))
        return counted

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hlo_bytes, "compile_with_text", compile_with_text)
        patch.setattr(hlo_bytes, "of_text", of_text)
        result = plan.plan(tiny_data_parallel(), "v5e:2x2")
    return result, seen.get("pairs", [])


@pytest.mark.parametrize("topology,devices,chips", [
    pytest.param("v5e:2x2", 4, 4, marks=pytest.mark.slow), ("v3:2x2", 8, 4)])
def test_plans_a_tiny_bert_on_small_slices(topology, devices, chips, request):
    if topology == "v5e:2x2":
        result, counted_both_ways = request.getfixturevalue("v5e_tiny_bert")
    else:
        result = plan.plan(tiny_data_parallel(), topology)
    assert result["devices"] == devices and result["chips"] == chips
    assert result["mesh"]["data"] == devices and result["fits"] is True
    assert 0 < result["per_device_bytes"] < result["hbm_bytes_per_device"]
    assert result["est_step_seconds"] > 0 and 0 < result["est_mfu"] < 1
    assert result["est_days"] > 0
    traffic = result["phases"][0]["memory_traffic"]
    # the compiler's own per-op cycles, at the chip's clock: a second estimate, of the
    # same order as the first (a whole-step roofline; on v3 the cost model's lower bound)
    assert traffic["compiler_cycles"] > 0
    assert 0.3 < traffic["compiler_cycles_seconds"] / result["est_step_seconds"] < 5
    if topology.startswith("v5e"):  # this libtpu's v5e cost model answers < 0
        assert result["estimate"].startswith("roofline")
        # v5e's compiler keeps most of a small step in on-chip memory (measured 7.3 MB
        # of HBM traffic against 148 MB on chip), which "bytes accessed" counts as HBM
        assert traffic["on_chip_bytes"] > 5 * traffic["hbm_bytes"] > 0
        # the counts come from the compile's own dump of the program (jax cannot print
        # some v6e and v5p programs: `as_text` fails a RET_CHECK in this libtpu); the
        # printed program, where there is one, counts the same, cycles included
        assert counted_both_ways and traffic in [dumped for dumped, _ in counted_both_ways]
        for dumped, printed in counted_both_ways:
            assert dumped == printed
        # neither: the plan says so rather than counting nothing
        text = hlo_bytes.compiled_text(_Unprintable(), dump_dir=None)
        assert hlo_bytes.of_text(text, 0, 0, 1, 1, 1)["note"].startswith("this libtpu")
    else:
        # v3 assigns no on-chip memory: the count from the text is the compiler's own
        # count (measured 89.7 MB against the cost analysis' 93.2 MB)
        assert 0.9 < traffic["hbm_bytes"] / traffic["cost_model_bytes"] < 1.1
        assert any("layer_N/attention" in p["part"] for p in traffic["top_hbm_parts"])


@pytest.mark.slow
def test_flop_formula_agrees_with_the_compiler():
    """Model FLOPs (the MFU numerator) within 10% of XLA's count for the whole step, at
    widths where matmuls dominate as they do in real models (at width 64 LayerNorm,
    softmax and the optimizer are 15% of the step). Batch 8 (ratios 0.948 and 0.962;
    0.963 and 0.984 at 32) compiles in half the time."""
    wide = {"model.hidden_size": 256, "model.mlp_dim": 1024, "global_batch_size": 8}
    for cfg in (tiny_bert_config(seq_len=128, **wide, **{"data.max_predictions_per_seq": 20}),
                tiny_t5_config(**wide, **{"model.head_dim": 64})):
        phase = plan.plan(cfg, "v5e:2x2")["phases"][0]
        ratio = phase["model_flops_per_step"] / phase["flops_per_step"]
        assert 0.9 < ratio < 1.1, (cfg.objective, ratio)


@pytest.mark.slow
def test_micro_batches_get_their_step_time_from_the_compilers_cycles(v5e_tiny_bert):
    """The micro-batch loop is a lax.scan whose body the cost analysis counts once: a
    step time from it would be about 1/k of the step's (the search once took 2 micro-
    batches for 1.5x faster on v5e by that error). The compiler's cycles count the loop
    per iteration: 2 micro-batches of 16 cost about what one batch of 32 costs."""
    one = v5e_tiny_bert[0]["phases"][0]
    cfg = tiny_bert_config(**{"global_batch_size": 32, "micro_batches": 2})
    phase = plan.plan(cfg, "v5e:2x2")["phases"][0]
    assert phase["fits"] and phase["per_device_bytes"] > 0
    assert "micro-batches counted per iteration" in phase["estimate"], phase["estimate"]
    whole = one["memory_traffic"]["compiler_cycles_seconds"]
    assert 0.8 * whole < phase["est_step_seconds"] < 2.5 * whole, (phase, whole)


@pytest.mark.slow
def test_zero1_reduce_scatters_the_gradients_and_gathers_the_parameters(v5e_tiny_bert):
    """libtpu writes a reduce-scatter as a fusion calling `%all-reduce-scatter` (the
    all-reduce and the slice of its result in one), not as the opcode: counted as one,
    ZeRO-1's plan hands each of the 4 devices a quarter of the gradient sums it reduces
    and gathers the updated parameters whole, where data parallelism all-reduces every
    gradient whole and gathers nothing."""
    plain = v5e_tiny_bert[0]["phases"][0]["memory_traffic"]["collectives"]
    cfg = tiny_data_parallel(**{"mesh.shard_optimizer": True})
    zero = plan.plan(cfg, "v5e:2x2")["phases"][0]["memory_traffic"]["collectives"]
    params = 4 * v5e_tiny_bert[0]["params"]  # float32 gradients of every parameter
    assert set(plain) == {"all-reduce"} and plain["all-reduce"]["bytes"] >= params, plain
    scattered = zero["reduce-scatter"]
    assert scattered["input_bytes"] == 4 * scattered["bytes"] >= params / 2, zero
    assert zero["all-gather"]["bytes"] >= scattered["input_bytes"], zero
    # still all-reduced whole: the scalars, the output bias the gradient norm reads
    # whole, and the tied word embedding's output-projection term, which the input
    # lookup's scatter then adds to. On 16-chip slices (v5e:4x4, v6e:4x4, v5p:2x2x4)
    # this libtpu all-reduces every gradient and slices it (docs/accelerators.md).
    assert zero["all-reduce"]["bytes"] < plain["all-reduce"]["bytes"] - scattered["bytes"]


def test_out_of_memory_is_reported_not_raised():
    cfg = tiny_bert_config(global_batch_size=2 ** 17, **{"model.hidden_size": 512,
                                                        "model.mlp_dim": 2048})
    result = plan.plan(cfg, "v5e:2x2")
    assert result["fits"] is False
    assert result["phases"][0]["compiler_message"]


def test_scanned_layers_fit_but_get_no_step_time():
    """XLA's cost analysis counts a loop body once: a scanned stack would look
    several times cheaper than it is, so the planner gives memory but no time."""
    cfg = tiny_data_parallel(**{"model.num_layers": 4, "model.scan_layers": True})
    result = plan.plan(cfg, "v3:2x2")
    assert result["fits"] is True and result["per_device_bytes"] > 0
    assert result["est_step_seconds"] is None and result["est_days"] is None
    assert "scan_layers" in result["estimate"]


def _fp32_param_bytes(result):
    return 4 * result["params"]


def _vocab(result):
    return tiny_bert_config().model.vocab_size


@pytest.mark.slow
def test_two_slices_send_only_the_gradient_all_reduce_over_dcn():
    """Data parallel across two v5e:2x2 slices, FSDP inside each: what crosses slices
    is the all-reduce of each device's gradient shard (a quarter of the float32
    gradients), once per step, whether the layers are a Python loop or a scan (the
    loop's trip count multiplies what its body sends). XLA gathers the word
    embedding lookup's activation gradients instead of all-reducing the table's
    gradient (less traffic), so the all-reduce carries the rest, up to twice over
    (this libtpu crosses DCN half-way through the slice's reduce-scatter, on 2x2 a
    half-reduced buffer). Width 256: at 64 the TPU's 128-lane tiles would pad every
    small shard several times over."""
    base = {"mesh.data": 1, "mesh.fsdp": -1, "global_batch_size": 32, "model.num_layers": 3,
            "model.hidden_size": 256, "model.mlp_dim": 1024}
    unrolled = plan.plan(tiny_bert_config(**base), "v5e:2x2", num_slices=2)
    scanned = plan.plan(tiny_bert_config(**base, **{"model.scan_layers": True}), "v5e:2x2",
                        num_slices=2)
    assert (unrolled["slices"], unrolled["devices"]) == (2, 8)
    assert unrolled["mesh"] == {"data": 2, "fsdp": 4, "tensor": 1}
    assert unrolled["dcn_mesh"] == {"data": 2, "fsdp": 1}
    dcn = unrolled["phases"][0]["dcn"]
    assert set(dcn["collectives"]) <= {"ALL_REDUCE", "ALL_GATHER"}
    shard = _fp32_param_bytes(unrolled) / 4
    table = 4 * _vocab(unrolled) * 256 / 4
    reduced = dcn["collectives"]["ALL_REDUCE"]["payload_bytes"]
    assert 0.95 * (shard - table) < reduced < 2.05 * shard, (reduced, shard, table)
    gathered = dcn["collectives"].get("ALL_GATHER", {}).get("payload_bytes", 0)
    assert gathered <= 2 * (32 // 8) * 64 * 256 * 4  # a device's rows of activations, twice
    assert dcn["gbps_per_chip"] == 25.0 and dcn["est_seconds"] > 0
    assert unrolled["est_step_seconds"] > unrolled["phases"][0]["est_step_seconds_without_dcn"]
    scanned_dcn = scanned["phases"][0]["dcn"]["collectives"]["ALL_REDUCE"]
    assert scanned_dcn["payload_bytes"] == pytest.approx(
        dcn["collectives"]["ALL_REDUCE"]["payload_bytes"], rel=0.05)


@pytest.mark.slow
def test_fsdp_across_slices_gathers_parameters_over_dcn():
    cfg = tiny_bert_config(**{"mesh.data": 1, "mesh.fsdp": -1, "mesh.dcn_data": 1,
                              "mesh.dcn_fsdp": 2, "global_batch_size": 32})
    result = plan.plan(cfg, "v5e:2x2", num_slices=2, dcn_gbps=100.0)
    assert result["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    assert result["dcn_mesh"] == {"data": 1, "fsdp": 2}
    dcn = result["phases"][0]["dcn"]
    assert "ALL_GATHER" in dcn["collectives"] and dcn["gbps_per_chip"] == 100.0


def test_slices_that_the_mesh_cannot_use_are_one_line():
    cfg = tiny_bert_config(**{"mesh.dcn_data": 3, "global_batch_size": 32})
    with pytest.raises(plan.UserError, match="needs 3 slices but 2 are present"):
        plan.plan(cfg, "v5e:2x2", num_slices=2)


@pytest.mark.slow
def test_attention_kernels_compile_for_v5e_and_the_plan_counts_their_work():
    """The train step with Pallas's splash (BERT) and flash (T5, with its relative
    position bias and a decoder shorter than the kernels' 128 tile, padded) compiles
    deviceless for v5e:2x2, sharded over its 4 chips. The compiler's cost model sees
    nothing inside a Mosaic kernel, so the plan adds each kernel's FLOPs, counted from
    its shapes: forward 4 B H Lq Lk D (half of it causal), backward 3.5x that."""
    bert = plan.plan(tiny_data_parallel(seq_len=128, **{
        "model.attention_impl": "splash",
        "model.hidden_size": 128, "model.num_heads": 2,
        "data.max_predictions_per_seq": 20}), "v5e:2x2")
    kernels = bert["phases"][0]["attention_kernels"]
    assert bert["fits"] and kernels["impl"] == "splash" and kernels["calls"] == TINY_LAYERS
    assert kernels["flops_per_step"] == TINY_LAYERS * 4 * 32 * 2 * 128 * 128 * 64 * 4.5
    assert "attention_dropout_rate=0 (the recipe has 0.1)" in bert["attention_dropout"]
    assert bert["est_step_seconds"] > kernels["est_seconds"] > 0
    assert "attention kernels" in bert["estimate"]

    t5 = plan.plan(tiny_t5_config(**{"mesh.data": -1, "global_batch_size": 16,
                                     "model.attention_impl": "flash"}), "v5e:2x2")
    kernels = t5["phases"][0]["attention_kernels"]
    # encoder self, decoder self (causal), cross: a call each a layer
    assert t5["fits"] and kernels["impl"] == "flash" and kernels["calls"] == 3 * TINY_LAYERS
    assert t5["est_step_seconds"] > kernels["est_seconds"] > 0


@pytest.mark.slow
def test_search_tries_layouts_and_kernels_then_remat_and_micro_batches(monkeypatch):
    """Stage one: every mesh layout with XLA's attention and with the kernel (planned
    without attention dropout); stage two: remat x micro-batches at the best of those.
    The answer is the fastest point that fits, and says when it needs the kernel.
    (One layout, two remats, one micro-batch count here, for the suite's time.)"""
    monkeypatch.setattr(plan, "LAYOUTS", {k: plan.LAYOUTS[k] for k in ("data",)})
    monkeypatch.setattr(plan, "REMATS", ("none", "full"))
    monkeypatch.setattr(plan, "MICRO_BATCHES", (1,))
    cfg = tiny_bert_config(**{"global_batch_size": 16})
    best = plan.plan(cfg, "v5e:2x2", search=True)["phases"][0]
    points = best["search"]
    stage_one = {(p["layout"], p["attention"]) for p in points[:2]}
    assert stage_one == {(lay, att) for lay in plan.LAYOUTS for att in ("xla", "kernel")}
    stage_two = points[2:]
    assert len(stage_two) == 1 and len({(p["layout"], p["attention"]) for p in stage_two}) == 1
    timed = [p for p in points if p["fits"] and p["est_step_seconds"]]
    assert best["est_step_seconds"] == min(p["est_step_seconds"] for p in timed)
    assert (best["attention"] == "kernel") == ("attention_note" in best)


def test_libtpu_starts_and_compiles_without_xla_cpus_own_flags(monkeypatch):
    """libtpu aborts the process on a flag it does not know, XLA:CPU's included: the
    planner hides them while libtpu reads XLA_FLAGS and gives them back after."""
    flags = "--xla_cpu_use_fusion_emitters=false --xla_force_host_platform_device_count=8"
    monkeypatch.setenv("XLA_FLAGS", flags)
    with plan.xla_flags_libtpu_knows():
        assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=8"
    assert os.environ["XLA_FLAGS"] == flags


def test_a_deviceless_compile_leaves_the_persistent_cache_alone():
    """A plan's executable cannot be loaded back without a TPU client, so the planner
    writes none to JAX's persistent cache (on here, as in every test, for programs of
    any compile time), and an entry an older pretrainx wrote there does not make each
    later plan of the same program warn that it could not read it. The program's shape is
    drawn for this run, so no earlier run's entry can stand in for its own (a constant
    would not do: JAX passes it as an argument, outside the cache key)."""
    import pathlib
    import uuid
    import warnings

    import jax
    import jax.numpy as jnp
    import numpy as np

    width = 128 * (1 + uuid.uuid4().int % 4096)

    def doubled_plus_one(x):
        return x * 2 + 1

    devices = plan.topology_devices("v5e:2x2")[0]
    whole = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(devices), ("x",)),
                                       jax.sharding.PartitionSpec("x"))
    lowered = jax.jit(doubled_plus_one).lower(
        jax.ShapeDtypeStruct((8, width), jnp.float32, sharding=whole))
    cache = pathlib.Path(jax.config.jax_compilation_cache_dir)

    def entries():
        return set(p.name for p in cache.glob("jit_doubled_plus_one-*"))

    earlier = entries()  # other widths', from earlier runs
    with warnings.catch_warnings(record=True) as caught, plan.xla_flags_libtpu_knows():
        warnings.simplefilter("always")
        compiled, text = hlo_bytes.compile_with_text(lowered)
        assert "multiply" in text
        assert entries() == earlier
        lowered.compile()  # as pretrainx did before 2026-12-01: an entry no run can load
        assert len(entries() - earlier) == 1
        hlo_bytes.compile_with_text(lowered)
    assert not [w for w in caught if "compilation cache" in str(w.message)], [
        str(w.message)[:300] for w in caught]
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0  # given back after
