"""Test setup: 8 simulated CPU devices, quiet logs, a persistent compile cache, and
XLA:CPU's cheapest compiles.

The tests' programs are tiny, so compiling them is most of the suite's time: with
`jax_disable_most_optimizations` (LLVM at -O0, no expensive passes) they compile 16-25%
faster (tests/train/test_train.py + test_scan.py from a cold cache: 195 s -> 157 s); XLA:CPU's
older loop emitters (`--xla_cpu_use_fusion_emitters=false`) take another 35-40% off each
compile (tests/train/test_train.py alone, cold: 121 s -> 98 s); and every program is cached,
however short its compile. A test marked `optimized` trains long
enough that XLA's full optimisation pays back its compile time and gets XLA's defaults
in the CLI runs it starts, and full optimisation in process (where the emitter flag,
read once a process, stays): the six then marked, one after another from a cold cache,
374 s -> 288 s (the two-host test, 58 s -> 64 s, stays cheap). With the older emitters
T5's text-to-text fine-tuning runs faster cheap (79 s -> 58 s, 2026-11-29) and is no
longer marked; BERT's SST-2 run is faster marked (14.1 s against 19.5 s). With the
shared-cores flags below, BART's SST-2 run became faster cheap (61.1 s -> 41.2 s) and
is no longer marked, and GPT-2's bfloat16 test faster marked (22 s -> 15-16 s). The flag
is a JAX option (read at each compile, part of the persistent cache's key), not an
XLA_FLAGS entry, so that a test can turn it off. Runs outside the tests (the CLI,
benchmarks) keep XLA's defaults. XLA_FLAGS must be set before jax is imported anywhere,
hence here; a subprocess that sets its own device count takes `xla_flags(n)`.
"""

import gc
import json
import os
import pathlib
import sys
import time

# CPython's collector at its default thresholds (700 allocations) runs a full collection
# every few hundred thousand allocations over a heap that JAX, Flax, torch and
# transformers make millions of objects large, and tracing allocates freely: 7% of
# tests/train/test_train.py + test_roberta.py's time (6.4 s of 88) went to 27 full collections.
# At 50,000 the collector still runs (cycles are freed; 1.2 s of GC there).
GC_THRESHOLDS = (50_000, 20, 10)
gc.set_threshold(*GC_THRESHOLDS)

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# On the CPU only: the GPU kit runs the gpu-marked tests with XLA's own settings. The
# CLI runs that tests start inherit it through the environment.
CHEAP_COMPILES = os.environ["JAX_PLATFORMS"] == "cpu"
if CHEAP_COMPILES:
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")


_CACHE = pathlib.Path(os.environ.get("PRETRAINX_TEST_CACHE",
                                     pathlib.Path.home() / ".cache" / "pretrainx-tests"))


def _known(flags: str) -> str:
    """`flags` less those the installed jaxlib does not know (tests/xla_support.py):
    XLA aborts on an unknown flag, and these are settings for speed, not claims."""
    from xla_support import known
    return " ".join(known(flags.split(), _CACHE)) if flags else ""


# XLA:CPU's older loop emitters compile the tests' -O0 programs faster than its MLIR
# fusion emitters: a tiny BERT's train, eval and init programs 4.4-5.9 s -> 2.7-3.1 s of
# XLA compile (five runs each, 2026-11-29). At full optimisation they compile slower
# (7.4 s -> 11.0 s), so a test marked `optimized` starts its subprocesses without it (an
# XLA flag is read once a process, so it keeps it in process). jaxlib 0.12 has no older
# emitters (the flag is gone): there it is left out.
CHEAP_XLA_FLAGS = _known("--xla_cpu_use_fusion_emitters=false" if CHEAP_COMPILES else "")
# Two test processes share two cores, so XLA:CPU's own threads only contend: codegen in
# one piece instead of split over a thread pool, and matmuls on the calling thread.
# tests/train/test_train.py and test_t5.py side by side from cold caches, two interleaved
# pairs of runs: 83.3/84.1 and 78.9/81.8 s without them, 79.1/81.0 and 78.0/78.5 s with
# them (3% of wall and 4% of CPU time; 2026-11-29); a tiny BERT's programs compile 9%
# faster alone.
SHARED_CORES_XLA_FLAGS = _known("--xla_cpu_parallel_codegen_split_count=1 "
                                "--xla_cpu_multi_thread_eigen=false" if CHEAP_COMPILES else "")


