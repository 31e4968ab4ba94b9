"""Weights & Biases, offline: the run's W&B log holds the config and the metrics.jsonl
series at their steps, and a resumed run continues the same W&B run."""

import glob
import importlib.util
import json
import os

import jax
import pytest

from conftest import read_metrics, tiny_bert_config
from pretrainx import config as config_lib
from pretrainx.errors import UserError

_BLOCK, _HEADER = 32768, 7  # the LevelDB log layout W&B's .wandb files use


def wandb_records(path):
    """The protobuf records of a .wandb transaction log, in order."""
    from wandb.proto import wandb_internal_pb2 as pb
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b":W&B", path
    pos, parts = _HEADER, []
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # a block's zero-filled tail
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:
            break
        parts.append(data[pos + _HEADER:pos + _HEADER + length])
        pos += _HEADER + length
        if kind in (1, 4):  # a FULL record, or the LAST part of one
            record = pb.Record()
            record.ParseFromString(b"".join(parts))
            parts = []
            yield record


def _logged(run_dir):
    """(run record, [history rows as dicts]) of one offline run directory."""
    run, rows = None, []
    for record in wandb_records(glob.glob(os.path.join(run_dir, "run-*.wandb"))[0]):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
        elif kind == "history":
            rows.append({"/".join(i.nested_key) or i.key: json.loads(i.value_json)
                         for i in record.history.item})
    return run, rows


@pytest.mark.slow
def test_offline_run_holds_config_and_series_and_a_resume_continues_it(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from pretrainx.train import loop
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    workdir = str(tmp_path / "w")
    cfg = tiny_bert_config(**{"total_steps": 3, "eval_every": 3, "logging.wandb": True,
                              "logging.wandb_tags": "tiny,test",
                              "eval_steps": 1})
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    cfg.total_steps = 6
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    runs = sorted(glob.glob(os.path.join(workdir, "wandb", "offline-run-*")))
    assert len(runs) == 2
    stored = open(os.path.join(workdir, "wandb_run_id")).read().strip()
    (first, rows1), (second, rows2) = _logged(runs[0]), _logged(runs[1])
    assert first.run_id == second.run_id == stored
    assert first.project == "pretrainx" and list(first.tags) == ["tiny", "test"]
    assert first.display_name == "w"
    config = {i.key: json.loads(i.value_json) for i in first.config.update}
    assert config["total_steps"] == 3 and config["optimizer"] == cfg.optimizer.to_dict()
    assert config["logging"]["wandb_tags"] == "tiny,test"
    # every train and eval record of metrics.jsonl, at its step, across the resume
    train = [r for r in rows1 + rows2 if "train/loss" in r]
    expected = read_metrics(workdir)
    assert [r["step"] for r in train] == [r["step"] for r in expected] == [1, 2, 3, 4, 5, 6]
    for logged, record in zip(train, expected):  # every number the record holds
        numbers = {f"train/{k}": v for k, v in record.items()
                   if isinstance(v, (int, float)) and k != "step"}
        assert {k: logged[k] for k in numbers} == pytest.approx(numbers, rel=1e-6)
    evals = [r for r in rows1 + rows2 if "eval/loss" in r]
    assert [r["step"] for r in evals] == [r["step"] for r in read_metrics(workdir, "eval")]
    assert [r["step"] for r in evals] == [3, 6]


def test_asking_for_wandb_without_it_is_refused_in_one_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    cfg = tiny_bert_config(**{"logging.wandb": True})
    with pytest.raises(UserError, match=r"logging\.wandb=True needs the wandb package: pip "
                                        r"install -e \"\.\[wandb\]\""):
        config_lib.validate_shared(cfg)


def test_wandb_that_will_not_start_is_one_line_and_the_run_can_go_on(tmp_path, monkeypatch):
    """No login (wandb.init raises): one line saying what to do (it was wandb's own
    traceback), and the same command without W&B then trains in that workdir."""
    wandb = pytest.importorskip("wandb")
    from pretrainx.train import loop

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")
    monkeypatch.setattr(wandb, "init", refuse)
    workdir = str(tmp_path / "w")
    cfg = tiny_bert_config(**{"total_steps": 2, "logging.wandb": True})
    with pytest.raises(UserError, match=r"Weights & Biases did not start \(UsageError: api_key "
                                        r"not configured.*run `wandb login`, or set WANDB_MODE"):
        loop.train(cfg, workdir, devices=jax.devices()[:1])
    cfg.logging.wandb = False
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    assert [r["step"] for r in read_metrics(workdir)] == [1, 2]
