"""What the notebooks (notebooks/*.ipynb) call, kept in the library so that their cells
stay short, use the same code as the command line, and are tested here rather than only
when a notebook runs:

- `load_recipe("quickstart.py")`: a recipe of configs/ (which ships with the checkout,
  not the package) as `--config=` would load it, to change in Python;
- `train(cfg, workdir)`: `pretrainx.pretrain.train` with a live progress bar;
- `read_metrics(workdir)`: WORKDIR/metrics.jsonl as a list of records, for plots;
- `fill_mask(workdir, ["... [MASK] ..."])`: what a pretrained BERT puts in each [MASK];
- `span_corruption_examples(cfg, texts)`: T5's span corruption of a text, decoded, from
  the objective's own example builder;
- `t5_sample(workdir, ["... <extra_id_0> ..."])`: what a pretrained T5 writes for an
  input with sentinels, greedy or sampled.
"""

import json
import os
import re
import sys

import jax
import ml_collections
import numpy as np

import pretrainx
from pretrainx import config as config_lib
from pretrainx import interop, models, objectives, pretrain
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.models import decoding
from pretrainx.models import peft as peft_lib

MASK = "[MASK]"
_SENTINEL = re.compile(r"<extra_id_(\d+)>")


# --- configs and training -------------------------------------------------------------

def repo_root() -> str | None:
    """The checkout pretrainx is installed from (pip install -e), if it has configs/."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(pretrainx.__file__)))
    return root if os.path.isdir(os.path.join(root, "configs")) else None


def load_recipe(name: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """get_config(arg) of configs/NAME (or of the file NAME), as `--config=` loads it."""
    path = name
    if not os.path.isfile(path):
        root = repo_root()
        path = os.path.join(root, "configs", name) if root else name
    if not os.path.isfile(path):
        raise UserError(f"config {name} not found: the recipes are in the checkout's "
                        "configs/ (install with `pip install -e CHECKOUT`) or give a path")
    return config_lib.load_file(path if arg is None else f"{path}:{arg}")


def _progress_bar(total: int, desc: str):
    """tqdm's notebook widget where ipywidgets is installed (Colab), else its text bar
    (tqdm.auto would warn about the missing widget first)."""
    try:
        import ipywidgets  # noqa: F401
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)


def train(cfg, workdir: str, **kwargs) -> dict:
    """`pretrainx.pretrain.train` with a progress bar (loss in its postfix); the
    run itself, its printed lines and its files are the command line's."""
    bar = _progress_bar(cfg.total_steps, os.path.basename(os.path.normpath(workdir)))
    shown = {}

    def on_step(step, records):
        for record in (r for r in records if "source" not in r):
            shown["eval_loss" if record.get("split") == "eval" else "loss"] = (
                f"{record['loss']:.3f}")
        if records:
            bar.set_postfix(shown, refresh=False)
        bar.update(step - bar.n)

    try:
        return pretrain.train(cfg, workdir, on_step=on_step, **kwargs)
    finally:
        bar.close()


def read_metrics(workdir: str, split: str = "train", source: str | None = None) -> list:
    """The records of WORKDIR/metrics.jsonl of one split ("train", "eval"; fine-tuning
    runs also write "dev"); `source` picks one eval source's records (runs with several
    eval sources write one a source besides the overall one)."""
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records
            if r.get("split", "train") == split and r.get("source") == source]


def _load(model):
    """A `Pretrained` (interop.load) from a path, or the one given."""
    return interop.load(model) if isinstance(model, (str, os.PathLike)) else model


def _eval_model_config(pretrained) -> ml_collections.ConfigDict:
    cfg = ml_collections.ConfigDict(pretrained.model.to_dict())
    cfg.scan_layers = False  # interop.load unrolls the layers
    cfg.dropout_rate = cfg.attention_dropout_rate = 0.0
    return cfg


# --- BERT: fill in [MASK] ---------------------------------------------------------------

