"""python -m pretrainx.generate --workdir=DIR --prompt="..." [--max_new_tokens=50]
    [--temperature=1.0] [--top_k=0] [--top_p=1.0] [--num_samples=1] [--seed=0]
    [--num_beams=1]

Continues a prompt with a decoder (GPT-2, ModernBERT's decoder as Ettin trains
it) from a pretraining workdir (its latest checkpoint) or a HuggingFace directory.
--temperature=0 is greedy decoding.

An encoder-decoder (BART, T5) reads the prompt as its input and writes its output,
greedily or by beam search (--num_beams; BART's decoding keeps a key-value cache). In
the prompt, "<mask>" is the tokenizer's mask token: a pretrained BART fills it in.

An encoder with an MLM head (a masked-diffusion run, configs/mdlm.py; any MLM model
runs) writes by iterative unmasking with --diffusion_steps=T: [CLS] prompt, then a
canvas of --canvas masks, [SEP]; each step predicts every masked token and reveals a
share of them, the most confident first (--remasking=confidence, LLaDA's) or at random
(--remasking=random, MDLM's ancestral order); --temperature=0 draws the likeliest token.
Deterministic under --seed. An instruction-tuned one (data.response_only) reads
[CLS] prompt [SEP] canvas [SEP], as it was tuned. A decoder made bidirectional
(`<family>_mdlm` or MNTP, model.causal=False) does the same on its own framing (the
prompt, then the canvas), each position predicted from the output before it, as it was
trained.
"""

import jax
import numpy as np
from absl import flags

from pretrainx import interop, models, registry
from pretrainx.objectives import mdlm, mntp, prefix_lm, shifted_mdlm
from pretrainx.trained import inference, sampling
from pretrainx import cli
from pretrainx.data.tokenizers import load_tokenizer
from pretrainx.errors import UserError
from pretrainx.finetune import text_to_text

_PROMPT = flags.DEFINE_string("prompt", None, "Text to continue.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 50, "Tokens to generate.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "0 = greedy.")
_TOP_K = flags.DEFINE_integer("top_k", 0, "Sample among the k likeliest tokens (0 = all).")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Sample within this much probability mass.")
_SAMPLES = flags.DEFINE_integer("num_samples", 1, "Continuations to draw.")
_SEED = flags.DEFINE_integer("seed", 0, "Sampling seed.")
_BEAMS = flags.DEFINE_integer("num_beams", 1, "Encoder-decoders: beams (1 = greedy).")
_DIFFUSION = flags.DEFINE_integer("diffusion_steps", 0, "Encoders: unmasking steps "
                                   "(0: not a diffusion sample).")
_CANVAS = flags.DEFINE_integer("canvas", 32, "Encoders: masked tokens to fill after the prompt.")
_REMASKING = flags.DEFINE_string("remasking", "confidence", "Encoders: confidence | random.")
_MASK = "<mask>"


