"""Faults and bad input at the CLI, as a table: what the user sees and what is kept.

    python benchmarks/faults.py [--only=NAME,NAME] [--markdown]

Trains a tiny quickstart run once (2 steps, a checkpoint at 2), then runs every
case against a copy of it: a fault done to the workdir, the data or the command line,
and `python -m pretrainx.main` (or the command the case names). Prints one JSON line
per case: the exit code, the line printed (`error:` or the run's last line), and
whether the committed files (checkpoints, config.json, metrics.jsonl) are unchanged,
by SHA-256 before and after. `--markdown` prints the table docs/reliability.md keeps.
Each case is also a test somewhere in tests/ (named in its row); this is the picture.
"""

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
BOOK = REPO / "pretrainx" / "assets" / "text" / "pg11_alice_in_wonderland.txt"
TINY = ["--config.total_steps=2", "--config.model.num_layers=1",
        "--config.model.hidden_size=32", "--config.model.num_heads=2",
        "--config.model.mlp_dim=64", "--config.global_batch_size=4", "--config.seq_len=32",
        "--config.data.max_predictions_per_seq=5", "--config.data.dupe_factor=1",
        "--config.eval_steps=1", "--config.checkpoint_every=2",
        f"--config.data.train_files={BOOK}"]


def _committed(workdir: pathlib.Path) -> str:
    """One hash of every committed file: checkpoints, config.json, metrics.jsonl."""
    digest = hashlib.sha256()
    for path in sorted(workdir.rglob("*")):
        rel = path.relative_to(workdir)
        if path.is_file() and not path.is_symlink() and (
                rel.parts[0] == "checkpoints" or rel.name in ("config.json", "metrics.jsonl")):
            digest.update(str(rel).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _said(result) -> str:
    """The line that tells the user what happened: an error, else a warning, else what
    changed on resume, else the last line."""
    lines = [ln.strip() for ln in (result.stderr + "\n" + result.stdout).splitlines()
             if ln.strip()]
    for wanted in ("error: ", "warning: ", "changed since"):
        found = [ln for ln in lines if wanted in ln]
        if found:
            return found[0]
    return lines[-1] if lines else ""


# name -> (what is done, the test that holds it, prepare(workdir, scratch) -> CLI args)
def _truncate_shard(w, scratch):
    prep = scratch / "prep"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-m", "pretrainx.data", "prepare",
                    "--config=configs/quickstart.py", f"--output={prep}", "--workers=1",
                    "--config.data.docs_per_shard=5"] + TINY, cwd=REPO, env=env, check=True,
                   capture_output=True)
    shard = sorted(prep.glob("train0/seq32/examples-*.array_record"))[1]
    shard.write_bytes(shard.read_bytes()[:shard.stat().st_size // 2])
    return [f"--config.data.prepared_dir={prep}", "--config.data.docs_per_shard=5",
            "--config.total_steps=4"]


def _vocab(lines):
    def prepare(w, scratch):
        path = scratch / "vocab.txt"
        path.write_text("\n".join(lines) + "\n")
        return [f"--config.data.tokenizer={path}"]
    return prepare


def _file(name, content):
    def prepare(w, scratch):
        path = scratch / name
        path.write_bytes(content)
        return [f"--config.data.train_files={path}"]
    return prepare


def _glue_extra_field(w, scratch):
    glue = scratch / "glue" / "RTE"
    glue.mkdir(parents=True)
    rows = "index\tsentence1\tsentence2\tlabel\n0\tA cat sat.\tA cat sat down.\tentailment\n"
    (glue / "train.tsv").write_text(rows + "1\tIt rained, and\tit poured.\tThe street was wet."
                                    "\tentailment\n")
    (glue / "dev.tsv").write_text(rows)
    return ["FINETUNE", f"--config.data.glue_dir={scratch / 'glue'}",
            f"--config.init_from={w}", "--config.task=rte", f"--workdir={scratch / 'ft'}"]


def _with_colon(w, scratch):
    folder = scratch / "runs:2026"
    folder.mkdir()
    shutil.copy(REPO / "configs" / "quickstart.py", folder / "quickstart.py")
    return ["CONFIG", str(folder / "quickstart.py")]


def _lock_dir(w, scratch):
    (w / ".lock").unlink(missing_ok=True)
    (w / ".lock").mkdir()
    return ["--config.total_steps=4"]


def _ckpt_file(w, scratch):
    fresh = scratch / "fresh"
    fresh.mkdir()
    (fresh / "checkpoints").write_text("not a folder")
    return ["WORKDIR", str(fresh)]


def _damage_newest(w, scratch):
    step = w / "checkpoints" / "2"
    for path in sorted(step.rglob("*")):
        if path.is_file() and path.stat().st_size > 1000:
            path.write_bytes(path.read_bytes()[:100])
            break
    return ["--config.total_steps=4"]


def _edit_config_json(w, scratch):
    path = w / "config.json"
    cfg = json.loads(path.read_text())
    cfg["model"]["hidden_act"] = "relu"
    path.write_text(json.dumps(cfg))
    return ["EXPORT", f"--output={scratch / 'hf'}"]


CASES = {
    "unknown config key": ("--config.totl_steps=5", "test_bad_input::test_cli_bad_input",
                           lambda w, s: ["--config.totl_steps=5"]),
    "missing corpus": ("data.train_files names no file", "test_bad_input::test_cli_bad_input",
                       lambda w, s: ["--config.data.train_files=/nonexistent/*.txt"]),
    "empty corpus": ("an empty text file", "test_bad_input::test_empty_corpus",
                     _file("empty.txt", b"")),
    "binary corpus": ("a binary file named .txt", "test_bad_input::test_cli_bad_input",
                      _file("binary.txt", bytes(range(256)) * 64)),
    "vocab: duplicate line": ("a WordPiece vocab.txt with a line twice",
                              "test_bad_input::test_a_wordpiece_vocab_whose_ids_would_shift",
                              _vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
                                      "the", "a"])),
    "batch vs devices": ("global_batch_size=3 on 2 data-parallel devices",
                         "test_bad_input::test_batch_not_dividing_data_axes",
                         lambda w, s: ["DEVICES", "--config.global_batch_size=3"]),
    "another model": ("resume with model.num_layers=2 on a 1-layer run",
                      "test_reliability::test_resume_refuses_another_model",
                      lambda w, s: ["--config.model.num_layers=2", "--config.total_steps=4"]),
    "total_steps lowered": ("total_steps=1 below the checkpoint at 2",
                            "test_reliability::test_total_steps_changed_on_resume",
                            lambda w, s: ["--config.total_steps=1"]),
    ".lock is a directory": ("WORKDIR/.lock made a folder",
                             "test_bad_input::test_a_lock_that_is_a_directory", _lock_dir),
    "checkpoints is a file": ("WORKDIR/checkpoints is a file",
                              "test_reliability::test_a_checkpoint_folder_that_cannot_be",
                              _ckpt_file),
    "unknown mesh axis": ("sharding_rules naming 'fsdpp'",
                          "test_bad_input::test_sharding_rules_naming_an_axis",
                          lambda w, s: ["--config.sharding_rules=(('batch', ('data', 'fsdpp')),)"]),
    "':' in config path": ("--config=.../runs:2026/quickstart.py",
                           "test_bad_input::test_a_config_path_with_a_colon", _with_colon),
    "truncated prepared shard": ("an ArrayRecord shard cut in half",
                                 "test_bad_input::test_a_truncated_prepared_shard",
                                 _truncate_shard),
    "huge dupe_factor": ("data.dupe_factor=10000000",
                         "test_data_scale::test_a_dupe_factor_that_would_not_fit",
                         lambda w, s: ["--config.data.dupe_factor=10000000"]),
    "GLUE row too wide": ("a train.tsv row with a tab inside a sentence",
                          "test_finetune::test_bad_glue_files_name_the_file_and_line",
                          _glue_extra_field),
    "total_steps raised": ("resume with total_steps=4 after a run to 2",
                           "test_reliability::test_total_steps_changed_on_resume",
                           lambda w, s: ["--config.total_steps=4"]),
    "config.json edited, then export": ("WORKDIR/config.json says relu; export",
                                        "test_interop::test_an_edited_config_json_does_not",
                                        _edit_config_json),
    "newest checkpoint damaged": ("a file of checkpoint 2 cut to 100 bytes; resume to 4",
                                  "test_reliability::test_a_damaged_newest_checkpoint",
                                  _damage_newest),
}


