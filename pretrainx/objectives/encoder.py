"""What every BERT-like objective (BERT, RoBERTa, SpanBERT, ALBERT, ELECTRA) shares:
the encoder's config keys and checks, the MLM part of a batch, its metrics, its
--stats summary and a readable row. Each objective composes these; none inherits
from another."""

import math

import jax.numpy as jnp
import numpy as np

from pretrainx import config as config_lib
from pretrainx.data import corpus
from pretrainx.errors import UserError
from pretrainx.objectives import mlm

# ---- config ---------------------------------------------------------------------
def defaults(objective: str, model, *, total_steps: int, batch: int, seq_len: int,
             learning_rate: float, schedule: str, lower_case: bool, mask_prob: float,
             max_predictions: int, **optimizer):
    """A one-length, MLM-only run of the family's `model` keys with the run values its
    spec passes (every one: a family's values live in its spec, each key set once);
    objectives that pair segments add `pairing_defaults`."""
    c = config_lib.shared_config(objective, total_steps=total_steps, batch=batch,
                                 seq_len=seq_len, learning_rate=learning_rate,
                                 schedule=schedule, **optimizer)
    c.model = model
    c.data.lower_case = lower_case
    c.data.mask_prob = mask_prob
    c.data.max_predictions_per_seq = max_predictions
    return c


def pairing_defaults(c, dupe_factor: int = 10):
    """create_pretraining_data's pairing: 10% shorter pairs, `dupe_factor` passes."""
    c.data.short_seq_prob = 0.1
    c.data.dupe_factor = dupe_factor  # times the corpus is paired
    return c


def packing_defaults(c, max_examples: int = 3):
    """Krell et al. 2021: several examples a row, each isolated (objectives/packed_pairs.py);
    off: the paper's one example a row, padded. max_examples_per_row: at most this many
    (3, as Krell et al. find enough for BERT's pairs)."""
    c.data.pack_examples = False
    c.data.max_examples_per_row = max_examples
    return c


def masked_corpus(cfg, tokenizer, vocab_must_fit: bool = False):
    """The corpus an MLM objective reads, once its tokenizer passed the checks (a
    [MASK] piece; with `vocab_must_fit`, every id within model.vocab_size).
    tokenizer None: shapes only (--describe), nothing to check."""
    if tokenizer is not None:
        require_mask(tokenizer)
        if vocab_must_fit:
            require_vocab_fits(tokenizer, cfg)
    return corpus.Corpus(cfg, tokenizer)


def validate_packing(cfg) -> None:
    """A packed row must hold its examples' 15% each: max_predictions_per_seq covers a
    full row's share (and each example's rounding has a slot of its own)."""
    config_lib.check_positive(cfg, "data.max_examples_per_row")
    if not cfg.data.get("pack_examples", False):
        return
    for phase in config_lib.phases(cfg):
        rate = phase.cfg.data.mask_prob  # a named phase's own
        if phase.max_predictions < rate * phase.seq_len:
            raise UserError(
                f"data.pack_examples=True needs {phase.prefix or 'data.'}"
                f"max_predictions_per_seq >= mask_prob x seq_len (a full row's share), "
                f"{phase.max_predictions} < {rate * phase.seq_len:g}")


# the architecture keys a BERT-built model may set (families/bert/model.py), values
# first to last; model.glu is True or False
ARCHITECTURE_CHOICES = {"norm": ("layernorm", "rmsnorm"), "norm_position": ("post", "pre"),
                        "position_embedding": ("learned", "rotary", "relative"),
                        "glu": (False, True)}