def fill_mask(model, texts, top_k: int = 5) -> list:
    """For each text with one or more "[MASK]": the model's `top_k` pieces (with their
    probabilities) at each mask, and the text with the likeliest ones filled in.

    `model` is a BERT pretraining workdir (or its `interop.load`). Each text becomes
    [CLS] text [SEP] as in pretraining; keep it within the length the model was trained
    at (positions beyond it were never trained).
    """
    pretrained = _load(model)
    family = models.FAMILIES.find(pretrained.family)
    if family is None or not family.fill_mask or pretrained.head not in ("pretrain", "mlm"):
        raise UserError(f"{pretrained.source} is a {pretrained.family} model with a "
                        f"{pretrained.head} head; fill_mask needs a masked-LM head")
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case,
                               layout=family.tokenizer_layout)
    rows, positions = [], []
    for text in texts:
        parts = text.split(MASK)
        if len(parts) < 2:
            raise ValueError(f"no {MASK} in {text!r}")
        ids, where = [tokenizer.cls_id], []
        for i, part in enumerate(parts):
            if i:
                where.append(len(ids))
                ids.append(tokenizer.mask_id)
            ids.extend(tokenizer.encode(part.strip()))
        rows.append(ids + [tokenizer.sep_id])
        positions.append(where)
    length, masks = max(map(len, rows)), max(map(len, positions))
    cfg = _eval_model_config(pretrained)
    limit = cfg.max_position_embeddings - cfg.get("position_offset", 0)
    if length > limit:
        raise ValueError(f"a text of {length} tokens exceeds the model's {limit} positions")
    input_ids = np.full((len(rows), length), tokenizer.pad_id, np.int32)
    attention = np.zeros((len(rows), length), np.int32)
    gather = np.zeros((len(rows), masks), np.int32)
    for r, (ids, where) in enumerate(zip(rows, positions)):
        input_ids[r, :len(ids)], attention[r, :len(ids)] = ids, 1
        gather[r, :len(where)] = where
    batch = {"input_ids": input_ids, "token_type_ids": np.zeros_like(input_ids),
             "attention_mask": attention, "masked_lm_positions": gather}
    net = family.fill_mask(cfg, pretrained.head)
    logits = jax.jit(lambda p, b: net.apply({"params": p}, b)["mlm_logits"])(
        pretrained.params, batch)
    probs = np.asarray(jax.nn.softmax(logits, axis=-1))
    out = []
    for r, (text, ids, where) in enumerate(zip(texts, rows, positions)):
        filled, predictions = list(ids), []
        for m, pos in enumerate(where):
            best = np.argsort(-probs[r, m])[:top_k]
            predictions.append([(tokenizer.decode([int(i)]) or tokenizer.id_to_piece(int(i)),
                                 float(probs[r, m, i])) for i in best])
            filled[pos] = int(best[0])
        out.append({"text": text, "predictions": predictions,
                    "filled": tokenizer.decode(filled[1:-1])})
    return out


# --- T5: span corruption and sampling -----------------------------------------------------

def _t5_objective(cfg_or_workdir):
    """The span-corruption objective of a T5 config, or of a workdir's config.json."""
    cfg = cfg_or_workdir
    if isinstance(cfg, (str, os.PathLike)):
        with open(os.path.join(cfg, "config.json"), encoding="utf-8") as f:
            cfg = ml_collections.ConfigDict(json.load(f))
    objective = objectives.build(cfg, load_tokenizer(cfg.data.tokenizer,
                                                     lower_case=cfg.data.lower_case))
    if not hasattr(objective, "corrupt"):
        raise UserError(f"a {cfg.get('objective')!r} config; span corruption is T5's")
    return objective


def span_corruption_examples(cfg_or_workdir, texts, seed: int = 0) -> list:
    """Each text span-corrupted as pretraining corrupts its examples (the objective's
    `corrupt`: T5's noise density, span lengths and sentinels), decoded: {"text",
    "inputs", "targets", "input_ids", "target_ids"}."""
    objective = _t5_objective(cfg_or_workdir)
    rng = np.random.default_rng(seed)
    out = []
    for text in texts:
        tokens = np.asarray(objective.tokenizer.encode(text), np.int32)
        inputs, targets = objective.corrupt(tokens, rng)
        out.append({"text": text, "inputs": objective.decode(inputs),
                    "targets": objective.decode(targets),
                    "input_ids": np.asarray(inputs), "target_ids": np.asarray(targets)})
    return out


def t5_sample(workdir: str, texts, max_new_tokens: int = 16, temperature: float = 0.0,
              top_k: int = 0, top_p: float = 1.0, num_samples: int = 1, seed: int = 0) -> list:
    """What a T5 pretraining workdir's model writes for each text, where "<extra_id_N>"
    in a text is sentinel N (the spans it was trained to fill in) and a trailing "</s>"
    (as span_corruption_examples writes it) is dropped: EOS is added as in training.
    Returns, per text, `num_samples` decoded outputs (cut after EOS); temperature 0 is
    greedy decoding."""
    objective = _t5_objective(workdir)
    pretrained = _load(workdir)
    tokenizer, sentinels = objective.tokenizer, objective.sentinels
    rows = []
    for text in texts:
        text = text.strip().removesuffix("</s>")
        ids, at = [], 0
        for match in _SENTINEL.finditer(text):
            ids.extend(tokenizer.encode(text[at:match.start()].strip()))
            n = int(match.group(1))
            if n >= len(sentinels):
                raise ValueError(f"<extra_id_{n}>: the model has {len(sentinels)} sentinels")
            ids.append(int(sentinels[n]))
            at = match.end()
        ids.extend(tokenizer.encode(text[at:].strip()))
        rows.extend([ids + [objective.eos_id]] * num_samples)
    length = max(map(len, rows))
    tokens = np.zeros((len(rows), length), np.int32)
    segments = np.zeros((len(rows), length), np.int32)
    for r, ids in enumerate(rows):
        tokens[r, :len(ids)], segments[r, :len(ids)] = ids, 1
    # a text-to-text family fine-tunes the encoder-decoder that writes its outputs
    net = models.family(pretrained.family).finetune_model(
        _eval_model_config(pretrained), "seq2seq", 0, peft_lib.Peft())
    sampler = jax.jit(lambda params, tokens, segments, key: decoding.encoder_decoder(
        net, params, tokens, segments, max_new_tokens, temperature, top_k, top_p, key))
    outputs = np.asarray(sampler(pretrained.params, tokens, segments, jax.random.key(seed)))
    decoded = []
    for row in outputs.tolist():
        if objective.eos_id in row:
            row = row[:row.index(objective.eos_id) + 1]
        decoded.append(objective.decode(row))
    return [decoded[i:i + num_samples] for i in range(0, len(decoded), num_samples)]