def xla_flags(devices: int | None = None) -> str:
    """XLA_FLAGS for a test's subprocess: `devices` CPU devices (None: XLA's one), the
    shared-cores flags, and the cheap-compile flag unless the running test is `optimized`."""
    count = f"--xla_force_host_platform_device_count={devices}" if devices else ""
    cheap = (CHEAP_XLA_FLAGS if CHEAP_XLA_FLAGS and CHEAP_XLA_FLAGS in os.environ.get("XLA_FLAGS", "")
             else "")
    return " ".join(filter(None, [cheap, SHARED_CORES_XLA_FLAGS, count]))


os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), CHEAP_XLA_FLAGS,
                                                 SHARED_CORES_XLA_FLAGS,
                                                 "--xla_force_host_platform_device_count=8"]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from absl import logging as absl_logging  # noqa: E402

absl_logging.set_verbosity(absl_logging.WARNING)
jax.config.update("jax_compilation_cache_dir", str(_CACHE / "jax"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

# The CLI runs that tests start in subprocesses share the cache through the environment.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(_CACHE / "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

REPO = pathlib.Path(__file__).resolve().parents[1]
# tests/ mirrors the package's roles, one folder each (claims/ for the files named after
# a claim); a test may import another's tiny-model helpers by module name, from any folder
sys.path[1:1] = sorted({str(p.parent) for p in (REPO / "tests").glob("*/test_*.py")}
                      - set(sys.path))
# ../shared/data beside the checkout; PRETRAINX_SHARED_DATA where it does not travel (the
# GPU kit carries the few files its checks read)
SHARED_DATA = pathlib.Path(os.environ.get("PRETRAINX_SHARED_DATA",
                                          REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _optimized_compiles(request, monkeypatch):
    """XLA's full optimisation for a test marked `optimized` (see the module's note)."""
    if not (CHEAP_COMPILES and request.node.get_closest_marker("optimized")):
        yield
        return
    before = jax.config.read("jax_disable_most_optimizations")
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
    if CHEAP_XLA_FLAGS:
        monkeypatch.setenv("XLA_FLAGS", os.environ["XLA_FLAGS"].replace(CHEAP_XLA_FLAGS, ""))
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", before)


@pytest.fixture(scope="session")
def shared_data():
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


# pretrained_workdir's depth: a config that continues from it (init_from) takes it too.
PRETRAINED_DEPTH = {"model.num_layers": 2}


def _pretrained(tmp_path_factory, name, cfg):
    from pretrainx.train import loop
    workdir = str(tmp_path_factory.mktemp(name) / "w")
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    return workdir


@pytest.fixture(scope="session")
def pretrained_workdir(tmp_path_factory):
    """A tiny BERT of two layers pretrained for a few steps on real text (a workdir as
    users have; the layer-wise fine-tuning tests read its stack)."""
    return _pretrained(tmp_path_factory, "pretrained",
                       tiny_bert_config(total_steps=3, checkpoint_every=3, **PRETRAINED_DEPTH))


@pytest.fixture(scope="session")
def pretrained_t5_workdir(tmp_path_factory):
    """A tiny T5 pretrained for a few steps on real text."""
    return _pretrained(tmp_path_factory, "pretrained_t5",
                       tiny_t5_config(total_steps=3, checkpoint_every=3))


def saved_params(workdir) -> dict:
    """The newest checkpoint's parameters as the run stored them (a distilled run's
    teacher beside its student), flattened to {path tuple: array}."""
    import orbax.checkpoint as ocp
    from flax import traverse_util
    manager = ocp.CheckpointManager(str(pathlib.Path(workdir) / "checkpoints"),
                                    item_names=("state", "data", "config"))
    state = manager.restore(manager.latest_step(), args=ocp.args.Composite(
        state=ocp.args.StandardRestore()))["state"]
    manager.close()
    return traverse_util.flatten_dict(state["params"])


def load_config(name: str, arg: str | None = None):
    """A recipe from configs/ as the CLI would load it (without the CLI)."""
    import importlib.util
    path = REPO / "configs" / name
    spec = importlib.util.spec_from_file_location(f"config_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg) if arg is not None else module.get_config()


# The test models' depth. One layer: a tiny BERT's programs compile 25-45% faster than
# with two (2026-12-06, the train step on one device and on a mesh of 8, cold cache), and
# most claims (a loss that falls, sharded equals unsharded, exact resume, parity) hold
# layer by layer; the tests about the stack (scanned layers, layer mappings, the last
# layer reused) ask for more layers themselves.
TINY_LAYERS = 1


def tiny_bert_config(**overrides):
    """The quickstart recipe shrunk to seconds: one layer, width 64, length 64 (a test
    whose claim is about the stack of layers sets `model.num_layers` itself)."""
    c = load_config("quickstart.py")
    c.total_steps = 6
    c.global_batch_size = 8
    c.seq_len = 64
    c.log_every = 1
    c.eval_every = 1000
    c.eval_steps = 2
    c.checkpoint_every = 3
    c.model.num_layers = TINY_LAYERS
    c.model.hidden_size = 64
    c.model.num_heads = 4
    c.model.mlp_dim = 128
    c.data.max_predictions_per_seq = 10
    c.data.dupe_factor = 1
    c.optimizer.warmup_steps = 2
    return override(c, overrides)


ALICE = str(REPO / "pretrainx" / "assets" / "text" / "pg11_alice_in_wonderland.txt")


def shrink_recipe(name: str, *, learning_rate: float, model: dict | None = None,
                  **overrides):
    """A family's recipe at test size: one layer 64 wide, 8 rows of 64 tokens of Alice,
    16 steps, data-parallel; `model` and `overrides` (dotted keys) add what the family
    needs on top."""
    c = load_config(name)
    c.total_steps = 16
    c.global_batch_size = 8
    c.seq_len = 64
    c.log_every = 1
    c.eval_every = 1000
    c.checkpoint_every = 1000
    c.mesh.data, c.mesh.fsdp = -1, 1
    c.model.update({"num_layers": TINY_LAYERS, "hidden_size": 64, "num_heads": 4,
                    "mlp_dim": 128, "dtype": "float32", **(model or {})})
    c.data.max_predictions_per_seq = 10
    c.data.train_files = ALICE
    c.optimizer.learning_rate = learning_rate
    c.optimizer.warmup_steps = 2
    return override(c, overrides)


# tiny_bert_config as command-line overrides of configs/quickstart.py, for tests
# that run the CLI in a subprocess (add total_steps, checkpoint_every, ...).
TINY_CLI = ["--config.global_batch_size=8", "--config.seq_len=64", "--config.log_every=1",
            "--config.eval_every=100000", "--config.data.eval_files=",
            f"--config.model.num_layers={TINY_LAYERS}", "--config.model.hidden_size=64",
            "--config.model.num_heads=4", "--config.model.mlp_dim=128",
            "--config.data.max_predictions_per_seq=10", "--config.data.dupe_factor=1",
            "--config.optimizer.warmup_steps=2",
            f"--config.data.train_files={ALICE}"]


def read_metrics(workdir, split="train", source=None):
    import json
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return [r for r in records if r.get("split", "train") == split and r.get("source") == source]


SENTENCES = [  # one from each bundled book: what parity tests feed both implementations
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife.",
    "Alice was beginning to get very tired of sitting by her sister on the bank.",
    "To Sherlock Holmes she is always the woman.",
]


def sentence_batch(tokenizer, pairs: bool = False, extra_padding: int = 0, second: int = 2,
                   pad_id: int | None = None) -> dict:
    """SENTENCES as [CLS]/<s> sentence [SEP]/</s> (with `pairs`, SENTENCES[second] as a
    second segment), padded to the longest row + `extra_padding` with `pad_id` (default
    the tokenizer's); MLM logits asked at every position."""
    rows = []
    for s in SENTENCES:
        ids = [tokenizer.cls_id] + tokenizer.encode(s) + [tokenizer.sep_id]
        types = [0] * len(ids)
        if pairs:
            other = tokenizer.encode(SENTENCES[second]) + [tokenizer.sep_id]
            ids, types = ids + other, types + [1] * len(other)
        rows.append((ids, types))
    length = max(len(r[0]) for r in rows) + extra_padding
    batch = {k: np.zeros((len(rows), length), np.int32)
             for k in ("input_ids", "token_type_ids", "attention_mask")}
    batch["input_ids"][:] = tokenizer.pad_id if pad_id is None else pad_id
    for i, (ids, types) in enumerate(rows):
        batch["input_ids"][i, :len(ids)] = ids
        batch["token_type_ids"][i, :len(ids)] = types
        batch["attention_mask"][i, :len(ids)] = 1
    batch["masked_lm_positions"] = np.tile(np.arange(length, dtype=np.int32), (len(rows), 1))
    return batch


MESH_OF_8 = {"mesh.data": 2, "mesh.fsdp": 2, "mesh.tensor": 2}


def losses_on_one_and_a_mesh(make_config, tmp_path) -> tuple:
    """(losses on one device, losses on a (data 2, fsdp 2, tensor 2) mesh) of the config
    `make_config(**overrides)` builds; the single device's workdir is tmp_path/"one"."""
    from pretrainx.train import loop
    loop.train(make_config(), str(tmp_path / "one"), devices=jax.devices()[:1])
    loop.train(make_config(**MESH_OF_8), str(tmp_path / "mesh"))
    return tuple([r["loss"] for r in read_metrics(tmp_path / name)] for name in ("one", "mesh"))


def assert_packed_examples_see_only_themselves(model, make_params, examples, length: int):
    """`examples` (1-D id arrays) packed into one row of `length` (segment ids, positions
    that restart) give each example's MLM logits as it gets alone, within 1e-5: no
    attention crosses a boundary. `model` takes input_ids, attention_mask, positions and
    masked_lm_positions; `make_params(batch)` gives its parameters. Returns the row's
    real length."""
    from pretrainx.data import packing
    packed = packing.pack_examples(examples, length)
    assert len(packed) == 1, len(packed)
    row = packed[0]
    n = row["input_ids"].size
    assert list(np.unique(row["segment_ids"])) == list(range(1, len(examples) + 1))
    pad = lambda x: np.pad(x, (0, length - n))[None]  # noqa: E731
    batch = {"input_ids": pad(row["input_ids"]), "attention_mask": pad(row["segment_ids"]),
             "positions": pad(row["positions"]),
             "masked_lm_positions": np.arange(length, dtype=np.int32)[None]}
    # jitted: eagerly, every op of every layer compiles alone (298 compiles for
    # ModernBERT's three layers; 22 s -> 5 s at 8,192 tokens)
    apply = jax.jit(lambda p, b: model.apply({"params": p}, b)["mlm_logits"])
    params = make_params(batch)
    together = np.asarray(apply(params, batch))[0]
    start = 0
    for e in examples:
        alone = {"input_ids": e[None], "attention_mask": np.ones_like(e)[None],
                 "masked_lm_positions": np.arange(e.size, dtype=np.int32)[None]}
        logits = np.asarray(apply(params, alone))[0]
        np.testing.assert_allclose(together[start:start + e.size], logits, rtol=0, atol=1e-5)
        start += e.size
    return n


def override(c, overrides):
    """Set dotted keys (\"optimizer.learning_rate\") of a config; returns it."""
    for key, value in overrides.items():
        target = c
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value
    return c


def tiny_t5_config(**overrides):
    """The T5 quickstart shrunk to seconds: one layer a side, width 64, inputs 128 / targets
    29."""
    c = load_config("t5_quickstart.py")
    c.total_steps = 6
    c.global_batch_size = 8
    c.seq_len = 128
    c.log_every = 1
    c.eval_every = 1000
    c.eval_steps = 2
    c.checkpoint_every = 3
    c.model.num_layers = TINY_LAYERS
    c.model.num_decoder_layers = TINY_LAYERS
    c.model.hidden_size = 64
    c.model.num_heads = 4
    c.model.head_dim = 16
    c.model.mlp_dim = 128
    c.optimizer.warmup_steps = 2
    return override(c, overrides)


def pytest_collection_modifyitems(config, items):
    """The slow-marked tests first, each file's order kept: pytest-xdist hands tests out
    in this order, so the suite ends on short tests that both workers share instead of
    one long test that leaves the other worker idle. (pyproject's `--dist worksteal`
    lets an idle worker take half of the other's queue: `load` never moves a test
    once sent, and its first chunks are a quarter of the suite.)"""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


# PRETRAINX_TEST_PROFILE=DIR: each worker appends one JSON line a test to DIR, with its
# wall time and the seconds this process spent tracing, lowering and compiling (XLA) and
# its compile-cache hits and misses, so that a run shows whether compilation, execution or
# subprocesses hold the suite's time (docs/benchmarks.md, "The test suite's time").
# A pytest that a profiled test starts (the GPU kit's dry run) writes no rows: its time
# is inside that test's row already; _PROFILED_TEST, set while a test runs, says so.
_PROFILED_TEST = "PRETRAINX_TEST_PROFILE_RUNNING"
_PROFILE_DIR = (None if os.environ.get(_PROFILED_TEST)
                else os.environ.get("PRETRAINX_TEST_PROFILE"))
_PROFILE_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace_s",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
                   "/jax/core/compile/backend_compile_duration": "compile_s",
                   "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read_s",
                   "/jax/compilation_cache/cache_hits": "hits",
                   "/jax/compilation_cache/cache_misses": "misses"}
_profile_totals: dict = {}

if _PROFILE_DIR:
    from jax import monitoring as _monitoring

    def _add(event, amount=1, **_):
        """A duration's seconds, or 1 for an event, to its column."""
        if event in _PROFILE_EVENTS:
            key = _PROFILE_EVENTS[event]
            _profile_totals[key] = _profile_totals.get(key, 0) + amount

    _monitoring.register_event_duration_secs_listener(_add)
    _monitoring.register_event_listener(_add)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        _profile_totals.clear()
        start = time.perf_counter()
        os.environ[_PROFILED_TEST] = item.nodeid
        try:
            yield
        finally:
            os.environ.pop(_PROFILED_TEST, None)
        # the run's id, shared by its xdist workers: `.ci/run` runs pytest twice into
        # one DIR (benchmarks/suite_profile.py keeps one run)
        row = {"test": item.nodeid, "run": os.environ.get("PYTEST_XDIST_TESTRUNUID", ""),
               "wall_s": round(time.perf_counter() - start, 2),
               **{k: round(v, 2) for k, v in _profile_totals.items()}}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        out = pathlib.Path(_PROFILE_DIR)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / f"{worker}.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")


def greedy_without_cache(model, params, prompt: list, steps: int) -> list:
    """The `steps` tokens a decoder writes greedily from `prompt` when it runs the whole
    prefix again each step, padded to one length (one compilation; causal attention and
    segment 0 keep the padding out of the prefix): what a key-value cache must match."""
    import jax
    import jax.numpy as jnp
    total = len(prompt) + steps
    forward = jax.jit(lambda p, b: model.apply({"params": p}, b)["logits"])
    ids = list(prompt)
    for _ in range(steps):
        n = len(ids)
        inputs, segments = np.zeros((1, total), np.int32), np.zeros((1, total), np.int32)
        inputs[0, :n], segments[0, :n] = ids, 1
        batch = {"inputs": inputs, "segment_ids": segments, "positions": np.arange(total)[None]}
        ids.append(int(jnp.argmax(forward(params, batch)[0, n - 1])))
    return ids[len(prompt):]

