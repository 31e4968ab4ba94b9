"""Every benchmark runs at a tiny size, so that none rots between measurements; the
figures themselves are in docs/benchmarks.md (never asserted: timing is the
machine's). What is asserted is each script's contract: its last line is one JSON
object with the keys the docs read, and the soak run checks its own promises."""

import importlib
import json
import os
import pathlib

import pytest

from cli_fork import run_script
from conftest import REPO, read_metrics, xla_flags

BOOKS = ",".join(str(REPO / "pretrainx" / "assets" / "text" / name) for name in
                 ("pg11_alice_in_wonderland.txt", "pg1661_adventures_of_sherlock_holmes.txt"))


# The smokes of the scripts that train their recipes' networks (up to 3 layers x 128)
# several times: the contract at one layer x 32 (compiles and steps are most of their time)
TINY = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "mlp_dim": 64}
TINY_NETWORK = f"--model={json.dumps(TINY)}"


def _trained_tiny(config_json) -> bool:
    """Whether the run whose config.json this is trained TINY (--model applied)."""
    model = json.loads(pathlib.Path(config_json).read_text())["model"]
    return {k: model[k] for k in TINY} == TINY


def _run(script, *args, timeout=600, devices=1):
    # one CPU device by default: the contract, not the figures (8 simulated devices on 2
    # cores only add compile and thread work)
    result = run_script(REPO / "benchmarks" / script, args, cwd=REPO, timeout=timeout,
                        env=dict(os.environ, XLA_FLAGS=xla_flags(devices)))
    assert result.returncode == 0, f"{script} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result, json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_distil_claim_prints_student_teacher_and_scratch(tmp_path):
    _, out = _run("distil_claim.py", "--steps=2", "--eval_steps=1", f"--workdir={tmp_path}")
    assert out["steps"] == 2 and 0 < out["teacher"] < 1 and 0 <= out["scratch"] < 1
    assert out["student_over_teacher"] == out["student"] / out["teacher"]


@pytest.mark.slow
def test_ettin_pair_trains_both_and_fine_tunes_both(shared_data, tmp_path):
    _, out = _run("ettin_pair.py", f"--workdir={tmp_path}", "--steps=2", "--seeds=0",
                  "--lrs=1e-3", "--max_rows=20", "--epochs=1", "--eval_steps=1", TINY_NETWORK)
    assert all(_trained_tiny(tmp_path / kind / "config.json") for kind in ("encoder", "decoder"))
    arms = out["settings"]["sst2_500"]
    assert set(arms) == {"encoder", "decoder"} and all(len(a["runs"]) == 1 for a in arms.values())
    assert out["held_out"]["decoder_perplexity"] > 1 and 0 <= out["held_out"][
        "encoder_mlm_accuracy"] <= 1


@pytest.mark.slow
def test_mmbert_languages_trains_branches_merges_and_scores_every_language(tmp_path):
    _, out = _run("mmbert_languages.py", f"--workdir={tmp_path}", "--steps=2,2,2",
                  "--eval_batches=1", TINY_NETWORK)
    assert _trained_tiny(tmp_path / "config.json")
    assert list(out["accuracy"]) == ["end of pretrain", "end of extension", "decay all",
                                     "decay cont", "decay eng", "merged (average)",
                                     "merged (ties)"]
    assert all(len(row) == 9 for row in out["accuracy"].values())  # 8 languages and all
    assert set(out["added_in_decay"]) == {"cs", "pt"}
    assert all(0 < g < 0.1 for g in out["guesser"].values()), out["guesser"]


@pytest.mark.slow
def test_soak_keeps_its_promises():
    # on 8 devices: on one, 40 steps can end before the memory sampler's first sample
    _, out = _run("soak.py", "--steps=40", "--checkpoint_every=10", "--keep=2", devices=8)
    assert out["checkpoints_left"] == [30, 40] and out["rss_end_over_warm"] > 0


