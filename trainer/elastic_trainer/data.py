"""Training data. A batch is a pure function of (seed, step): a run restarted at step k
(in the same process after an elastic event, or in a new one) sees exactly the data an
undisturbed run would have seen.

Two sources:
- `synthetic`: arithmetic progressions modulo the vocabulary, `x[t] = a + b*t (mod V)`
  with a random start `a` and stride `b`. The model must read the stride off the context,
  so the loss falls from ln(V) towards 0 in a few hundred steps on the tiny config.
  Evaluations (evaluation.py) read a held-out stream of such batches (`eval_batch`).
- a directory (or glob) of ArrayRecord shards written by `prepare_dataset`: each record
  is a run of byte-level tokens (one token per UTF-8 byte, vocabulary 256). Records are
  read by random access through grain's `ArrayRecordDataSource`; which records and
  offsets make up a batch is drawn from (seed, step), so the file path is deterministic
  per (seed, step) too.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from elastic_api import data_paths

MAX_STRIDE = 8
SHARD_SUFFIX = ".array_record"
# The streams of (seed, step) draws: training's synthetic batches, ArrayRecord rows, and
# the held-out synthetic batches evaluations read (never trained on).
TRAIN_STREAM, RECORDS_STREAM, EVAL_STREAM = 0, 1, 2


def step_rng(seed: int, step: int, stream: int = 0) -> np.random.Generator:
    """An RNG that depends only on (seed, step, stream)."""
    return np.random.default_rng(np.random.SeedSequence([seed, step, stream]))


class BatchSource(Protocol):
    def batch(self, step: int) -> np.ndarray:
        """int32 tokens [global_batch, seq_len + 1] for training step `step`."""
        ...


def synthetic_batch(seed: int, step: int, batch: int, seq_len: int, vocab: int,
                    stream: int = TRAIN_STREAM) -> np.ndarray:
    rng = step_rng(seed, step, stream)
    start = rng.integers(0, vocab, size=(batch, 1))
    stride = rng.integers(1, MAX_STRIDE + 1, size=(batch, 1))
    positions = np.arange(seq_len + 1)[None, :]
    return ((start + stride * positions) % vocab).astype(np.int32)


class SyntheticSource:
    def __init__(self, seed: int, batch: int, seq_len: int, vocab: int) -> None:
        self.seed, self.global_batch, self.seq_len, self.vocab = seed, batch, seq_len, vocab

    def batch(self, step: int) -> np.ndarray:
        return synthetic_batch(self.seed, step, self.global_batch, self.seq_len, self.vocab)


def check_data(path: str) -> None:
    """What admission refuses of spec.trainer.data (elastic_api.data_paths), refused here
    too before anything is read: a URL."""
    if data_paths.is_url(path):
        raise ValueError(f"--data {path}: {data_paths.READ_FROM_A_FILESYSTEM}")


def find_shards(path: str) -> list[str]:
    check_data(path)
    if os.path.isdir(path):
        shards = sorted(glob.glob(os.path.join(path, f"*{SHARD_SUFFIX}")))
    else:
        shards = sorted(glob.glob(path))
    if not shards:
        raise FileNotFoundError(
            f"--data {path}: no ArrayRecord shards (*{SHARD_SUFFIX}) found; write some with "
            "`etj train --prepare-data TEXT_FILES... --out DIR`"
        )
    return shards


class ArrayRecordSource:
    """Byte-level token records in ArrayRecord shards, read by random access with grain."""

    def __init__(self, path: str, seed: int, batch: int, seq_len: int, vocab: int) -> None:
        import grain

        if vocab < 256:
            raise ValueError(f"byte-level data needs a vocabulary of at least 256, not {vocab}")
        self.shards = find_shards(path)
        self.source = grain.sources.ArrayRecordDataSource(self.shards)
        self.num_records = len(self.source)
        if self.num_records == 0:
            raise ValueError(f"--data {path}: the shards hold no records")
        self.seed, self.global_batch, self.seq_len = seed, batch, seq_len

    def _row(self, rng: np.random.Generator) -> np.ndarray:
        need = self.seq_len + 1
        index = int(rng.integers(0, self.num_records))
        pieces: list[np.ndarray] = []
        have = 0
        # A record shorter than a row borrows from the records after it (wrapping around).
        while have < need:
            record = np.frombuffer(self.source[index % self.num_records], dtype=np.uint8)
            pieces.append(record)
            have += len(record)
            index += 1
            if len(pieces) > need:  # only empty records; prepare_dataset never writes them
                raise ValueError("ArrayRecord records are empty")
        tokens = np.concatenate(pieces)
        offset = int(rng.integers(0, len(tokens) - need + 1))
        return tokens[offset : offset + need].astype(np.int32)

    def batch(self, step: int) -> np.ndarray:
        rng = step_rng(self.seed, step, stream=RECORDS_STREAM)
        return np.stack([self._row(rng) for _ in range(self.global_batch)])


def eval_batch(seed: int, index: int, batch: int, seq_len: int, vocab: int) -> np.ndarray:
    """Batch `index` of the held-out synthetic stream (whatever --data trains on): every
    evaluation reads the same batches 0..M-1, so its losses compare across the run."""
    return synthetic_batch(seed, index, batch, seq_len, vocab, stream=EVAL_STREAM)


def make_source(data: str, seed: int, batch: int, seq_len: int, vocab: int) -> BatchSource:
    if data == data_paths.SYNTHETIC:
        return SyntheticSource(seed, batch, seq_len, vocab)
    return ArrayRecordSource(data, seed, batch, seq_len, vocab)


def prepare_dataset(
    text_files: Sequence[str], out_dir: str, record_bytes: int = 4096, num_shards: int = 2,
) -> list[str]:
    """Tokenize text files byte-level into ArrayRecord shards under out_dir.

    Every file is cut into records of at most `record_bytes` tokens; records go to the
    shards round-robin. Returns the shard paths.
    """
    from array_record.python.array_record_module import ArrayRecordWriter

    if record_bytes < 2:
        raise ValueError("record_bytes must be at least 2")
    records: list[bytes] = []
    for name in text_files:
        data = Path(name).read_bytes()
        records.extend(
            data[i : i + record_bytes] for i in range(0, len(data), record_bytes)
        )
    if not records:
        raise ValueError(f"--prepare-data: the text files {list(text_files)} are empty")
    os.makedirs(out_dir, exist_ok=True)
    num_shards = max(1, min(num_shards, len(records)))
    paths = [
        os.path.join(out_dir, f"data-{i:05d}-of-{num_shards:05d}{SHARD_SUFFIX}")
        for i in range(num_shards)
    ]
    writers = [ArrayRecordWriter(p, "group_size:1") for p in paths]
    for i, record in enumerate(records):
        writers[i % num_shards].write(record)
    for writer in writers:
        writer.close()
    return paths
