"""Downstream probes: a checkpoint fine-tuned on a small task, logged as probe/* at
the checkpoint's step, by the command and in the background of a run."""

import json
import shutil

import jax
import pytest

from cli_fork import run_module
from conftest import tiny_bert_config
from pretrainx.evaluate import probe as probe_lib
from pretrainx.errors import UserError
from pretrainx.train import loop


def _small(probe, shared_data):
    probe.update(task="sst2", glue_dir=str(shared_data / "glue"), max_train_examples=96,
                 holdout_examples=32, epochs=1, seq_len=64, global_batch_size=16)
    return probe


def _records(workdir):
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("split") == "probe"]


@pytest.mark.slow
def test_probe_fine_tunes_a_checkpoint_and_reads_it_back(shared_data, pretrained_workdir,
                                                         tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(pretrained_workdir, workdir)
    with pytest.raises(UserError, match="probe.task is empty"):
        probe_lib.settings(str(workdir))
    probe = _small(probe_lib.settings(str(workdir), "sst2", "unused"), shared_data)
    record = probe_lib.probe_step(str(workdir), 3, probe)
    assert record["split"] == "probe" and record["step"] == 3 and record["task"] == "sst2"
    assert 0.0 <= record["accuracy"] <= 1.0 and record["chosen_epoch"] == 1
    assert not any(k.startswith("holdout_") for k in record)  # dev only is reported
    chosen = json.loads((workdir / "probe" / "3" / "finetune" / "config.json").read_text())
    assert chosen["init_from"].endswith("checkpoints/3") and chosen["data"]["holdout_examples"] == 32
    assert probe_lib.probe_step(str(workdir), 3, probe) == record  # done once, read back


def test_bad_probe_config_is_refused():
    with pytest.raises(UserError, match="probe.every_steps=5 must be a multiple of "
                                        "checkpoint_every=3"):
        loop.train(tiny_bert_config(**{"probe.every_steps": 5, "probe.task": "sst2",
                                       "probe.glue_dir": "x"}), "/tmp/never")
    with pytest.raises(UserError, match="probe.task is empty"):
        loop.train(tiny_bert_config(**{"probe.every_steps": 3}), "/tmp/never")
    with pytest.raises(UserError, match="probe.retrieval_dir is empty"):
        loop.train(tiny_bert_config(**{"probe.every_steps": 3, "probe.task": "retrieval"}),
                   "/tmp/never")


@pytest.mark.slow
def test_a_run_probes_in_the_background_and_logs_probe_scalars(shared_data, tmp_path):
    """Two checkpoints, two background probes, two probe records at their steps; the
    command afterwards finds nothing left to do."""
    cfg = tiny_bert_config(total_steps=4, checkpoint_every=2, **{"probe.every_steps": 2})
    _small(cfg.probe, shared_data)
    workdir = tmp_path / "run"
    loop.train(cfg, str(workdir), devices=jax.devices()[:1])
    records = _records(workdir)
    assert [r["step"] for r in records] == [2, 4], records
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["seconds"] > 0 for r in records)
    assert probe_lib.checkpoint_steps(str(workdir)) == [2, 4]
    events = list((workdir / "tensorboard").glob("events.*"))
    if events:  # tensorboardX installed: the scalars are under probe/
        assert b"probe/accuracy" in events[0].read_bytes()
    # The command does what the run left: here only the probe removed afterwards.
    shutil.rmtree(workdir / "probe" / "4")
    out = run_module("pretrainx.evaluate.probe", [f"--workdir={workdir}"])
    assert out.returncode == 0, out.stderr[-2000:]
    printed = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["step"] for r in printed] == [4]
    assert [r["step"] for r in _records(workdir)] == [2, 4, 4]