@pytest.mark.slow
def test_train_step_compares_equal_work_for_every_family():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    # every side in this one process: each side in its own (the script's default) spawns
    # seven interpreters that import torch and transformers again (13 s each in a slow
    # sitting; the smoke alone 122 s -> 52 s); the spawning itself is the next test's.
    # HF's Flax BERT is left out: a fourth BERT side (37 s in one process)
    _, out = _run("train_step.py", "--sizes=tiny,t5_tiny,gpt2_tiny", "--windows=1",
                  "--steps=1", "--no_flax", "--in_process")
    assert out["peak_flops"] == max(out["peaks_measured"]) > 0
    assert len(out["peaks_measured"]) == 4  # before each size and after the last
    for size in ("tiny", "t5_tiny", "gpt2_tiny"):
        row = out[size]
        assert row["ratio"] > 0 and 0 < row["ours"]["mfu"] < 1, row
        keras = row["keras_hub"]  # measured where KerasHub is installed, else how to
        assert keras.get("ratio_ours_over_this", 0) > 0 or "keras-hub" in keras["install"]
    bert = out["tiny"]
    # HF's MLM head over every position does more work than over the masked ones.
    assert bert["hf_pytorch_task"]["work"] == "all_positions"
    assert bert["hf_pytorch_same_work"]["work"] == "same" and "hf_flax_task" not in bert
    assert bert["ratio"] == bert["hf_pytorch_same_work"]["ratio_ours_over_this"]


def test_train_step_times_each_side_in_a_fresh_interpreter_by_default(monkeypatch):
    """What the smoke above runs in one process: train_step.py's default runs a side in
    a new interpreter (its own imports, no state another side left), not in this one."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    train_step = importlib.import_module("train_step")
    assert train_step._in_fresh_process(os.getpid) != os.getpid()
    assert train_step._here(os.getpid) == os.getpid()


@pytest.mark.slow
def test_input_pipeline_reports_cores_per_host(shared_data):
    _, out = _run("input_pipeline.py", "--batches=2", "--workers=1", f"--corpus={BOOKS}")
    assert set(out["cases"]) == {"bert_128", "bert_512", "t5_512"}
    for case in out["cases"].values():
        assert case["tokens_per_sec_per_core"] > 0 and case["cores_needed_per_host"] >= 1
    text, parquet = out["read"]["text"], out["read"]["parquet"]
    assert parquet["rows"] > 0 and text["rows"] > parquet["rows"]  # lines vs records
    assert abs(parquet["tokens"] / text["tokens"] - 1) < 0.1  # the same text, split two ways


@pytest.mark.slow
def test_averaging_merges_and_evaluates_the_last_checkpoints():
    _, out = _run("averaging.py", "--steps=4", "--every=2", "--keep=2")
    results = out["results"]
    assert results["last"]["steps"] == [4] and results["average of last 2"]["steps"] == [2, 4]
    assert results["last"]["mlm_accuracy"] >= 0 and results["average of last 2"]["loss"] > 0


@pytest.mark.slow
def test_scan_layers_compares_both_forms_on_the_same_steps():
    _, out = _run("scan_layers.py", "--depths=7", "--windows=1", "--steps=1")
    seven = out["depths"]["7"]
    assert seven["max_loss_difference"] < 1e-5 and seven["step_ratio_scanned_over_unrolled"] > 0


@pytest.mark.slow
def test_sts_contrastive_compares_pretrained_with_random_init(shared_data, pretrained_workdir):
    _, out = _run("sts_contrastive.py", f"--workdir={pretrained_workdir}",
                  f"--glue_dir={shared_data}/glue", "--seeds=1", "--epochs=1", "--limit=64")
    assert -1 <= out["zero_shot"] <= 1 and len(out["random init"]["runs"]) == 1
    assert out["pretrained_minus_random"] == pytest.approx(
        out["pretrained"]["median"] - out["random init"]["median"])


def test_long_context_times_steps_after_the_compiling_one():
    _, out = _run("long_context.py", "--seq_len=256", "--rows=2", "--steps=3")
    assert out["tokens_per_step"] == 512 and out["seconds_per_step"]["windows"] == 2
    assert out["peak_rss"] >= out["rss_after_start"] > 0


def test_parquet_memory_reads_every_record_of_the_file_it_wrote(shared_data):
    _, out = _run("parquet_memory.py", "--gigabytes=0.003",
                  f"--corpus={shared_data}/corpus/gutenberg/pg11_alice_in_wonderland.txt")
    assert out["records"] == out["rows"] > 0 and out["file_bytes"] > 3e6
    assert out["peak_rss"] >= out["rss_after_imports"] > 0 and out["units"] == 1


@pytest.mark.slow
def test_tpu_plan_compares_with_flax_bert():
    pytest.importorskip("libtpu")
    pytest.importorskip("transformers")
    _, out = _run("tpu_plan.py", "--tiny", "--topology=v5e:2x2")
    assert out["speedup"] > 0 and out["ours_flops_per_step"] > 0


def test_tpu_matmuls_prices_each_of_a_layers_matmuls_by_the_compilers_cycles():
    """Each Dense and attention's two batched matmuls, forward and backward, with the
    compiler's cycles against the chip's peak, and the layer's sums."""
    pytest.importorskip("libtpu")
    _, out = _run("tpu_matmuls.py", "--tiny", "--topologies=v5e:1x1")
    rows = {r["matmul"]: r for r in out["rows"]}
    assert set(rows) == {"qkv", "attention out", "mlp in", "mlp out", "attention scores",
                         "attention values", "the four Dense", "the layer's matmuls"}
    assert all(r["cycles_seconds"] > 0 and 0 < r["of_peak"] < 1 for r in rows.values()), rows
    dense = sum(rows[k]["cycles_seconds"] for k in ("qkv", "attention out", "mlp in", "mlp out"))
    assert rows["the four Dense"]["cycles_seconds"] == pytest.approx(dense)
    assert rows["the layer's matmuls"]["cycles_seconds"] > dense


