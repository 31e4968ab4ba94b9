"""Multi-host: two local processes under jax.distributed (2 CPU devices each, gloo
collectives) must train exactly as one process with 4 devices, and a checkpoint
written by either must resume in the other."""

import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, TINY_CLI, read_metrics

TINY = TINY_CLI + [
    "--config.total_steps=6", "--config.checkpoint_every=3", "--config.keep_checkpoints=2",
    # parameters sharded across the two hosts, the batch over both axes
    "--config.mesh.data=2", "--config.mesh.fsdp=2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train(workdir, processes: int, devices_per_process: int):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices_per_process}")
    command = [sys.executable, "-m", "pretrainx.main", "--config=configs/quickstart.py",
               f"--workdir={workdir}", *TINY]
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


def _copy_at_step_3(src, dst):
    """The workdir as a preemption after step 3 would have left it."""
    shutil.copytree(src, dst)
    shutil.rmtree(os.path.join(dst, "checkpoints", "6"))
    os.remove(os.path.join(dst, "metrics.jsonl"))


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="local multi-process needs Linux")
def test_two_hosts_train_as_one_and_resume_across(tmp_path):
    two, one = tmp_path / "two_hosts", tmp_path / "one_host"
    _train(two, processes=2, devices_per_process=2)
    _train(one, processes=1, devices_per_process=4)
    two_losses, one_losses = _losses(two), _losses(one)
    assert sorted(two_losses) == list(range(1, 7))
    np.testing.assert_allclose([two_losses[s] for s in range(1, 7)],
                               [one_losses[s] for s in range(1, 7)], rtol=1e-5)
    # Only process 0 writes metrics: one record per step, not two.
    assert len(read_metrics(two)) == 6

    _copy_at_step_3(two, tmp_path / "two_then_one")
    out = _train(tmp_path / "two_then_one", processes=1, devices_per_process=4)
    assert "resumed from" in out[0]
    _copy_at_step_3(one, tmp_path / "one_then_two")
    out = _train(tmp_path / "one_then_two", processes=2, devices_per_process=2)
    assert "resumed from" in out[0]
    for resumed in ("two_then_one", "one_then_two"):
        losses = _losses(tmp_path / resumed)
        assert sorted(losses) == [4, 5, 6], (resumed, losses)
        np.testing.assert_allclose([losses[s] for s in (4, 5, 6)],
                                   [one_losses[s] for s in (4, 5, 6)], rtol=1e-5,
                                   err_msg=resumed)
