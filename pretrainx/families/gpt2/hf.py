"""GPT-2 parameters <-> HuggingFace `GPT2LMHeadModel` state dicts and config.json.

HF keeps OpenAI's Conv1D layout: weights are [in, out] as our kernels, and the
query, key and value projections are one fused `c_attn` of width 3 x d_model.
The output layer is tied to `wte`.
"""

import os
import shutil

import numpy as np

from pretrainx.data import bpe
from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.families.gpt2 import model as gpt2


def to_hf_state(params, cfg) -> dict:
    d = cfg.hidden_size
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    out = {"transformer.wte.weight": f32(params["token_embed"]["embedding"]),
           "transformer.wpe.weight": f32(params["position_embed"]["embedding"]),
           "transformer.ln_f.weight": f32(params["final_norm"]["scale"]),
           "transformer.ln_f.bias": f32(params["final_norm"]["bias"])}
    for i in range(cfg.num_layers):
        p, h = params[f"layer_{i}"], f"transformer.h.{i}."
        attn = p["attention"]
        out[h + "attn.c_attn.weight"] = np.concatenate(
            [f32(attn[n]["kernel"]).reshape(d, d) for n in ("query", "key", "value")], axis=1)
        out[h + "attn.c_attn.bias"] = np.concatenate(
            [f32(attn[n]["bias"]).reshape(d) for n in ("query", "key", "value")])
        out[h + "attn.c_proj.weight"] = f32(attn["out"]["kernel"]).reshape(d, d)
        out[h + "attn.c_proj.bias"] = f32(attn["out"]["bias"])
        for norm, name in (("attention_norm", "ln_1"), ("mlp_norm", "ln_2")):
            out[h + f"{name}.weight"] = f32(p[norm]["scale"])
            out[h + f"{name}.bias"] = f32(p[norm]["bias"])
        for ours, theirs in (("wi", "c_fc"), ("wo", "c_proj")):
            out[h + f"mlp.{theirs}.weight"] = f32(p["mlp"][ours]["kernel"])
            out[h + f"mlp.{theirs}.bias"] = f32(p["mlp"][ours]["bias"])
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_state(state, cfg, source: str) -> dict:
    state = {(k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k): v
             for k, v in state.items()}

    def get(name):
        if name not in state:
            raise UserError(f"{source}: no tensor {name} (expected for a GPT-2 with "
                            f"{cfg.num_layers} layers)")
        return np.asarray(state[name], np.float32)

    d, heads = cfg.hidden_size, cfg.num_heads
    params = {"token_embed": {"embedding": get("transformer.wte.weight")},
              "position_embed": {"embedding": get("transformer.wpe.weight")},
              "final_norm": {"scale": get("transformer.ln_f.weight"),
                             "bias": get("transformer.ln_f.bias")}}
    for i in range(cfg.num_layers):
        h = f"transformer.h.{i}."
        qkv_w, qkv_b = get(h + "attn.c_attn.weight"), get(h + "attn.c_attn.bias")
        attention = {}
        for j, name in enumerate(("query", "key", "value")):
            attention[name] = {"kernel": qkv_w[:, j * d:(j + 1) * d].reshape(d, heads, -1),
                               "bias": qkv_b[j * d:(j + 1) * d].reshape(heads, -1)}
        attention["out"] = {"kernel": get(h + "attn.c_proj.weight").reshape(heads, -1, d),
                            "bias": get(h + "attn.c_proj.bias")}
        params[f"layer_{i}"] = {
            "attention": attention,
            "attention_norm": {"scale": get(h + "ln_1.weight"), "bias": get(h + "ln_1.bias")},
            "mlp_norm": {"scale": get(h + "ln_2.weight"), "bias": get(h + "ln_2.bias")},
            "mlp": {"wi": {"kernel": get(h + "mlp.c_fc.weight"), "bias": get(h + "mlp.c_fc.bias")},
                    "wo": {"kernel": get(h + "mlp.c_proj.weight"),
                           "bias": get(h + "mlp.c_proj.bias")}}}
    return params


def to_hf_config(cfg, eot_id: int) -> dict:
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": cfg.vocab_size, "n_positions": cfg.max_position_embeddings,
            "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers, "n_head": cfg.num_heads,
            "n_inner": cfg.mlp_dim, "activation_function": "gelu_new",
            "resid_pdrop": cfg.dropout_rate, "embd_pdrop": cfg.dropout_rate,
            "attn_pdrop": cfg.attention_dropout_rate, "layer_norm_epsilon": cfg.layer_norm_eps,
            "initializer_range": cfg.initializer_range, "bos_token_id": int(eot_id),
            "eos_token_id": int(eot_id), "pad_token_id": int(eot_id),
            "tie_word_embeddings": True,
            "torch_dtype": "float32"}


def model_config_from_hf(hf: dict, base, source: str):
    act = hf.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        raise UserError(f"{source}: activation_function {act!r} is not supported (gelu_new)")
    m = base
    m.vocab_size = hf["vocab_size"]
    m.max_position_embeddings = hf.get("n_positions", 1024)
    m.hidden_size = hf["n_embd"]
    m.num_layers = hf["n_layer"]
    m.num_heads = hf["n_head"]
    m.mlp_dim = hf.get("n_inner") or 4 * hf["n_embd"]
    m.dropout_rate = hf.get("resid_pdrop", 0.1)
    m.attention_dropout_rate = hf.get("attn_pdrop", 0.1)
    m.layer_norm_eps = hf.get("layer_norm_epsilon", 1e-5)
    m.initializer_range = hf.get("initializer_range", 0.02)
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, gpt2.default_config(), os.path.join(path, "config.json"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=from_hf_state(state, model, path), tokenizer=tokenizer,
                lower_case=False, head="causal_lm")


def _write(pretrained, params, tokenizer):
    return (to_hf_state(params, pretrained.model),
            to_hf_config(pretrained.model, tokenizer.sep_id))


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    if pretrained.tokenizer.endswith("tokenizer.json"):  # transformers 5 saves it alone
        files = ["tokenizer.json"]
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "tokenizer.json"))
    else:
        files = ["vocab.json", "merges.txt"]
        for source, name in zip(bpe.files_in(pretrained.tokenizer), files):
            shutil.copyfile(source, os.path.join(output, name))
    # <|endoftext|> pads too, as our batches pad: HF's GPT-2 has no pad token, so a
    # padded tokenizer(...) call would fail on the export without one
    special = {"bos_token": bpe.END_OF_TEXT, "eos_token": bpe.END_OF_TEXT,
               "unk_token": bpe.END_OF_TEXT, "pad_token": bpe.END_OF_TEXT}
    max_len = int(pretrained.model.max_position_embeddings)
    config = dict(tokenizer_class="GPT2Tokenizer", model_max_length=max_len,
                  add_prefix_space=False)
    return files + hf_lib.write_tokenizer_config(output, config, special)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("lm_head.weight",
         "transformer.wte.weight"),)


def _caveat(pretrained) -> str:
    """HF's GPT2LMHeadModel has no switch for bidirectional attention: the folder holds the
    weights, and HF runs them causally."""
    if pretrained.model.causal:
        return ""
    return ("this model attends both ways (model.causal=False); transformers' GPT2LMHeadModel "
            "has no such switch and runs the exported weights causally, so its states differ "
            "from pretrainx.embed's")


ADAPTER = hf_lib.Adapter(name="gpt2", tied=TIED, model_type="gpt2", read=_read,
                         write=_write, write_tokenizer=_write_tokenizer,
                         caveat=_caveat)
