"""The notebooks (notebooks/*.ipynb): stored without outputs, and run top to bottom
headless on a CPU (a few dozen steps) with what they show checked; and the helpers of
pretrainx.compare.notebook they call."""

import json
import os
import pathlib
import re

import numpy as np
import pytest

from conftest import REPO, SHARED_DATA, read_metrics, tiny_bert_config, tiny_t5_config

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


# --- stored notebooks ---------------------------------------------------------------

def test_the_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"quickstart.ipynb", "t5_span_corruption.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_stored_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, (
                f"{path.name}: strip the outputs (jupyter nbconvert --clear-output --inplace)")
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


# --- pretrainx.compare.notebook ---------------------------------------------------------------

def test_load_recipe_is_the_config_file():
    from conftest import load_config
    from pretrainx.compare import notebook
    assert notebook.load_recipe("quickstart.py").to_dict() == load_config("quickstart.py").to_dict()
    assert notebook.load_recipe(str(REPO / "configs" / "t5_quickstart.py")).objective == "t5"


@pytest.mark.slow
def test_train_calls_on_step_after_every_step_with_the_logged_records(tmp_path, monkeypatch):
    from pretrainx.compare import notebook
    from pretrainx.train import loop
    cfg = tiny_bert_config(total_steps=4, log_every=2, checkpoint_every=4, eval_every=4)
    seen, real_train = [], loop.train

    def spy(cfg, workdir, on_step, **kwargs):  # the hook notebook.train's progress bar gets
        return real_train(cfg, workdir, **kwargs,
                          on_step=lambda step, records: (seen.append((step, list(records))),
                                                         on_step(step, records)))

    monkeypatch.setattr(loop, "train", spy)
    result = notebook.train(cfg, str(tmp_path))
    assert [step for step, _ in seen] == [1, 2, 3, 4]
    assert [[r.get("split", "train") for r in records] for _, records in seen] == [
        [], ["train"], [], ["train", "eval"]]
    assert seen[-1][1] == [result["train"], result["eval"]]
    assert notebook.read_metrics(str(tmp_path)) == [seen[1][1][0], seen[3][1][0]]
    assert notebook.read_metrics(str(tmp_path), "eval") == [result["eval"]]


def test_fill_mask(pretrained_workdir, pretrained_t5_workdir):
    from pretrainx import interop
    from pretrainx.compare import notebook
    from pretrainx.errors import UserError
    texts = ["The Hatter was the [MASK] to break the silence.",
             "“Of course it [MASK],” said the Mock [MASK]."]
    out = notebook.fill_mask(pretrained_workdir, texts, top_k=3)
    assert [o["text"] for o in out] == texts
    assert [len(o["predictions"]) for o in out] == [1, 2]
    for o in out:
        for guesses in o["predictions"]:
            probs = [p for _, p in guesses]
            assert len(guesses) == 3 and probs == sorted(probs, reverse=True) and probs[0] < 1
        assert "[MASK]" not in o["filled"] and o["filled"].startswith(o["text"][:4].lower())
    # A loaded model gives the same, and batching does not change a text's answer.
    alone = notebook.fill_mask(interop.load(pretrained_workdir), texts[:1], top_k=3)
    assert alone[0]["filled"] == out[0]["filled"]
    np.testing.assert_allclose([p for _, p in alone[0]["predictions"][0]],
                               [p for _, p in out[0]["predictions"][0]], rtol=1e-4)
    with pytest.raises(ValueError, match=r"no \[MASK\]"):
        notebook.fill_mask(pretrained_workdir, ["nothing masked"])
    with pytest.raises(UserError, match="fill_mask needs a masked-LM head"):
        notebook.fill_mask(pretrained_t5_workdir, texts)


def test_span_corruption_examples_come_from_the_objective():
    from pretrainx import objectives
    from pretrainx.compare import notebook
    from pretrainx.data.tokenizers import load_tokenizer
    cfg = tiny_t5_config()
    text = ("Alice was beginning to get very tired of sitting by her sister on the bank, and "
            "of having nothing to do: once or twice she had peeped into the book her sister "
            "was reading, but it had no pictures or conversations in it.")
    [ex] = notebook.span_corruption_examples(cfg, [text], seed=3)
    objective = objectives.build(cfg, load_tokenizer(cfg.data.tokenizer))
    inputs, targets = objective.corrupt(np.asarray(objective.tokenizer.encode(text), np.int32),
                                        np.random.default_rng(3))
    assert np.array_equal(ex["input_ids"], inputs) and np.array_equal(ex["target_ids"], targets)
    spans = re.findall(r"<extra_id_(\d+)>", ex["inputs"])
    assert len(spans) >= 2 and spans == [str(i) for i in range(len(spans))]
    assert re.findall(r"<extra_id_(\d+)>", ex["targets"]) == spans
    assert ex["inputs"].endswith("</s>") and ex["targets"].endswith("</s>")
    # Inputs and targets together hold the text: put the spans back where the sentinels are.
    sentinels = set(objective.sentinels.tolist())
    pieces, rebuilt, s = {}, [], None
    for t in targets[:-1].tolist():
        s = t if t in sentinels else s
        pieces.setdefault(s, []).extend([] if t in sentinels else [t])
    for t in inputs[:-1].tolist():
        rebuilt.extend(pieces[t] if t in sentinels else [t])
    assert rebuilt == objective.tokenizer.encode(text)


