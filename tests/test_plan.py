"""The planner: deviceless TPU compilation of the real train step (needs libtpu)."""

import pytest

from conftest import tiny_bert_config, tiny_t5_config

pytest.importorskip("libtpu", reason="libtpu not installed (pip install 'pretrainx[plan]')")

from pretrainx import plan  # noqa: E402


@pytest.mark.parametrize("topology,devices,chips", [("v5e:2x2", 4, 4), ("v3:2x2", 8, 4)])
def test_plans_a_tiny_bert_on_small_slices(topology, devices, chips):
    cfg = tiny_bert_config(**{"mesh.data": -1, "global_batch_size": 32})
    result = plan.plan(cfg, topology)
    assert result["devices"] == devices and result["chips"] == chips
    assert result["mesh"]["data"] == devices and result["fits"] is True
    assert 0 < result["per_device_bytes"] < result["hbm_bytes_per_device"]
    assert result["est_step_seconds"] > 0 and 0 < result["est_mfu"] < 1
    assert result["est_days"] > 0
    if topology.startswith("v5e"):  # this libtpu's v5e cost model answers < 0
        assert result["estimate"].startswith("roofline")


@pytest.mark.slow
def test_flop_formula_agrees_with_the_compiler():
    """Model FLOPs (the MFU numerator) within 10% of XLA's count for the whole step, at
    widths where matmuls dominate as they do in real models (at width 64 LayerNorm,
    softmax and the optimizer are 15% of the step)."""
    wide = {"model.hidden_size": 256, "model.mlp_dim": 1024, "global_batch_size": 32}
    for cfg in (tiny_bert_config(seq_len=128, **wide, **{"data.max_predictions_per_seq": 20}),
                tiny_t5_config(**wide, **{"model.head_dim": 64})):
        phase = plan.plan(cfg, "v5e:2x2")["phases"][0]
        ratio = phase["model_flops_per_step"] / phase["flops_per_step"]
        assert 0.9 < ratio < 1.1, (cfg.objective, ratio)


def test_out_of_memory_is_reported_not_raised():
    cfg = tiny_bert_config(global_batch_size=2 ** 17, **{"model.hidden_size": 512,
                                                        "model.mlp_dim": 2048})
    result = plan.plan(cfg, "v5e:2x2")
    assert result["fits"] is False
    assert result["phases"][0]["compiler_message"]


def test_scanned_layers_fit_but_get_no_step_time():
    """XLA's cost analysis counts a loop body once: a scanned stack would look
    several times cheaper than it is, so the planner gives memory but no time."""
    cfg = tiny_bert_config(**{"mesh.data": -1, "global_batch_size": 32,
                              "model.num_layers": 4, "model.scan_layers": True})
    result = plan.plan(cfg, "v3:2x2")
    assert result["fits"] is True and result["per_device_bytes"] > 0
    assert result["est_step_seconds"] is None and result["est_days"] is None
    assert "scan_layers" in result["estimate"]
