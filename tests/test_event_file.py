"""Plateau's event-file writer and reader against TensorBoard's own: each reads what the other writes, and
a file cut short or damaged reads as TensorBoard's loader reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from plateau_tracker.server.tb._event_file import EventFile, read_events


def _events(count: int) -> list[event_pb2.Event]:
    return [
        event_pb2.Event(
            step=step,
            wall_time=1_700_000_000.0 + step,
            summary=summary_pb2.Summary(
                value=[summary_pb2.Summary.Value(tag="loss", simple_value=1 / (step + 1))]
            ),
        )
        for step in range(count)
    ]


def _tensorboard_reads(path: Path) -> list[event_pb2.Event]:
    return list(LegacyEventFileLoader(str(path)).Load())


def _only_file(directory: Path) -> Path:
    [path] = [p for p in directory.iterdir() if "tfevents" in p.name]
    return path


def test_tensorboard_reads_what_plateau_writes(tmp_path: Path) -> None:
    with EventFile(tmp_path, suffix=".plateau") as file:
        for event in _events(500):
            file.add_event(event)
    path = _only_file(tmp_path)
    assert path.name.startswith("events.out.tfevents.")
    assert path.name.endswith(".plateau")
    read = _tensorboard_reads(path)
    assert read[0].file_version == "brain.Event:2"
    assert read[1:] == _events(500)
    assert list(read_events(path)) == read


def test_plateau_reads_what_tensorboard_writes(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))
    for event in _events(300):
        writer.add_event(event)
    writer.close()
    path = _only_file(tmp_path)
    assert list(read_events(path)) == _tensorboard_reads(path)
    assert len(list(read_events(path))) == 301


@pytest.mark.parametrize("damage", ["cut", "flipped"])
def test_a_damaged_file_reads_as_tensorboard_reads_it(tmp_path: Path, damage: str) -> None:
    with EventFile(tmp_path) as file:
        for event in _events(50):
            file.add_event(event)
    path = _only_file(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "cut":  # a writer still at work: the last record is half there
        del data[-7:]
    else:  # one bit flipped in the middle of the file: that record's checksum fails
        data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    ours = list(read_events(path))
    assert ours == _tensorboard_reads(path)
    assert 1 < len(ours) < 51
