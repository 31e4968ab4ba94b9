"""python -m pretrainx.compare: a grid of strategies and modifications pretrained on one
budget and fine-tuned on one suite with seeds, each cell resumable, the table written;
a rerun computes only what is missing; a bad grid is refused in one line."""

import dataclasses
import json
import os
import shutil

import pytest

from conftest import REPO
from pretrainx.compare import __main__ as compare_cli
from pretrainx.compare import grid as grid_lib

TINY_BERT = {"model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 2,
             "model.mlp_dim": 64, "seq_len": 32, "global_batch_size": 8,
             "data.max_predictions_per_seq": 5}


def _grid(tmp_path, cells=None, **extra) -> str:
    cells = cells or {
        "bert": {"config": str(REPO / "configs" / "quickstart.py"), "set": TINY_BERT},
        "bert_relu": {"config": str(REPO / "configs" / "quickstart.py"),
                      "set": dict(TINY_BERT, **{"model.hidden_act": "relu"})},
        "word2vec": {"config": str(REPO / "configs" / "word2vec.py") + ":cpu",
                     "set": {"model.embedding_size": 16}}}
    values = {"CELLS": cells, "BUDGET": {"steps": 3},
              "TASKS": {"sst2": {"task": "sst2", "rows": 40, "held_out": 8, "seq_len": 32,
                                 "epochs": 1, "batch": 8}},
              "SEEDS": [0, 1], "LEARNING_RATES": [1e-3],
              "GLUE_DIR": str(REPO.parent / "shared" / "data" / "glue"), **extra}
    path = tmp_path / "grid.py"
    path.write_text("".join(f"{k} = {v!r}\n" for k, v in values.items()), encoding="utf-8")
    return str(path)