def run(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    workdir = cli.workdir()
    if not workdir or _PROMPT.value is None:
        raise UserError("--workdir and --prompt are required")
    if _TEMPERATURE.value < 0 or not 0 < _TOP_P.value <= 1 or _TOP_K.value < 0:
        raise UserError("--temperature must be >= 0, --top_p in (0, 1], --top_k >= 0")
    if _BEAMS.value < 1:
        raise UserError(f"--num_beams={_BEAMS.value} must be >= 1")
    pretrained = interop.load(workdir)
    family = models.FAMILIES.find(pretrained.family)
    if _DIFFUSION.value:
        return _diffusion(workdir, pretrained, family)
    sampled = family is not None and registry.samples(family, pretrained.model)
    if family is None or not (sampled or family.generate):
        samplers = [f.name for f in models.FAMILIES.entries()
                    if f.causal_sampling or f.generate]
        what = "encoder" if family is not None and family.causal_sampling else "model"
        raise UserError(f"{workdir} holds a {pretrained.family} {what}; generate writes with "
                        f"{', '.join(samplers)} decoders and encoder-decoders")
    tokenizer = load_tokenizer(pretrained.tokenizer, layout=family.tokenizer_layout)
    if not sampled:
        return _encoder_decoder(pretrained, family, tokenizer)
    if _BEAMS.value != 1:
        raise UserError("--num_beams is for encoder-decoders; a decoder samples (--temperature=0 "
                        "is greedy)")
    model_cfg = pretrained.model
    model_cfg.dropout_rate = model_cfg.attention_dropout_rate = 0.0
    prompt, stop = list(tokenizer.encode(_PROMPT.value)), tokenizer.eot_id
    if family.sample_framing == "cls":  # rows of [CLS] text [SEP]
        prompt, stop = [tokenizer.cls_id] + prompt, tokenizer.sep_id
    elif family.sample_framing == "bos":  # documents opened by <bos> (Gemma's)
        prompt = registry.text_ids(family, tokenizer, prompt)
    # a prefix LM reads its prompt as the prefix, both ways, as it trained
    trained_as = (pretrained.run or {}).get("objective") or ""
    sample = (sampling.generate_prefixed if trained_as.endswith(prefix_lm.SUFFIX)
              else sampling.generate)
    try:
        rows = sample(model_cfg, pretrained.params, prompt, _MAX_NEW.value, _TEMPERATURE.value,
                      _TOP_K.value, _TOP_P.value, _SEED.value, _SAMPLES.value, stop_id=stop)
    except ValueError as e:
        raise UserError(str(e)) from None
    for i, row in enumerate(rows):
        if len(rows) > 1:
            print(f"--- sample {i}")
        print(_PROMPT.value + tokenizer.decode(row), flush=True)
    return 0


def _diffusion(workdir, pretrained, family) -> int:
    """Iterative unmasking of [CLS] prompt canvas [SEP] with an encoder's MLM head, or of
    a bidirectional decoder's framed prompt and canvas with its shifted head."""
    # a decoder made bidirectional predicts a masked token from the output before it
    shifted = (family is not None and pretrained.head == "causal_lm"
               and family.causal_sampling is not None and not family.is_causal(pretrained.model))
    # an encoder read with its MLM head: pretrainx.load's logits are that head's
    if family is None or family.outputs is None or not (
            shifted or pretrained.head in ("mlm", "pretrain")):
        raise UserError(f"{workdir} holds a {pretrained.family} model without an MLM head or "
                        "a bidirectional decoder's; --diffusion_steps writes with an encoder's "
                        "(configs/mdlm.py)")
    if _CANVAS.value < 1:
        raise UserError(f"--canvas={_CANVAS.value} must be at least 1")
    model = inference.load(workdir)
    tok = model.tokenizer
    prompt = list(tok.encode(_PROMPT.value)) if _PROMPT.value else []
    if shifted:
        mask_id = mntp.mask_id_of(tok, (pretrained.run or {}).get("mask_token") or "")
        start = registry.text_ids(family, tok, prompt)
        if not start:
            raise UserError(f"--prompt is empty: a {pretrained.family} decoder predicts each "
                            "token from the one before it, and its texts open with no token "
                            "of their own; give a prompt")
        ids, end = start + [mask_id] * _CANVAS.value, None
    else:
        mask_id = tok.mask_id
        # instruction-tuned (data.response_only): the response follows the prompt's [SEP]
        start = [tok.cls_id] + prompt + (
            [tok.sep_id] if (pretrained.run or {}).get("response_only") else [])
        ids, end = start + [mask_id] * _CANVAS.value + [tok.sep_id], -1
    forbidden = sorted(set(int(i) for i in tok.special_ids()) - {mask_id})

    def logits_fn(row):
        logits = model(ids=[list(row)])["logits"][0]
        return shifted_mdlm.shifted_logits(logits) if shifted else logits

    rows = []
    for sample in range(_SAMPLES.value):
        out = mdlm.unmask(logits_fn, ids, mask_id, _DIFFUSION.value, _SEED.value + sample,
                          _TEMPERATURE.value, _REMASKING.value, forbidden)
        rows.append(out[len(start):end])
    for i, row in enumerate(rows):
        if len(rows) > 1:
            print(f"--- sample {i}")
        print((_PROMPT.value + " " if _PROMPT.value else "") + tok.decode(row), flush=True)
    return 0


def _encoder_decoder(pretrained, family, tokenizer) -> int:
    sampling_flags = [f"--{name}" for name in ("temperature", "top_k", "top_p", "num_samples")
                      if flags.FLAGS[name].present]
    if sampling_flags:
        raise UserError(f"{', '.join(sampling_flags)}: a {pretrained.family} model decodes "
                        "greedily or by beam search (--num_beams)")
    pieces = _PROMPT.value.split(_MASK)
    ids = tokenizer.encode(pieces[0])
    for piece in pieces[1:]:
        ids += [tokenizer.mask_id] + tokenizer.encode(piece)
    framing = family.text_framing
    ids = ([tokenizer.cls_id] if framing == "bos_eos" else []) + ids + [tokenizer.sep_id]
    model_cfg = pretrained.model
    model_cfg.dropout_rate = model_cfg.attention_dropout_rate = 0.0
    model_cfg.scan_layers = False  # interop.load unrolls scanned layers
    tokens = np.asarray([ids], np.int32)
    try:
        # one program (run eagerly, every op of the encoder and the first decode would
        # compile alone)
        search = jax.jit(lambda params, t, s: family.generate(
            model_cfg, params, t, s, _MAX_NEW.value, tokenizer.sep_id, tokenizer.pad_id,
            _BEAMS.value))
        out = search(pretrained.params, tokens, np.ones_like(tokens))
    except ValueError as e:
        raise UserError(str(e)) from None
    print(text_to_text.decode(tokenizer, np.asarray(out)[0], framing), flush=True)
    return 0


if __name__ == "__main__":
    cli.main(run)
