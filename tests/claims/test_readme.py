"""Every command in the README and the docs runs, so they cannot rot.

The fenced ```bash and ```python blocks are read from README.md and docs/*.md. Placeholders (a
gs:// bucket, /data/... corpora, DIR) become local stand-ins, each training command
gets overrides that shrink it to seconds, and every command of a block runs in order
in one scratch directory, as a reader would paste them. Each command must match a
rule below; a command that none covers fails the test, so a new one cannot slip in
untested. The install steps and the test command are what `.ci/run` executes: for
those the test checks that `.ci/run` runs them as the README says.
"""

import gzip
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess

import numpy as np
import pytest

from cli_fork import run_module, run_script
from conftest import REPO, SHARED_DATA

README = REPO / "README.md"
# The pages whose commands run: the README and every page of docs/.
PAGES = [README] + sorted((REPO / "docs").glob("*.md"))
CI = REPO / ".ci" / "run"
TEXT = REPO / "pretrainx" / "assets" / "text"
ALICE = TEXT / "pg11_alice_in_wonderland.txt"

BERT_TINY = {"total_steps": 2, "global_batch_size": 8, "seq_len": 32, "log_every": 1,
             "eval_every": 2, "eval_steps": 1, "checkpoint_every": 2,
             "model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 2,
             "model.mlp_dim": 64, "phase2.fraction": 0.0, "data.dupe_factor": 1,
             "data.max_predictions_per_seq": 5, "optimizer.warmup_steps": 1}
T5_TINY = {"total_steps": 2, "global_batch_size": 8, "seq_len": 64, "log_every": 1,
           "eval_every": 2, "eval_steps": 1, "checkpoint_every": 2,
           "model.num_layers": 1, "model.num_decoder_layers": 1, "model.hidden_size": 32,
           "model.num_heads": 2, "model.head_dim": 16, "model.mlp_dim": 64,
           "optimizer.warmup_steps": 1}
GPT2_TINY = {"total_steps": 2, "global_batch_size": 8, "seq_len": 32, "log_every": 1,
             "eval_every": 2, "eval_steps": 1, "checkpoint_every": 2,
             "model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 2,
             "model.mlp_dim": 64, "optimizer.warmup_steps": 1}
ELMO_TINY = {"total_steps": 2, "global_batch_size": 8, "seq_len": 8, "log_every": 1,
             "eval_every": 2, "eval_steps": 1, "checkpoint_every": 2,
             "model.filters": "1:8,2:8", "model.num_highway": 1, "model.lstm_dim": 32,
             "model.projection_dim": 16, "model.vocab_size": 512}
FINETUNE_TINY = {"epochs": 1, "global_batch_size": 8, "eval_batch_size": 8, "seq_len": 32,
                 "log_every": 1, "data.max_train_examples": 16,
                 "data.max_eval_examples": 16}
# The shrinking overrides of each recipe file the README names (by its name's prefix).
# T5Gemma's stacks and the Gemma 2 it adapts share one shape (adapt.* takes no other)
GEMMA2_SHAPE = {"model.num_layers": 1, "model.hidden_size": 32, "model.num_heads": 2,
                "model.num_kv_heads": 1, "model.head_dim": 16, "model.mlp_dim": 64,
                "model.query_pre_attn_scalar": 16}
MODERNBERT_TINY = {**GPT2_TINY, "data.max_predictions_per_seq": 10, "model.local_attention": 8,
                   "optimizer.decay_steps": 1, "data.train_files": str(ALICE), "phase_order": ""}