@pytest.mark.slow
def test_tpu_plan_tables_the_recipes_phase_by_phase():
    """--recipes plans every phase of each named config on each topology (the
    quickstart's one phase, shrunk, here) and says what bounds it by the compiled
    program's HBM bytes."""
    pytest.importorskip("libtpu")
    _, out = _run("tpu_plan.py", "--tiny", "--recipes=quickstart", "--topologies=v5e:2x2")
    assert [(r["recipe"], r["topology"], r["phase"]) for r in out["rows"]] == [
        ("quickstart", "v5e:2x2", 1)]
    row = out["rows"][0]
    assert row["fits"] and 0 < row["est_mfu"] < 1 and row["est_days"] > 0, row
    assert row["bound_hbm_only"] in ("flops", "hbm_bytes"), row


@pytest.mark.slow
@pytest.mark.optimized
def test_pretrain_pays_runs_end_to_end(shared_data, tmp_path):
    """Every part at toy size: pretraining on a budget, both arms over two seeds with the
    held-out rows choosing, the curve from an earlier checkpoint, the JSON contract."""
    _, out = _run("pretrain_pays.py", f"--workdir={tmp_path}", "--minutes=10",
                  "--max_steps=4", "--checkpoint_every=2", "--settings=sst2_500", "--seeds=0,1",
                  "--lrs=1e-3", "--max_rows=48", "--epochs=1", "--curve_points=1",
                  "--vocab_size=1000", f"--corpus={BOOKS}", TINY_NETWORK)
    assert _trained_tiny(tmp_path / "pretrain" / "config.json")
    assert out["best_setting"] == "sst2_500"
    arms = out["settings"]["sst2_500"]
    assert out["best_gap_points"] == arms["pretrained"]["mean"] - arms["random_init"]["mean"]
    assert out["best_gap_spread"] == max(arms["pretrained"]["std"], arms["random_init"]["std"])
    assert [r["seed"] for r in arms["random_init"]["runs"]] == [0, 1]
    assert len(out["curve"]) == 2 and out["curve"][0]["step"] < out["curve"][1]["step"]


@pytest.mark.slow
def test_packing_benchmark_prints_both_ways(shared_data):
    """Pairs (ALBERT's; BERT's take the same path) and RoBERTa's rows both ways: pairs
    pack below their padding, RoBERTa's packed rows (kept inside their documents) below
    DOC-SENTENCES' unpacked ones."""
    alice = str(REPO / "pretrainx" / "assets" / "text" / "pg11_alice_in_wonderland.txt")
    # 2 steps a run: the compiling one, then one timed window (each step of the quickstart's
    # BERT-Tiny over 4,096 tokens is 1-2 s on 2 cores, and padding is counted over the epoch)
    _, out = _run("packing.py", "--objectives=albert,roberta", "--seq_lens=64", "--steps=2",
                  "--window=1", f"--files={alice}", TINY_NETWORK)
    for name in ("albert", "roberta"):
        row = out["objectives"][name]["64"]
        assert row["packed"]["padding_fraction"] < row.get(
            "doc_sentences_padding", row["unpacked"]["padding_fraction"]), name
        assert row["useful_ratio"] > 0


