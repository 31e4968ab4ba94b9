"""Multi-host and multi-slice: two local processes under jax.distributed (2 CPU
devices each, gloo collectives) standing for two slices (mesh.dcn_data=2: data
parallel across the slices, FSDP inside each) must train exactly as one process
with 4 devices, and a checkpoint written by either must resume in the other (there
with ZeRO-1's split optimizer state) and on a run of another data-parallel size (one
process, 2 devices), with the same examples next."""

import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY_CLI, read_metrics, xla_flags

EVAL_BOOK = REPO / "pretrainx" / "assets" / "text" / "pg1342_pride_and_prejudice.txt"

TINY = TINY_CLI + [
    "--config.total_steps=6", "--config.checkpoint_every=3", "--config.keep_checkpoints=2",
    # parameters sharded inside a slice (or host), the batch over both axes
    "--config.mesh.fsdp=2",
    # an eval at the last step, on a book it does not train on
    f"--config.data.eval_files={EVAL_BOOK}", "--config.eval_steps=2"]
# Each process a slice: the data axis spans the two, FSDP stays inside each.
SLICES = ["--config.mesh.dcn_data=2", "--config.mesh.data=1"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(workdir, processes: int, devices_per_process: int, extra=()):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=xla_flags(devices_per_process))
    command = [sys.executable, "-m", "pretrainx.main", "--config=configs/quickstart.py",
               f"--workdir={workdir}", *TINY, *(SLICES if processes > 1 else []), *extra]
    if processes > 1:
        port = _free_port()
        commands = [command + [f"--coordinator_address=127.0.0.1:{port}",
                               f"--num_processes={processes}", f"--process_id={i}"]
                    for i in range(processes)]
    else:
        commands = [command]
    procs = [subprocess.Popen(c, cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for c in commands]
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for i, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"process {i} of {processes} failed:\n{out[-3000:]}"
    return outputs


def _losses(workdir):
    return {r["step"]: r["loss"] for r in read_metrics(workdir)}


def _eval(workdir):
    [record] = read_metrics(workdir, split="eval")
    return {k: record[k] for k in ("loss", "mlm_accuracy")}


def _copy_at_step_3(src, dst):
    """The workdir as a preemption after step 3 would have left it."""
    shutil.copytree(src, dst)
    shutil.rmtree(os.path.join(dst, "checkpoints", "6"))
    os.remove(os.path.join(dst, "metrics.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="local multi-process needs Linux")
def test_two_slices_train_as_one_host_and_resume_on_another_size(tmp_path):
    two, one = tmp_path / "two_slices", tmp_path / "one_host"
    out = _train(two, processes=2, devices_per_process=2)
    assert "mesh {'data': 2, 'fsdp': 2, 'tensor': 1}" in out[0]
    _train(one, processes=1, devices_per_process=4)
    two_losses, one_losses = _losses(two), _losses(one)
    assert sorted(two_losses) == list(range(1, 7))
    np.testing.assert_allclose([two_losses[s] for s in range(1, 7)],
                               [one_losses[s] for s in range(1, 7)], rtol=1e-5)
    # Only process 0 writes metrics: one record per step, not two.
    assert len(read_metrics(two)) == 6
    reference_eval = _eval(one)
    for k, v in _eval(two).items():
        np.testing.assert_allclose(v, reference_eval[k], rtol=1e-5, err_msg=k)

    # Two slices' checkpoint on one process of 2 devices: data-parallel size 4 -> 2.
    _copy_at_step_3(two, tmp_path / "two_then_smaller")
    out = _train(tmp_path / "two_then_smaller", processes=1, devices_per_process=2)
    assert "resumed from" in out[0]
    changed = next(line for line in out[0].splitlines() if "changed since the checkpoint" in line)
    for change in ("processes 2 -> 1", "slices 2 -> 1", "devices 4 -> 2",
                   "data-parallel 4 -> 2", "mesh.dcn_data 2 -> -1",
                   "the same examples follow"):
        assert change in changed, (change, changed)
    # ... and one host's checkpoint on two slices with ZeRO-1 (the optimizer state split
    # over the data axis, across the two processes): the same losses still
    _copy_at_step_3(one, tmp_path / "one_then_two")
    out = _train(tmp_path / "one_then_two", processes=2, devices_per_process=2,
                 extra=["--config.mesh.shard_optimizer=True"])
    assert "resumed from" in out[0] and "slices 1 -> 2" in out[0]
    assert "mesh.shard_optimizer False -> True" in out[0]
    for resumed in ("two_then_smaller", "one_then_two"):
        losses = _losses(tmp_path / resumed)
        assert sorted(losses) == [4, 5, 6], (resumed, losses)
        np.testing.assert_allclose([losses[s] for s in (4, 5, 6)],
                                   [one_losses[s] for s in (4, 5, 6)], rtol=1e-5,
                                   err_msg=resumed)
        for k, v in _eval(tmp_path / resumed).items():
            np.testing.assert_allclose(v, reference_eval[k], rtol=1e-5, err_msg=(resumed, k))
