"""Parquet and Arrow corpora (data/columnar.py): read by row group as JSONL reads by line,
split into units for prepare, checked on resume, and bad files named in one line."""

import json
import os

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO, read_metrics, tiny_bert_config
from pretrainx.prepare import examples as prepare
from pretrainx.data import prepared, sources
from pretrainx.errors import UserError

PRIDE = REPO / "pretrainx" / "assets" / "text" / "pg1342_pride_and_prejudice.txt"


def _records(count=60):
    """Web-page-like records of real prose: four paragraphs of Pride and Prejudice each."""
    text = PRIDE.read_text(encoding="utf-8")
    paragraphs = [p.replace("\n", " ") for p in text.split("\n\n") if len(p) > 200]
    return [{"id": i, "text": "\n".join(paragraphs[4 * i:4 * i + 4])} for i in range(count)]


def _parquet(path, records, row_group_size=7):
    pq.write_table(pa.Table.from_pylist(records), str(path), row_group_size=row_group_size)
    return str(path)


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _save_to_disk(folder, records, batch_rows=9):
    """The layout HF datasets' save_to_disk writes: Arrow stream shards and state.json."""
    folder.mkdir()
    table = pa.Table.from_pylist(records)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            for batch in table.to_batches(max_chunksize=batch_rows):
                writer.write_batch(batch)
    (folder / "state.json").write_text(json.dumps(
        {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}), encoding="utf-8")
    (folder / "dataset_info.json").write_text("{}", encoding="utf-8")
    return str(folder)


def test_parquet_and_arrow_read_as_the_same_records_in_jsonl(tmp_path):
    records = _records()
    from_jsonl, _ = sources.read_documents(_jsonl(tmp_path / "pages.jsonl", records))
    from_parquet, stats = sources.read_documents(_parquet(tmp_path / "pages.parquet", records))
    assert from_parquet == from_jsonl and len(from_jsonl) == 60
    assert stats["records"] == 60 and stats["files"] == 1
    from_arrow, stats = sources.read_documents(_save_to_disk(tmp_path / "saved", records))
    assert from_arrow == from_jsonl and stats["records"] == 60


def test_units_are_whole_row_groups_that_together_read_the_file_once(tmp_path):
    path = _parquet(tmp_path / "pages.parquet", _records(), row_group_size=7)  # 9 groups
    units = sources.list_units(path, records_per_unit=20)
    assert [(u.start, u.stop) for u in units] == [(0, 3), (3, 6), (6, 9)]
    assert repr(units[1]).endswith("pages.parquet[row groups 3:6]")
    whole, _ = sources.read_documents(path)
    parts = [d for u in units for d in sources.unit_documents(u)]
    assert parts == whole
    arrow = sources.list_units(_save_to_disk(tmp_path / "saved", _records()), records_per_unit=20)
    assert [(u.start, u.stop) for u in arrow] == [(0, 3), (3, 6), (6, 7)]  # 9 rows a batch


def test_prepare_writes_from_parquet_what_it_writes_from_jsonl(tmp_path):
    records = _records()
    shards = {}
    for kind, path in (("jsonl", _jsonl(tmp_path / "pages.jsonl", records)),
                       ("parquet", _parquet(tmp_path / "pages.parquet", records))):
        cfg = tiny_bert_config(**{"data.train_files": path, "data.docs_per_shard": 20})
        out = str(tmp_path / kind)
        manifest = prepare.prepare(cfg, out, workers=1)
        info = manifest["sources"]["train0"]
        shards[kind] = [prepared.decode(r) for s in info["examples"]["64"]["shards"]
                        for r in _array_records(os.path.join(out, s))]
        assert info["documents"] == 60
    assert len(shards["parquet"]) == len(shards["jsonl"]) > 20
    for a, b in zip(shards["parquet"], shards["jsonl"]):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def _array_records(path):
    import grain
    source = grain.sources.ArrayRecordDataSource([path])
    return [source[i] for i in range(len(source))]