@pytest.mark.slow
def test_recipes_benchmark_prints_every_recipe():
    _, out = _run("recipes.py", "--budget_minutes=0.05", "--window=1", "--eval_steps=1",
                  TINY_NETWORK)
    assert out["budget_seconds"] == 3.0
    for name in ("bert", "crammed", "modernbert"):
        r = out["recipes"][name]
        assert 0 <= r["eval_mlm_accuracy"] <= 1 and r["steps"] >= 1 and "over_bert" in r
        assert r["params"] < 500_000, (name, r["params"])  # the recipes' own: about 1.0M


@pytest.mark.slow
def test_faults_table_reports_exit_line_and_kept_files():
    """Two cases of benchmarks/faults.py: a refused override and a damaged checkpoint
    (the run refuses to start afresh over it), each with its exit code, its one line,
    and the committed files unchanged."""
    result, last = _run("faults.py", "--only=unknown config key,newest checkpoint damaged")
    rows = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [r["exit"] for r in rows] == [2, 2] and last == rows[-1]
    assert rows[0]["said"].startswith("error: unknown config key in --config.totl_steps=5")
    assert all(r["committed_unchanged"] for r in rows)


@pytest.mark.slow
def test_hf_parity_reports_each_family(shared_data):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    _, out = _run("hf_parity.py", "--families=bert,xlm-roberta,t5", "--rows=2")
    assert out["bert"]["ours"] < 1e-4 and out["xlm-roberta"]["round_trip"] < 1e-4
    assert out["t5"]["ours"] < 1e-4 and all(out[f]["tokenizer_same"] for f in ("bert", "t5"))


@pytest.mark.slow
def test_word2vec_gensim_scores_both_on_the_same_words():
    pytest.importorskip("gensim")
    books = ",".join(str(REPO / "pretrainx" / "assets" / "text" / name) for name in
                     ("pg11_alice_in_wonderland.txt", "pg1342_pride_and_prejudice.txt"))
    _, out = _run("word2vec_gensim.py", f"--files={books}", "--epochs=1", "--max_steps=1",
                  "--glove_epochs=1")
    assert out["pretrainx_glove"]["steps"] == 1 and out["pretrainx_glove"]["entries"] > 100_000
    for system in ("pretrainx", "gensim", "pretrainx_glove"):
        assert out[system]["seconds"] > 0 and out[system]["analogies"]["questions"] > 0
        assert out[system]["simlex"]["pairs"] > 100


