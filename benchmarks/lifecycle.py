"""What each phase of a lifecycle run did: every phase's last checkpoint evaluated as its
own phase and as each later one.

    python benchmarks/lifecycle.py [--workdir=DIR]

Trains configs/modernbert_lifecycle_quickstart.py (128-token rows, then 512 with the
global RoPE base raised, then a decay on another mix at 15% masking; minutes on 2
cores), or reads a finished `--workdir` of any named-phase run. Each phase's end
checkpoint is evaluated with `pretrainx.evaluate.heldout --phase` on every batch of the eval
sources: as its own phase, as every later phase (their length, RoPE bases and eval
masking), and as every later phase but with its own model keys (a pretraining model at
the extension's length with the base it was trained with). Prints one line an
evaluation; the last line is one JSON object. Evaluations, not timings: one run each.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import ml_collections  # noqa: E402

from pretrainx import config as config_lib, pretrain  # noqa: E402
from pretrainx.train import loop  # noqa: E402

ALL_BATCHES = 10_000  # eval_steps above the eval sources' batches: each batch once


def _config(workdir):
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        return ml_collections.ConfigDict(json.load(f))


def _evaluate(workdir, step, cfg, phase, scratch):
    """Checkpoint `step` of `workdir` evaluated as `phase` of `cfg` (a copy of the
    checkpoint alone, so that it is the newest)."""
    one = tempfile.mkdtemp(dir=scratch)
    shutil.copytree(os.path.join(workdir, "checkpoints", str(step)),
                    os.path.join(one, "checkpoints", str(step)))
    cfg = cfg.copy_and_resolve_references()
    cfg.eval_steps = ALL_BATCHES
    return loop.evaluate(cfg, one, phase=phase)["eval"]


def model_differences(phase, source) -> dict:
    """{model key: source's value} where `phase`'s model keys differ from `source`'s."""
    return {k: v for k, v in source.cfg.model.items() if phase.cfg.model[k] != v}


def with_model_of(cfg, phase, source):
    """cfg with `phase` running the model keys of phase `source` (what it trained with)."""
    cfg = cfg.copy_and_resolve_references()
    own = cfg.phases[phase.name]
    if "model" not in own:
        own.model = ml_collections.ConfigDict()
    own.model.update(model_differences(phase, source))
    return cfg


def measure(workdir) -> list:
    """[{checkpoint, trained_in, evaluated_as, seq_len, model, loss, mlm_accuracy}]."""
    cfg = _config(workdir)
    every = config_lib.phases(cfg)
    if len(every) < 2 or not every[0].name:
        raise SystemExit(f"{workdir} is not a run of named phases (phase_order)")
    for p in every:
        if not os.path.isdir(os.path.join(workdir, "checkpoints", str(p.end))):
            raise SystemExit(f"{workdir}/checkpoints/{p.end} ({p.name}'s end) is gone: run with "
                             "keep_checkpoints large enough to keep every phase's end")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for i, trained in enumerate(every):
            for later in every[i:]:
                variants = [("as trained there", cfg)]
                if later is not trained and model_differences(later, trained):
                    variants.append((f"{trained.name}'s model keys",
                                     with_model_of(cfg, later, trained)))
                for model, c in variants:
                    result = _evaluate(workdir, trained.end, c, later.name, scratch)
                    row = {"checkpoint": trained.end, "trained_in": trained.name,
                           "evaluated_as": later.name, "seq_len": later.seq_len,
                           "model": model, "loss": result["loss"],
                           "mlm_accuracy": result.get("mlm_accuracy")}
                    print(f"checkpoint {row['checkpoint']:>6} ({trained.name:>10}) as "
                          f"{later.name:>10} at {later.seq_len:>5} tokens ({model}): loss "
                          f"{row['loss']:.4f}  MLM accuracy {row['mlm_accuracy']:.4f}",
                          flush=True)
                    rows.append(row)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default=None,
                        help="a finished named-phase run (default: train the quickstart)")
    args = parser.parse_args()
    workdir = args.workdir
    if workdir is None:
        workdir = tempfile.mkdtemp(prefix="lifecycle-")
        cfg = config_lib.load_file(os.path.join(REPO, "configs",
                                                "modernbert_lifecycle_quickstart.py"))
        pretrain.train(cfg, workdir)
    print(json.dumps({"workdir": workdir, "evaluations": measure(workdir)}))


if __name__ == "__main__":
    main()
