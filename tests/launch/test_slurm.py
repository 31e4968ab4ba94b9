"""launch/slurm.py: the sbatch script of --dry-run, its submission to a stand-in sbatch,
and that script run by a stand-in srun as two local "nodes": pretrainx.main's start-up
finds SLURM's environment and joins both processes through jax.distributed."""

import os
import pathlib
import random
import shlex
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCHER = REPO / "launch" / "slurm.py"
TRAIN = ["python", "-m", "pretrainx.main", "--config=configs/bert_base.py",
         "--workdir=/shared/runs/bert base"]

# Two tasks of one job step, as srun starts them on two nodes (here both on this one).
STAND_IN_SRUN = """#!/bin/bash
echo "$@" > "$STAND_IN_LOG/srun_args"
while [[ "$1" == --* ]]; do shift; done
pids=()
for id in 0 1; do
  SLURM_NTASKS=2 SLURM_PROCID=$id SLURM_LOCALID=0 SLURM_STEP_NODELIST=localhost \\
    "$@" > "$STAND_IN_LOG/task$id" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait $p || status=1; done
exit $status
"""

STAND_IN_SBATCH = """#!/bin/bash
echo "$@" > "$STAND_IN_LOG/sbatch_args"
cat > "$STAND_IN_LOG/submitted.sh"
echo "4242;cluster"
"""


@pytest.fixture
def cluster(tmp_path):
    """A bin directory with the stand-ins first on PATH, and where they write."""
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir(), log.mkdir()
    for name, text in (("srun", STAND_IN_SRUN), ("sbatch", STAND_IN_SBATCH)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               STAND_IN_LOG=str(log), JAX_PLATFORMS="cpu")
    return env, log


def launch(*args, env=None):
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_dry_run_prints_one_task_per_node_and_the_quoted_command():
    result = launch("--nodes=4", "--gpus_per_node=8", "--partition=h100", "--time=48:00:00",
                    "--dry-run", "--", *TRAIN, env=dict(os.environ, PATH="/nonexistent"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--nodes=4", "--ntasks-per-node=1", "--gpus-per-node=8",
                      "--partition=h100", "--time=48:00:00", "--exclusive"):
        assert f"#SBATCH {directive}" in lines, directive
    srun = [ln for ln in lines if ln.startswith("srun ")]
    assert len(srun) == 1 and shlex.split(srun[0])[2:] == TRAIN  # the space stays quoted


def test_submits_to_sbatch_and_the_script_joins_two_processes(cluster, tmp_path):
    env, log = cluster
    probe = ("from absl import flags; from pretrainx import main; import jax; "
             "flags.FLAGS(['probe']); main._init_distributed(); "
             "print('process', jax.process_index(), 'of', jax.process_count())")
    result = launch("--nodes=2", "--gpus_per_node=1", "--", sys.executable, "-c", probe,
                    env=env)
    assert result.returncode == 0, result.stderr
    assert "submitted job 4242" in result.stdout and "pretrainx-4242.out" in result.stdout
    assert (log / "sbatch_args").read_text().split() == ["--parsable"]
    script = log / "submitted.sh"
    # What SLURM would do with it: run it on the first node with the job's id set.
    run = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=REPO,
                         env=dict(env, SLURM_JOB_ID=str(random.randrange(1, 4000))),
                         timeout=120)
    outputs = [(log / f"task{i}").read_text() for i in (0, 1)]
    assert run.returncode == 0, outputs
    assert (log / "srun_args").read_text().startswith("--kill-on-bad-exit=1 ")
    assert "process 0 of 2" in outputs[0] and "process 1 of 2" in outputs[1], outputs


def test_detects_slurm_and_open_mpi_jobs_but_not_one_task():
    from pretrainx.main import cluster_detected
    assert cluster_detected({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "16"})
    assert not cluster_detected({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"})  # salloc + python
    assert cluster_detected({"OMPI_COMM_WORLD_SIZE": "4"})
    assert not cluster_detected({})


def test_bad_input_is_one_line():
    for args, words in ((["--nodes=2"], "after --"), (["--nodes=0", "--", "x"], "--nodes=0"),
                        (["--", "true"], "sbatch not found")):
        result = launch(*args, env=dict(os.environ, PATH="/nonexistent"))
        assert result.returncode == 1 and result.stderr.strip().startswith("error: "), args
        assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1, args