def _run(capsys, *argv) -> dict:
    assert compare_cli.main(list(argv)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_grid_fills_its_table_and_a_rerun_computes_only_what_is_missing(
        shared_data, tmp_path, capsys):
    """Two BERT cells (one a modification: ReLU for GELU) and word2vec (its vectors under
    a task network), 3 steps each, SST-2 with 2 seeds: the table has
    Narang et al.'s columns; a second run trains nothing; a fine-tuning removed is the
    only one redone."""
    grid, work = _grid(tmp_path), tmp_path / "work"
    status = _run(capsys, f"--grid={grid}", f"--workdir={work}", "--status")
    assert [s["state"] for s in status["status"]] == ["missing"] * 3
    _run(capsys, f"--grid={grid}", f"--workdir={work}")
    table = (work / "compare.md").read_text()
    for column in ("params", "FLOPs/step", "steps/s", "early loss", "final loss",
                   "sst2 (mean +- sd)", "task mean"):
        assert column in table
    result = json.loads((work / "compare.json").read_text())
    by_cell = {c["cell"]: c for c in result["cells"]}
    assert by_cell["bert"]["steps"] == by_cell["bert_relu"]["steps"] == 3
    assert by_cell["bert"]["params"] == by_cell["bert_relu"]["params"] > 0
    assert [r["seed"] for r in by_cell["bert"]["tasks"]["sst2"]["runs"]] == [0, 1]
    assert 0 <= by_cell["bert"]["task_mean"] <= 100
    # static vectors fine-tune as the input layer of a task network
    assert [r["seed"] for r in by_cell["word2vec"]["tasks"]["sst2"]["runs"]] == [0, 1]
    assert 0 <= by_cell["word2vec"]["task_mean"] <= 100 and "| word2vec |" in table

    def stamps():
        return {p: os.path.getmtime(p) for p in work.rglob("*")
                if p.name in ("metrics.jsonl", "choice.json")}
    before = stamps()
    _run(capsys, f"--grid={grid}", f"--workdir={work}")
    assert stamps() == before  # nothing trained again
    again = work / "bert_relu" / "finetune" / "sst2" / "s1_lr0.001" / "choice.json"
    again.unlink()
    (work / "bert_relu" / "cell.json").unlink()
    status = _run(capsys, f"--grid={grid}", f"--workdir={work}", "--status")
    assert [s["finetunings"] for s in status["status"]] == ["2/2", "1/2", "2/2"]
    _run(capsys, f"--grid={grid}", f"--workdir={work}")
    after = stamps()
    changed = sorted(str(p.relative_to(work)) for p in after if after[p] != before.get(p))
    assert changed == ["bert_relu/finetune/sst2/s1_lr0.001/choice.json",
                       "bert_relu/finetune/sst2/s1_lr0.001/metrics.jsonl"]


@pytest.mark.slow
def test_a_cell_stopped_before_its_end_is_not_fine_tuned_and_a_rerun_resumes_it(
        shared_data, tmp_path, capsys, monkeypatch):
    """A preemption during a cell's pretraining (stop_at, as a signal would): nothing is
    fine-tuned from the half-trained model, the command says which cell stopped, the
    status says it started; a rerun pretrains it to its budget, then fine-tunes."""
    from pretrainx.compare import cells
    grid = _grid(tmp_path, {"bert": {"config": str(REPO / "configs" / "quickstart.py"),
                                     "set": TINY_BERT}}, SEEDS=[0])
    work = tmp_path / "work"
    whole = cells.pretrain.train
    monkeypatch.setattr(cells.pretrain, "train",
                        lambda cfg, workdir: whole(cfg, workdir, stop_at=2))
    result = _run(capsys, f"--grid={grid}", f"--workdir={work}")
    assert result == {"cells": 0, "stopped": "bert"}
    assert not (work / "bert" / "finetune").exists()
    assert not (work / "bert" / "cell.json").exists()
    status = _run(capsys, f"--grid={grid}", f"--workdir={work}", "--status")
    assert status["status"][0]["state"] == "pretraining started"
    monkeypatch.setattr(cells.pretrain, "train", whole)
    _run(capsys, f"--grid={grid}", f"--workdir={work}")
    record = json.loads((work / "bert" / "cell.json").read_text())
    assert record["steps"] == 3 and [r["seed"] for r in record["tasks"]["sst2"]["runs"]] == [0]


@pytest.mark.parametrize("cells, extra, words", [
    ({"x": {"config": str(REPO / "configs" / "quickstart.py"), "set": {"model.nope": 1}}},
     {}, "cell 'x': sweep key 'model.nope' is not a key"),
    ({"x": {"config": "nowhere.py"}}, {}, "config file .*nowhere.py not found"),
    ({"x": {"config": str(REPO / "configs" / "quickstart.py")}}, {"BUDGET": {"hours": 1}},
     "budget must be"),
    ({"x": {"config": str(REPO / "configs" / "quickstart.py"), "budget": {"flops": -1}}}, {},
     "cell 'x': budget must be"),
    ({"x": {"config": str(REPO / "configs" / "modernbert_lifecycle_quickstart.py")}},
     {"BUDGET": {"minutes": 2}}, "trains in phases, which a minutes budget would cut"),
])
def test_bad_grids_are_refused_in_one_line(tmp_path, capsys, cells, extra, words):
    import re
    grid = _grid(tmp_path, cells, **extra)
    assert compare_cli.main([f"--grid={grid}", f"--workdir={tmp_path / 'w'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(words, err[0]), err


def test_a_minutes_budget_stretches_the_recipe_schedule_over_the_time(tmp_path):
    """The quickstart's 100 warmup steps of 2,500 keep their 4% of the run."""
    quickstart = {"b": {"config": str(REPO / "configs" / "quickstart.py")}}
    grid = grid_lib.read(_grid(tmp_path, quickstart, BUDGET={"minutes": 2}))
    cfg = grid_lib.cell_config(grid, "b")
    assert cfg.optimizer.budget_hours == pytest.approx(2 / 60)
    assert cfg.optimizer.warmup_steps / cfg.total_steps == pytest.approx(100 / 2500)


def test_a_flops_budget_gives_each_cell_the_steps_of_equal_compute(tmp_path):
    """Equal FLOPs: a cell of twice the work a step gets half the steps (whatever else
    runs on the machine); a cell's own budget replaces the grid's; the schedule keeps
    its shares."""
    from pretrainx.train import loop
    wide = dict(TINY_BERT, **{"model.hidden_size": 64, "model.mlp_dim": 128})
    quickstart = str(REPO / "configs" / "quickstart.py")
    cells = {"small": {"config": quickstart, "set": TINY_BERT},
             "wide": {"config": quickstart, "set": wide},
             "own": {"config": quickstart, "set": TINY_BERT, "budget": {"steps": 7}}}
    grid = grid_lib.read(_grid(tmp_path, cells, BUDGET={"flops": 1e12}))
    spent = {}
    for name in ("small", "wide"):
        cfg = grid_lib.cell_config(grid, name)
        per_step = loop.describe(cfg)["flops_per_token"] * cfg.global_batch_size * cfg.seq_len
        assert (cfg.total_steps - 1) * per_step < 1e12 <= cfg.total_steps * per_step
        assert cfg.optimizer.warmup_steps == round(100 * cfg.total_steps / 2500)
        spent[name] = cfg.total_steps
    assert 2 < spent["small"] / spent["wide"] < 4  # 2x the width: 2-4x the work a step
    assert grid_lib.cell_config(grid, "own").total_steps == 7


def test_a_recipes_own_clock_does_not_cut_a_flops_or_steps_budget(tmp_path):
    """Crammed BERT's quickstart ends at 10 minutes of wall clock; under a FLOPs (or
    steps) budget that clock would end it short of the budget on a slow machine (the
    strategies grid's crammed cell stopped at 63% of its FLOPs), so its schedule follows
    the budget's steps instead."""
    crammed = {"c": {"config": str(REPO / "configs" / "crammed_quickstart.py")}}
    for budget in ({"flops": 1e12}, {"steps": 7}):
        cfg = grid_lib.cell_config(grid_lib.read(_grid(tmp_path, crammed, BUDGET=budget)), "c")
        assert cfg.optimizer.budget_hours == 0.0 and cfg.total_steps >= 7, budget
    minutes = grid_lib.read(_grid(tmp_path, crammed, BUDGET={"minutes": 3}))
    assert grid_lib.cell_config(minutes, "c").optimizer.budget_hours == pytest.approx(3 / 60)


def test_a_phased_recipe_keeps_its_phases_shares_under_a_flops_budget(tmp_path):
    """The lifecycle quickstart (128 tokens, the extension to 512, the decay) scaled to
    a budget: each phase keeps its share of the steps, and the FLOPs of its steps at its
    own length add up to the budget."""
    from pretrainx import config as config_lib
    lifecycle = str(REPO / "configs" / "modernbert_lifecycle_quickstart.py")
    recipe = [(p.start, p.end) for p in config_lib.phases(config_lib.load_file(lifecycle))]
    grid = grid_lib.read(_grid(tmp_path, {"l": {"config": lifecycle}},
                               BUDGET={"flops": 4e12}))
    cfg = grid_lib.cell_config(grid, "l")
    phases = grid_lib.phase_flops(cfg)
    scale = cfg.total_steps / recipe[-1][1]
    assert 0 < scale < 0.5 and len(phases) == len(recipe) == 3
    for (start, end, _), (r_start, r_end) in zip(phases, recipe):
        assert abs((end - start) - (r_end - r_start) * scale) <= 1
    spent = sum((end - start) * per_step for start, end, per_step in phases)
    assert spent == pytest.approx(4e12, rel=0.01)
    assert phases[1][2] > phases[0][2]  # the same tokens a step, attention over 4x the length


def test_a_distillation_keeps_its_transfer_steps_and_distils_for_the_rest_of_the_flops(
        pretrained_workdir, tmp_path):
    """A staged cell (MobileBERT from the grid's own BERT, named through {workdir}): its
    layer stages keep their steps, the distillation gets the rest of the budget, the
    teacher's forward pass counted; a teacher not trained yet is refused in one line."""
    from pretrainx import objectives, pretrain
    from pretrainx.errors import UserError
    from test_mobilebert_distill import STUDENT
    root = tmp_path / "compare"
    shutil.copytree(pretrained_workdir, root / "bert" / "pretrain")
    cells = {"m": {"config": str(REPO / "configs" / "mobilebert_distill.py") + ":quickstart",
                   "set": dict(STUDENT, **{"distill.teacher": "{workdir}/bert/pretrain",
                                           "distill.layer_steps": 3})}}
    grid = grid_lib.read(_grid(tmp_path, cells, BUDGET={"flops": 1e11}))
    cfg = grid_lib.cell_config(grid, "m", str(root))
    assert cfg.distill.teacher == f"{root}/bert/pretrain"
    *transfers, (_, last) = objectives.stages(cfg)
    assert [stage.total_steps for _, stage in transfers] == [3, 3]
    teacher = pretrain.imported_models(cfg)
    assert grid_lib.spent(last, teacher) > 1.2 * grid_lib.spent(last)  # the teacher counts
    per_step = grid_lib.spent(last, teacher) / last.total_steps
    total = grid_lib.earlier_stages_flops(cfg, teacher) + grid_lib.spent(last, teacher)
    assert 1e11 <= total < 1e11 + per_step and last.total_steps > 20
    with pytest.raises(UserError, match="bert/pretrain is not there yet"):
        grid_lib.cell_config(grid, "m", str(tmp_path / "elsewhere"))


@pytest.mark.parametrize("name, cells", [("strategies.py", 24), ("quick.py", 5)])
def test_the_shipped_grids_build_and_validate_every_cell(name, cells, tmp_path):
    """benchmarks/grids/*: every strategy and modification is a run that starts (its
    recipe, its keys and the budget pass the recipe's checks); a cell that reads another
    cell's model (its teacher) waits for it under a FLOPs budget, and validates alone
    under a steps budget."""
    from pretrainx import objectives
    from pretrainx.errors import UserError
    grid = grid_lib.read(str(REPO / "benchmarks" / "grids" / name))
    assert len(grid.cells) == cells and os.path.isdir(grid.glue_dir)
    for cell in grid.cells:
        if grid_lib.WORKDIR in repr(grid.cells[cell].get("set")):
            with pytest.raises(UserError, match="not there yet"):
                grid_lib.cell_config(grid, cell, str(tmp_path))
            stepped = dataclasses.replace(grid, budget={"steps": 10})
            objectives.validate(grid_lib.cell_config(stepped, cell, str(tmp_path)))
        else:
            objectives.validate(grid_lib.cell_config(grid, cell))
