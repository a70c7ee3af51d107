"""TensorBoard event files read without TensorBoard, every byte taken for hostile.

`summarywriter.tfevents` was written by torch 2.13's `torch.utils.tensorboard.SummaryWriter`
(tensorboard 2.21): for steps 0-2, `add_scalar("Loss/train", 1 / (step + 1), step)` and
`add_scalar("new", 2.5 * step, step, new_style=True)` (a tensor of the `scalars` plugin), then
a histogram and a text, which are not scalars."""

import math
import struct
from pathlib import Path

import pytest

from jobs.capture.tfevents import (
    MAX_RECORD_BYTES,
    BadRecord,
    encode_record,
    encode_scalar_event,
    event_scalars,
    masked_crc32c,
    split_records,
)

WRITTEN = Path(__file__).with_name("summarywriter.tfevents")


def test_what_summarywriter_wrote_is_read_back() -> None:
    data = WRITTEN.read_bytes()
    records = split_records(data)
    assert (records.consumed, records.skipped, records.broken) == (len(data), 0, None)
    scalars = [s for record in records.data for s in event_scalars(record)]
    assert [(s.tag, s.step, s.value) for s in scalars] == [
        ("Loss/train", 0, 1.0),
        ("new", 0, 0.0),
        ("Loss/train", 1, 0.5),
        ("new", 1, 2.5),
        ("Loss/train", 2, pytest.approx(1 / 3)),
        ("new", 2, 5.0),
    ]
    assert all(s.wall_time > 1.7e9 for s in scalars)


def test_the_checksum_is_tensorflows() -> None:
    # CRC32C("123456789") is 0xE3069283 (RFC 3720); TFRecord masks it.
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_a_record_still_being_written_waits() -> None:
    whole = encode_record(encode_scalar_event("loss", 0.5, 3, 100.0))
    for cut in (1, 11, 12, len(whole) - 1):
        records = split_records(whole[:cut])
        assert (records.data, records.consumed, records.broken) == ([], 0, None)
    both = whole + whole[:-2]
    assert split_records(both).consumed == len(whole)


def test_a_bad_data_checksum_skips_the_record_and_reading_goes_on() -> None:
    good = encode_record(encode_scalar_event("loss", 0.5, 3, 100.0))
    bad = bytearray(encode_record(encode_scalar_event("loss", 0.25, 4, 101.0)))
    bad[-1] ^= 0xFF
    records = split_records(bytes(bad) + good)
    assert (len(records.data), records.skipped, records.broken) == (1, 1, None)
    assert event_scalars(records.data[0])[0].step == 3


@pytest.mark.parametrize("length", [MAX_RECORD_BYTES + 1, 2**64 - 1])
def test_a_damaged_or_absurd_length_ends_the_file(length: int) -> None:
    header = struct.pack("<Q", length)
    lying = header + struct.pack("<I", masked_crc32c(header)) + b"x" * 64
    records = split_records(encode_record(b"") + lying)
    assert records.broken is not None and records.consumed == 16
    flipped = bytearray(encode_record(b"abc"))
    flipped[0] ^= 1  # the length no longer matches its checksum
    assert split_records(bytes(flipped)).broken is not None


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\xff\xff\xff\xff\x0f",  # a field longer than the message
        b"\x08",  # a varint cut short
        b"\x0b",  # wire type 3 (groups), never written
        b"\x2a\x05\x0a\x03\x0a\x01",  # a summary value cut inside
        b"\x08" + b"\xff" * 20,  # a varint of more than 64 bits
    ],
)
def test_a_broken_protocol_buffer_is_refused_not_crashed_on(data: bytes) -> None:
    with pytest.raises(BadRecord):
        event_scalars(data)


def test_odd_but_valid_values_come_through_as_written() -> None:
    negative = event_scalars(encode_scalar_event("x", 1.0, -5, 1.0))[0]
    assert negative.step == -5
    assert math.isnan(event_scalars(encode_scalar_event("x", math.nan, 1, 1.0))[0].value)
    assert event_scalars(encode_scalar_event("", 1.0, 1, 1.0)) == []  # no tag: nothing
