"""Bad input at the CLI: one line naming the culprit, exit code 2, no traceback."""

import os
import subprocess
import sys

import pytest

from conftest import REPO

TINY = ["--config.total_steps=1", "--config.model.num_layers=1", "--config.model.hidden_size=32",
        "--config.model.num_heads=2", "--config.model.mlp_dim=64", "--config.global_batch_size=4",
        "--config.seq_len=32", "--config.data.max_predictions_per_seq=5",
        "--config.data.dupe_factor=1", "--config.eval_steps=1"]
BOOK = os.path.join(REPO, "pretrainx", "assets", "text", "pg11_alice_in_wonderland.txt")


def run_cli(args, workdir, devices=1):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    cmd = [sys.executable, "-m", "pretrainx.main", "--config=configs/quickstart.py",
           f"--workdir={workdir}"] + TINY + args
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


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


CASES = {
    "unknown key": (["--config.optimizer.lr=1e-3"], ["--config.optimizer.lr"]),
    "mistyped value": (["--config.total_steps=many"], ["total_steps", "many"]),
    "missing corpus": (["--config.data.train_files=/no/such/corpus.txt"], ["/no/such/corpus.txt"]),
    "seq_len above positions": (["--config.seq_len=1024"], ["seq_len=1024",
                                                             "max_position_embeddings=512"]),
    "zero batch": (["--config.global_batch_size=0"], ["global_batch_size"]),
    "missing tokenizer": (["--config.data.tokenizer=/no/such/spm.model"], ["/no/such/spm.model"]),
    "heads do not divide": (["--config.model.num_heads=3"], ["num_heads=3"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cli_bad_input(name, tmp_path):
    args, culprits = CASES[name]
    assert_one_line_error(run_cli(args, tmp_path / "w"), *culprits)


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
    result = subprocess.run([sys.executable, "-m", "pretrainx.main", "--config=configs/nope.py",
                             "--describe"], cwd=REPO, env=env, capture_output=True, text=True)
    assert_one_line_error(result, "configs/nope.py")


def test_undecodable_bytes_are_replaced_and_counted(tmp_path):
    with open(BOOK, "rb") as f:
        raw = f.read()
    broken = tmp_path / "broken.txt"
    broken.write_bytes(raw[:20000] + b"\xff\xfe\xc3 " + raw[20000:])
    result = run_cli([f"--config.data.train_files={broken}", f"--config.data.eval_files={broken}"],
                     tmp_path / "w")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "undecodable bytes replaced" in result.stdout + result.stderr