def validate(cfg) -> None:
    """The encoder's keys, masking, and each phase's length and batch."""
    config_lib.check_positive(cfg, "model.hidden_size", "model.num_heads", "model.mlp_dim",
                              "model.max_position_embeddings", "data.max_predictions_per_seq")
    config_lib.check_divisible(cfg)
    m = cfg.model
    embedding_size = m.get("embedding_size", 0)
    if isinstance(embedding_size, bool) or not isinstance(embedding_size, int) \
            or embedding_size < 0:
        raise UserError(f"config key 'model.embedding_size' must be an integer >= 0 "
                        f"(0: hidden_size), got {embedding_size!r}")
    if not isinstance(m.get("share_layers", False), bool):
        raise UserError(f"config key 'model.share_layers' must be True or False, "
                        f"got {m.share_layers!r}")
    for key, choices in ARCHITECTURE_CHOICES.items():  # where the model has the key
        if key in m:
            config_lib.choice(m[key], f"model.{key}", choices)
    if "phase2" in cfg and not 0.0 <= cfg.phase2.fraction < 1.0:
        raise UserError(f"phase2.fraction={cfg.phase2.fraction} must be in [0, 1)")
    config_lib.check_fraction(cfg, "data.mask_prob", 0.0, 1.0)
    for phase in config_lib.phases(cfg):
        pm = phase.cfg.model  # a named phase may raise max_position_embeddings (RoPE)
        offset = pm.get("position_offset", 0)
        if phase.seq_len + offset > pm.max_position_embeddings:
            raise UserError(
                f"{phase.prefix}seq_len={phase.seq_len}"
                + (f" + model.position_offset={offset}" if offset else "")
                + f" exceeds {phase.prefix}model.max_position_embeddings="
                f"{pm.max_position_embeddings}")
        if phase.global_batch_size % cfg.micro_batches:
            raise UserError(
                f"{phase.prefix}global_batch_size={phase.global_batch_size} is not divisible "
                f"by micro_batches={cfg.micro_batches}")
        if phase.max_predictions > phase.seq_len:
            raise UserError(f"max_predictions_per_seq={phase.max_predictions} exceeds "
                            f"{phase.prefix}seq_len={phase.seq_len}")