def test_suite_profile_splits_a_run_into_jax_and_the_rest(tmp_path):
    """Rows as tests/conftest.py writes them, from two runs into one folder (as `.ci/run`
    does): the largest run alone, its in-process seconds split into JAX's columns and
    the rest, the tests with no JAX in process apart, files and tests by their time."""
    rows = {"gw0": [{"test": "tests/test_a.py::one", "run": "r1", "wall_s": 10.0,
                     "trace_s": 1.0, "lower_s": 0.5, "compile_s": 4.0, "hits": 2},
                    {"test": "tests/test_b.py::cli", "run": "r1", "wall_s": 30.0},
                    {"test": "tests/test_a.py::again", "run": "r2", "wall_s": 99.0}],
            "gw1": [{"test": "tests/test_a.py::two", "run": "r1", "wall_s": 6.0,
                     "compile_s": 1.0, "cache_read_s": 0.5}]}
    for worker, lines in rows.items():
        (tmp_path / f"{worker}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    _, out = _run("suite_profile.py", str(tmp_path), "--top=2")
    assert (out["tests"], out["worker_seconds"]) == (3, 46.0)
    inside = out["in_process"]
    assert (inside["tests"], inside["seconds"], inside["compile_s"]) == (2, 16.0, 5.0)
    assert inside["not_jax_s"] == 16.0 - 7.0
    assert out["no_jax_in_process"] == {"tests": 1, "seconds": 30.0}
    assert out["files"] == [["tests/test_b.py", 30.0], ["tests/test_a.py", 16.0]]
    assert [t for t, *_ in out["slowest"]] == ["tests/test_b.py::cli", "tests/test_a.py::one"]
    assert out["slowest_not_jax"][0] == ["tests/test_a.py::one", 4.5, 10.0]


@pytest.mark.slow
def test_biphasic_trains_every_arm_continues_both_and_fine_tunes_each(shared_data, tmp_path):
    _, out = _run("biphasic.py", f"--workdir={tmp_path}", "--steps=4", "--cpt_steps=2",
                  "--seeds=0", "--lrs=1e-3", "--max_rows=20", "--epochs=1", "--eval_steps=1",
                  TINY_NETWORK)
    arms = out["arms"]
    assert set(arms) == {"mlm", "clm", "clm_then_mlm_0.25", "clm_then_mlm_0.5",
                         "mlm_continued_from_mlm", "mlm_continued_from_clm"}
    assert "perplexity" in arms["clm"] and all(
        0 <= a["mlm_accuracy"]["median"] <= 1 for k, a in arms.items() if k != "clm")
    assert all(len(a["sst2_500"]["per_seed"]) == 1 for a in arms.values())
    bounds = read_metrics(tmp_path / "pretrain" / "clm_then_mlm_0.5_s0", split="phase")
    assert [(b["step"], b["sets"]["objective"]) for b in bounds] == [(2, "modernbert")]


@pytest.mark.slow
def test_encdec_objectives_trains_at_equal_flops_evaluates_and_fine_tunes(shared_data, tmp_path):
    _, out = _run("encdec_objectives.py", f"--workdir={tmp_path}", "--steps=2", "--seeds=0",
                  "--arms=span,ul2,gemma2,scratch_total,adapted_kd", "--max_rows=20",
                  "--epochs=1", "--eval_steps=1", timeout=900)
    arms = out["arms"]
    # span corruption's shorter targets buy it more steps for the same FLOPs
    assert arms["span"]["steps"] > arms["ul2"]["steps"] == 2
    assert abs(arms["span"]["tflops"] / arms["ul2"]["tflops"] - 1) < 0.3
    # scratch_total's FLOPs are the decoder's and an adapted run's (the student's) together
    together = arms["gemma2"]["tflops"] + arms["adapted_kd"]["tflops"]
    assert abs(arms["scratch_total"]["tflops"] / together - 1) < 0.3
    for arm in ("span", "ul2", "scratch_total", "adapted_kd"):
        assert all(0 < arms[arm][f"heldout_{d}"]["median"] < 9 for d in ("R:3:0.15", "S"))
        assert 0 <= arms[arm]["sst2_2000"]["median"] <= 100
    config = json.loads((tmp_path / "pretrain" / "adapted_kd_s0" / "config.json").read_text())
    assert config["adapt"]["encoder_from"] == config["distill"]["teacher"]
    assert config["distill"]["teacher"].endswith("gemma2_s0") and config["data"]["denoisers"] == "S"


@pytest.mark.slow
def test_mdlm_bound_trains_both_and_reports_the_ratio(tmp_path):
    _, out = _run("mdlm_bound.py", f"--workdir={tmp_path}", "--steps=2", "--seeds=0",
                  "--eval_steps=1", TINY_NETWORK)
    assert out["runs"][0]["mdlm_bound_perplexity"] > 1 and out["runs"][0]["clm_perplexity"] > 1
    assert out["ratio"]["median"] > 0


@pytest.mark.slow
def test_decoder_to_encoder_scores_every_stage(shared_data, tmp_path):
    _, out = _run("decoder_to_encoder.py", f"--workdir={tmp_path}", "--clm_steps=2",
                  "--mntp_steps=2", "--seeds=0", "--simcse_rows=40", "--pair_rows=40",
                  f"--glue_dir={shared_data / 'glue'}", TINY_NETWORK, timeout=900)
    stages = out["stages"]
    assert set(stages) == {"a_causal_last", "b_bidirectional_mean", "c_mntp_mean",
                           "encoder_mean", "d_simcse", "e_supervised", "encoder_simcse",
                           "encoder_supervised"}
    assert all(-1 <= s["spearman"]["median"] <= 1 and 0 <= s["mrr_at_10"]["median"] <= 1
               for s in stages.values())
    assert {"spearman_at_32", "spearman_at_8"} <= set(stages["e_supervised"])