TINY = {"t5gemma": {**T5_TINY, **GEMMA2_SHAPE, "model.num_decoder_layers": 1,
                    **{k.replace("model.", "model.decoder_"): v for k, v in GEMMA2_SHAPE.items()
                       if k != "model.num_layers"},
                    "data.targets_length": 64, "data.train_files": str(ALICE)},
        "gemma2": {**GPT2_TINY, **GEMMA2_SHAPE, "model.max_position_embeddings": 32},
        "quickstart": {**BERT_TINY, "data.train_files": str(ALICE)}, "bert": BERT_TINY,
        "t5": {**T5_TINY, "data.train_files": str(ALICE)}, "gpt2": GPT2_TINY,
        "ul2": {**T5_TINY, "data.targets_length": 64, "data.train_files": str(ALICE)},
        "bart": {**GPT2_TINY, "model.num_decoder_layers": 1,
                 "model.max_position_embeddings": 32, "data.train_files": str(ALICE)},
        "elmo": {**ELMO_TINY, "data.train_files": str(ALICE)}, "finetune": FINETUNE_TINY,
        "roberta": {**GPT2_TINY, "data.max_predictions_per_seq": 5},
        "crammed": {**GPT2_TINY, "data.max_predictions_per_seq": 10,
                    "optimizer.budget_hours": 0.0, "optimizer.batch_ramp": 0.0,
                    "optimizer.accumulate_to": 1},
        # the release's phases set aside (their steps are the recipe's): one phase
        "modernbert": MODERNBERT_TINY, "ettin": MODERNBERT_TINY,
        # two of the eight languages: the mixing and the per-language eval, in seconds
        "multilingual": {**GPT2_TINY, "data.max_predictions_per_seq": 5,
                         "data.train_files": ";".join(
                             str(SHARED_DATA / "corpus" / "multilingual" / f"fortunes.{x}.txt")
                             for x in ("pt", "es")),
                         "data.train_source_names": "pt,es"},
        "spanbert": {**GPT2_TINY, "data.max_predictions_per_seq": 5,
                     "model.vocab_size": 30522},
        "electra": {**GPT2_TINY, "model.hidden_size": 48, "model.embedding_size": 16,
                    "data.max_predictions_per_seq": 5},
        "mobilebert": {**GPT2_TINY, "data.max_predictions_per_seq": 5, "data.dupe_factor": 1,
                       "model.intra_size": 16, "model.embedding_size": 8},
        "albert": {**GPT2_TINY, "data.max_predictions_per_seq": 5, "data.dupe_factor": 1,
                   "model.vocab_size": 4096, "model.embedding_size": 16},
        "deberta": {**GPT2_TINY, "data.max_predictions_per_seq": 5,
                    "model.position_buckets": 8, "model.max_relative_positions": 32},
        "qwen3": {**GPT2_TINY, "model.num_kv_heads": 1, "model.head_dim": 16},
        "gemma3": {**GPT2_TINY, "model.head_dim": 16, "model.query_pre_attn_scalar": 16},
        # the model of the gemma3 run it continues (init_from takes no other shape)
        "llm2vec": {**GPT2_TINY, "model.head_dim": 16, "model.query_pre_attn_scalar": 16},
        "biphasic": {**GPT2_TINY, "data.max_predictions_per_seq": 10,
                     "model.local_attention": 8, "optimizer.decay_steps": 1,
                     "phases.clm.steps": 1},
        "mdlm": {**GPT2_TINY, "data.max_predictions_per_seq": 32, "model.local_attention": 8,
                 "optimizer.decay_steps": 1},
        # configs/mdlm.py:gemma3 continues the gemma3 run (its model's shape)
        "mdlm:gemma3": {**GPT2_TINY, "model.head_dim": 16, "model.query_pre_attn_scalar": 16},
        "word2vec": {"total_steps": 4, "global_batch_size": 8, "seq_len": 32, "log_every": 1,
                     "eval_every": 4, "eval_steps": 1, "checkpoint_every": 4,
                     "model.embedding_size": 16},
        # a student of the quickstart's shrunk teacher: its width, one layer
        "distil": {k: v for k, v in BERT_TINY.items()
                   if k not in ("phase2.fraction", "data.dupe_factor")}}


def fenced_blocks(markdown: str):
    """(line number, language, body) of every fenced block."""
    blocks, lines, i = [], markdown.splitlines(), 0
    while i < len(lines):
        opening = re.match(r"\s*```(\w*)\s*$", lines[i])
        if not opening:
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        start, body = i + 1, []
        i += 1
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:])
            i += 1
        blocks.append((start, opening.group(1), "\n".join(body)))
        i += 1
    return blocks


def shell_steps(body: str):
    """A bash block as its commands, each a list of words ('|' kept as a word); lines
    joined at trailing backslashes, comments dropped, `&&` splitting commands."""
    steps = []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            steps.append(words[:cut])
            words = words[cut + 1:]
    return steps


