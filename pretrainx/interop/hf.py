"""HuggingFace model directories: config.json, safetensors (or PyTorch) weights and
tokenizer files, read and written without importing `transformers`."""

import json
import os
import shutil

import numpy as np

from pretrainx.errors import UserError
from pretrainx.interop import Pretrained, hf_bert, hf_gpt2, hf_t5

SUPPORTED = ("bert", "t5", "gpt2")


def _read_weights(path: str) -> dict:
    safetensors_file = os.path.join(path, "model.safetensors")
    torch_file = os.path.join(path, "pytorch_model.bin")
    index_file = safetensors_file + ".index.json"
    if os.path.isfile(index_file):  # a large model in several shards
        from safetensors.numpy import load_file
        try:
            with open(index_file, encoding="utf-8") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            state = {}
            for shard in shards:
                state.update(load_file(os.path.join(path, shard)))
            return state
        except Exception as e:
            raise UserError(f"cannot read the shards of {index_file}: {e}") from None
    if os.path.isfile(safetensors_file):
        from safetensors.numpy import load_file
        try:
            return load_file(safetensors_file)
        except Exception as e:
            raise UserError(f"cannot read {safetensors_file}: {e}") from None
    if os.path.isfile(torch_file):
        try:
            import torch
        except ImportError:
            raise UserError(f"{torch_file} needs PyTorch to read (pip install torch); "
                            "safetensors weights need nothing") from None
        try:
            state = torch.load(torch_file, map_location="cpu", weights_only=True)
        except Exception as e:
            raise UserError(f"cannot read {torch_file}: {str(e).splitlines()[0]}") from None
        return {k: v.float().numpy() for k, v in state.items()}
    raise UserError(f"no model.safetensors or pytorch_model.bin in {path}")


def _tokenizer_config(path: str) -> dict:
    config_file = os.path.join(path, "tokenizer_config.json")
    if not os.path.isfile(config_file):
        return {}
    try:
        with open(config_file, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {config_file}: {e}") from None


def _tokenizer_of(path: str) -> tuple:
    """(tokenizer file, lower_case) of an HF directory."""
    config = _tokenizer_config(path)
    for name in ("vocab.json", "vocab.txt", "spiece.model"):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name), bool(config.get("do_lower_case", True))
    raise UserError(f"no vocab.json, vocab.txt or spiece.model in {path}: the tokenizer is "
                    "needed too")


def load(path: str) -> Pretrained:
    from pretrainx import config as config_lib
    config_file = os.path.join(path, "config.json")
    with open(config_file, encoding="utf-8") as f:
        try:
            hf = json.load(f)
        except ValueError as e:
            raise UserError(f"cannot read {config_file}: {e}") from None
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED:
        arch = ",".join(hf.get("architectures") or ["?"])
        raise UserError(f"{config_file}: unsupported architecture {arch} (model_type "
                        f"{model_type!r}); expected one of: {', '.join(SUPPORTED)}")
    state = _read_weights(path)
    extra = {}
    try:  # a reshape that fails: tensor shapes that do not fit config.json
        if model_type == "t5":
            model = hf_t5.model_config_from_hf(hf, config_lib.default_config("t5").model,
                                               config_file)
            params, head = hf_t5.from_hf_state(state, model, path), "seq2seq"
            extra["num_sentinels"] = int(_tokenizer_config(path).get("extra_ids", 100))
        elif model_type == "gpt2":
            model = hf_gpt2.model_config_from_hf(
                hf, config_lib.default_config("causal_lm").model, config_file)
            params, head = hf_gpt2.from_hf_state(state, model, path), "causal_lm"
        else:
            model = hf_bert.model_config_from_hf(hf, config_lib.default_config("bert").model,
                                                 config_file)
            head = hf_bert.head_of_architecture(hf)
            params = hf_bert.from_hf_state(state, model, head, path)
            extra["labels"] = _labels(hf, head)
    except ValueError as e:
        raise UserError(f"{path}: weights do not fit its config.json ({e})") from None
    tokenizer, lower_case = _tokenizer_of(path)
    return Pretrained(model=model, params=params, tokenizer=tokenizer,
                      lower_case=lower_case if model_type == "bert" else False, head=head,
                      source=path, **extra)


def _labels(hf: dict, head: str):
    """A fine-tuned BERT head's labels from config.json: () for regression."""
    if head not in ("classify", "tokens"):
        return None
    if hf.get("problem_type") == "regression":
        return ()
    id2label = hf.get("id2label") or {"0": "LABEL_0", "1": "LABEL_1"}
    return tuple(id2label[str(i)] for i in range(len(id2label)))


def _merged_params(pretrained: Pretrained) -> dict:
    """LoRA merged into the kernels; methods with no place in a plain BERT refused."""
    peft = pretrained.peft or {"method": "none"}
    if peft["method"] == "none":
        return pretrained.params
    if peft["method"] != "lora":
        raise UserError(f"{pretrained.source}: peft.method={peft['method']} adds parameters a "
                        "plain BERT has no place for; export takes full or LoRA fine-tuning")
    from pretrainx.models import layers, peft as peft_lib
    return peft_lib.merge_lora(pretrained.params, layers.Lora(
        int(peft["lora_rank"]), float(peft["lora_alpha"])))


