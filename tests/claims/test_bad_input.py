"""Bad input at the CLI: one line naming the culprit, exit code 2, no traceback, and
nothing in an existing workdir (checkpoint, metrics, config) changed or lost."""

import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from cli_fork import run_module
from conftest import REPO, xla_flags
from pretrainx.errors import UserError
from pretrainx.interop import hub as hub_lib

TINY = ["--config.total_steps=1", "--config.model.num_layers=1", "--config.model.hidden_size=32",
        "--config.model.num_heads=2", "--config.model.mlp_dim=64", "--config.global_batch_size=4",
        "--config.seq_len=32", "--config.data.max_predictions_per_seq=5",
        "--config.data.dupe_factor=1", "--config.eval_steps=1"]
BOOK = os.path.join(REPO, "pretrainx", "assets", "text", "pg11_alice_in_wonderland.txt")
OTHER_BOOK = os.path.join(REPO, "pretrainx", "assets", "text",
                          "pg1661_adventures_of_sherlock_holmes.txt")


def run_cli(args, workdir, devices=1):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=xla_flags(devices))
    return run_module("pretrainx.main", ["--config=configs/quickstart.py",
                                         f"--workdir={workdir}"] + TINY + args,
                      cwd=REPO, env=env)


def assert_one_line_error(result, *culprits):
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, result.stderr[-2000:]
    for culprit in culprits:
        assert culprit in errors[0], errors[0]


