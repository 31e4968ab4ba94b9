"""The chip table behind MFU (metrics) and the planner's estimates."""

import pytest

from pretrainx.train import chips


@pytest.mark.parametrize("kind,generation,per_device", [
    ("TPU v3", "v3", 61.5e12),  # two TensorCores (JAX devices) per chip
    ("TPU v4", "v4", 137.5e12),
    ("TPU v5 lite", "v5e", 197e12),  # not v5p, although "TPU v5" is a prefix of it
    ("TPU v5", "v5p", 459e12),
    ("TPU v6 lite", "v6e", 918e12),
    ("NVIDIA H100 80GB HBM3", "h100", 989e12),
    ("NVIDIA H100 PCIe", "h100_pcie", 756e12),  # the longer prefix wins over SXM's
    ("NVIDIA H200", "h200", 989e12),
    ("NVIDIA A100-SXM4-40GB", "a100", 312e12),
    ("NVIDIA L4", "l4", 121e12),
])
def test_device_kinds_map_to_per_device_peaks(kind, generation, per_device):
    name, chip = chips.chip_of_device_kind(kind)
    assert name == generation and chip.peak_flops_per_device == per_device


def test_unknown_devices_have_no_peak():
    assert chips.chip_of_device_kind("cpu") is None


@pytest.mark.parametrize("topology", ["v2:2x2", "v3:2x2", "v4:2x2x1", "v5e:2x2", "v6e:2x2"])
def test_devices_per_chip_agree_with_libtpu(topology):
    pytest.importorskip("libtpu", reason="libtpu not installed (pip install 'pretrainx[plan]')")
    from pretrainx.plan import planner as plan
    devices, generation, per_chip = plan.topology_devices(topology)
    assert per_chip == chips.CHIPS[generation].devices_per_chip


def test_tpu_clocks_match_their_mxus():
    """A TPU core's peak over its clock is a whole number of 128 x 128 MXUs' multiply-adds
    (v3 2, v4 and v5e 4, v5p 8, v6e 16: four of 256 x 256)."""
    mxus = {"v2": 1, "v3": 2, "v4": 4, "v5e": 4, "v5p": 8, "v6e": 16}
    for name, count in mxus.items():
        chip = chips.CHIPS[name]
        per_cycle = chip.peak_flops_per_device / chip.clock_hz
        assert abs(per_cycle / (count * 128 * 128 * 2) - 1) < 0.02, name  # v2: 45 is 45.9