def test_stats_count_a_parquet_source_mixed_by_temperature_with_text(tmp_path):
    from pretrainx.prepare.data_cli import batch_statistics
    path = _parquet(tmp_path / "pages.parquet", _records())
    cfg = tiny_bert_config(**{"data.train_files": path})
    stats = batch_statistics(cfg, num_batches=1)
    assert stats["sources"][path]["records"] == 60
    assert stats["masked_fraction"] > 0.1
    cfg = tiny_bert_config(**{"data.train_files": f"{path};{cfg.data.eval_files}",
                              "data.mixing_alpha": 0.3, "data.train_source_names": "web,book"})
    stats = batch_statistics(cfg, num_batches=4)
    assert stats["sources"][path]["records"] == 60
    expected = stats["expected_source_fractions"]  # temperature over the sources' tokens
    tokens = [stats["sources"][spec]["tokens"] for spec in cfg.data.train_files.split(";")]
    lifted = [n ** 0.3 for n in tokens]
    assert [expected["web"], expected["book"]] == pytest.approx([x / sum(lifted) for x in lifted])


def test_bad_parquet_is_named_in_one_line_and_nulls_are_counted(tmp_path):
    records = _records(10)
    path = _parquet(tmp_path / "pages.parquet", records)
    with pytest.raises(UserError, match=r"pages\.parquet: no column 'body' \(data\.text_field\); "
                                        r"its columns are id, text"):
        sources.read_documents(path, text_field="body")
    with pytest.raises(UserError, match=r"column 'id' \(data\.text_field\) holds int64, not text"):
        sources.read_documents(path, text_field="id")
    cut = tmp_path / "cut.parquet"
    cut.write_bytes((tmp_path / "pages.parquet").read_bytes()[:-100])
    with pytest.raises(UserError, match=r"cannot read '.*cut\.parquet': not a Parquet file, "
                                        r"or cut short"):
        sources.read_documents(str(cut))
    with_null = _parquet(tmp_path / "null.parquet", records[:3] + [{"id": 3, "text": None}])
    with pytest.raises(UserError, match=r"null\.parquet\[row groups 0:1\] row 3: column 'text' "
                                        r"is null; set data\.skip_bad_lines=True"):
        sources.read_documents(with_null)
    docs, stats = sources.read_documents(with_null, skip_bad_lines=True)
    assert stats["skipped_lines"] == 1 and stats["records"] == 3


def test_a_hub_path_without_network_says_what_to_do(monkeypatch):
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match=r"cannot reach 'hf://datasets/HuggingFaceFW/fineweb-edu"
                                        r"/sample/10BT/\*\.parquet'.*without network, download "
                                        r"it first \(hf download --repo-type dataset"):
        sources.read_documents("hf://datasets/HuggingFaceFW/fineweb-edu/sample/10BT/*.parquet")


def test_a_save_to_disk_dataset_dict_asks_for_a_split(tmp_path):
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    with pytest.raises(UserError, match=r"holds the splits train, test of a DatasetDict: give "
                                        r"one of them, e\.g\. .*dd/train"):
        sources.read_documents(str(tmp_path / "dd"))


@pytest.mark.slow
def test_a_resume_on_a_changed_parquet_file_is_refused(tmp_path):
    from pretrainx.train import loop
    records = _records(120)
    path = _parquet(tmp_path / "pages.parquet", records)
    workdir = str(tmp_path / "w")
    cfg = tiny_bert_config(**{"data.train_files": path, "total_steps": 3})
    loop.train(cfg, workdir, devices=jax.devices()[:1])
    assert len(read_metrics(workdir)) == 3
    _parquet(tmp_path / "pages.parquet", records[:-1])  # one row fewer
    cfg.total_steps = 6
    with pytest.raises(UserError, match=r"pages\.parquet had \d+ bytes, 120 rows then, \d+ "
                                        r"bytes, 119 rows now"):
        loop.train(cfg, workdir, devices=jax.devices()[:1])
    assert len(read_metrics(workdir)) == 3  # nothing written on the way out