def run_case(name, trained: pathlib.Path) -> dict:
    what, test, prepare = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = pathlib.Path(tmp)
        workdir = scratch / "w"
        shutil.copytree(trained, workdir, symlinks=True)
        (workdir / ".lock").unlink(missing_ok=True)
        args = prepare(workdir, scratch)
        config, module, tiny, env_devices = "configs/quickstart.py", "pretrainx.main", True, None
        if args and args[0] == "FINETUNE":
            module, config, tiny, args = "pretrainx.main", "configs/finetune_glue.py", False, (
                args[1:] + ["--config.epochs=1", "--config.global_batch_size=2",
                            "--config.eval_batch_size=2", "--config.seq_len=32"])
        elif args and args[0] == "EXPORT":
            module, config, tiny, args = "pretrainx.export", None, False, args[1:]
        elif args and args[0] == "CONFIG":
            config, args = args[1], []
        elif args and args[0] == "WORKDIR":
            workdir, args = pathlib.Path(args[1]), []
        elif args and args[0] == "DEVICES":
            env_devices, args = 2, args[1:]
        before = _committed(workdir)
        if not any(a.startswith("--workdir=") for a in args):
            args = args + [f"--workdir={workdir}"]
        result = _run(args, module, config, tiny, env_devices)
        return {"case": name, "what": what, "exit": result.returncode, "said": _said(result),
                "committed_unchanged": _committed(workdir) == before, "test": test}


def _run(args, module, config, tiny, devices):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}" if devices else "")
    cmd = ([sys.executable, "-m", module] + ([f"--config={config}"] if config else [])
           + (TINY if tiny else []) + args)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"unknown case {unknown[0]!r}; cases: {', '.join(CASES)}")
    with tempfile.TemporaryDirectory() as tmp:
        trained = pathlib.Path(tmp) / "trained"
        result = _run([f"--workdir={trained}"], "pretrainx.main", "configs/quickstart.py", True,
                      None)
        if result.returncode:
            sys.exit(f"the tiny run failed: {result.stderr[-2000:]}")
        rows = [run_case(name, trained) for name in names]
    for row in rows:
        print(json.dumps(row))
    if args.markdown:
        print("\n| fault or bad input | exit | what the user sees | committed files |")
        print("|---|---|---|---|")
        for r in rows:
            said = r["said"].replace("|", "\\|")
            kept = "unchanged" if r["committed_unchanged"] else "changed"
            print(f"| {r['what']} | {r['exit']} | `{said}` | {kept} |")


if __name__ == "__main__":
    main()
