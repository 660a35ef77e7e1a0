"""Data: a batch is a pure function of (seed, step), for the synthetic and the file path."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elastic_trainer.data import (
    ArrayRecordSource,
    make_source,
    prepare_dataset,
    synthetic_batch,
)


def test_synthetic_batch_is_a_pure_function_of_seed_and_step() -> None:
    a = synthetic_batch(3, 17, 8, 32, 256)
    assert a.shape == (8, 33) and a.dtype == np.int32
    np.testing.assert_array_equal(a, synthetic_batch(3, 17, 8, 32, 256))
    assert not np.array_equal(a, synthetic_batch(3, 18, 8, 32, 256))
    assert not np.array_equal(a, synthetic_batch(4, 17, 8, 32, 256))


def test_synthetic_sequences_have_learnable_structure() -> None:
    batch = synthetic_batch(0, 0, 16, 32, 256)
    strides = (batch[:, 1:] - batch[:, :-1]) % 256
    assert (strides == strides[:, :1]).all()  # each row is an arithmetic progression
    assert ((strides >= 1) & (strides <= 8)).all()


def test_prepared_arrayrecord_data_is_deterministic_per_seed_and_step(tmp_path: Path) -> None:
    text = tmp_path / "a.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200)
    short = tmp_path / "b.txt"
    short.write_text("tiny")
    shards = prepare_dataset([str(text), str(short)], str(tmp_path / "ds"), record_bytes=100,
                             num_shards=2)
    assert len(shards) == 2 and all(Path(s).exists() for s in shards)

    source = make_source(str(tmp_path / "ds"), seed=1, batch=4, seq_len=32, vocab=256)
    assert isinstance(source, ArrayRecordSource)
    assert source.num_records == 91  # 9000 bytes / 100 + 1 short record
    a = source.batch(5)
    assert a.shape == (4, 33) and a.dtype == np.int32
    again = ArrayRecordSource(str(tmp_path / "ds"), seed=1, batch=4, seq_len=32, vocab=256)
    np.testing.assert_array_equal(a, again.batch(5))
    assert not np.array_equal(a, source.batch(6))
    # Tokens are the UTF-8 bytes of the text.
    corpus = text.read_bytes() + short.read_bytes()
    row = bytes(a[0].astype(np.uint8))
    assert row in corpus * 2


def test_missing_or_empty_data_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--prepare-data"):
        make_source(str(tmp_path), seed=0, batch=2, seq_len=8, vocab=256)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty"):
        prepare_dataset([str(empty)], str(tmp_path / "out"))
    with pytest.raises(ValueError, match="mount the bucket"):
        make_source("gs://bucket/data", seed=0, batch=2, seq_len=8, vocab=256)
    with pytest.raises(ValueError, match="vocabulary of at least 256"):
        make_source(str(tmp_path), seed=0, batch=2, seq_len=8, vocab=100)
