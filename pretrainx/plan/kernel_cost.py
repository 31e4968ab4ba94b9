"""The attention kernels' work in a planned train step: the compiler's cost model
cannot see inside a Mosaic kernel, so the planner counts its FLOPs and HBM bytes from
the shapes the kernels were called with (pretrainx.models.attention.recording)."""

from pretrainx.train.chips import CHIPS


def kernel_work(calls, global_batch, remat, generation, devices_per_chip, n_devices) -> dict:
    """FLOPs and HBM bytes of a train step's attention kernels, which the compiler's cost
    model cannot see into, and their seconds at the chip's roofline.

    Per call (global shapes, rows scaled to the step's batch: a micro-batched step
    traces one micro-batch): the forward's two matmuls (QK^T, PV) are 4 B H Lq Lk D
    FLOPs, halved for a causal mask (the kernels skip blocks above the diagonal; with a
    sliding window, Lk is the key blocks a query block meets); the
    backward's two kernels (dK/dV, then dQ) recompute the scores and do 7 matmuls in
    all, 3.5x the forward; a rematerialised step runs the forward twice. Bytes: each
    kernel reads its blocked operand once per block of the other side (128 long)."""
    calls, chip = list(calls), CHIPS[generation]
    flops = bytes_ = 0.0
    for c in calls:
        rows = global_batch / c.batch
        nq, nk = -(-c.q_len // 128), -(-c.kv_len // 128)  # attend pads to whole blocks
        # A sliding window: a block meets at most 2 ceil(w / 128) + 1 blocks of the other side
        band = 2 * -(-c.window // 128) + 1 if c.window else max(nq, nk)
        q_len, kv_len = 128 * nq, 128 * nk
        q_met, kv_met = 128 * min(nq, band), 128 * min(nk, band)  # per block of the other
        fwd = 4.0 * c.batch * c.heads * q_len * kv_met * c.head_dim * rows
        if c.causal and q_len == kv_len:
            fwd /= 2
        flops += fwd * (1 + 3.5 + (remat != "none"))
        per = c.batch * rows * c.heads * c.head_dim * c.itemsize
        fwd_bytes = per * (2 * q_len + 2 * kv_met * nq)  # q, o; k, v per q block
        bwd_bytes = (per * (4 * kv_len + 3 * q_met * nk)  # dK/dV: q, o, dO per kv block
                     + per * (3 * q_len + 2 * kv_met * nq))  # dQ: k, v per q block
        bytes_ += fwd_bytes * (1 + (remat != "none")) + bwd_bytes
    flops_dev, bytes_dev = flops / n_devices, bytes_ / n_devices
    seconds = max(flops_dev / (chip.peak_flops / devices_per_chip),
                  bytes_dev / (chip.hbm_bandwidth / devices_per_chip))
    impls = sorted({c.impl for c in calls})
    return {"impl": "/".join(impls), "calls": len(calls), "flops_per_step": flops,
            "flops_per_device": flops_dev, "bytes_per_device": bytes_dev,
            "est_seconds": seconds,
            "note": "the compiler's cost model cannot see inside a Mosaic kernel; these "
                    "FLOPs and bytes are counted from the shapes and added at the roofline"}
