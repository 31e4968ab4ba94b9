"""The tensors of a Llama-style decoder block as transformers names them, shared by the
families HF holds in that layout (Qwen3, Gemma 3): self_attn.{q,k,v,o}_proj, the per-head
q_norm and k_norm, and mlp.{gate,up,down}_proj.

torch's Linear weights are [out, in]; ours are [in, heads, head_dim] for the query, key
and value projections, [heads, head_dim, out] for the output one, and the SwiGLU/GeGLU's
gate and up projections one fused `wi` [in, 2, mlp] (gate first). Each family adds its
own norms and names around these.
"""

import numpy as np


def _f32(x):
    return np.asarray(x, np.float32)


def attention_to_hf(attn: dict, name: str, qk_norm: bool = True) -> dict:
    """{HF name: array} of one attention (`name`: its HF prefix, e.g. "...self_attn.")."""
    out = {}
    for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        kernel = _f32(attn[ours]["kernel"])  # [in, heads, head_dim]
        out[name + f"{theirs}.weight"] = kernel.reshape(kernel.shape[0], -1).T
    kernel = _f32(attn["out"]["kernel"])  # [heads, head_dim, out]
    out[name + "o_proj.weight"] = kernel.reshape(-1, kernel.shape[-1]).T
    if qk_norm:
        out[name + "q_norm.weight"] = _f32(attn["query_norm"]["scale"])
        out[name + "k_norm.weight"] = _f32(attn["key_norm"]["scale"])
    return out


def mlp_to_hf(mlp: dict, name: str) -> dict:
    wi = _f32(mlp["wi"]["kernel"])  # [h, 2, mlp]: gate, up
    return {name + "gate_proj.weight": wi[:, 0, :].T, name + "up_proj.weight": wi[:, 1, :].T,
            name + "down_proj.weight": _f32(mlp["wo"]["kernel"]).T}


def block_to_hf(p: dict, name: str, hidden: int) -> dict:
    """{HF name: array} of one block's attention and feed-forward (`p`: our layer_N)."""
    del hidden  # the kernels carry their shapes
    return {**attention_to_hf(p["attention"], name + "self_attn."),
            **mlp_to_hf(p["mlp"], name + "mlp.")}


def attention_from_hf(get, name: str, head_dim: int, qk_norm: bool = True) -> dict:
    """Our attention from HF's tensors under `name` (`get(name)` -> float32 [out, in])."""
    d = head_dim
    heads = lambda w: w.T.reshape(w.shape[1], -1, d)  # noqa: E731
    out_weight = get(name + "o_proj.weight")
    attention = {"query": {"kernel": heads(get(name + "q_proj.weight"))},
                 "key": {"kernel": heads(get(name + "k_proj.weight"))},
                 "value": {"kernel": heads(get(name + "v_proj.weight"))},
                 "out": {"kernel": out_weight.T.reshape(-1, d, out_weight.shape[0])}}
    if qk_norm:
        attention["query_norm"] = {"scale": get(name + "q_norm.weight")}
        attention["key_norm"] = {"scale": get(name + "k_norm.weight")}
    return attention


def mlp_from_hf(get, name: str) -> dict:
    wi = np.stack([get(name + "gate_proj.weight").T, get(name + "up_proj.weight").T], axis=1)
    return {"wi": {"kernel": wi}, "wo": {"kernel": get(name + "down_proj.weight").T}}


def block_from_hf(get, name: str, hidden: int, head_dim: int) -> dict:
    """Our layer_N's attention and mlp from HF's tensors (`get(name)` -> float32)."""
    del hidden
    return {"attention": attention_from_hf(get, name + "self_attn.", head_dim),
            "mlp": mlp_from_hf(get, name + "mlp.")}
