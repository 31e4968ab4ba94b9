"""A comparison's grid (python -m pretrainx.compare --grid=FILE): which strategies, on what
budget, fine-tuned on which tasks with which seeds and rates.

A grid is a Python file (upper-case names; those starting with _ are the file's own) or
YAML (lower-case keys):

    CELLS = {"bert": {"config": "configs/quickstart.py"},
             "bert_relu": {"config": "configs/quickstart.py",
                           "set": {"model.hidden_act": "relu"}},   # a modification
             "word2vec": {"config": "configs/word2vec.py:cpu"}}
    BUDGET = {"flops": 1.5e13}     # training FLOPs a cell; or {"minutes": M}, {"steps": N}
    TASKS = {"sst2_500": {"task": "sst2", "rows": 500, "held_out": 100, "seq_len": 64,
                          "epochs": 5, "batch": 16}}
    SEEDS = [0, 1, 2]
    LEARNING_RATES = [3e-4, 1e-3]
    GLUE_DIR = "../shared/data/glue"  # relative paths: to the grid file's folder

A cell is a recipe (`config`, with `:ARG` as --config takes it), dotted keys it sets
(`set`, refused in one line when the recipe lacks one) and optionally a `budget` of its
own (the static vectors' cells: a FLOPs budget sized for transformers would be millions
of their steps). A FLOPs budget is the steps whose training FLOPs (the family's
flops_per_token, as MFU counts them, x tokens a step) reach it: equal compute whatever
else runs on the machine, where a minutes budget gives a cell the steps the machine
allowed it (optimizer.budget_hours). Under any budget the recipe's warmup and decay
keep their share of the run (train/budget.py; as benchmarks/recipes.py runs recipes).
A phased recipe scales every phase's steps (and its own warmup and decay) by one
factor, its FLOPs counted phase by phase; a minutes budget would end it in its first
phase and is refused. A staged recipe (objectives.stages: MobileBERT's transfer a
layer, then distillation) keeps its earlier stages' steps and gives the last the rest
of a FLOPs budget, the teacher's forward pass counted. "{workdir}" in a `set` value is
the comparison's workdir: a cell can distil another cell's model. A cell pretrains on
its recipe's own data.
"""

import dataclasses
import importlib.util
import math
import os

import ml_collections

from pretrainx import config as config_lib
from pretrainx import objectives, phasing, pretrain
from pretrainx.compare import sweep
from pretrainx.errors import UserError

# in a cell's `set` values, the comparison's --workdir: another cell's run as this one's
# teacher ({"distill.teacher": "{workdir}/bert/pretrain"})
WORKDIR = "{workdir}"
UPPER = 1_000_000  # a minutes budget's schedule resolution (the budget ends the run)
TASK_KEYS = ("task", "rows", "held_out", "seq_len", "epochs", "batch")
DEFAULT_TASKS = {  # low-resource sizes of the bundled tasks
    "sst2_500": {"task": "sst2", "rows": 500, "held_out": 100, "seq_len": 64, "epochs": 5,
                 "batch": 16},
    "mrpc_1000": {"task": "mrpc", "rows": 1000, "held_out": 200, "seq_len": 128, "epochs": 5,
                  "batch": 16},
    "stsb_1000": {"task": "stsb", "rows": 1000, "held_out": 200, "seq_len": 128, "epochs": 5,
                  "batch": 16},
    "conll_1000": {"task": "conll2003", "rows": 1000, "held_out": 200, "seq_len": 128,
                   "epochs": 5, "batch": 16},
}


@dataclasses.dataclass
class Grid:
    path: str
    cells: dict
    budget: dict
    tasks: dict
    seeds: tuple
    learning_rates: tuple
    glue_dir: str


def _read_python(path: str) -> dict:
    spec = importlib.util.spec_from_file_location("pretrainx_compare_grid", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name.lower(): getattr(module, name) for name in dir(module)
            if name.isupper() and not name.startswith("_")}


