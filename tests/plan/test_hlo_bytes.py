"""Counting a compiled step's bytes from its HLO text (pretrainx/plan/hlo_bytes.py)."""

from pretrainx.plan import hlo_bytes

# A small module as a TPU compile prints it: tiled layouts, an on-chip (S(1)) copy, a
# loop whose body runs a fusion, and op_name metadata from two layers of a model.
HLO = """HloModule jit_step

%fused_computation (p0: bf16[3,100]) -> bf16[3,100] {
  %p0 = bf16[3,100]{1,0:T(8,128)(2,1)} parameter(0)
  ROOT %n = bf16[3,100]{1,0:T(8,128)(2,1)} negate(%p0)
}

%body (w: bf16[3,100]) -> bf16[3,100] {
  %w = bf16[3,100]{1,0:T(8,128)(2,1)} parameter(0)
  ROOT %h = bf16[3,100]{1,0:T(8,128)(2,1)} fusion(%w), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(step)/while/body/neg"}, backend_config={"flag_configs":[],"estimated_cycles":"100"}
}

%cond (c: (s32[], bf16[3,100])) -> pred[] {
  %c = (s32[], bf16[3,100]{1,0:T(8,128)(2,1)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%c), index=0
  %four = s32[]{:T(128)} constant(4)
  ROOT %k = pred[]{:T(512)} compare(%i, %four), direction=LT
}

ENTRY %main.9_spmd (a: bf16[3,100], b: f32[256,128]) -> (bf16[3,100], f32[256,128]) {
  %a = bf16[3,100]{1,0:T(8,128)(2,1)} parameter(0)
  %b = f32[256,128]{1,0:T(8,128)} parameter(1)
  %f = bf16[3,100]{1,0:T(8,128)(2,1)} fusion(%a), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(step)/jvp(Model)/layer_3/mlp/neg"}, backend_config={"estimated_cycles":"50","used_scoped_memory_configs":[]}
  %cs = (f32[256,128]{1,0:T(8,128)}, f32[256,128]{1,0:T(8,128)S(1)}, u32[]{:S(2)}) copy-start(%b)
  %cd = f32[256,128]{1,0:T(8,128)S(1)} copy-done(%cs)
  %g = f32[256,128]{1,0:T(8,128)} fusion(%cd), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(step)/transpose(jvp(Model))/layer_11/mlp/neg"}
  %l = bf16[3,100]{1,0:T(8,128)(2,1)} while(%f), condition=%cond, body=%body
  ROOT %t = (bf16[3,100]{1,0:T(8,128)(2,1)}, f32[256,128]{1,0:T(8,128)}) tuple(%l, %g)
}
"""

TILE_BF16 = 8 * 128 * 2  # bf16[3,100] padded to one (8, 128) tile
F32 = 256 * 128 * 4


def test_arrays_are_padded_to_their_tile_and_on_chip_memory_is_marked():
    assert hlo_bytes.array_bytes("bf16[3,100]{1,0:T(8,128)(2,1)}") == TILE_BF16
    assert hlo_bytes.array_bytes("bf16[3,100]{1,0:T(8,128)(2,1)}", padded=False) == 600
    # a column-major layout pads the other dimension: 3 -> 128 minor, 100 -> 104
    assert hlo_bytes.array_bytes("f32[3,100]{0,1:T(8,128)}") == 128 * 104 * 4
    assert hlo_bytes.arrays("(f32[4]{0:T(128)S(1)}, s32[2]{0})") == [(512, True), (8, False)]


def test_each_instruction_reads_its_operands_and_writes_its_result():
    rows = {r["name"]: r for r in hlo_bytes.instruction_bytes(HLO)}
    assert set(rows) == {"f", "cs", "g", "h"}  # parameters, -done, tuples are free
    assert rows["f"]["bytes"] == rows["f"]["hbm_bytes"] == 2 * TILE_BF16
    # the prefetch reads HBM and writes on-chip memory; its consumer reads on chip
    assert (rows["cs"]["bytes"], rows["cs"]["hbm_bytes"]) == (2 * F32, F32)
    assert (rows["g"]["bytes"], rows["g"]["hbm_bytes"]) == (2 * F32, F32)
    # the loop's body, once per iteration (i < 4), where XLA's cost analysis counts it once
    assert rows["h"]["hbm_bytes"] == 4 * 2 * TILE_BF16 and rows["h"]["times"] == 4


def test_bytes_are_grouped_by_the_model_code_that_made_them():
    parts = hlo_bytes.by_part(hlo_bytes.instruction_bytes(HLO))
    assert parts[0] == {"part": "Model/layer_N/mlp/neg", "bytes": 2 * TILE_BF16 + F32,
                        "share": round((2 * TILE_BF16 + F32) / (10 * TILE_BF16 + 2 * F32), 4)}
    assert {p["part"] for p in parts} == {"Model/layer_N/mlp/neg", "(copy-start)",
                                          "while/body/neg"}


def test_the_roofline_says_what_bounds_the_step():
    common = dict(hlo_text=HLO, cost_bytes=1e9, flops=1e6, peak=1e12, bandwidth=1e9)
    by_bytes = hlo_bytes.traffic(model_flops=1e6, **common)
    assert by_bytes["bound_hbm_only"] == "hbm_bytes"
    assert by_bytes["hbm_bytes"] == 10 * TILE_BF16 + 2 * F32
    assert by_bytes["on_chip_bytes"] == 2 * F32
    by_flops = hlo_bytes.traffic(model_flops=1e10, **common)
    assert by_flops["bound_hbm_only"] == "flops" and by_flops["mfu_bound_hbm_only"] == 1.0