def _blocks_to_run():
    """(page name, line, language, body) of every command block of every page."""
    return [(page.relative_to(REPO).as_posix(), *b) for page in PAGES
            for b in fenced_blocks(page.read_text(encoding="utf-8")) if b[1] in ("bash", "python")]


def test_docs_pages_are_found():
    assert README in PAGES and any(p.name == "architecture.md" for p in PAGES), PAGES


def test_readme_has_only_runnable_command_blocks():
    """A command under another fence language would escape the test below."""
    for page in PAGES:
        blocks = fenced_blocks(page.read_text(encoding="utf-8"))
        languages = {lang for _, lang, _ in blocks}
        assert languages <= {"", "bash", "python"}, (page.name, languages)
        for line, lang, body in blocks:
            if lang == "":  # sample output or a picture, not commands
                assert not re.match(r"\s*(\$ |python |pip )", body), f"{page.name}:{line}"


def _alice_pages(separator: str) -> list:
    """Alice as web-page-like documents of 20 paragraphs, joined by `separator`."""
    paragraphs = [p.replace("\n", " ").strip()
                  for p in ALICE.read_text(encoding="utf-8").split("\n\n")]
    return [separator.join(paragraphs[i:i + 20]) for i in range(0, len(paragraphs), 20)]


class Sandbox:
    """A scratch directory standing where the README's reader stands (the checkout's
    root), with the local stand-ins for what the README's placeholders name."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        for name in ("configs", "launch", "benchmarks", "notebooks", "pretrainx"):
            if (REPO / name).exists():
                (root / name).symlink_to(REPO / name)
        self.env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
                        WANDB_MODE="offline", WANDB_SILENT="true")  # W&B: no account here
        # one CPU device, as on the reader's machine (conftest gives the tests 8)
        self.env["XLA_FLAGS"] = self.env.get("XLA_FLAGS", "").replace(
            "--xla_force_host_platform_device_count=8", "").strip()
        guard = root / ".guard"
        guard.mkdir()
        (guard / "gcloud").write_text("#!/bin/sh\necho 'error: the real gcloud was called'"
                                      " >&2\nexit 99\n")
        (guard / "gcloud").chmod(0o755)
        self.env["PATH"] = os.pathsep.join([str(guard), os.environ.get("PATH", "")])

    def words(self, words):
        """The README's placeholders replaced by what exists here."""
        bucket = str(self.root / "bucket")
        subs = [("gs://BUCKET", bucket), ("/data/corpus/*.txt", str(ALICE)),
                ("/data/c4/*.txt", str(ALICE)), ("texts/*.txt", str(ALICE)),
                ("/data/1b/*.txt", str(ALICE)), ("/data/1b", str(self.root / "1b")),
                ("/data/t5/spiece.model", str(REPO / "pretrainx/assets/spm_t5_4k.model")),
                ("/data/bert-base-uncased/vocab.txt",
                 str(SHARED_DATA / "tokenizers/bert-base-uncased/vocab.txt")),
                # no cased BERT vocabulary is at hand: the uncased one stands in
                ("/data/bert-base-cased/vocab.txt",
                 str(SHARED_DATA / "tokenizers/bert-base-uncased/vocab.txt")),
                ("/data/gpt2", str(SHARED_DATA / "tokenizers/gpt2")),
                ("/data/albert/30k-clean.model", str(REPO / "pretrainx/assets/spm_4k.model")),
                ("/data/webtext/*.jsonl", self._webtext()),
                ("/data/fineweb-edu/sample/10BT/*.parquet", self._parquet()),
                ("/data/fwe-prepared", str(self.root / "fwe-prepared")),
                ("/data/spm.model", str(REPO / "pretrainx/assets/spm_4k.model")),
                ("/data/books/*.txt.gz", self._gzipped_book()),
                ("tfds:wikipedia/20230601.en", "tfds:pretrainx_text/wiki@train"),
                ("/data/bert_prepared", str(self.root / "bert_prepared")),
                ("--config.data.glue_dir=DIR", f"--config.data.glue_dir={SHARED_DATA / 'glue'}"),
                ("../shared/data", str(SHARED_DATA))]
        out = []
        for word in words:
            for old, new in subs:
                word = word.replace(old, new)
            out.append(word)
        return out

    def _webtext(self):
        path = self.root / "webtext" / "alice.jsonl"
        if not path.exists():
            path.parent.mkdir()
            with open(path, "w", encoding="utf-8") as f:
                for page in _alice_pages("\n\n"):
                    f.write(json.dumps({"text": page}) + "\n")
        return str(path.parent / "*.jsonl")

    def _parquet(self):
        """Alice as a Parquet file of web-page-like records (FineWeb-Edu's layout)."""
        path = self.root / "fineweb-edu" / "000_00000.parquet"
        if not path.exists():
            import pyarrow as pa
            import pyarrow.parquet as pq
            path.parent.mkdir()
            texts = _alice_pages("\n")
            pq.write_table(pa.table({"text": texts, "id": list(range(len(texts)))}), str(path),
                           row_group_size=8)
        return str(path.parent / "*.parquet")

    def _gzipped_book(self):
        path = self.root / "books" / "alice.txt.gz"
        if not path.exists():
            path.parent.mkdir()
            path.write_bytes(gzip.compress(ALICE.read_bytes()))
        return str(path.parent / "*.txt.gz")

    def run(self, words, timeout=600, cwd=None):
        command = " ".join(w if w == "|" else shlex.quote(w) for w in words)
        cwd = cwd or self.root
        if words[0] == "python" and len(words) > 1 and "|" not in words and words[1] != "-c":
            # `python -m MODULE ...` or `python SCRIPT ...` as bash would run it, forked
            # from a process that has imported JAX and pretrainx already (tests/cli_fork.py)
            module = words[2] if words[1] == "-m" else None
            result = (run_module(module, words[3:], cwd=cwd, env=self.env, timeout=timeout)
                      if module else run_script(words[1], words[2:], cwd=cwd, env=self.env,
                                                timeout=timeout))
        else:
            result = subprocess.run(["bash", "-c", command], cwd=cwd, env=self.env,
                                    capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, (f"README command failed ({result.returncode}): "
                                        f"{command}\n{result.stdout[-2000:]}\n"
                                        f"{result.stderr[-3000:]}")
        return result.stdout


def _flag(words, name):
    for word in words:
        if word.startswith(f"--{name}="):
            return word.split("=", 1)[1]
    return None


def tiny_key(spec: str):
    """TINY's entry for a recipe `configs/NAME.py[:ARG]`: NAME:ARG's where it has one,
    else the first that NAME starts with (None: none)."""
    path, _, arg = spec.partition(":")
    stem = pathlib.Path(path).stem
    if arg and f"{stem}:{arg}" in TINY:
        return f"{stem}:{arg}"
    return next((k for k in TINY if ":" not in k and stem.startswith(k)), None)


def _tiny(words):
    """The shrinking overrides for the recipe a command names, after its own."""
    config = _flag(words, "config")
    family = tiny_key(config)
    assert family, f"no tiny overrides in tests/claims/test_readme.py for {config}"
    own = _flag(words, "config.data.train_files") or ""
    return [f"--config.{k}={v}" for k, v in TINY[family].items()
            if not (k == "data.train_files" and own.endswith(".parquet"))]  # keep a stand-in


def _ci_runs(words):
    """Install steps and the test command: .ci/run must run them as the README says."""
    ci = CI.read_text(encoding="utf-8")
    if words[0] == "pip":
        spec = words[words.index("-e") + 1]
        assert re.search(r"pip install .*-e \"?" + re.escape(spec) + r"[\"\[]", ci) or \
            f'-e "{spec}' in ci, f".ci/run does not install {spec} as the README does"
    elif words[:3] == ["python", "-m", "pytest"]:
        if "-m" in words[3:]:  # the fast subset: CI's command without the tests marked slow
            at = words.index("-m", 3)
            assert words[at + 1] == "not slow", words
            assert "slow:" in (REPO / "pyproject.toml").read_text(), "no `slow` marker"
            words = words[:at] + words[at + 2:]
        assert " ".join(words) in ci, f".ci/run does not run `{' '.join(words)}`"


def _needs(words):
    """Skip a command whose recipe, overrides or words read ../shared/data where that is
    absent (a checkout outside the workspace), or the planner without libtpu."""
    text = " ".join(words)
    recipe = REPO / (_flag(words, "config") or "").split(":")[0]
    if recipe.is_file():
        family = tiny_key(_flag(words, "config"))
        text += " ".join(str(v) for v in TINY.get(family, {}).values())
        text += str(SHARED_DATA) if '"shared"' in recipe.read_text(encoding="utf-8") else ""
    if str(SHARED_DATA) in text and not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    if words[:3] == ["python", "-m", "pretrainx.plan"]:
        pytest.importorskip("libtpu")
    if "--config.logging.wandb=True" in words:
        pytest.importorskip("wandb")


def run_step(sandbox: Sandbox, words):
    """Run one README command the way its rule says; returns what it checked."""
    if words[:3] == ["python3", "-m", "venv"] or words[0] == ".":
        return "setup"  # the venv: .ci/run makes its own
    if words[0] == "pip" or words[:3] == ["python", "-m", "pytest"]:
        _ci_runs(words)
        return "ci"
    if words[:2] == ["python", "launch/slurm.py"]:
        # the sbatch script only: nothing is submitted
        dry = words if "--dry-run" in words else words[:2] + ["--dry-run"] + words[2:]
        out = sandbox.run(dry, cwd=REPO)
        assert out.startswith("#!/bin/bash") and "\nsrun " in out, out
        return "slurm"
    if words[:3] == ["python3", "launch/gpu_kit.py", "run"]:
        # there it needs a GPU: here its arguments parse and its files are written, on the
        # CPU, with no part but the versions (tests/launch/test_gpu_kit.py dry-runs the parts)
        out_dir = sandbox.root / "kit_out"
        sandbox.run(["python"] + words[1:] + ["--dry_run", "--parts=versions", "--out",
                                              str(out_dir)], cwd=REPO)
        assert (out_dir / "summary.md").is_file() and (out_dir / "results.json").is_file()
        return "gpu_kit"
    if words[:2] == ["python", "launch/gke.py"]:
        # the manifest only, with the page's gs:// workdir: nothing reaches a cluster
        import yaml
        out = sandbox.run(words + ([] if "--dry-run" in words else ["--dry-run"]), cwd=REPO)
        jobset = yaml.safe_load(out)
        assert jobset["kind"] == "JobSet" and jobset["spec"]["replicatedJobs"], out
        return "gke"
    words = sandbox.words(words)
    _needs(words)
    module = words[2] if words[:2] == ["python", "-m"] else None
    if module == "pretrainx.main":
        if "--describe" in words:
            described = json.loads(sandbox.run(words).strip().splitlines()[-1])
            assert described["params"] > 0
            return "describe"
        words = words + _tiny(words)
        if "tfds:pretrainx_text/wiki@train" in " ".join(words):
            tfds_dir = _flag(words, "config.data.tfds_data_dir")
            sandbox.run(["python", "-m", "pretrainx.data", "build_tfds", f"--input={ALICE}",
                         f"--data_dir={tfds_dir}", "--name=wiki"])
        out = sandbox.run(words)
        workdir = pathlib.Path(sandbox.root, _flag(words, "workdir"))
        assert "done:" in out or (workdir / "best").is_dir(), out[-2000:]
        assert (workdir / "metrics.jsonl").stat().st_size > 0
        return "train"
    if module == "pretrainx.data" and "--stats" in words:
        stats = json.loads(sandbox.run(words + _tiny(words) + ["--num_batches=2"])
                           .strip().splitlines()[-1])
        assert stats["tokens_per_sec"] > 0, stats
        return "stats"
    if module == "pretrainx.data" and words[3] == "build_tfds":
        out = sandbox.run(words)
        assert f"tfds:pretrainx_text/{_flag(words, 'name')}@train" in out, out
        return "build_tfds"
    if module == "pretrainx.data" and words[3] == "prepare":
        sandbox.run(words + _tiny(words) + ["--workers=1"])
        assert list(pathlib.Path(_flag(words, "output")).glob("*"))
        return "prepare"
    if module == "pretrainx.plan":
        # a tiny model, but a batch that splits over the slice's devices
        tiny = _tiny(words) + ["--config.global_batch_size=64"]
        if "--phase=2" in words:  # keep a short phase 2 at its own length to plan
            tiny = [w for w in tiny if not w.startswith("--config.phase2.fraction=")] + [
                "--config.total_steps=10", "--config.phase2.fraction=0.1",
                "--config.phase2.global_batch_size=64"]
        plan = json.loads(sandbox.run(words + tiny).strip().splitlines()[-1])
        assert plan["fits"] is True, plan
        return "plan"
    if module == "pretrainx.merge":
        # the page's run kept its last checkpoints: a tiny quickstart with one a step
        run = sandbox.root / "workdir" / "quickstart"
        if not run.exists():
            sandbox.run(["python", "-m", "pretrainx.main", "--config=configs/quickstart.py",
                         f"--workdir={run}", *_tiny(["--config=configs/quickstart.py"]),
                         "--config.checkpoint_every=1", "--config.keep_checkpoints=5"])
        named = _flag(words, "inputs").split(",")
        held = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
        assert len(held) >= len(named), held
        inputs = ",".join(str(run / "checkpoints" / str(s)) for s in held[-len(named):])
        record = json.loads(sandbox.run([w if not w.startswith("--inputs=") else
                                         f"--inputs={inputs}" for w in words])
                            .strip().splitlines()[-1])
        assert record["steps"] == held[-len(named):], record
        return "merge"
    if module == "pretrainx.compare":
        if not SHARED_DATA.is_dir():  # the fine-tuning reads its GLUE folder
            pytest.skip(f"shared data not found at {SHARED_DATA}")
        if "--status" not in words:  # the page's grid at seconds' size: one cell, 2 steps
            grid = sandbox.root / "tiny_grid.py"
            grid.write_text("".join(f"{k} = {v!r}\n" for k, v in {
                "CELLS": {"bert": {"config": str(REPO / "configs" / "quickstart.py"),
                                   "set": {k: v for k, v in BERT_TINY.items()
                                           if k != "total_steps"}}},
                "BUDGET": {"steps": 2}, "SEEDS": [0], "LEARNING_RATES": [1e-3],
                "TASKS": {"sst2": {"task": "sst2", "rows": 16, "held_out": 4, "seq_len": 32,
                                   "epochs": 1, "batch": 4}},
                "GLUE_DIR": str(SHARED_DATA / "glue")}.items()), encoding="utf-8")
            words = [f"--grid={grid}" if w.startswith("--grid=") else w for w in words]
        result = json.loads(sandbox.run(words).strip().splitlines()[-1])
        assert result.get("cells") == 1 or result.get("status"), result
        return "compare"
    if module == "pretrainx.evaluate":
        result = json.loads(sandbox.run(words).strip().splitlines()[-1])
        assert result["eval"]["loss"] > 0, result
        return "evaluate"
    if module == "pretrainx.similarity":
        result = json.loads(sandbox.run(words + ["--limit=16"]).strip().splitlines()[-1])
        assert result["pairs"] == 16 and -1 <= result["spearman"] <= 1, result
        return "similarity"
    if module == "pretrainx.export":
        sandbox.run(words)
        output = pathlib.Path(sandbox.root, _flag(words, "output"))
        assert (output / "config.json").is_file() and (output / "model.safetensors").is_file()
        return "export"
    if module == "pretrainx.embed":
        shapes = json.loads(sandbox.run(words).strip().splitlines()[-1])
        written = np.load(pathlib.Path(sandbox.root, _flag(words, "output")))
        assert list(written["hidden_states"].shape) == shapes["hidden_states"]
        assert written["logits"].shape[:2] == written["input_ids"].shape
        return "embed"
    if module == "pretrainx.generate":
        out = sandbox.run(words + ["--max_new_tokens=4"])
        prompt = _flag(words, "prompt")
        # GPT-2 prints the prompt and its continuation; an encoder-decoder (a <mask> to
        # fill, or UL2's [S2S] mode) prints its output alone, one line
        seq2seq = "<mask>" in prompt or prompt.startswith("[S2S]")
        assert (out.strip() and out.endswith("\n") if seq2seq else prompt in out), out
        return "generate"
    if module == "pretrainx.tokenizer" and words[3] == "train":
        sandbox.run(words + ["--max_sentences=2000", "--vocab_size=500"])
        written = {"words": "vocab.words", "wordpiece": "vocab.txt"}.get(
            _flag(words, "model_type"), "spiece.model")
        assert (sandbox.root / _flag(words, "output") / written).is_file()
        return "tokenizer"
    if words[0] == "echo" and "pretrainx.tokenizer" in words and "encode" in words:
        ids = sandbox.run(words).split()
        assert ids and all(i.isdigit() for i in ids), ids
        return "encode"
    if words[:2] == ["python", "launch/sweep_lr.py"]:
        tiny = {**TINY["quickstart"], "log_every": 2, "eval_every": 2, "checkpoint_every": 2}
        out = sandbox.run(words + ["--steps=2"] + [f"--set={k}={v}" for k, v in tiny.items()
                                                     if k != "total_steps"])
        root = pathlib.Path(sandbox.root, _flag(words, "root"))
        if "--emit" in words:
            lines = out.strip().splitlines()
            assert len(lines) == 3 and all("--config.optimizer.learning_rate=" in x
                                           for x in lines), out
            if _flag(words, "tpu_vm"):
                assert all(x.startswith("launch/tpu_vm.sh train --name=") for x in lines)
        else:
            rows = [json.loads(x) for x in (root / "results.jsonl").read_text().splitlines()]
            assert [r["status"] for r in rows] == ["done"] * 3, rows
        return "sweep"
    if words[0] == "launch/tpu_vm.sh":
        # from the checkout, which the launcher ships with git archive
        out = sandbox.run([words[0], words[1], "--dry-run", *words[2:]], cwd=REPO)
        lines = out.strip().splitlines()
        assert lines and all(line.startswith("+ ") for line in lines), out
        return "launch"
    raise AssertionError(f"README command not covered by tests/claims/test_readme.py: "
                         f"{shlex.join(words)}")


_PYTHON_PREAMBLE = """
import json as _json, pathlib as _pathlib
from pretrainx import config as _config_lib
_TINY, _real = _json.loads({tiny!r}), _config_lib.load_file

def _tiny_load_file(spec):
    name, _, arg = spec.partition(":")
    name = _pathlib.Path(name).stem
    family = (name + ":" + arg if arg and name + ":" + arg in _TINY else
              next((k for k in _TINY if ":" not in k and name.startswith(k)), None))
    assert family, "no tiny overrides in tests/claims/test_readme.py for " + spec
    cfg = _real(spec)
    for key, value in _TINY[family].items():
        *path, last = key.split(".")
        target = cfg
        for part in path:
            target = target[part]
        target[last] = value
    return cfg

_config_lib.load_file = _tiny_load_file
"""


def _python_block(sandbox, body):
    """A Python block runs as a script in the sandbox, with recipes loaded through
    load_file shrunk the same way as the commands; a sweep's table must be all done."""
    script = sandbox.root / "readme_block.py"
    script.write_text(_PYTHON_PREAMBLE.format(tiny=json.dumps(TINY)) + body
                      + '\nprint("ROWS " + _json.dumps(globals().get("rows", [])))\n',
                      encoding="utf-8")
    out = sandbox.run(["python", str(script)])
    rows = json.loads(out.strip().splitlines()[-1][len("ROWS "):])
    for row in rows:
        assert row["status"] == "done", row


@pytest.mark.slow
@pytest.mark.parametrize("block", _blocks_to_run(), ids=lambda b: f"{b[0]}:{b[1]}")
def test_readme_block_runs(block, tmp_path, request):
    page, line, lang, body = block
    sandbox = Sandbox(tmp_path)
    if "workdir/quickstart" in body and ("--config.init_from=workdir/quickstart" in body
                                         or 'pretrainx.load("workdir/quickstart")' in body
                                         or 'interop.load("workdir/quickstart")' in body
                                         or "pretrainx.embed --workdir=workdir/quickstart"
                                         in body
                                         or "pretrainx.similarity --workdir=workdir/quickstart"
                                         in body):
        shutil.copytree(request.getfixturevalue("pretrained_workdir"),  # a pretrained BERT
                        tmp_path / "workdir" / "quickstart")
    if lang == "python":
        if "sentence_transformers" in body:
            pytest.importorskip("sentence_transformers")
        _python_block(sandbox, body)
        return
    kinds = [run_step(sandbox, words) for words in shell_steps(body)]
    assert kinds, f"{page}:{line}: an empty command block"