def _read_yaml(path: str) -> dict:
    import yaml
    with open(path, encoding="utf-8") as f:
        try:
            values = yaml.safe_load(f) or {}
        except yaml.YAMLError as e:
            raise UserError(f"--grid={path}: not YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(values, dict):
        raise UserError(f"--grid={path}: expected a mapping of cells, budget, tasks, ...")
    return values


def _check_budget(budget, where: str) -> None:
    if not isinstance(budget, dict) or len(budget) != 1 or \
            not set(budget) <= {"minutes", "steps", "flops"} or \
            not float(next(iter(budget.values()))) > 0:
        raise UserError(f"{where} must be {{'flops': F}}, {{'minutes': M}} or {{'steps': N}}, "
                        f"got {budget!r}")


def budget_of(grid: Grid, name: str) -> dict:
    """Cell `name`'s budget: its own, else the grid's."""
    return grid.cells[name].get("budget", grid.budget)


def read(path: str) -> Grid:
    """The grid file at `path`, checked: every problem is one line naming the key."""
    if not os.path.isfile(path):
        raise UserError(f"--grid={path}: file not found")
    values = _read_python(path) if path.endswith(".py") else _read_yaml(path)
    unknown = set(values) - {"cells", "budget", "tasks", "seeds", "learning_rates", "glue_dir"}
    if unknown:
        raise UserError(f"--grid={path}: unknown key(s) {', '.join(sorted(unknown))}")
    cells = values.get("cells") or {}
    if not isinstance(cells, dict) or not cells:
        raise UserError(f"--grid={path}: 'cells' must name at least one cell")
    for name, cell in cells.items():
        if not isinstance(cell, dict) or "config" not in cell or \
                set(cell) - {"config", "set", "budget"}:
            raise UserError(f"--grid={path}: cell {name!r} must be {{'config': ..., 'set': "
                            "{...}, 'budget': {...}}} ('set' and 'budget' optional)")
        if "budget" in cell:
            _check_budget(cell["budget"], f"--grid={path}: cell {name!r}: budget")
    budget = values.get("budget") or {}
    _check_budget(budget, f"--grid={path}: budget")
    tasks = values.get("tasks", DEFAULT_TASKS)
    for name, task in tasks.items():
        if not isinstance(task, dict) or set(task) != set(TASK_KEYS):
            raise UserError(f"--grid={path}: task {name!r} must give {', '.join(TASK_KEYS)}")
    folder = os.path.dirname(os.path.abspath(path))
    glue_dir = os.path.normpath(os.path.join(folder, values.get("glue_dir", "")))
    cells = {name: dict(cell, config=os.path.join(folder, cell["config"])
                        if not os.path.isabs(cell["config"]) else cell["config"])
             for name, cell in cells.items()}
    return Grid(path=path, cells=cells, budget=dict(budget), tasks=dict(tasks),
                seeds=tuple(values.get("seeds", (0, 1, 2))),
                learning_rates=tuple(values.get("learning_rates", (3e-4, 1e-3))),
                glue_dir=glue_dir)


def phase_flops(cfg, imported: dict | None = None) -> list:
    """[(start, end, training FLOPs a step)] of each phase of the run: its objective's
    flops_per_token at its length, x its tokens a step; `imported`: the models it reads
    (a teacher's forward pass counts)."""
    out = []
    for phase in config_lib.phases(cfg):
        objective = objectives.build(phase.cfg or cfg, tokenizer=None, imported=imported)
        out.append((phase.start, phase.end, objective.flops_per_token(phase)
                    * phase.global_batch_size * phase.seq_len))
    return out


def spent(cfg, imported: dict | None = None) -> float:
    """Training FLOPs of the whole of `cfg`'s run, phase by phase."""
    return sum((end - start) * per_step for start, end, per_step in phase_flops(cfg, imported))


def earlier_stages_flops(cfg, imported: dict | None = None) -> float:
    """Training FLOPs of the stages before a staged recipe's last (a distillation's layer
    by layer transfer): a FLOPs budget keeps their steps and gives the last the rest."""
    return sum(spent(stage_cfg, imported) for _, stage_cfg in objectives.stages(cfg)[:-1])


def imported_models(cfg, name: str) -> dict | None:
    """The models cell `name` reads (a teacher), loaded, for its FLOPs; one not there yet
    is refused in one line (the cell that trains it comes first)."""
    wanted = objectives.imports(cfg)
    missing = [path for path in wanted.values() if "://" not in path
               and not os.path.exists(path)]
    if missing:
        raise UserError(f"cell {name!r}: {', '.join(missing)} is not there yet: its FLOPs "
                        "count the model it reads (a teacher's forward pass); run the cell "
                        "that trains it first")
    return pretrain.imported_models(cfg) or None


def _scale_schedule(cfg, scale: float) -> None:
    """The recipe's steps x `scale`: total_steps, warmup and decay, and each named
    phase's steps (or tokens) and its own warmup and decay, each keeping its share."""
    def scaled(n):
        return max(1, round(n * scale)) if n else 0

    o = cfg.optimizer
    o.warmup_steps = scaled(o.warmup_steps)
    if "decay_steps" in o:
        o.decay_steps = scaled(o.decay_steps)
    rest = 0  # steps of the named phases before the last (which takes the rest)
    if phasing.named(cfg):
        names = [phase.name for phase in phasing.phases(cfg)]
        for phase_name in names:
            keys = cfg.phases[phase_name]
            for key in ("steps", "tokens"):
                if keys.get(key):
                    keys[key] = scaled(keys[key])
                    if key == "steps" and phase_name != names[-1]:
                        rest += keys[key]
            for key in ("warmup_steps", "decay_steps"):
                if "optimizer" in keys and keys.optimizer.get(key):
                    keys.optimizer[key] = scaled(keys.optimizer[key])
    cfg.total_steps = max(1, rest + 1, math.ceil(cfg.total_steps * scale))


def cell_config(grid: Grid, name: str, root: str = ".") -> ml_collections.ConfigDict:
    """Cell `name`'s pretraining config: its recipe, its `set` keys (WORKDIR in a value:
    the comparison's workdir `root`), the budget."""
    cell = grid.cells[name]
    keys = {k: v.replace(WORKDIR, root) if isinstance(v, str) else v
            for k, v in cell.get("set", {}).items()}
    try:
        cfg = sweep.apply_overrides(config_lib.load_file(cell["config"]), keys)
    except UserError as e:
        raise UserError(f"cell {name!r}: {e}") from None
    budget = budget_of(grid, name)
    phased = len(config_lib.phases(cfg)) > 1
    if "minutes" in budget:
        if phased:
            raise UserError(f"cell {name!r}: {cell['config']} trains in phases, which a "
                            "minutes budget would cut in the first: give it a flops or "
                            "steps budget")
        steps = UPPER  # the clock ends the run
        cfg.optimizer.budget_hours = float(budget["minutes"]) / 60
    elif "flops" in budget:
        imported = imported_models(cfg, name)
        before = earlier_stages_flops(cfg, imported)
        if before >= float(budget["flops"]):
            raise UserError(f"cell {name!r}: its stages before the last spend {before:.3g} "
                            f"FLOPs, the whole budget of {float(budget['flops']):.3g}")
        steps = cfg.total_steps * (float(budget["flops"]) - before) / spent(
            objectives.stages(cfg)[-1][1], imported)
    else:
        steps = int(budget["steps"])
    if "minutes" not in budget and cfg.optimizer.budget_hours:
        # the recipe's own clock (crammed BERT's 10 minutes) would end the run before the
        # budget's steps on a slow machine: its schedule and batch ramp follow steps here
        cfg.optimizer.budget_hours = 0.0
    _scale_schedule(cfg, steps / cfg.total_steps)
    cfg.log_every = min(cfg.log_every, 50)
    cfg.eval_every = cfg.checkpoint_every = cfg.total_steps
    cfg.keep_checkpoints = 1
    return cfg
