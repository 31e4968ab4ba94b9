"""HuggingFace's train steps for benchmarks/train_step.py, on the same batches.

Each `*_step(size, batch)` returns (one_step, work) where one_step() runs forward,
loss, backward, clipping at 1.0 and AdamW on the batch and returns the loss, and
`work` says what it computes beyond ours ("same": nothing). PyTorch runs on CPU
in float32 with its default threads unless `configure` says otherwise (the GPU
benchmark: CUDA, bf16 autocast); the Flax peer is jitted like ours.
"""

import contextlib

import numpy as np

VOCAB = {"bert": 30522, "t5": 32128, "gpt2": 50257, "modernbert": 50368}
INSTALL = "pip install -e '.[reference]'"  # what a missing peer's row says
REQUIRES = ("torch", "transformers")  # checked before a process is spawned for a peer
_PLACE = {"device": "cpu", "autocast": None}


def configure(device: str = "cpu", autocast=None):
    """Where the PyTorch peers run and in what: `autocast` a torch dtype (bf16) for
    torch.autocast's mixed precision, parameters staying float32 as ours do."""
    _PLACE.update(device=device, autocast=autocast)


def _placed(model):
    return model.to(_PLACE["device"])


def _torch():
    import torch
    return torch


def _adamw(model):
    torch = _torch()
    return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)


def _step(model, opt, loss_fn):
    torch = _torch()

    def one_step(wait: bool = True):
        opt.zero_grad(set_to_none=True)
        mixed = (torch.autocast(_PLACE["device"].split(":")[0], dtype=_PLACE["autocast"])
                 if _PLACE["autocast"] is not None else contextlib.nullcontext())
        with mixed:
            loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach()) if wait else loss.detach()

    return one_step


def _long(x):
    return _torch().from_numpy(np.asarray(x).astype(np.int64)).to(_PLACE["device"])


def bert_config(shape):
    from transformers import BertConfig
    # gelu_pytorch_tanh: the tanh GELU that google-research/bert and ours use
    return BertConfig(vocab_size=VOCAB["bert"], hidden_size=shape["hidden"],
                      num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                      intermediate_size=shape["mlp"], max_position_embeddings=512,
                      hidden_act="gelu_pytorch_tanh")


def bert_task_step(shape, batch):
    """BertForPreTraining as a user runs it: vocabulary logits at every position."""
    from transformers import BertForPreTraining
    torch = _torch()
    torch.manual_seed(0)
    model = _placed(BertForPreTraining(bert_config(shape)).train())
    ids = batch["_original_ids"]
    labels = np.full_like(ids, -100)
    np.put_along_axis(labels, batch["masked_lm_positions"],
                      np.take_along_axis(ids, batch["masked_lm_positions"], 1), axis=1)
    inputs = {"input_ids": _long(batch["input_ids"]),
              "token_type_ids": _long(batch["token_type_ids"]),
              "attention_mask": _long(batch["attention_mask"]), "labels": _long(labels),
              "next_sentence_label": _long(batch["next_sentence_label"])}
    return _step(model, _adamw(model), lambda: model(**inputs).loss), "all_positions"


def bert_same_work_step(shape, batch):
    """The same model with its MLM head applied only at the masked positions, as
    google-research/bert and ours do: the encoder, the head at 20 of 128 positions,
    NSP; equal FLOPs to ours."""
    from transformers import BertForPreTraining
    torch = _torch()
    torch.manual_seed(0)
    model = _placed(BertForPreTraining(bert_config(shape)).train())
    ids, types = _long(batch["input_ids"]), _long(batch["token_type_ids"])
    mask, positions = _long(batch["attention_mask"]), _long(batch["masked_lm_positions"])
    targets, nsp = _long(batch["masked_lm_ids"]), _long(batch["next_sentence_label"])

    def loss_fn():
        out = model.bert(input_ids=ids, token_type_ids=types, attention_mask=mask)
        hidden = out.last_hidden_state
        picked = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        logits = model.cls.predictions(picked)
        mlm = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        nsp_logits = model.cls.seq_relationship(out.pooler_output)
        return mlm + torch.nn.functional.cross_entropy(nsp_logits, nsp)

    return _step(model, _adamw(model), loss_fn), "same"