def test_t5_sample_reads_sentinels_and_decodes_greedily(pretrained_t5_workdir):
    """t5_sample turns "<extra_id_N>" into sentinel ids and adds EOS as training does,
    then decodes with decoding.encoder_decoder (tested against transformers' generate
    in test_interop)."""
    import jax.numpy as jnp
    from pretrainx import interop
    from pretrainx.compare import notebook
    from pretrainx.models import decoding
    from pretrainx.families.t5 import model as t5
    texts = ["Alice opened the door and found that it led into a small <extra_id_0>.",
             "The Hatter <extra_id_0> the first to <extra_id_1> the silence. </s>"]
    out = notebook.t5_sample(pretrained_t5_workdir, texts, max_new_tokens=6)
    assert [len(o) for o in out] == [1, 1] and all(isinstance(o[0], str) for o in out)

    objective = notebook._t5_objective(pretrained_t5_workdir)
    model = interop.load(pretrained_t5_workdir)
    ids = objective.tokenizer.encode("Alice opened the door and found that it led into a small")
    tokens = jnp.asarray([ids + [int(objective.sentinels[0])]
                          + objective.tokenizer.encode(".") + [objective.eos_id]])
    expected = decoding.encoder_decoder(t5.T5(notebook._eval_model_config(model)),
                                        model.params, tokens, jnp.ones_like(tokens), 6)
    row = np.asarray(expected)[0].tolist()
    row = row[:row.index(objective.eos_id) + 1] if objective.eos_id in row else row
    assert out[0][0] == objective.decode(row)

    samples = notebook.t5_sample(pretrained_t5_workdir, texts[:1], max_new_tokens=6,
                                 temperature=1.0, num_samples=4, seed=0)
    assert len(samples) == 1 and len(samples[0]) == 4
    with pytest.raises(ValueError, match="sentinels"):
        notebook.t5_sample(pretrained_t5_workdir, ["<extra_id_100>"])


# --- the notebooks, run -----------------------------------------------------------------

def _run(name: str, tmp_path: pathlib.Path, steps: int):
    """Executes notebooks/NAME in a fresh kernel with cwd tmp_path; returns the notebook."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    env = dict(os.environ, PRETRAINX_NOTEBOOK_STEPS=str(steps), JAX_PLATFORMS="cpu",
               PRETRAINX_NOTEBOOK_EXAMPLES="320",
               MPLBACKEND="module://matplotlib_inline.backend_inline")
    for name_ in ("PRETRAINX_NOTEBOOK_DIR", "PRETRAINX_GLUE_DIR"):  # the defaults are tested
        env.pop(name_, None)
    # One CPU device, as a notebook has (conftest simulates 8 for the other tests).
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "",
                              env.get("XLA_FLAGS", "")).strip()
    nb = nbformat.read(REPO / "notebooks" / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)
    return nb


def _text(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.slow
@pytest.mark.optimized
def test_quickstart_notebook_runs(tmp_path):
    nb = _run("quickstart.ipynb", tmp_path, steps=40)
    root = tmp_path / "workdir"
    records = read_metrics(str(root / "notebook_quickstart"))
    assert records[-1]["step"] == 40 and records[-1]["loss"] < records[0]["loss"] - 0.5
    assert read_metrics(str(root / "notebook_quickstart"), "eval")
    curves = next(c for c in nb.cells if c.get("id") == "curves")
    assert any("image/png" in o.get("data", {}) for o in curves.outputs)
    fills = _text(nb, "fill")
    assert fills.count("model:") == 4 and "[MASK]" in fills
    have_sst2 = (SHARED_DATA / "glue" / "SST-2" / "dev.tsv").is_file()
    assert ("skipping fine-tuning" in _text(nb, "finetune")) != have_sst2
    if have_sst2:
        assert read_metrics(str(root / "notebook_sst2"), "dev")
    exported = set(os.listdir(root / "notebook_hf"))
    assert {"config.json", "model.safetensors"} <= exported
    architecture = "BertForSequenceClassification" if have_sst2 else "BertForPreTraining"
    assert json.loads((root / "notebook_hf" / "config.json").read_text())["architectures"] == [
        architecture]
    if "skipping" not in _text(nb, "transformers"):
        assert _text(nb, "transformers").count("P(positive)" if have_sst2 else "MLM logits") >= 1


@pytest.mark.slow
def test_t5_notebook_runs(tmp_path):
    nb = _run("t5_span_corruption.ipynb", tmp_path, steps=24)
    records = read_metrics(str(tmp_path / "workdir" / "notebook_t5"))
    assert records[-1]["step"] == 24 and records[-1]["loss"] < records[0]["loss"]
    spans = _text(nb, "spans")
    assert spans.count("inputs: ") == 3 and spans.count("<extra_id_0>") == 6
    assert "<extra_id_1>" in spans
    samples = _text(nb, "sample")
    assert samples.count("model:  ") == 3
    assert len(re.findall(r"^sample \d: ", samples, re.M)) == 3
