"""Accelerator figures: published dense bf16 peaks, HBM size and bandwidth.

One table for MFU in the metrics and for the planner's estimates. v2, v3 and v4
expose two JAX devices (TensorCores) per chip; the others one.
"""

from typing import NamedTuple

GIB = 1024 ** 3


class Chip(NamedTuple):
    peak_flops: float  # per chip, dense bf16
    hbm_bytes: int  # per chip
    hbm_bandwidth: float  # bytes/s per chip
    devices_per_chip: int
    device_kinds: tuple  # jax Device.device_kind prefixes
    # bytes/s per chip over the data-center network between slices, where Google
    # publishes it (v5e: two 100 Gbit/s NICs per host of 8 chips); None elsewhere
    dcn_bandwidth: float | None = None
    # a TPU core's clock: the peak over the MXUs' multiply-adds a cycle (v5e: 197 TFLOP/s
    # over 4 MXUs of 128 x 128 = 1.5 GHz), what turns the compiler's cycles into seconds
    clock_hz: float | None = None

    @property
    def peak_flops_per_device(self) -> float:
        return self.peak_flops / self.devices_per_chip


CHIPS = {  # keyed by the generation of a topology name (v3:4x4)
    # clocks: v2 1 MXU a core, v3 2, v4 4 (128 x 128), two cores a chip; v5e 4 a chip;
    # v5p 8 (two cores as one device); v6e 4 of 256 x 256 (Trillium's 4.7x over v5e:
    # 4x the MXU area at 1.75 / 1.5 the clock)
    "v2": Chip(45e12, 16 * GIB, 700e9, 2, ("TPU v2",), clock_hz=0.7e9),
    "v3": Chip(123e12, 32 * GIB, 900e9, 2, ("TPU v3",), clock_hz=0.94e9),
    "v4": Chip(275e12, 32 * GIB, 1228e9, 2, ("TPU v4",), clock_hz=1.05e9),
    "v5e": Chip(197e12, 16 * GIB, 819e9, 1, ("TPU v5 lite", "TPU v5e"), 2 * 100e9 / 8 / 8,
                1.5e9),
    "v5p": Chip(459e12, 95 * GIB, 2765e9, 1, ("TPU v5p", "TPU v5"), clock_hz=1.75e9),
    "v6e": Chip(918e12, 32 * GIB, 1640e9, 1, ("TPU v6 lite", "TPU v6e"), clock_hz=1.75e9),
    # NVIDIA's datasheet dense bf16 tensor-core peaks (their sparse figures are twice these)
    "h100": Chip(989e12, 80 * GIB, 3350e9, 1, ("NVIDIA H100",)),  # SXM
    "h100_pcie": Chip(756e12, 80 * GIB, 2000e9, 1, ("NVIDIA H100 PCIe",)),
    "h200": Chip(989e12, 141 * GIB, 4800e9, 1, ("NVIDIA H200",)),
    "a100": Chip(312e12, 80 * GIB, 2039e9, 1, ("NVIDIA A100",)),  # the 40 GB card: same peak
    "l4": Chip(121e12, 24 * GIB, 300e9, 1, ("NVIDIA L4",)),
}


def chip_of_device_kind(kind: str):
    """(generation, Chip) for a jax device_kind, or None. Longest prefix wins, so
    'TPU v5 lite' is v5e, not v5p."""
    matches = [(len(prefix), name) for name, chip in CHIPS.items()
               for prefix in chip.device_kinds if kind.startswith(prefix)]
    if not matches:
        return None
    name = max(matches)[1]
    return name, CHIPS[name]
