"""HuggingFace model directories: config.json, safetensors (or PyTorch) weights and
tokenizer files, read and written without importing `transformers`.

Each family that HF holds lists an `Adapter` (families/NAME/hf.py) in its entry: how its
tensors, config.json and tokenizer files map to ours. This module reads and writes
the files and picks the adapter by config.json's `model_type` or by our family.
"""

import dataclasses
import json
import os
import shutil
import tempfile
from typing import Callable

import numpy as np
from safetensors.numpy import load_file, save_file

from pretrainx.data import folder_ids
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
import pretrainx.interop.hf_tensors as hf_tensors
import pretrainx.interop.model_card as model_card
import pretrainx.interop.sentence_files as sentence_files
from pretrainx.interop.pretrained import Pretrained, read_json
from pretrainx import models
from pretrainx.models import layers, peft as peft_lib
from pretrainx import registry

ADAPTERS = registry.View("HF adapter", registry.FAMILIES, "hf")
# our model.hidden_act <-> an HF config.json's hidden_act
ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
ACT_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "gelu_fast": "gelu_tanh", "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
OUTPUT_KERNEL = ("output", "kernel")  # layers.output_layer's kernel, [embed, vocab]


@dataclasses.dataclass(frozen=True)
class Adapter:
    name: str  # our model.family
    model_type: str  # config.json's model_type
    # (config.json as a dict, state dict, directory) -> Pretrained's fields
    read: Callable
    # (Pretrained, params with LoRA merged, tokenizer) -> (state dict, config.json dict)
    write: Callable
    # (Pretrained, tokenizer, output directory) -> the file names written
    write_tokenizer: Callable
    # (Pretrained) -> None, or a UserError for what the HF class cannot hold
    check: Callable = lambda pretrained: None
    # (Pretrained, params, tokenizer) -> {subdirectory: (state dict, config.json dict)}:
    # models HF keeps in directories of their own (ELECTRA's generator)
    companions: Callable = lambda pretrained, params, tokenizer: {}
    # (Pretrained) -> "" or a sentence on what the HF class leaves out or computes
    # otherwise (SpanBERT's SBO head); the export command prints it
    caveat: Callable = lambda pretrained: ""
    # (output layer, word table) pairs, as HF's classes name them, tied unless config.json
    # says tie_word_embeddings=false
    tied: tuple = ()
    # whether our model holds an untied output layer (model.tie_output=False, its
    # kernel at OUTPUT_KERNEL); an untied file of an adapter without one is refused
    can_untie: bool = True
    # {config.json model_type: why not}: a relative's layout this family does not read
    # (DeBERTa v1 beside v2/v3), refused with the family's own words
    refuses: dict = dataclasses.field(default_factory=dict)
    # (Pretrained) -> whether this adapter writes it: a family HF holds in two layouts
    # (RoBERTa's byte-level vocabulary, XLM-R's SentencePiece one) has an adapter each
    writes: Callable = lambda pretrained: True


def adapter_for(pretrained: Pretrained):
    """The adapter that writes `pretrained` (None: HF holds no model of its family)."""
    return next((a for a in ADAPTERS.entries()
                 if a.name == pretrained.family and a.writes(pretrained)), None)


def _adapter_of_model_type(model_type):
    for adapter in ADAPTERS.entries():
        if adapter.model_type == model_type:
            return adapter
    return None


def read_weights(path: str) -> dict:
    safetensors_file = os.path.join(path, "model.safetensors")
    torch_file = os.path.join(path, "pytorch_model.bin")
    index_file = safetensors_file + ".index.json"
    if os.path.isfile(index_file):  # a large model in several shards
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


def tokenizer_config(path: str) -> dict:
    config_file = os.path.join(path, "tokenizer_config.json")
    return read_json(config_file) if os.path.isfile(config_file) else {}


def tokenizer_of(path: str) -> tuple:
    """(tokenizer file, lower_case) of an HF directory."""
    config = tokenizer_config(path)
    # spm.model: DeBERTa-v2/v3's; sentencepiece.bpe.model: XLM-R's (fairseq's ids);
    # tokenizer.json alone: a fast tokenizer (ModernBERT's)
    names = ("vocab.json", "vocab.txt", "spiece.model", "spm.model", "sentencepiece.bpe.model",
             "tokenizer.json")
    for name in names:
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name), bool(config.get("do_lower_case", True))
    raise UserError(f"no {', '.join(names)} in {path}: the tokenizer is needed too")


