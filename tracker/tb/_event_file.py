"""Event files in TensorBoard's record format, written and read with a C CRC-32C.

``tensorboard``'s own ``EventFileWriter`` hands every event to a writer thread through a bounded queue, and
that thread checksums each record in pure Python: a 1,000,000-point export spent most of its two minutes
waiting on that queue; its readers check each record the same way. Here each record is framed and
checksummed where it is made or read (``google-crc32c``, a C extension), through a buffer. The file is what
``EventFileWriter`` writes: its name, a first event that names the format (``brain.Event:2``), then one
record per event (length, masked CRC of the length, the serialized ``Event``, masked CRC of it), so every
TensorBoard reader reads it, and :func:`read_events` reads what any TensorBoard writer wrote.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google_crc32c
from tensorboard.compat.proto import event_pb2

_MASK_DELTA = 0xA282EAD8
_uids = itertools.count()


def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF)


class EventFile:
    """One new event file in ``directory``, named as TensorBoard names them, ending in ``suffix``."""

    def __init__(self, directory: Path, suffix: str = "") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
            f"{next(_uids)}{suffix}"
        )
        self.path = directory / name
        self._file = self.path.open("wb", buffering=1 << 20)
        self.add_event(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def add_event(self, event: Any) -> None:
        """Append one ``Event`` proto."""
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + _masked_crc(header) + data + _masked_crc(data))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_events(path: Path) -> Iterator[Any]:
    """Every ``Event`` of the file, in order. As TensorBoard's loaders do, reading stops at a record cut
    short (a file still being written) or one whose checksum fails."""
    with path.open("rb", buffering=1 << 20) as file:
        while True:
            header = file.read(12)
            if len(header) < 12 or _masked_crc(header[:8]) != header[8:]:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = file.read(length)
            footer = file.read(4)
            if len(data) < length or _masked_crc(data) != footer:
                return
            yield event_pb2.Event.FromString(data)