def test_the_compilers_cycles_are_summed_per_iteration():
    """Each fusion's estimated_cycles (the TPU compiler's own per-op model), a loop body's
    once per iteration, turned into seconds at the chip's clock; none without a clock."""
    rows = {r["name"]: r for r in hlo_bytes.instruction_bytes(HLO)}
    assert (rows["f"]["cycles"], rows["h"]["cycles"], rows["g"]["cycles"]) == (50, 400, 0)
    out = hlo_bytes.traffic(HLO, cost_bytes=1e9, flops=1e6, model_flops=1e6, peak=1e12,
                            bandwidth=1e9, clock_hz=1e3)
    assert out["compiler_cycles"] == 450 and out["compiler_cycles_seconds"] == 0.45
    assert abs(out["compiler_cycles_mfu"] - 1e6 / 1e12 / 0.45) < 1e-15
    assert hlo_bytes.traffic(HLO, 1e9, 1e6, 1e6, 1e12, 1e9)["compiler_cycles_seconds"] is None


def test_a_slice_prefetch_counts_the_same_as_jax_prints_it_or_libtpu_dumps_it():
    """jax prints an asynchronous slice as slice-start; libtpu's own dump (read where
    jax cannot print a program) wraps it as async-start of a computation whose root is
    the slice. Either way it reads the slice it writes, not the whole operand."""
    head = ("HloModule m\n\n%wrapped (p: f32[1024,128]) -> f32[256,128] {\n"
            "  %p = f32[1024,128]{1,0:T(8,128)} parameter(0)\n"
            "  ROOT %s = f32[256,128]{1,0:T(8,128)S(1)} slice(%p), slice={[0:256], [0:128]}\n"
            "}\n\n")
    entry = ("ENTRY %main (a: f32[1024,128]) -> f32[256,128] {\n"
             "  %a = f32[1024,128]{1,0:T(8,128)} parameter(0)\n"
             "  %ss = ((f32[1024,128]{1,0:T(8,128)}), f32[256,128]{1,0:T(8,128)S(1)}, "
             "s32[]{:S(2)}) OP\n"
             "  ROOT %sd = f32[256,128]{1,0:T(8,128)S(1)} slice-done(%ss)\n}\n")
    printed = entry.replace("OP", "slice-start(%a), slice={[0:256], [0:128]}")
    dumped = entry.replace("OP", "async-start(%a), calls=%wrapped")
    rows = [hlo_bytes.instruction_bytes(text) for text in (printed, head + dumped)]
    assert [(r["opcode"], r["bytes"], r["hbm_bytes"]) for r in rows[0]] == \
        [(r["opcode"], r["bytes"], r["hbm_bytes"]) for r in rows[1]] == \
        [("slice-start", 2 * F32, F32)]


# ZeRO-1's collectives as libtpu writes them: the gradients' reduce-scatter as a fusion
# calling %all-reduce-scatter (inside it, the all-reduce it stands for), a scalar
# all-reduce, and an all-gather of the new parameters inside a loop run twice.
COLLECTIVES_HLO = """HloModule jit_step

%all-reduce-scatter.3 (input_0: f32[64,16]) -> f32[16,16] {
  %input_0 = f32[64,16]{1,0} parameter(0)
  %all-reduce.9 = f32[64,16]{1,0} all-reduce(%input_0), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %s = f32[16,16]{1,0} dynamic-slice(%all-reduce.9, %z, %z), dynamic_slice_sizes={16,16}
}

%body (w: f32[16,16]) -> f32[64,16] {
  %w = f32[16,16]{1,0:T(8,128)} parameter(0)
  ROOT %ag = f32[64,16]{1,0:T(8,128)} all-gather(%w), channel_id=3, replica_groups={{0,1,2,3}}, dimensions={0}
}

%cond (c: (s32[], f32[16,16])) -> pred[] {
  %c = (s32[], f32[16,16]{1,0}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%c), index=0
  %two = s32[]{:T(128)} constant(2)
  ROOT %k = pred[]{:T(512)} compare(%i, %two), direction=LT
}

ENTRY %main (g: f32[64,16], n: f32[]) -> f32[64,16] {
  %g = f32[64,16]{1,0:T(8,128)} parameter(0)
  %n = f32[]{:T(128)} parameter(1)
  %rs = f32[16,16]{1,0:T(8,128)S(1)} fusion(%g), kind=kCustom, calls=%all-reduce-scatter.3, metadata={op_name="jit(step)/sharding_constraint"}
  %norm = f32[]{:T(128)} all-reduce(%n), channel_id=2, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %l = f32[64,16]{1,0:T(8,128)} while(%rs), condition=%cond, body=%body
}
"""


def test_collectives_count_libtpus_reduce_scatter_fusion_as_one():
    counted = hlo_bytes.collectives(COLLECTIVES_HLO)
    assert counted == {
        "reduce-scatter": {"count": 1, "bytes": 16 * 16 * 4, "input_bytes": 64 * 16 * 4},
        "all-reduce": {"count": 1, "bytes": 4, "input_bytes": 4},  # not the one inside
        "all-gather": {"count": 2, "bytes": 2 * 64 * 16 * 4, "input_bytes": 2 * 16 * 16 * 4}}
