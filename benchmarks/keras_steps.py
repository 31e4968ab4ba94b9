"""KerasHub's train steps (Keras 3 on the JAX backend) for benchmarks/train_step.py, on
the same batches as ours: the JAX peer a user picks now that transformers has no Flax.

Each `*_step(shape, batch)` returns (one_step, work) as benchmarks/hf_steps.py's do:
one_step() runs Keras's jit-compiled train function (forward, loss, backward, AdamW
with global-norm clipping at 1.0, dropout 0.1 on) on the batch and returns the loss.
KerasHub 0.32 imports TensorFlow (through tensorflow-text), so it stays out of the
project's extras; install it beside the project to run this peer:

    pip install "keras-hub==0.32.0"    # pulls keras, tensorflow, tensorflow-text

Keras must run on JAX: benchmarks/train_step.py sets KERAS_BACKEND=jax before anything
imports Keras; any other backend is reported as missing, not measured.
"""

import numpy as np

from hf_steps import VOCAB

INSTALL = 'pip install "keras-hub==0.32.0" beside the project (it brings TensorFlow)'
REQUIRES = ("keras", "keras_hub")


def _keras():
    import keras
    import keras_hub
    if keras.backend.backend() != "jax":
        raise ImportError(f"Keras runs on {keras.backend.backend()}, not jax: set "
                          "KERAS_BACKEND=jax before it is imported")
    return keras, keras_hub


def _compiled(model):
    """The model compiled with ours and HF's optimizer: AdamW at 1e-4, decay 0.01,
    eps 1e-6, clipping the global gradient norm at 1.0; XLA-compiled (JAX's jit)."""
    keras, _ = _keras()
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01,
                                                   epsilon=1e-6, global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    return model


def _step(model, inputs, targets, weights):
    def one_step(wait: bool = True):
        # train_on_batch hands back the loss as a host number: each step is waited for
        logs = model.train_on_batch(inputs, targets, sample_weight=weights, return_dict=True)
        return float(logs["loss"])
    return one_step


def _int32(x):
    return np.asarray(x).astype(np.int32)


def _backbone(name: str, family: str, shape: dict, **own):
    """KerasHub's `name` backbone at `shape` with our vocabulary, dropout 0.1, seed 0;
    `own`: the arguments only that family takes."""
    keras, keras_hub = _keras()
    keras.utils.set_random_seed(0)
    return keras_hub, getattr(keras_hub.models, name)(
        vocabulary_size=VOCAB[family], num_layers=shape["layers"], num_heads=shape["heads"],
        hidden_dim=shape["hidden"], intermediate_dim=shape["mlp"], dropout=0.1, **own)


def bert_step(shape, batch):
    """BertMaskedLM: the encoder and its MLM head at the masked positions only, as
    ours; it has no next-sentence head (a pooler and a 2-way layer a sequence, under
    0.1% of the step's FLOPs at these sizes), hence `work` "same_less_nsp"."""
    keras_hub, backbone = _backbone("BertBackbone", "bert", shape, max_sequence_length=512)
    model = _compiled(keras_hub.models.BertMaskedLM(backbone))
    inputs = {"token_ids": _int32(batch["input_ids"]),
              "segment_ids": _int32(batch["token_type_ids"]),
              "padding_mask": _int32(batch["attention_mask"]),
              "mask_positions": _int32(batch["masked_lm_positions"])}
    return (_step(model, inputs, _int32(batch["masked_lm_ids"]),
                  np.asarray(batch["masked_lm_weights"], np.float32)), "same_less_nsp")


def t5_step(shape, batch):
    """T5Seq2SeqLM as T5 1.0 (ReLU, not gated; tied embeddings, the decoder's output
    scaled by d_model^-0.5 before them, as ours and HF's): vocabulary logits at every
    target, padding weighted out."""
    keras_hub, backbone = _backbone("T5Backbone", "t5", shape, key_value_dim=shape["head_dim"],
                                    activation="relu", use_gated_activation=False,
                                    tie_embedding_weights=True)
    model = _compiled(keras_hub.models.T5Seq2SeqLM(backbone))
    targets = _int32(batch["decoder_target_tokens"])
    inputs = {"encoder_token_ids": _int32(batch["encoder_input_tokens"]),
              "encoder_padding_mask": _int32(np.asarray(batch["encoder_segment_ids"]) > 0),
              "decoder_token_ids": _int32(batch["decoder_input_tokens"]),
              "decoder_padding_mask": np.ones_like(targets)}
    return _step(model, inputs, targets, (targets > 0).astype(np.float32)), "same"


def gpt2_step(shape, batch):
    """GPT2CausalLM (the tanh GELU): vocabulary logits at every position against the
    next token, ours' targets."""
    keras_hub, backbone = _backbone("GPT2Backbone", "gpt2", shape, max_sequence_length=1024)
    model = _compiled(keras_hub.models.GPT2CausalLM(backbone))
    ids = _int32(batch["inputs"])
    inputs = {"token_ids": ids, "padding_mask": np.ones_like(ids)}
    targets = _int32(batch["targets"])
    return _step(model, inputs, targets, np.ones(targets.shape, np.float32)), "same"