@pytest.fixture
def vocab_without_mask(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "a"]) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A workdir holding a finished 2-step run: checkpoint, metrics, config."""
    workdir = tmp_path_factory.mktemp("trained") / "w"
    result = run_cli(["--config.total_steps=2", "--config.checkpoint_every=2",
                      f"--config.data.train_files={BOOK}"], workdir)
    assert result.returncode == 0, result.stderr[-2000:]
    return workdir


def _snapshot(workdir):
    return {str(p.relative_to(workdir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(workdir.rglob("*")) if p.is_file()}


@pytest.fixture
def bad_files(tmp_path):
    """Files a user may point the config at by mistake."""
    binary = tmp_path / "weights.bin"
    binary.write_bytes(bytes(range(256)) * 64)
    raises = tmp_path / "raises.py"
    raises.write_text("def get_config():\n    raise ValueError('no such size')\n")
    jsonl = tmp_path / "pages.jsonl"
    jsonl.write_text('{"text": "Alice was beginning to get very tired."}\n{"body": "x"}\n')
    import pyarrow as pa
    import pyarrow.parquet as pq
    parquet = tmp_path / "pages.parquet"
    pq.write_table(pa.table({"body": ["Alice was beginning to get very tired."]}), str(parquet))
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(parquet.read_bytes()[:-40])
    return {"binary": str(binary), "directory": str(tmp_path), "raises": str(raises),
            "not_a_model": str(tmp_path / "weights.bin"), "jsonl": str(jsonl),
            "parquet": str(parquet), "cut_parquet": str(cut)}


CASES = {  # name: (arguments, words the error line must contain)
    "unknown key": (["--config.optimizer.lr=1e-3"], ["--config.optimizer.lr"]),
    "mistyped value": (["--config.total_steps=many"], ["total_steps", "many"]),
    "float for an int": (["--config.model.num_layers=1.5"], ["num_layers", "1.5"]),
    "missing corpus": (["--config.data.train_files=/no/such/corpus.txt"], ["/no/such/corpus.txt"]),
    "missing eval corpus": ([f"--config.data.train_files={BOOK}",
                             "--config.data.eval_files=/no/such/eval.txt"],
                            ["/no/such/eval.txt"]),
    "seq_len above positions": (["--config.seq_len=1024"], ["seq_len=1024",
                                                             "max_position_embeddings=512"]),
    "zero batch": (["--config.global_batch_size=0"], ["global_batch_size"]),
    "zero layers": (["--config.model.num_layers=0"], ["model.num_layers"]),
    "negative warmup": (["--config.optimizer.warmup_steps=-5"], ["warmup_steps=-5"]),
    "negative learning rate": (["--config.optimizer.learning_rate=-0.1"],
                               ["learning_rate=-0.1"]),
    "unknown dtype": (["--config.model.dtype=float8"], ["model.dtype", "float8"]),
    "float16 without loss scaling": (["--config.model.dtype=float16"],
                                     ["model.dtype=float16", "bfloat16"]),
    "unknown attention kernel": (["--config.model.attention_impl=fast"],
                                 ["model.attention_impl", "'fast'"]),
    "TPU attention kernel on a CPU": (["--config.model.attention_impl=splash"],
                                      ["attention_impl=splash", "TPUs", "cpu"]),
    "unknown remat policy": (["--config.model.remat=some"], ["model.remat", "some"]),
    "mesh larger than the devices": (["--config.mesh.data=3"], ["mesh", "1 are present"]),
    "phase-2 fraction above 1": (["--config.phase2.fraction=1.5"], ["phase2.fraction=1.5"]),
    "zero masking rate": (["--config.data.mask_prob=0.0"], ["data.mask_prob=0.0"]),
    "missing tokenizer": (["--config.data.tokenizer=/no/such/spm.model"], ["/no/such/spm.model"]),
    "vocabulary larger than the model's": (["--config.model.vocab_size=100"],
                                          ["model.vocab_size=100"]),
    "heads do not divide": (["--config.model.num_heads=3"], ["num_heads=3"]),
    "another model's checkpoint": (["--config.model.hidden_size=64",
                                    "--config.model.mlp_dim=128"],
                                   ["another model", "model.hidden_size: checkpoint 32"]),
    "stray argument": (["train"], ["unexpected arguments", "train"]),
    "binary corpus": (["--config.data.train_files={binary}"], ["{binary}", "binary"]),
    "directory as corpus": (["--config.data.train_files={directory}"], ["{directory}"]),
    "non-tokenizer as tokenizer": (["--config.data.tokenizer={not_a_model}"], ["{not_a_model}"]),
    "resume on other data": (["--config.total_steps=4", f"--config.data.train_files={OTHER_BOOK}"],
                             ["data position belongs to other data", "examples"]),
    "JSONL line without the text field": (["--config.data.train_files={jsonl}"],
                                          ["{jsonl}:2", "no field 'text'"]),
    "Parquet without the text column": (["--config.data.train_files={parquet}"],
                                        ["{parquet}", "no column 'text'", "columns are body"]),
    "cut Parquet file": (["--config.data.train_files={cut_parquet}"],
                         ["{cut_parquet}", "not a Parquet file, or cut short"]),
    "unknown TFDS dataset": (["--config.data.train_files=tfds:no_such_corpus"],
                             ["tfds:no_such_corpus", "no dataset"]),
    "more weights than sources": (["--config.data.train_weights=1,2"],
                                  ["data.train_weights", "2 weights for 1 sources"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cli_bad_input(name, trained, bad_files, tmp_path):
    args, culprits = CASES[name]
    workdir = tmp_path / "w"
    shutil.copytree(trained, workdir)
    before = _snapshot(workdir)
    result = run_cli([a.format(**bad_files) for a in args], workdir)
    assert_one_line_error(result, *[c.format(**bad_files) for c in culprits])
    after = _snapshot(workdir)
    assert {k: v for k, v in after.items() if k in before} == before, name  # nothing changed
    assert set(before) <= set(after)  # nothing lost


def test_config_file_that_raises(bad_files):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = run_module("pretrainx.main", [f"--config={bad_files['raises']}", "--describe"],
                        cwd=REPO, env=env)
    assert_one_line_error(result, "ValueError", "no such size")


def test_missing_workdir(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = run_module("pretrainx.main", ["--config=configs/quickstart.py"], cwd=REPO,
                        env=env)
    assert_one_line_error(result, "--workdir is required")


def test_workdir_under_a_file(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory\n")
    assert_one_line_error(run_cli([], blocker / "run"), str(blocker / "run"))


def test_huge_single_line_corpus_trains(tmp_path):
    """A corpus with no line breaks (a whole book on one line) is text, not an
    error: it is split into sentences and trains."""
    one_line = tmp_path / "one_line.txt"
    one_line.write_text(" ".join(open(BOOK, encoding="utf-8").read().split()))
    result = run_cli([f"--config.data.train_files={one_line}", "--config.data.eval_files="],
                     tmp_path / "w")
    assert result.returncode == 0, result.stderr[-2000:]


def test_empty_corpus(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert_one_line_error(run_cli([f"--config.data.train_files={empty}"], tmp_path / "w"),
                          str(empty))


def test_corpus_too_small_for_a_batch(tmp_path):
    tiny = tmp_path / "tiny.txt"
    tiny.write_text("Alice was beginning to get very tired of sitting by her sister.\n")
    assert_one_line_error(run_cli([f"--config.data.train_files={tiny}"], tmp_path / "w"),
                          str(tiny), "global batch")


def test_vocab_without_mask(tmp_path, vocab_without_mask):
    result = run_cli([f"--config.data.tokenizer={vocab_without_mask}",
                      "--config.model.vocab_size=30522"], tmp_path / "w")
    assert_one_line_error(result, vocab_without_mask, "[MASK]")


def test_batch_not_dividing_data_axes(tmp_path):
    result = run_cli(["--config.global_batch_size=3"], tmp_path / "w", devices=2)
    assert_one_line_error(result, "global_batch_size=3", "2 data-parallel devices")


def test_missing_config_file(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = run_module("pretrainx.main", ["--config=configs/nope.py", "--describe"],
                        cwd=REPO, env=env)
    assert_one_line_error(result, "configs/nope.py")


def test_a_config_path_with_a_colon_says_what_was_read(tmp_path):
    """ml-collections passes what follows the first ':' to get_config: the error named a
    file the user never gave ('/tmp/my')."""
    folder = tmp_path / "runs:2026"
    folder.mkdir()
    shutil.copy(REPO / "configs" / "quickstart.py", folder / "quickstart.py")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for overrides in ([], ["--config.total_steps=5"]):  # overrides fail earlier, elsewhere
        result = run_module("pretrainx.main",
                            [f"--config={folder}/quickstart.py", "--describe"] + overrides,
                            cwd=REPO, env=env)
        assert_one_line_error(result, f"--config={folder}/quickstart.py",
                              f"so {tmp_path}/runs was read", "without ':'")


def test_a_mistyped_override_says_what_was_meant():
    """The message was ml-collections' KeyError text, escaped quotes and a literal \\n."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    result = run_module("pretrainx.main", ["--config=configs/quickstart.py",
                                           "--config.model.nm_layers=2", "--describe"],
                        cwd=REPO, env=env)
    assert_one_line_error(result, "unknown config key in --config.model.nm_layers=2 (did you "
                          "mean num_layers?)")
    assert "\\" not in result.stderr


