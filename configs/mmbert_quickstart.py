"""mmBERT's annealed language learning at CPU size: eight bundled languages, added in
three phases while the masking rate and the temperature fall.

    python -m pretrainx.main --config=configs/mmbert_quickstart.py --workdir=/tmp/mmbert
    python benchmarks/mmbert_languages.py  # each phase's model on all eight languages,
                                           # the decay variants and their TIES merge

| phase | steps | rows | masking | temperature | languages |
|---|---|---|---|---|---|
| pretrain | 1,500 | 32 x 64 | 30% | 0.7 | en de es ru |
| extension | 500 | 8 x 256, RoPE 160,000 | 15% | 0.5 | + it zh |
| decay | 500 | 8 x 256, 1 - sqrt decay | 5% | 0.3 | + cs pt |

configs/mmbert.py's schedule in miniature (mmBERT: 60, 110, then 1,833 languages):
Czech and Portuguese are seen only in the decay, as mmBERT's 1,700 low-resource
languages are. The network is the ModernBERT quickstart's (3 layers x 128, a 32-token
window) over the bundled 8,000-piece multilingual SentencePiece vocabulary
(configs/multilingual_quickstart.py says how it was trained); the text is English (two
novels) and Debian's fortune files in seven languages (../shared/data/corpus/multilingual).
The first 10% of each language's documents are held out and evaluated at 15% masking
(one eval record a language, each phase's own languages at its end). Expected
(docs/recipes.md#mmbert): every language above its most-frequent-piece guesser after
the decay, Czech and Portuguese included.
"""

import os

import ml_collections

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")
# The text that ships beside this repository (../shared/data/corpus/multilingual)
SHARED = os.path.normpath(os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "..", "..", "shared", "data",
    "corpus", "multilingual"))
ENGLISH = ",".join(os.path.join(ASSETS, "text", f) for f in (
    "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
# (phase, languages it adds, steps, masking rate, temperature)
PHASES = (("pretrain", ("en", "de", "es", "ru"), 1500, 0.30, 0.7),
          ("extension", ("it", "zh"), 500, 0.15, 0.5),
          ("decay", ("cs", "pt"), 500, 0.05, 0.3))


def languages(names) -> dict:
    """The data keys that train on `names`: one source a language."""
    files = [ENGLISH if n == "en" else os.path.join(SHARED, f"fortunes.{n}.txt") for n in names]
    return {"train_files": ";".join(files), "train_source_names": ",".join(names)}


def get_config():
    c = default_config("modernbert")
    c.total_steps = sum(steps for _, _, steps, _, _ in PHASES)
    c.global_batch_size = 32
    c.seq_len = 64
    c.log_every = 100
    c.eval_every = 100_000  # each phase's end, and the run's
    c.eval_steps = 4  # a language: 4 batches (its held-out part, once or more)
    c.checkpoint_every = 500
    c.keep_checkpoints = 10
    c.model.update(num_layers=3, hidden_size=128, num_heads=2, mlp_dim=256, vocab_size=8000,
                   local_attention=32, max_position_embeddings=256, dtype="float32")
    c.optimizer.learning_rate = 2e-3  # the quickstart's: minutes to learn in, not days
    c.optimizer.weight_decay = 8e-5 / 2e-3
    c.optimizer.update(b2=0.95, eps=1e-8, warmup_steps=100, accumulate_to=1, batch_ramp=0.0)
    c.optimizer.decay_steps = PHASES[-1][2]
    c.data.tokenizer = os.path.join(ASSETS, "spm_multi_8k.model")
    c.data.eval_split_percent = 10.0
    c.data.eval_mask_prob = 0.15  # one rate for every phase's evaluation

    seen = []
    for name, added, steps, rate, alpha in PHASES:
        seen += added
        length = c.seq_len if name == "pretrain" else 256
        # masks a row holds: its length at the training or the eval rate, whichever is more
        holds = -(-int(max(rate, c.data.eval_mask_prob) * length) // 8) * 8
        data = dict(languages(seen), mask_prob=rate, mixing_alpha=alpha,
                    max_predictions_per_seq=holds)
        phase = {"steps": steps, "data": data}
        if name == "pretrain":  # RoPE 10,000 everywhere, the rate held after its warmup
            phase.update(model={"global_rope_theta": 10_000.0, "local_rope_theta": 10_000.0},
                         optimizer={"schedule": "constant"})
        else:  # 160,000 from the extension on (a phase's keys carry into the next)
            phase.update(seq_len=length, global_batch_size=8,
                         model={"global_rope_theta": 160_000.0, "local_rope_theta": 160_000.0})
        if name == "decay":
            phase["optimizer"] = {"schedule": "warmup_stable_decay", "warmup_steps": 0,
                                  "decay_steps": steps, "final_lr_fraction": 0.02}
        c.phases[name] = ml_collections.ConfigDict(phase)
    c.data.update(c.phases.pretrain.data)  # the run's keys are its first phase's
    c.phase_order = ",".join(name for name, *_ in PHASES)
    return c
