"""Data at scale: prepared ArrayRecord shards, TFDS, JSONL, mixing, multi-process
input, exact resume, tokenizer training, and bad input."""

import gzip
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cli_fork import run_module
from conftest import REPO, tiny_bert_config, tiny_t5_config
from pretrainx import config as config_lib, objectives
from pretrainx.prepare import examples as prepare
from pretrainx.data import pipeline, prepared, sources
from pretrainx.data.tokenizers import bert_pretokenize, load_tokenizer, train_wordpiece
from pretrainx.errors import UserError
from pretrainx.train import phases as phases_lib

BOOKS = REPO / "pretrainx" / "assets" / "text"
ALICE = str(BOOKS / "pg11_alice_in_wonderland.txt")


def _digest(directory):
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _objective(cfg):
    return objectives.build(cfg, load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case))


def _same_examples(a, b):
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                np.testing.assert_array_equal(x[k], y[k])
        else:  # a T5 row: the raw examples packed together
            assert len(x) == len(y)
            for u, v in zip(x, y):
                np.testing.assert_array_equal(u, v)


@pytest.fixture(scope="module")
def bert_prepared(tmp_path_factory):
    cfg = tiny_bert_config(**{"data.dupe_factor": 2, "data.docs_per_shard": 6,
                              "data.eval_files": ALICE})
    out = str(tmp_path_factory.mktemp("prepared") / "bert")
    prepare.prepare(cfg, out, workers=1)
    return cfg, out


# --- prepare -----------------------------------------------------------------


def test_prepare_is_deterministic_whatever_the_workers(bert_prepared, tmp_path):
    cfg, out = bert_prepared
    again = str(tmp_path / "again")
    prepare.prepare(cfg, again, workers=2)  # spawned worker processes
    first, second = _digest(out), _digest(again)
    assert len([p for p in first if p.endswith(".array_record")]) >= 4  # several shards
    assert first == second


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_prepared_examples_equal_the_ones_built_from_text(family, tmp_path):
    make = tiny_bert_config if family == "bert" else tiny_t5_config
    cfg = make(**{"data.docs_per_shard": 5})
    out = str(tmp_path / "prep")
    manifest = prepare.prepare(cfg, out, workers=1)
    assert len(manifest["sources"]["train0"]["examples"][str(cfg.seq_len)]["shards"]) > 1
    phase = config_lib.phases(cfg)[0]
    from_text = _objective(cfg).examples(cfg.data.train_files, phase, train=True)
    cfg.data.prepared_dir = out
    from_shards = _objective(cfg).examples(cfg.data.train_files, phase, train=True)
    _same_examples(from_text, from_shards)
    # and so the training batches are the same too
    text_cfg = make(**{"data.docs_per_shard": 5})
    a = phases_lib.train_dataset(text_cfg, _objective(text_cfg), phase)[3]
    b = phases_lib.train_dataset(cfg, _objective(cfg), phase)[3]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_prepared_data_refuses_a_config_it_was_not_made_with(bert_prepared):
    cfg, out = bert_prepared
    cfg = tiny_bert_config(**{"data.dupe_factor": 3, "data.docs_per_shard": 6,
                              "data.eval_files": ALICE, "data.prepared_dir": out})
    phase = config_lib.phases(cfg)[0]
    with pytest.raises(UserError, match=r"made with data\.dupe_factor=2; this config has 3"):
        _objective(cfg).examples(cfg.data.train_files, phase, train=True)
    cfg.seq_len = 32
    cfg.data.dupe_factor = 2
    with pytest.raises(UserError, match="no train0 examples at seq_len 32"):
        _objective(cfg).examples(cfg.data.train_files, config_lib.phases(cfg)[0], train=True)
    with pytest.raises(UserError, match="has no manifest.json"):
        cfg.data.prepared_dir = os.path.dirname(out)
        _objective(cfg).examples(cfg.data.train_files, phase, train=True)
    before = _digest(out)
    cfg.data.prepared_dir = ""
    with pytest.raises(UserError, match="is not empty; give a new or empty directory"):
        prepare.prepare(cfg, out, workers=1)
    assert _digest(out) == before  # an older preparation is never overwritten