def test_undecodable_bytes_are_replaced_and_counted(tmp_path):
    with open(BOOK, "rb") as f:
        raw = f.read()
    broken = tmp_path / "broken.txt"
    broken.write_bytes(raw[:20000] + b"\xff\xfe\xc3 " + raw[20000:])
    result = run_cli([f"--config.data.train_files={broken}", f"--config.data.eval_files={broken}"],
                     tmp_path / "w")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "undecodable bytes replaced" in result.stdout + result.stderr


def _run_module(module, args):
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1))
    return run_module(module, args, cwd=REPO, env=env)


def test_finetune_glue_file_without_its_label_column(tmp_path):
    """The fine-tuning CLI names the GLUE file and the column it expected."""
    glue = tmp_path / "glue" / "SST-2"
    glue.mkdir(parents=True)
    (glue / "train.tsv").write_text("sentence\tscore\nit is a gripping film .\t1\n")
    result = _run_module("pretrainx.main", [
        "--config=configs/finetune_glue.py", f"--workdir={tmp_path / 'w'}",
        f"--config.data.glue_dir={tmp_path / 'glue'}", "--config.model.num_layers=1",
        "--config.model.hidden_size=32", "--config.model.num_heads=2",
        "--config.model.mlp_dim=64", "--config.model.vocab_size=4096",
        f"--config.data.tokenizer={REPO}/pretrainx/assets/spm_4k.model"])
    assert_one_line_error(result, str(glue / "train.tsv"), "no label column 'label'")
    assert not (tmp_path / "w").exists()


