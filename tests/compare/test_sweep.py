"""Sweeps: trials from a grid or a random search, failures recorded, reruns skip."""

import csv
import json

import pytest

from conftest import load_config, tiny_bert_config
from pretrainx.compare import sweep
from pretrainx.errors import UserError


def test_grid_names_workdirs_and_configs(tmp_path):
    base = load_config("quickstart.py")
    trials = sweep.grid(base, {"optimizer.learning_rate": [1e-4, 3e-4],
                               "model.num_layers": [2, 4]}, root=str(tmp_path))
    assert [t.name for t in trials] == [
        "learning_rate=0.0001,num_layers=2", "learning_rate=0.0001,num_layers=4",
        "learning_rate=0.0003,num_layers=2", "learning_rate=0.0003,num_layers=4"]
    assert trials[3].config.optimizer.learning_rate == 3e-4
    assert trials[3].config.model.num_layers == 4 and base.model.num_layers == 2
    assert trials[1].workdir == str(tmp_path / trials[1].name)
    commands = sweep.commands(trials, "configs/quickstart.py", tpu_vm="--name=s --zone=z")
    assert commands[1].startswith("launch/tpu_vm.sh train --name=s --zone=z -- python -m "
                                  "pretrainx.main --config=configs/quickstart.py")
    assert "--config.model.num_layers=4" in commands[1]
    with pytest.raises(UserError, match="sweep key 'optimizer.lr'"):
        sweep.grid(base, {"optimizer.lr": [1e-3]})


def test_random_search_is_reproducible():
    base = load_config("quickstart.py")
    space = {"optimizer.learning_rate": sweep.log_uniform(1e-4, 1e-2),
             "model.num_heads": [1, 2, 4]}
    a = sweep.random_search(base, space, 6, seed=3)
    b = sweep.random_search(base, space, 6, seed=3)
    assert [t.name for t in a] == [t.name for t in b]
    rates = [t.overrides["optimizer.learning_rate"] for t in a]
    assert all(1e-4 <= r <= 1e-2 for r in rates) and len(set(rates)) == len(rates)


def test_failures_are_recorded_and_reruns_skip_finished_trials(tmp_path):
    calls = []

    def fake_train(cfg, workdir):
        calls.append(cfg.optimizer.learning_rate)
        if cfg.optimizer.learning_rate > 1e-2:
            raise FloatingPointError("loss diverged")
        return {"eval": {"loss": cfg.optimizer.learning_rate * 100, "mlm_accuracy": 0.2}}

    base = load_config("quickstart.py")
    trials = sweep.grid(base, {"optimizer.learning_rate": [1e-3, 3e-2, 1e-4]},
                        root=str(tmp_path))
    rows = sweep.run(trials, fake_train)
    assert [r["status"] for r in rows] == ["done", "failed", "done"]
    assert rows[1]["error"] == "FloatingPointError: loss diverged"
    assert sweep.best(rows, "eval_loss")["trial"] == "learning_rate=0.0001"
    table = list(csv.DictReader(open(tmp_path / "results.csv")))
    assert [r["trial"] for r in table] == [t.name for t in trials]
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 3
    calls.clear()
    sweep.run(trials, fake_train)  # the finished two are skipped, the failed one retried
    assert calls == [3e-2]


@pytest.mark.slow
def test_a_real_sweep_trains_its_trial(tmp_path):
    base = tiny_bert_config(total_steps=2, eval_every=2, checkpoint_every=2)
    trials = sweep.grid(base, {"optimizer.learning_rate": [3e-3]}, root=str(tmp_path))
    rows = sweep.run(trials)
    assert rows[0]["status"] == "done" and rows[0]["eval_loss"] > 0
    assert json.loads((tmp_path / trials[0].name / "trial.json").read_text())["status"] == "done"