def save(pretrained: Pretrained, output: str) -> list:
    """Write an HF directory; returns the files written."""
    from safetensors.numpy import save_file
    from pretrainx.data.tokenizers import load_tokenizer
    if pretrained.family not in ("bert", "gpt2", "t5"):
        raise UserError(f"{pretrained.source} is a {pretrained.family} model; HF export "
                        "writes bert, gpt2 and t5 models")
    m = pretrained.model
    if pretrained.family == "bert" and (
            m.get("embedding_size", 0) not in (0, m.hidden_size) or m.get("share_layers")):
        # ELECTRA-Small's projected embeddings (and shared layers) have no place in BertModel
        raise UserError(f"{pretrained.source} has factorised embeddings or shared layers "
                        "(model.embedding_size / model.share_layers), which an HF BERT "
                        "cannot hold; HF export writes plain BERT, GPT-2 and T5")
    if os.path.isdir(output) and os.listdir(output):
        raise UserError(f"output directory {output} is not empty")
    os.makedirs(output, exist_ok=True)
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case)
    params = _merged_params(pretrained)
    if pretrained.family == "gpt2":
        state = hf_gpt2.to_hf_state(params, pretrained.model)
        config = hf_gpt2.to_hf_config(pretrained.model, tokenizer.sep_id)
    elif pretrained.family == "t5":
        state = hf_t5.to_hf_state(params, pretrained.model)
        config = hf_t5.to_hf_config(pretrained.model, tokenizer.pad_id, tokenizer.sep_id)
    else:
        state = hf_bert.to_hf_state(params, pretrained.model, pretrained.head)
        labels = pretrained.labels if pretrained.head in ("classify", "tokens") else None
        config = hf_bert.to_hf_config(pretrained.model, pretrained.head, tokenizer.pad_id,
                                      labels)
    # Tied tensors may not share memory in a safetensors file.
    state = {k: np.array(v, np.float32, copy=True) for k, v in state.items()}
    save_file(state, os.path.join(output, "model.safetensors"), metadata={"format": "pt"})
    written = ["config.json", "model.safetensors"]
    with open(os.path.join(output, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    written += _save_tokenizer(pretrained, tokenizer, output)
    return written


def _save_tokenizer(pretrained, tokenizer, output) -> list:
    max_len = int(pretrained.model.get("max_position_embeddings", 512))
    if pretrained.family == "gpt2":
        from pretrainx.data import bpe
        vocab, merges = bpe.files_in(pretrained.tokenizer)
        shutil.copyfile(vocab, os.path.join(output, "vocab.json"))
        shutil.copyfile(merges, os.path.join(output, "merges.txt"))
        special = {"bos_token": bpe.END_OF_TEXT, "eos_token": bpe.END_OF_TEXT,
                   "unk_token": bpe.END_OF_TEXT}
        config = dict(special, tokenizer_class="GPT2Tokenizer", model_max_length=max_len,
                      add_prefix_space=False)
        for file_name, content in (("tokenizer_config.json", config),
                                   ("special_tokens_map.json", special)):
            with open(os.path.join(output, file_name), "w", encoding="utf-8") as f:
                json.dump(content, f, indent=2, sort_keys=True)
        return ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"]
    if pretrained.family == "t5":
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "spiece.model"))
        config = {"tokenizer_class": "T5Tokenizer", "extra_ids": pretrained.num_sentinels,
                  "model_max_length": 512, "legacy": True}
        name = "spiece.model"
    elif pretrained.tokenizer.endswith(".txt"):
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "vocab.txt"))
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": pretrained.lower_case,
                  "model_max_length": max_len}
        name = "vocab.txt"
    else:
        # Our SentencePiece BERT vocabularies carry [CLS]/[SEP]/[MASK] as pieces:
        # ALBERT's tokenizer is HF's SentencePiece tokenizer with BERT's layout.
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "spiece.model"))
        config = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": False,
                  "keep_accents": True, "remove_space": True, "model_max_length": max_len}
        name = "spiece.model"
    special = {"unk_token": tokenizer.id_to_piece(tokenizer.unk_id),
               "pad_token": tokenizer.id_to_piece(tokenizer.pad_id)}
    if pretrained.family == "t5":
        special["eos_token"] = tokenizer.id_to_piece(tokenizer.sep_id)
    else:
        special.update(cls_token=tokenizer.id_to_piece(tokenizer.cls_id),
                       sep_token=tokenizer.id_to_piece(tokenizer.sep_id))
    if tokenizer.mask_id >= 0:
        special["mask_token"] = tokenizer.id_to_piece(tokenizer.mask_id)
    config.update(special)
    for file_name, content in (("tokenizer_config.json", config),
                               ("special_tokens_map.json", special)):
        with open(os.path.join(output, file_name), "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2, sort_keys=True)
    return [name, "tokenizer_config.json", "special_tokens_map.json"]
