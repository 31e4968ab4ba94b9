"""DistilBERT's claim at CPU size: a student of half the teacher's depth keeps most of its
accuracy, and beats the same student trained alone for the same steps.

    python benchmarks/distil_claim.py [--steps=150] [--eval_steps=4] [--workdir=DIR]
        [--teacher=tests/fixtures/quickstart_teacher_900]

The teacher is the quickstart's BERT-Tiny stopped at step 900 (stored in the tests'
data: an HF export, eval MLM accuracy 0.19 on the unseen Alice). Two runs of
configs/distil_quickstart.py's one-layer student, `--steps` each on the same rows:
distilled (DistilBERT's loss, started from the teacher's first layer) and from scratch
(fresh weights, MLM loss only). Both are evaluated on the same Alice rows beside the
teacher. The last line is one JSON object: student, teacher and scratch eval MLM
accuracy, the student's share of the teacher's, and whether it beats scratch.
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from pretrainx import config as config_lib, pretrain  # noqa: E402

SCRATCH = {"alpha_ce": 0.0, "alpha_cos": 0.0, "alpha_mlm": 1.0, "init_from_teacher": False,
           "freeze_positions": False}


def _run(args, workdir: str, scratch: bool) -> dict:
    cfg = config_lib.load_file(os.path.join(REPO, "configs", "distil_quickstart.py"))
    cfg.total_steps = cfg.eval_every = cfg.checkpoint_every = args.steps
    cfg.log_every, cfg.eval_steps = max(args.steps // 3, 1), args.eval_steps
    cfg.distill.teacher = args.teacher
    if scratch:
        cfg.distill.update(SCRATCH)
    pretrain.train(cfg, workdir)
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        evals = [r for r in map(json.loads, f) if r.get("split") == "eval"]
    return evals[-1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--eval_steps", type=int, default=4)
    parser.add_argument("--teacher", default=os.path.join(REPO, "tests", "fixtures",
                                                          "quickstart_teacher_900"))
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="pretrainx-distil-claim-")
    distilled = _run(args, os.path.join(work, "distilled"), scratch=False)
    scratch = _run(args, os.path.join(work, "scratch"), scratch=True)
    student, teacher = distilled["mlm_accuracy"], distilled["teacher_mlm_accuracy"]
    out = {"steps": args.steps, "student": student, "teacher": teacher,
           "scratch": scratch["mlm_accuracy"], "student_over_teacher": student / teacher,
           "beats_scratch": student > scratch["mlm_accuracy"]}
    print(f"teacher {teacher:.4f} | student {student:.4f} ({100 * student / teacher:.1f}% of "
          f"the teacher's) | scratch {scratch['mlm_accuracy']:.4f}, {args.steps} steps each")
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