def test_export_of_an_unsupported_hf_directory(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    result = _run_module("pretrainx.trained.export", [f"--workdir={tmp_path / 'hf'}",
                                              f"--output={tmp_path / 'out'}"])
    from pretrainx.interop import hf
    supported = ", ".join(a.model_type for a in hf.ADAPTERS.entries() if a.model_type)
    assert "bert, " in supported and "gpt2" in supported and "t5" in supported
    assert_one_line_error(result, str(tmp_path / "hf" / "config.json"),
                          "unsupported architecture LlamaForCausalLM", supported)


def test_import_of_deberta_v1_says_which_deberta_is_read(tmp_path):
    """DeBERTa v1's layout is not DeBERTa-v2's: a v1 folder is refused by name, with
    the model_type that is read, not lumped in with architectures nobody supports."""
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text(
        '{"model_type": "deberta", "architectures": ["DebertaForMaskedLM"]}')
    result = _run_module("pretrainx.trained.export", [f"--workdir={tmp_path / 'hf'}",
                                              f"--output={tmp_path / 'out'}"])
    assert_one_line_error(result, str(tmp_path / "hf" / "config.json"), "DeBERTa v1",
                          "model_type deberta-v2")
    assert not (tmp_path / "out").exists()


def test_push_to_hub_without_a_token_is_one_line_and_exports_nothing(tmp_path,
                                                                     pretrained_workdir):
    env = {k: v for k, v in os.environ.items() if k not in hub_lib.TOKEN_VARIABLES}
    result = run_module("pretrainx.trained.export", [f"--workdir={pretrained_workdir}",
                                             f"--output={tmp_path / 'out'}",
                                             "--push_to_hub=someone/tiny-bert"],
                        cwd=REPO, env=dict(env, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1)))
    assert_one_line_error(result, "--push_to_hub", "HF_TOKEN")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,culprit", [([], "--text"), (["--text=Alice", "--output=e.npy"],
                                                          "--output=e.npy")])
def test_embed_without_text_or_with_another_suffix_is_one_line(tmp_path, args, culprit):
    result = _run_module("pretrainx.trained.embed", [f"--workdir={tmp_path}"] + args)
    assert_one_line_error(result, culprit)
    assert not (REPO / "e.npy").exists()


DISTIL_CASES = {  # name: (arguments, words the error line must contain)
    "teacher and student vocabularies differ": (["--config.model.vocab_size=4104"],
                                                ["model.vocab_size=4096", "vocabularies"]),
    "teacher path holds no checkpoint": (["--config.distill.teacher={empty_run}"],
                                         ["{empty_run}/checkpoints", "no checkpoint"]),
    "layer map names a missing layer": (["--config.distill.layer_map=1:5"],
                                        ["layer_map 1:5", "does not exist"]),
    "wider teacher without a projection": (["--config.model.hidden_size=16",
                                            "--config.model.mlp_dim=32",
                                            "--config.distill.init_from_teacher=False"],
                                           ["32 wide, the student 16",
                                            "distill.project_hidden=True"]),
}


@pytest.mark.parametrize("name", list(DISTIL_CASES))
def test_cli_bad_distillation_input(name, trained, tmp_path):
    """configs/distil_quickstart.py with the 2-step quickstart run above as its teacher:
    each mistake is one line, and the workdir (a copy of that run) keeps every file."""
    empty_run = tmp_path / "empty_run"
    (empty_run / "checkpoints").mkdir(parents=True)
    shutil.copy(trained / "config.json", empty_run / "config.json")
    args, culprits = DISTIL_CASES[name]
    workdir = tmp_path / "w"
    shutil.copytree(trained, workdir)
    before = _snapshot(workdir)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=xla_flags(1))
    student = ["--config.total_steps=1", "--config.model.num_layers=1",
               "--config.model.hidden_size=32", "--config.model.num_heads=2",
               "--config.model.mlp_dim=64", "--config.global_batch_size=4",
               "--config.seq_len=32", "--config.eval_steps=1", f"--config.data.train_files={BOOK}",
               f"--config.distill.teacher={trained}"]
    result = run_module("pretrainx.main", ["--config=configs/distil_quickstart.py",
                                           f"--workdir={workdir}"] + student
                        + [a.format(empty_run=empty_run) for a in args], cwd=REPO, env=env)
    assert_one_line_error(result, *[c.format(empty_run=empty_run) for c in culprits])
    assert _snapshot(workdir) == before