def load(path: str) -> Pretrained:
    config_file = os.path.join(path, "config.json")
    with open(config_file, encoding="utf-8") as f:
        try:
            hf = json.load(f)
        except ValueError as e:
            raise UserError(f"cannot read {config_file}: {e}") from None
    model_type = hf.get("model_type")
    adapter = _adapter_of_model_type(model_type)
    if adapter is None:
        refusing = next((a for a in ADAPTERS.entries() if model_type in a.refuses), None)
        if refusing is not None:
            raise UserError(f"{config_file}: model_type {model_type!r} is not read: "
                            f"{refusing.refuses[model_type]}")
        arch = ",".join(hf.get("architectures") or ["?"])
        supported = [a.model_type for a in ADAPTERS.entries() if a.model_type]
        raise UserError(f"{config_file}: unsupported architecture {arch} (model_type "
                        f"{model_type!r}); expected one of: {', '.join(supported)}")
    state = read_weights(path)
    untied = _untied_outputs(adapter, hf, state, path)
    try:  # a reshape that fails: tensor shapes that do not fit config.json
        fields = adapter.read(hf, state, path)
    except ValueError as e:
        raise UserError(f"{path}: weights do not fit its config.json ({e})") from None
    if untied:  # the output layer's own kernel, [vocab, E] in torch, [E, vocab] here
        fields["model"].tie_output = False
        hf_tensors.put(fields["params"], OUTPUT_KERNEL,
                       np.asarray(state[untied[0]], np.float32).T)
    fields["tokenizer"] = folder_ids.agreeing(path, fields["tokenizer"], lambda: load_tokenizer(
        fields["tokenizer"], fields["lower_case"], _layout(fields["model"].family)))
    return Pretrained(source=path, **fields)


def _layout(family_name: str) -> str:
    family = models.FAMILIES.find(family_name)
    return family.tokenizer_layout if family else ""


def _untied_outputs(adapter, hf: dict, state: dict, path: str) -> list:
    """The HF names of the output layers that are not the word table: as transformers
    reads a file, config.json's tie_word_embeddings (default true) decides, whatever
    the tensors hold. A family whose model cannot hold one is refused, never dropped."""
    if hf.get("tie_word_embeddings", True):
        return []
    untied = [output for output, _ in adapter.tied if output in state]
    if untied and not adapter.can_untie:
        raise UserError(f"{path}: its output layer {untied[0]} is not tied to the word table "
                        f"(tie_word_embeddings=false); pretrainx's {adapter.name} ties them, "
                        "so importing it would compute other logits")
    return untied


def _merged_params(pretrained: Pretrained) -> dict:
    """LoRA merged into the kernels; methods with no place in a plain BERT refused."""
    peft = pretrained.peft or {"method": "none"}
    if peft["method"] == "none":
        return pretrained.params
    if peft["method"] != "lora":
        raise UserError(f"{pretrained.source}: peft.method={peft['method']} adds parameters a "
                        "plain BERT has no place for; export takes full or LoRA fine-tuning")
    return peft_lib.merge_lora(pretrained.params, layers.Lora(
        int(peft["lora_rank"]), float(peft["lora_alpha"])))


def _untie(adapter, pretrained: Pretrained, params: dict, state: dict, config: dict) -> tuple:
    """(state, config) with the model's own output kernel in place of the word table's
    copy and tie_word_embeddings=false, when model.tie_output is False."""
    if pretrained.model.get("tie_output", True):
        return state, config
    if not adapter.can_untie:
        raise UserError(f"{pretrained.source}: model.tie_output=False, but HF's "
                        f"{adapter.name} classes are written with a tied output layer")
    for output in [output for output, _ in adapter.tied if output in state]:
        state = dict(state, **{output: np.asarray(
            hf_tensors.get(params, OUTPUT_KERNEL), np.float32).T})
    return state, dict(config, tie_word_embeddings=False)


def caveat(pretrained: Pretrained) -> str:
    """What the HF directory written for `pretrained` leaves out ("" if nothing)."""
    adapter = adapter_for(pretrained)
    return adapter.caveat(pretrained) if adapter else ""


