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


def block_to_hf(p: dict, name: str, hidden: int) -> dict:
    """{HF name: array} of one block's attention and feed-forward (`p`: our layer_N)."""
    attn, out = p["attention"], {}
    for ours, theirs in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        kernel = _f32(attn[ours]["kernel"]).reshape(hidden, -1)
        out[name + f"self_attn.{theirs}.weight"] = kernel.T
    out[name + "self_attn.o_proj.weight"] = _f32(attn["out"]["kernel"]).reshape(-1, hidden).T
    out[name + "self_attn.q_norm.weight"] = _f32(attn["query_norm"]["scale"])
    out[name + "self_attn.k_norm.weight"] = _f32(attn["key_norm"]["scale"])
    wi = _f32(p["mlp"]["wi"]["kernel"])  # [h, 2, mlp]: gate, up
    out[name + "mlp.gate_proj.weight"] = wi[:, 0, :].T
    out[name + "mlp.up_proj.weight"] = wi[:, 1, :].T
    out[name + "mlp.down_proj.weight"] = _f32(p["mlp"]["wo"]["kernel"]).T
    return out


def block_from_hf(get, name: str, hidden: int, head_dim: int) -> dict:
    """Our layer_N's attention and mlp from HF's tensors (`get(name)` -> float32)."""
    h, d = hidden, head_dim
    attention = {
        "query": {"kernel": get(name + "self_attn.q_proj.weight").T.reshape(h, -1, d)},
        "key": {"kernel": get(name + "self_attn.k_proj.weight").T.reshape(h, -1, d)},
        "value": {"kernel": get(name + "self_attn.v_proj.weight").T.reshape(h, -1, d)},
        "out": {"kernel": get(name + "self_attn.o_proj.weight").T.reshape(-1, d, h)},
        "query_norm": {"scale": get(name + "self_attn.q_norm.weight")},
        "key_norm": {"scale": get(name + "self_attn.k_norm.weight")}}
    wi = np.stack([get(name + "mlp.gate_proj.weight").T,
                   get(name + "mlp.up_proj.weight").T], axis=1)
    return {"attention": attention,
            "mlp": {"wi": {"kernel": wi}, "wo": {"kernel": get(name + "mlp.down_proj.weight").T}}}