@pytest.mark.parametrize("lines,culprit", [
    (["[PAD]", "[UNK]", "[CLS]", "", "[SEP]", "[MASK]", "the"], "line 4 is empty"),
    (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "[MASK]", "the"],
     "line 7 repeats 'the' of line 5"),
], ids=["empty_line", "repeated_piece"])
def test_a_wordpiece_vocab_whose_ids_would_shift_is_refused(tmp_path, lines, culprit):
    """A vocab.txt line's number is its id: an empty or repeated line (a bad merge, an
    editor) shifted every later id, [MASK] included, without a word."""
    from pretrainx.data.tokenizers import load_tokenizer
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=re.escape(f"vocab {path} {culprit}")):
        load_tokenizer(str(path))


def test_a_lock_that_is_a_directory_is_named_and_left(tmp_path):
    from pretrainx.train.workdir_lock import LOCK_NAME, WorkdirLock
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(UserError, match=re.escape(str(tmp_path / LOCK_NAME))):
        WorkdirLock(str(tmp_path)).acquire()
    assert (tmp_path / LOCK_NAME).is_dir() and not any((tmp_path / LOCK_NAME).iterdir())


def test_a_read_only_workdir_is_named(tmp_path, monkeypatch):
    """A workdir pretrainx may not write (a read-only mount, another user's folder): one
    line naming it, at the start, and nothing in it touched. Where the tests run as root
    (which writes through a chmod) the kernel's answer is given by hand."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("mine")
    workdir.chmod(0o555)
    try:
        if os.geteuid() == 0:
            import errno
            from pretrainx.train import workdir_lock

            def read_only(path, *args, **kwargs):
                raise OSError(errno.EROFS, "Read-only file system", str(path))
            monkeypatch.setattr(workdir_lock, "open", read_only, raising=False)
            with pytest.raises(UserError, match=f"workdir {workdir} is not writable "
                                                r"\(Read-only file system\)"):
                workdir_lock.WorkdirLock(str(workdir)).acquire()
        else:
            assert_one_line_error(run_cli([], workdir), f"workdir {workdir} is not writable")
        assert sorted(p.name for p in workdir.iterdir()) == ["notes.txt"]
    finally:
        workdir.chmod(0o755)


def test_a_truncated_prepared_shard_is_named(tmp_path):
    """A prepared shard cut short (a full disk, a copy that stopped): one line naming the
    shard (Riegeli's traceback named no file), and the workdir left as it was."""
    prep = tmp_path / "prep"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    per_shard = ["--config.data.docs_per_shard=5", f"--config.data.train_files={BOOK}"]
    made = subprocess.run([sys.executable, "-m", "pretrainx.data", "prepare",
                           "--config=configs/quickstart.py", f"--output={prep}", "--workers=1"]
                          + TINY + per_shard, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    shard = sorted(prep.glob("train0/seq32/examples-*.array_record"))[1]
    shard.write_bytes(shard.read_bytes()[:shard.stat().st_size // 2])
    result = run_cli([f"--config.data.prepared_dir={prep}"] + per_shard, tmp_path / "w")
    assert_one_line_error(result, f"prepared shard {shard} is damaged", "prepare again")


def test_sharding_rules_naming_an_axis_the_mesh_lacks():
    from conftest import load_config
    from pretrainx import sharding
    cfg = load_config("quickstart.py")
    cfg.sharding_rules = (("batch", ("data", "fsdpp")),)
    with pytest.raises(UserError, match="sharding_rules.*'fsdpp'.*data, fsdp, tensor"):
        sharding.rules_of(cfg)