def save(pretrained: Pretrained, output: str, license_id: str = "unknown") -> list:
    """Write an HF directory with its model card (README.md, under the Hub's license
    identifier `license_id`); returns the files written."""
    adapter = adapter_for(pretrained)
    if adapter is None:
        families = [a.name for a in ADAPTERS.entries()]
        raise UserError(f"{pretrained.source} is a {pretrained.family} model; HF export "
                        f"writes {', '.join(families)} models")
    adapter.check(pretrained)
    if os.path.isdir(output) and os.listdir(output):
        raise UserError(f"output directory {output} is not empty")
    if os.path.lexists(output) and not os.path.isdir(output):
        raise UserError(f"output {output} is a file, not a directory")
    family = models.FAMILIES.find(pretrained.family)
    tokenizer = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case,
                               layout=_layout(pretrained.family))
    params = _merged_params(pretrained)
    # Every tensor and config is converted (and every refusal raised) before a file
    # is written: a refused export leaves no directory behind.
    models_to_write = {"": _untie(adapter, pretrained, params,
                                  *adapter.write(pretrained, params, tokenizer))}
    models_to_write.update(adapter.companions(pretrained, params, tokenizer))
    # Written into a staging folder beside `output` and renamed onto it at the end, so
    # an export is whole or absent (a kill half way leaves no half folder to refuse).
    parent = os.path.dirname(os.path.abspath(output))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(output))}.partial-",
                               dir=parent)
    try:
        written = []
        for name, (state, config) in models_to_write.items():
            where = os.path.join(staging, name) if name else staging
            os.makedirs(where, exist_ok=True)
            files = (_write_model(where, state, config)
                     + adapter.write_tokenizer(pretrained, tokenizer, where))
            written += [f"{name}/{f}" if name else f for f in files]
        pooling = (pretrained.head[len("embed_"):] if pretrained.head.startswith("embed_")
                   else family and registry.sentence_pooling(family, pretrained.model))
        if pooling:  # an encoder: SentenceTransformer(output) loads it too
            written += sentence_files.write(staging, pooling, pretrained.model.hidden_size,
                                            normalize=pretrained.head.startswith("embed_"))
        with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:
            f.write(model_card.card(pretrained, models_to_write[""][1], license_id))
        written.append("README.md")
        _usual_modes(staging)
        if os.path.isdir(output):
            os.rmdir(output)  # empty, checked above
        os.rename(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return written


def _usual_modes(root: str) -> None:
    """The modes a plain write gives under the user's umask, for every file and folder
    (mkdtemp makes 0700 and safetensors writes 0600; the others were 0644)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(root, 0o777 & ~umask)
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o777 & ~umask)
        for f in files:
            os.chmod(os.path.join(folder, f), 0o666 & ~umask)


def _write_model(output: str, state: dict, config: dict) -> list:
    # Tied tensors may not share memory in a safetensors file, and safetensors writes an
    # array's buffer as it lies: a transposed (Fortran-ordered) view would be written
    # scrambled, so every tensor is copied C-ordered here, whatever an adapter returns.
    state = {k: np.array(v, np.float32, copy=True, order="C") for k, v in state.items()}
    save_file(state, os.path.join(output, "model.safetensors"), metadata={"format": "pt"})
    write_json(output, "config.json", config)
    return ["config.json", "model.safetensors"]


def write_json(output: str, name: str, content: dict) -> None:
    with open(os.path.join(output, name), "w", encoding="utf-8") as f:
        json.dump(content, f, indent=2, sort_keys=True)


def special_tokens(tokenizer, names=("cls", "sep")) -> dict:
    """special_tokens_map.json's entries of a tokenizer: unk, pad, the `names`, mask."""
    special = {"unk_token": tokenizer.id_to_piece(tokenizer.unk_id),
               "pad_token": tokenizer.id_to_piece(tokenizer.pad_id)}
    ids = {"cls": tokenizer.cls_id, "sep": tokenizer.sep_id, "eos": tokenizer.sep_id}
    special.update({f"{n}_token": tokenizer.id_to_piece(ids[n]) for n in names})
    if tokenizer.mask_id >= 0:
        special["mask_token"] = tokenizer.id_to_piece(tokenizer.mask_id)
    return special


def write_tokenizer_config(output: str, config: dict, special: dict) -> list:
    """tokenizer_config.json (config + special) and special_tokens_map.json."""
    write_json(output, "tokenizer_config.json", dict(config, **special))
    write_json(output, "special_tokens_map.json", special)
    return ["tokenizer_config.json", "special_tokens_map.json"]