def t5_step(shape, batch):
    """T5ForConditionalGeneration (T5 1.0: ReLU, tied embeddings) on the span-corrupted
    batch: encoder inputs, decoder inputs, vocabulary logits at every target."""
    from transformers import T5Config, T5ForConditionalGeneration
    torch = _torch()
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(
        vocab_size=VOCAB["t5"], d_model=shape["hidden"], d_kv=shape["head_dim"],
        d_ff=shape["mlp"], num_layers=shape["layers"], num_decoder_layers=shape["layers"],
        num_heads=shape["heads"], feed_forward_proj="relu", tie_word_embeddings=True)).train()
    model = _placed(model)
    inputs = {"input_ids": _long(batch["encoder_input_tokens"]),
              "attention_mask": _long(batch["encoder_segment_ids"] > 0),
              "decoder_input_ids": _long(batch["decoder_input_tokens"]),
              "labels": _long(batch["decoder_target_tokens"])}
    return _step(model, _adamw(model), lambda: model(**inputs).loss), "same"


def gpt2_step(shape, batch):
    """GPT2LMHeadModel (gelu_new, the tanh GELU) predicting every next token."""
    from transformers import GPT2Config, GPT2LMHeadModel
    torch = _torch()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(
        vocab_size=VOCAB["gpt2"], n_embd=shape["hidden"], n_layer=shape["layers"],
        n_head=shape["heads"], n_inner=shape["mlp"], n_positions=1024,
        activation_function="gelu_new")).train()
    model = _placed(model)
    ids = _long(batch["inputs"])
    return _step(model, _adamw(model), lambda: model(input_ids=ids, labels=ids).loss), "same"


def modernbert_step(shape, batch):
    """ModernBertForMaskedLM with sparse_prediction (its head at the masked positions
    only, as ours: equal work), SDPA attention (the local layers as a masked full
    attention, as ours), one document a row."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM
    torch = _torch()
    torch.manual_seed(0)
    ids = batch["input_ids"]
    config = ModernBertConfig(
        vocab_size=VOCAB["modernbert"], hidden_size=shape["hidden"],
        intermediate_size=shape["mlp"], num_hidden_layers=shape["layers"],
        num_attention_heads=shape["heads"], max_position_embeddings=max(8192, ids.shape[1]),
        sparse_prediction=True, pad_token_id=0)
    try:
        model = ModernBertForMaskedLM._from_config(config, attn_implementation="sdpa")
    except Exception:  # a version without SDPA (or _from_config) for it: its default
        model = ModernBertForMaskedLM(config)
    model = _placed(model.train())
    labels = np.full_like(ids, -100)
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
    inputs = {"input_ids": _long(ids), "attention_mask": _long(np.ones_like(ids)),
              "labels": _long(labels)}
    return _step(model, _adamw(model), lambda: model(**inputs).loss), "same"


def bert_flax_step(shape, batch):
    """transformers' FlaxBertForPreTraining (4.57 still has it), jitted with optax's
    AdamW and clipping: the JAX-to-JAX peer, vocabulary logits at every position."""
    import jax
    import jax.numpy as jnp
    import optax
    from transformers import FlaxBertForPreTraining
    model = FlaxBertForPreTraining(bert_config(shape), seed=0, dtype=jnp.float32)
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(1e-4, eps=1e-6, weight_decay=0.01))
    ids = batch["_original_ids"]
    labels = np.full_like(ids, -1)
    np.put_along_axis(labels, batch["masked_lm_positions"],
                      np.take_along_axis(ids, batch["masked_lm_positions"], 1), axis=1)
    arrays = {k: jnp.asarray(batch[k]) for k in ("input_ids", "attention_mask",
                                                 "token_type_ids", "next_sentence_label")}
    arrays["labels"] = jnp.asarray(labels)

    def loss_fn(params, rng):
        out = model(arrays["input_ids"], arrays["attention_mask"], arrays["token_type_ids"],
                    params=params, dropout_rng=rng, train=True)
        weights = (arrays["labels"] >= 0).astype(jnp.float32)
        logp = jax.nn.log_softmax(out.prediction_logits)
        nll = -jnp.take_along_axis(logp, jnp.maximum(arrays["labels"], 0)[..., None], -1)[..., 0]
        mlm = jnp.sum(nll * weights) / jnp.maximum(jnp.sum(weights), 1.0)
        nsp = optax.softmax_cross_entropy_with_integer_labels(
            out.seq_relationship_logits, arrays["next_sentence_label"]).mean()
        return mlm + nsp

    @jax.jit
    def step(params, opt_state, rng):
        loss, grads = jax.value_and_grad(loss_fn)(params, rng)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    state = {"params": model.params, "opt": tx.init(model.params), "rng": jax.random.PRNGKey(0)}

    def one_step(wait: bool = True):
        state["rng"], rng = jax.random.split(state["rng"])
        state["params"], state["opt"], loss = step(state["params"], state["opt"], rng)
        return float(loss) if wait else loss

    return one_step, "all_positions"
