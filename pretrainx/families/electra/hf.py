"""ELECTRA parameters <-> HuggingFace `ElectraFor*` state dicts and config.json.

HF keeps ELECTRA's two networks as two models, as Google released them
(electra-*-discriminator, electra-*-generator): export writes the discriminator
(`ElectraForPreTraining`: the encoder and `discriminator_predictions`) to the output
directory and the generator (`ElectraForMaskedLM`: its own copy of the shared
embeddings, its encoder, `generator_predictions` and `generator_lm_head`, tied to the
word table) to OUTPUT/generator. Both have BERT's layer names under `electra.`, and
`electra.embeddings_project` where the embeddings (E) are narrower than the network.

HF's generator head applies exact GeLU whatever config.json's hidden_act says; a run
with hidden_act gelu_tanh (BERT's, this family's default) exports a generator whose
logits differ from ours by that approximation (the discriminator is exact either way).
Fine-tuned classifiers are not written: HF's ElectraClassificationHead applies GeLU
where our pooler applies tanh, so the same tensors would give other logits.
"""

import os

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf_tensors as t
from pretrainx.interop.pretrained import read_json
from pretrainx.models import transformer_encoder as enc
from pretrainx.families.electra import model as electra

ARCHITECTURES = {"pretrain": "ElectraForPreTraining", "mlm": "ElectraForMaskedLM",
                 "tokens": "ElectraForTokenClassification", "span": "ElectraForQuestionAnswering"}
GENERATOR_DIR = "generator"


def encoder_pairs(model_cfg) -> list:
    """Embeddings, E -> hidden projection and layers of one network."""
    pairs = hf_bert.encoder_pairs(model_cfg.num_layers, "electra.")
    if enc.factorised(model_cfg):
        pairs += t.dense_pairs(("bert", "embedding_projection"), "electra.embeddings_project")
    return pairs


def name_pairs(model_cfg, head: str) -> list:
    """Our ElectraFor{head} tensors; for "mlm" `model_cfg` is the generator's."""
    pairs = encoder_pairs(model_cfg)
    if head == "pretrain":
        pairs += (t.dense_pairs(("discriminator_dense",), "discriminator_predictions.dense")
                  + t.dense_pairs(("discriminator_out",),
                                  "discriminator_predictions.dense_prediction"))
    elif head == "mlm":
        pairs += hf_bert.mlm_pairs("generator_predictions.dense",
                                   "generator_predictions.LayerNorm", "generator_lm_head.bias")
    elif head in ("tokens", "span"):
        pairs += hf_bert.task_pairs(head)
    return pairs


def _model_config(hf: dict, config_file: str):
    model = hf_bert.model_config_from_hf(hf, electra.default_config(), config_file)
    model.embedding_size = hf.get("embedding_size", model.hidden_size)
    return model


def _read(hf: dict, state: dict, path: str) -> dict:
    config_file = os.path.join(path, "config.json")
    arch = (hf.get("architectures") or [""])[0]
    if arch == "ElectraForSequenceClassification":
        raise UserError(f"{config_file}: ElectraForSequenceClassification's head (GeLU) has "
                        "no place in our classifier (tanh pooler); take the encoder from an "
                        "ElectraModel or ElectraForPreTraining directory")
    model = _model_config(hf, config_file)
    head = t.head_of(hf, ARCHITECTURES)
    params = t.from_hf(state, name_pairs(model, head), model.num_heads, path,
                       f"an {ARCHITECTURES.get(head, 'ElectraModel')} with {model.num_layers} layers")
    generator_dir = os.path.join(path, GENERATOR_DIR)
    if head == "pretrain" and os.path.isfile(os.path.join(generator_dir, "config.json")):
        gen_hf = read_json(os.path.join(generator_dir, "config.json"))
        gen = _model_config(gen_hf, os.path.join(generator_dir, "config.json"))
        params["generator"] = t.from_hf(hf_lib.read_weights(generator_dir),
                                        name_pairs(gen, "mlm"), gen.num_heads, generator_dir,
                                        f"an ElectraForMaskedLM with {gen.num_layers} layers")
        model.generator_size = gen.hidden_size / model.hidden_size
        model.generator_layers = gen.num_layers / model.num_layers
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=lower_case,
                head=head, labels=t.labels_of(hf, head))


def _check(pretrained) -> None:
    hf_bert.check_architecture(pretrained)
    if pretrained.head == "classify":
        raise UserError(f"{pretrained.source} is a fine-tuned classifier: HF's "
                        "ElectraForSequenceClassification applies GeLU where our pooler "
                        "applies tanh, so its logits would differ; export the pretraining run")


def _config(model_cfg, head: str, tokenizer, labels=None) -> dict:
    config = hf_bert.to_hf_config(model_cfg, head, tokenizer.pad_id, labels)
    config.update(model_type="electra", architectures=[ARCHITECTURES.get(head, "ElectraModel")],
                  embedding_size=enc.embedding_size(model_cfg))
    return config


def _write(pretrained, params, tokenizer):
    m, head = pretrained.model, pretrained.head
    state = t.to_hf(params, name_pairs(m, head))
    if head == "mlm":
        state["generator_lm_head.weight"] = state["electra.embeddings.word_embeddings.weight"]
    labels = pretrained.labels if head == "tokens" else None
    return state, _config(m, head, tokenizer, labels)


def _companions(pretrained, params, tokenizer) -> dict:
    """The generator of a pretraining run, in a directory of its own."""
    if pretrained.head != "pretrain" or "generator" not in params:
        return {}
    gen = electra.generator_config(pretrained.model)
    state = t.to_hf(params["generator"], name_pairs(gen, "mlm"))
    state["generator_lm_head.weight"] = state["electra.embeddings.word_embeddings.weight"]
    return {GENERATOR_DIR: (state, _config(gen, "mlm", tokenizer))}


def _caveat(pretrained) -> str:
    if pretrained.head in ("pretrain", "mlm") and pretrained.model.hidden_act != "gelu":
        return (f"HF's ELECTRA generator head applies exact GeLU, this model "
                f"{pretrained.model.hidden_act}: the generator's logits differ by that "
                "approximation (the discriminator's do not)")
    return ""


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("generator_lm_head.weight",
         "electra.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(
    name="electra", tied=TIED, can_untie=False, model_type="electra", read=_read, write=_write,
    write_tokenizer=hf_tokenizer_files.write_encoder_tokenizer,
    check=_check, companions=_companions,
    caveat=_caveat)