def validate_document_mlm(cfg) -> None:
    """The checks of a rotary encoder trained on masks drawn at batch time from
    document rows: an even head size for RoPE, data.eval_mask_prob
    in [0, 1], and each phase's max_predictions_per_seq within 10% of mask_prob's
    share of a row."""
    m = cfg.model
    if m.hidden_size % m.num_heads or (m.hidden_size // m.num_heads) % 2:
        raise UserError(f"model.hidden_size={m.hidden_size} over model.num_heads={m.num_heads} "
                        "must give an even head size (RoPE rotates pairs)")
    rate = cfg.data.eval_mask_prob
    if not 0.0 <= rate <= 1.0:
        raise UserError(f"data.eval_mask_prob={rate} must be in [0, 1] (0: data.mask_prob)")
    for phase in config_lib.phases(cfg):
        rate = phase.cfg.data.mask_prob  # a named phase's own
        need = math.ceil(rate * (phase.seq_len - 2))
        if phase.max_predictions < min(need, phase.seq_len) * 0.9:
            raise UserError(f"{phase.prefix or 'data.'}max_predictions_per_seq="
                            f"{phase.max_predictions} cuts mask_prob={rate} of "
                            f"{phase.seq_len} tokens ({need} predictions) by more than 10%")


def pretrained_encoder(model_cfg, params):
    """A finished pretraining run read as a BERT with its pretraining heads."""
    return model_cfg, params, "pretrain"


def pretrained_mlm(model_cfg, params):
    """A finished run of BertForMaskedLM (or a model that extends it: SpanBERT's SBO
    head rides along) read as the encoder and its MLM head."""
    return model_cfg, params, "mlm"


# ---- tokenizer --------------------------------------------------------------------
def require_mask(tokenizer, token: str = "[MASK]") -> None:
    if tokenizer.mask_id < 0:
        raise UserError(f"tokenizer {tokenizer.path} has no {token} token")


def require_cls_and_sep(tokenizer, family: str, layout: str) -> None:
    if tokenizer.cls_id == tokenizer.sep_id:
        raise UserError(f"tokenizer {tokenizer.path} has no separate [CLS] and [SEP]; "
                        f"{family}'s rows are {layout} (a WordPiece vocab.txt)")


def unmasked_specials(tokenizer):
    """The ids google-research's create_pretraining_data (BERT, ALBERT, ELECTRA) never
    masks: [CLS] and [SEP] (padding and [MASK] never occur in its input); [UNK] it masks
    like any word, so it is left out here. Also what a random replacement never is."""
    specials = tokenizer.special_ids()
    return specials[specials != tokenizer.unk_id]


def require_vocab_fits(tokenizer, cfg) -> None:
    if tokenizer.vocab_size > cfg.model.vocab_size:
        raise UserError(f"tokenizer {tokenizer.path} has {tokenizer.vocab_size} ids "
                        f"here but model.vocab_size={cfg.model.vocab_size}")


def check_row_tokenizer(tokenizer, cfg, family: str, layout: str) -> None:
    """What a [CLS] ... [SEP] objective needs of its vocabulary, in the order it is said."""
    require_cls_and_sep(tokenizer, family, layout)
    require_mask(tokenizer, "mask")
    require_vocab_fits(tokenizer, cfg)


# ---- batches ----------------------------------------------------------------------
def pad_row(example, seq_len: int, pad_id: int):
    """A single-segment row's input_ids padded to seq_len, and its attention mask."""
    ids = example["input_ids"]
    padded = np.full(seq_len, pad_id, np.int32)
    padded[:ids.size] = ids
    attention = np.zeros(seq_len, np.int32)
    attention[:ids.size] = 1
    return padded, attention


def example_batch(batch_size: int, phase) -> dict:
    """Zeros of an MLM batch: the encoder's inputs and the masked predictions."""
    b, s, p = batch_size, phase.seq_len, phase.max_predictions
    return {
        "input_ids": np.zeros((b, s), np.int32),
        "token_type_ids": np.zeros((b, s), np.int32),
        "attention_mask": np.ones((b, s), np.int32),
        "masked_lm_positions": np.zeros((b, p), np.int32),
        "masked_lm_ids": np.zeros((b, p), np.int32),
        "masked_lm_weights": np.zeros((b, p), np.float32),
    }


# ---- loss and metrics -------------------------------------------------------------
def mlm_normalizer(batch):
    """The global batch's real masked positions (at least 1)."""
    return jnp.maximum(jnp.sum(batch["masked_lm_weights"]), 1.0)


def mlm_metrics(sums, norms) -> dict:
    return {"mlm_loss": sums["mlm_loss_sum"] / norms["mlm"],
            "mlm_accuracy": sums["mlm_correct_sum"] / norms["mlm"]}


def mlm_eval_metrics(totals) -> dict:
    n = max(float(totals["mlm_weight_sum"]), 1.0)
    return {"mlm_loss": float(totals["mlm_loss_sum"]) / n,
            "mlm_accuracy": float(totals["mlm_correct_sum"]) / n}


def pair_metrics(sums, norms, task: str) -> dict:
    """The two-way sentence task (NSP or SOP) of a pair objective, as `task`_*."""
    return {f"{task}_loss": sums[f"{task}_loss_sum"] / norms[task],
            f"{task}_accuracy": sums[f"{task}_correct_sum"] / norms[task]}


def pair_eval_metrics(totals, task: str) -> dict:
    n = max(float(totals[f"{task}_count"]), 1.0)
    return {f"{task}_loss": float(totals[f"{task}_loss_sum"]) / n,
            f"{task}_accuracy": float(totals[f"{task}_correct_sum"]) / n}


# ---- statistics (python -m pretrainx.data --stats) --------------------------------
def masking_summary(totals) -> dict:
    """BERT-style masking from mlm.masking_counts added over batches."""
    masked = max(totals["masked"], 1)
    return {"masked_fraction": totals["masked"] / max(totals["candidates"], 1),
            "mask_token_fraction": totals["mask_token"] / masked,
            "random_token_fraction": totals["random"] / masked,
            "kept_fraction": totals["kept"] / masked}


def full_rows(batch) -> int:
    """Rows whose real tokens fill at least 95% of the length."""
    real = batch["attention_mask"] > 0
    return int((real.sum(axis=1) >= 0.95 * real.shape[1]).sum())


def show_rows(tokenizer, batch, count: int, label=None) -> list:
    """Rows as pieces with what was masked; `label(row)` adds a tag to the header."""
    texts = []
    for row in range(min(count, batch["input_ids"].shape[0])):
        n = int((batch["attention_mask"][row] > 0).sum())  # packed rows: segment ids
        ids = batch["input_ids"][row][:n]
        chosen = batch["masked_lm_weights"][row] > 0
        originals = [tokenizer.id_to_piece(int(i)) for i in batch["masked_lm_ids"][row][chosen]]
        tag = f" ({label(row)})" if label is not None else ""
        texts.append(f"--- row {row}{tag}\n"
                     + " ".join(tokenizer.id_to_piece(int(i)) for i in ids)
                     + f"\nmasked originals: {' '.join(originals)}")
    return texts


class MlmLoss:
    """The loss part of an MLM-only objective (RoBERTa, DeBERTa's MLM, the crammed BERT,
    ModernBERT; assembled.py): the mean cross-entropy over the real masked positions of
    the global batch."""

    def loss_sums(self, outputs, batch) -> dict:
        return mlm.mlm_loss_and_metrics(outputs["mlm_logits"], batch["masked_lm_ids"],
                                        batch["masked_lm_weights"])

    def normalizers(self, batch) -> dict:
        return {"mlm": mlm_normalizer(batch)}

    def loss(self, sums, norms):
        return sums["mlm_loss_sum"] / norms["mlm"]

    def metrics(self, sums, norms) -> dict:
        return mlm_metrics(sums, norms)

    def eval_metrics(self, totals) -> dict:
        out = mlm_eval_metrics(totals)
        return {"loss": out["mlm_loss"], **out}