def test_cli_prepare_then_train_reads_only_the_shards(tmp_path):
    from conftest import TINY_CLI
    out = tmp_path / "prep"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    common = [f"--config={REPO}/configs/quickstart.py", *TINY_CLI]
    done = run_module("pretrainx.data", ["prepare", *common, f"--output={out}", "--workers=1"],
                      env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["sources"]["train0"]["examples"]["64"] > 8
    assert summary["tokens_per_sec"] > 0
    # The text is gone: training reads token ids from the shards alone.
    corpus = tmp_path / "alice.txt"
    corpus.write_text(open(ALICE, encoding="utf-8").read(), encoding="utf-8")
    cmd = [sys.executable, "-m", "pretrainx.data", *common,
           f"--config.data.train_files={corpus}", f"--config.data.prepared_dir={out}",
           "--stats", "--num_batches=2"]
    corpus.unlink()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["masked_fraction"] > 0.1


# --- sources -----------------------------------------------------------------


def test_tfds_builder_round_trip(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    from pretrainx.data import tfds_text
    files = f"{ALICE},{REPO}/pretrainx/assets/text/pg1661_adventures_of_sherlock_holmes.txt"
    spec = tfds_text.build(files, str(tmp_path / "tfds"), name="books")
    assert spec == "tfds:pretrainx_text/books@train"
    from_tfds, stats = sources.read_documents(spec, tfds_data_dir=str(tmp_path / "tfds"))
    from_files, _ = sources.read_documents(files)
    assert from_tfds == from_files and stats["records"] == len(from_files)
    # A config trains on it through the same path as Wikipedia or C4 would take.
    cfg = tiny_bert_config(**{"data.train_files": spec,
                              "data.tfds_data_dir": str(tmp_path / "tfds")})
    batch = phases_lib.train_dataset(cfg, _objective(cfg), config_lib.phases(cfg)[0])[0]
    assert batch["input_ids"].shape == (8, 64) and batch["masked_lm_weights"].sum() > 0


def test_tfds_bad_input_is_one_line(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(UserError, match="TFDS has no dataset 'no_such_corpus'"):
        sources.read_documents("tfds:no_such_corpus", tfds_data_dir=str(tmp_path))
    with pytest.raises(UserError, match="'data.tfds_data_dir' is '/nonexistent/tfds': not a"):
        sources.read_documents("tfds:pretrainx_text/books", tfds_data_dir="/nonexistent/tfds")
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    with pytest.raises(UserError, match="not a readable directory"):
        sources.read_documents("tfds:pretrainx_text/books", tfds_data_dir=str(a_file))
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        if not os.access(locked, os.R_OK):  # root reads any directory
            with pytest.raises(UserError, match="not a readable directory"):
                sources.read_documents("tfds:pretrainx_text/books", tfds_data_dir=str(locked))
    finally:
        locked.chmod(0o755)


def test_tf_reader_without_tensorflow_says_what_to_install(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    try:
        import tensorflow  # noqa: F401
        pytest.skip("TensorFlow is installed")
    except ImportError:
        pass
    from pretrainx.data import tfds_text
    spec = tfds_text.build(ALICE, str(tmp_path), name="alice")
    with pytest.raises(UserError, match=r"tfds_reader='tf' needs TensorFlow \(pip install"):
        sources.read_documents(spec, tfds_data_dir=str(tmp_path), tfds_reader="tf")


def test_jsonl_gzip_and_globs(tmp_path):
    pride = (BOOKS / "pg1342_pride_and_prejudice.txt").read_text(encoding="utf-8")
    paragraphs = [p.replace("\n", " ") for p in pride.split("\n\n") if len(p) > 200][:40]
    records = [{"id": i, "text": "\n".join(paragraphs[i:i + 4])} for i in range(0, 40, 4)]
    lines = "".join(json.dumps(r) + "\n" for r in records)
    (tmp_path / "a.jsonl").write_text(lines, encoding="utf-8")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(lines)
    docs, stats = sources.read_documents(str(tmp_path / "*.jsonl*"))
    assert stats["records"] == 20 and stats["files"] == 2
    assert docs[:len(docs) // 2] == docs[len(docs) // 2:]  # .gz reads as the plain file
    first = " ".join(docs[0])
    assert first == " ".join(" ".join(p.split()) for p in paragraphs[:4])
    assert all(len(d) > 1 for d in docs)  # records are split into sentences


def test_bad_jsonl_lines_name_file_and_line_or_are_skipped_and_counted(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "A good line. It has two sentences."}\n'
                   '{"text": broken\n'
                   '{"body": "no text field here."}\n'
                   '{"text": "Another good line."}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.jsonl:2: not JSON"):
        sources.read_documents(str(bad))
    bad.write_text('{"text": "fine."}\n{"body": "x"}\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"bad\.jsonl:2: no field 'text' \(data\.text_field\)"):
        sources.read_documents(str(bad))
    bad.write_text('{"text": "A good line. It has two sentences."}\n{"text": broken\n'
                   '{"body": "x"}\n{"text": "Another good line."}\n', encoding="utf-8")
    docs, stats = sources.read_documents(str(bad), skip_bad_lines=True)
    assert stats["skipped_lines"] == 2 and stats["records"] == 2
    assert docs == [["A good line.", "It has two sentences."], ["Another good line."]]


def test_truncated_gzip_names_the_file_or_keeps_what_came_before(tmp_path):
    text = open(ALICE, encoding="utf-8").read()
    cut = tmp_path / "cut.txt.gz"
    cut.write_bytes(gzip.compress(text.encode("utf-8"))[:30000])
    with pytest.raises(UserError, match=r"cut\.txt\.gz'.*gzip stream broken after \d+ bytes"):
        sources.read_documents(str(cut))
    docs, stats = sources.read_documents(str(cut), skip_bad_lines=True)
    assert stats["truncated_files"] == 1
    whole, _ = sources.read_documents(ALICE)
    assert 0 < sum(map(len, docs)) < sum(map(len, whole))
    assert docs[0][:5] == whole[0][:5]


def test_bad_lines_are_counted_in_the_stats_command(tmp_path):
    from pretrainx.prepare.data_cli import batch_statistics
    good = [json.dumps({"text": p}) for p in open(ALICE, encoding="utf-8").read().split("\n\n")
            if len(p) > 300]
    (tmp_path / "c.jsonl").write_text("\n".join(good[:60] + ["not json"] * 3) + "\n",
                                      encoding="utf-8")
    cfg = tiny_bert_config(**{"data.train_files": str(tmp_path / "c.jsonl"),
                              "data.skip_bad_lines": True})
    stats = batch_statistics(cfg, num_batches=1)
    assert stats["sources"][str(tmp_path / "c.jsonl")]["skipped_lines"] == 3


# --- mixing, processes, resume ---------------------------------------------------


def _ids(n, tag):
    return [{"tag": np.int32(tag), "i": np.int32(i)} for i in range(n)]


def _identity(example, rng):
    del rng
    return example


def test_mixing_weights_hold_within_two_percent():
    a, b, c = _ids(1000, 0), _ids(50, 1), _ids(7000, 2)  # very different sizes
    ds = pipeline.make_dataset([a, b, c], _identity, global_batch=100, seed=3,
                               weights=[0.5, 0.2, 0.3], process_index=0, process_count=1)
    tags = np.concatenate([ds[i]["tag"] for i in range(100)])  # 10k examples
    share = np.bincount(tags, minlength=3) / tags.size
    np.testing.assert_allclose(share, [0.5, 0.2, 0.3], atol=0.02)
    with pytest.raises(UserError, match="2 weights for 3 sources"):
        sources.source_weights("a;b;c", "1,2")


def test_mixed_sources_from_a_config(tmp_path):
    cfg = tiny_bert_config(**{
        "data.train_files": f"{ALICE};{BOOKS}/pg1661_adventures_of_sherlock_holmes.txt",
        "data.train_weights": "1,3"})
    objective = _objective(cfg)
    phase = config_lib.phases(cfg)[0]
    alice = {e["input_ids"].tobytes() for e in objective.examples(ALICE, phase, train=True)}
    ds = phases_lib.train_dataset(cfg, objective, phase)
    from_alice = []
    for i in range(125):  # 1000 examples
        batch = ds[i]
        ids, n = batch["input_ids"], batch["attention_mask"].sum(1)
        for row in range(ids.shape[0]):
            unmasked = ids[row].copy()
            unmasked[batch["masked_lm_positions"][row][batch["masked_lm_weights"][row] > 0]] = -1
            from_alice.append(any(_matches(unmasked[:n[row]], a) for a in _candidates(alice, n[row])))
    assert abs(np.mean(from_alice) - 0.25) < 0.05


def _candidates(pool, n):
    return [np.frombuffer(x, np.int32) for x in pool if len(x) == 4 * n]


def _matches(masked, original):
    keep = masked >= 0
    return np.array_equal(masked[keep], original[keep])


@pytest.mark.parametrize("processes", [1, 2, 4])
def test_processes_read_disjoint_rows_that_cover_the_epoch_once(processes):
    examples = _ids(96, 0)
    per_epoch = 96 // 8
    rows = []
    for p in range(processes):
        ds = pipeline.make_dataset(examples, _identity, global_batch=8, seed=5,
                                   process_index=p, process_count=processes)
        rows.append([ds[s]["i"] for s in range(per_epoch)])
    seen = np.concatenate([r for mine in rows for r in mine])
    np.testing.assert_array_equal(np.sort(seen), np.arange(96))  # every example, once
    for s in range(per_epoch):  # each step's union is the one-process batch
        one = pipeline.make_dataset(examples, _identity, global_batch=8, seed=5,
                                    process_index=0, process_count=1)[s]["i"]
        np.testing.assert_array_equal(np.concatenate([mine[s] for mine in rows]), one)


@pytest.mark.parametrize("skip", [5, 11])  # 12 batches an epoch: inside it, across its end
def test_iterator_over_shards_resumes_exactly(bert_prepared, skip):
    cfg, out = bert_prepared
    cfg = tiny_bert_config(**{"data.dupe_factor": 2, "data.docs_per_shard": 6,
                              "data.eval_files": ALICE, "data.prepared_dir": out})
    phase = config_lib.phases(cfg)[0]
    examples = _objective(cfg).examples(cfg.data.train_files, phase, train=True)
    assert isinstance(examples, prepared.Examples)
    small = [examples[i] for i in range(96)]  # an epoch of 12 batches of 8
    transform = _objective(cfg).transform(phase, train=True)
    ds = pipeline.make_dataset(small, transform, 8, seed=1)
    it = pipeline.make_iterator(ds, signature={"examples": [96]})
    for _ in range(skip):
        next(it)
    state = json.loads(json.dumps(it.get_state()))  # as the checkpoint stores it
    expected = [next(it) for _ in range(3)]
    fresh = pipeline.make_iterator(pipeline.make_dataset(small, transform, 8, seed=1),
                                   signature={"examples": [96]})
    fresh.set_state(state)
    for want in expected:
        got = next(fresh)
        for k in want:
            np.testing.assert_array_equal(want[k], got[k])
    other = pipeline.make_iterator(ds, signature={"examples": [97]})
    with pytest.raises(UserError, match=r"other data \(examples \[96\] then, \[97\] now\)"):
        other.set_state(state)


# --- tokenizer training ------------------------------------------------------------


def test_wordpiece_training_is_deterministic_and_covers_held_out_text(tmp_path):
    books = [str(BOOKS / "pg1342_pride_and_prejudice.txt")]
    a = train_wordpiece(books, str(tmp_path / "a"), vocab_size=3000)
    b = train_wordpiece(books, str(tmp_path / "b"), vocab_size=3000)
    assert open(a, "rb").read() == open(b, "rb").read()
    tok = load_tokenizer(a)
    assert tok.vocab_size == 3000
    assert [tok.id_to_piece(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    held_out = open(ALICE, encoding="utf-8").read()
    ids = np.array(tok.encode(held_out))
    # Only a word with a character the training text never had is [UNK].
    alphabet = set(bert_pretokenize(open(books[0], encoding="utf-8").read()))
    unknown = [w for w in bert_pretokenize(held_out).split() if tok.encode(w) == [tok.unk_id]]
    assert all(set(w) - alphabet for w in unknown)
    assert (ids == tok.unk_id).mean() < 0.01
    words = len(held_out.split())
    assert ids.size < 2.0 * words  # word pieces (characters would be about 5 a word)
    assert "the" in tok.tokenize("The Queen said") and "##" not in tok.tokenize("the")[0]


def test_cli_trains_a_wordpiece_vocab(tmp_path):
    done = run_module("pretrainx.prepare.tokenizer", [
        "train", f"--input={ALICE}", "--vocab_size=800", "--model_type=wordpiece",
        f"--output={tmp_path}/wp", "--max_sentences=500"],
        timeout=120, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{tmp_path}/wp/vocab.txt"
    assert len(open(f"{tmp_path}/wp/vocab.txt", encoding="utf-8").read().split("\n")) == 801


def test_grain_worker_processes_give_the_same_batches_and_resume(bert_prepared):
    """data.worker_processes: transforms in grain processes, same batches, exact resume."""
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()  # grain's workers read absl flags
    cfg, out = bert_prepared
    cfg = tiny_bert_config(**{"data.dupe_factor": 2, "data.docs_per_shard": 6,
                              "data.eval_files": ALICE, "data.prepared_dir": out})
    objective, phase = _objective(cfg), config_lib.phases(cfg)[0]
    ds, signature = phases_lib.train_data(cfg, objective, phase)
    threads = pipeline.make_iterator(ds, signature=signature)
    want = [next(threads) for _ in range(6)]
    workers = pipeline.make_iterator(ds, signature=signature, worker_processes=2)
    got = [next(workers) for _ in range(3)]
    state = json.loads(json.dumps(workers.get_state()))
    del workers
    resumed = pipeline.make_iterator(ds, signature=signature, worker_processes=2)
    resumed.set_state(state)
    got += [next(resumed) for _ in range(3)]
    del resumed
    for w, g in zip(want, got):
        for k in w:
            np.testing.assert_array_equal(w[k], g[k])
    with pytest.raises(UserError, match="worker_processes 2 then, None now"):
        threads.set_state(state)


def test_a_dupe_factor_that_would_not_fit_in_memory_is_refused(monkeypatch):
    """dupe_factor passes of the corpus are held in memory: measured on the first pass
    (real text), a factor whose passes exceed 80% of the host's available memory is
    refused in one line naming the key, before the host runs out (it died without a
    word); the same factor on a host with room builds them all."""
    from pretrainx.objectives import mlm
    from pretrainx.errors import UserError
    cfg = tiny_bert_config(**{"data.dupe_factor": 3})
    phase = config_lib.phases(cfg)[0]
    first = _objective(cfg.copy_and_resolve_references()).examples(cfg.data.train_files, phase,
                                                                  train=True)
    per_pass = sum(sum(v.nbytes for v in p.values() if isinstance(v, np.ndarray)) for p in first)
    per_pass /= 3
    monkeypatch.setattr(mlm, "available_memory", lambda: int(per_pass * 3))
    with pytest.raises(UserError, match=r"data.dupe_factor=3 would hold [0-9.]+ GiB of pairs in "
                                        r"memory .* available; lower it"):
        _objective(cfg).examples(cfg.data.train_files, phase, train=True)
    monkeypatch.setattr(mlm, "available_memory", lambda: int(per_pass * 30))
    assert len(_objective(cfg).examples(cfg.data.train_files, phase, train=True)) == len(first)


def test_a_damaged_record_names_its_shard(tmp_path):
    """Bytes overwritten inside a prepared shard (bad media, a stray write): reading the
    record gives one line naming the shard, not Riegeli's hash-mismatch traceback."""
    from pretrainx.errors import UserError
    cfg = tiny_bert_config(**{"data.docs_per_shard": 5})
    out = str(tmp_path / "prep")
    manifest = prepare.prepare(cfg, out, workers=1)
    shard = os.path.join(out, manifest["sources"]["train0"]["examples"][str(cfg.seq_len)][
        "shards"][1])
    size = os.path.getsize(shard)
    with open(shard, "r+b") as f:
        f.seek(size // 3)
        f.write(b"\xff" * 64)
    cfg.data.prepared_dir = out
    examples = _objective(cfg).examples(cfg.data.train_files, config_lib.phases(cfg)[0],
                                        train=True)
    with pytest.raises(UserError, match=f"prepared shard {shard} is damaged \\(Corrupted "
                                        "Riegeli/records file.*prepare again"):
        for i in range(len(examples)):
            examples[i]


def test_a_data_format_is_one_reader_and_its_registration(tmp_path, monkeypatch):
    """data.format names are the readers registered in data/formats.py: a new one reads
    files named for it and files with its suffix under auto; other files keep theirs."""
    from pretrainx.data import formats
    monkeypatch.setitem(formats.TEXT_FORMATS, "lines", None)
    del formats.TEXT_FORMATS["lines"]  # restored without it at the end, whatever happens
    with pytest.raises(UserError, match="'data.format' is 'lines'; expected one of auto"):
        formats.check_format("lines")
    book = (REPO / "pretrainx" / "assets" / "text" / "pg11_alice_in_wonderland.txt").read_text()
    lines = [ln.strip() for ln in book.splitlines() if ln.strip()]
    formats.register_format("lines", lambda path, text, field, skip, stats: [
        [ln.strip()] for ln in text.splitlines() if ln.strip()], suffixes=(".lines",))
    formats.check_format("lines")
    (tmp_path / "alice.txt").write_text(book)
    with gzip.open(tmp_path / "alice.lines.gz", "wt") as f:
        f.write(book)
    named, _ = sources.read_documents(str(tmp_path / "alice.txt"), "lines")
    by_suffix, _ = sources.read_documents(str(tmp_path / "alice.lines.gz"))
    as_prose, _ = sources.read_documents(str(tmp_path / "alice.txt"))
    assert named == by_suffix == [[ln] for ln in lines]
    assert len(as_prose) < len(lines) / 10  # the book's own documents, many lines each
