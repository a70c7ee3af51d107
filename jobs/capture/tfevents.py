"""TensorBoard event files read without TensorBoard: their records and the scalars in them.

An event file (``events.out.tfevents.*``, written by `SummaryWriter`, tensorboardX, Keras or
a framework's TensorBoard logger) is a sequence of TFRecords:

    uint64 length | uint32 masked CRC32C of length | data | uint32 masked CRC32C of data

each `data` an `Event` protocol buffer: `wall_time` (1, double), `step` (2, int64), `summary`
(5) whose `value`s (1) carry a `tag` (1) and either a `simple_value` (2, float: what
`add_scalar` writes) or a scalar `tensor` (8) whose metadata (9) names the `scalars` plugin
(TensorFlow 2's `tf.summary.scalar`, `add_scalar(new_style=True)`).

The file is the job's, so every byte is hostile: lengths are bounded, CRCs checked, each
protocol buffer read field by field with its bounds checked; what breaks the format ends the
reading of that file (a bad length CRC: nothing after it can be trusted) or skips that record
(a bad data CRC, a buffer that does not parse). Standard library only (see `jobs.capture`).
"""

import struct
from collections.abc import Iterator
from dataclasses import dataclass

# A record longer than this is taken for damage, not data (TensorBoard's scalars are bytes).
MAX_RECORD_BYTES = 16 << 20
HEADER_BYTES = 12
FOOTER_BYTES = 4
SCALARS_PLUGIN = b"scalars"
# TensorProto dtypes a scalar may have: float, double, int32, int64, half, bfloat16.
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64, DT_BFLOAT16, DT_HALF = 1, 2, 3, 9, 14, 19


class BadRecord(ValueError):
    """A record or protocol buffer that breaks the format."""


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC32C (Castagnoli), rotated and offset as TensorFlow masks it."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def encode_record(data: bytes) -> bytes:
    """One TFRecord holding `data` (for tests and benchmarks that write event files)."""
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", masked_crc32c(length))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    wall_time: float
    value: float


@dataclass
class Records:
    """What `split_records` found in a buffer: the complete records' data, how many bytes
    they took, how many were skipped (a bad data CRC), and why reading must stop, if so."""

    data: list[bytes]
    consumed: int
    skipped: int = 0
    broken: str | None = None


def split_records(buffer: bytes, limit: int | None = None) -> Records:
    """The complete records at the start of `buffer` (at most `limit`); a partial last record
    is left for the next read."""
    found = Records([], 0)
    view = memoryview(buffer)
    offset = 0
    while limit is None or len(found.data) < limit:
        if len(buffer) - offset < HEADER_BYTES:
            break
        length_bytes = bytes(view[offset : offset + 8])
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", view[offset + 8 : offset + 12])
        if masked_crc32c(length_bytes) != length_crc or length > MAX_RECORD_BYTES:
            found.broken = f"a damaged record header at byte {offset}"
            break
        end = offset + HEADER_BYTES + length + FOOTER_BYTES
        if end > len(buffer):
            break
        data = bytes(view[offset + HEADER_BYTES : end - FOOTER_BYTES])
        (data_crc,) = struct.unpack("<I", view[end - FOOTER_BYTES : end])
        if masked_crc32c(data) == data_crc:
            found.data.append(data)
        else:
            found.skipped += 1
        offset = end
    found.consumed = offset
    return found


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise BadRecord("a truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one protocol buffer message: an int
    for varints and fixed-size fields (their raw little-endian bits), bytes for the others."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, wire, value
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(data):
                raise BadRecord("a truncated fixed-size field")
            yield number, wire, int.from_bytes(data[pos : pos + size], "little")
            pos += size
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise BadRecord("a truncated length-delimited field")
            yield number, wire, data[pos : pos + size]
            pos += size
        else:
            raise BadRecord(f"wire type {wire}")


def _double(bits: int) -> float:
    return float(struct.unpack("<d", bits.to_bytes(8, "little"))[0])


def _float(bits: int) -> float:
    return float(struct.unpack("<f", bits.to_bytes(4, "little"))[0])


def _signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _names_scalars_plugin(metadata: bytes) -> bool:
    for number, _, plugin_data in fields(metadata):
        if number == 1 and isinstance(plugin_data, bytes):
            for inner, _, name in fields(plugin_data):
                if inner == 1 and name == SCALARS_PLUGIN:
                    return True
    return False


def _tensor_scalar(tensor: bytes) -> float | None:
    """The value of a rank-0 numeric TensorProto, else None."""
    dtype, values = 0, []
    for number, wire, value in fields(tensor):
        if number == 1 and isinstance(value, int):
            dtype = value
        elif number == 2 and isinstance(value, bytes):
            if any(n == 2 for n, _, _ in fields(value)):
                return None  # it has dimensions: not a scalar
        elif number == 4 and isinstance(value, bytes):  # tensor_content: the raw value
            formats = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q"}
            fmt = formats.get(dtype)
            if fmt is None or len(value) != struct.calcsize(fmt):
                return None
            return float(struct.unpack(fmt, value)[0])
        elif number in (5, 6) and isinstance(value, bytes):  # packed float_val, double_val
            size = 4 if number == 5 else 8
            values += [v[0] for v in struct.iter_unpack("<f" if size == 4 else "<d", value)]
        elif number == 5 and wire == 5 and isinstance(value, int):
            values.append(_float(value))
        elif number == 6 and wire == 1 and isinstance(value, int):
            values.append(_double(value))
        elif number in (7, 10) and isinstance(value, int):  # int_val, int64_val (unpacked)
            values.append(float(_signed64(value)))
    return float(values[0]) if len(values) == 1 else None


def _value(data: bytes) -> tuple[str, float] | None:
    tag, simple, tensor, metadata = b"", None, None, b""
    for number, wire, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            tag = value
        elif number == 2 and wire == 5 and isinstance(value, int):
            simple = _float(value)
        elif number == 8 and isinstance(value, bytes):
            tensor = value
        elif number == 9 and isinstance(value, bytes):
            metadata = value
    if simple is None and tensor is not None and _names_scalars_plugin(metadata):
        simple = _tensor_scalar(tensor)
    if simple is None or not tag:
        return None
    return tag.decode("utf-8", "replace"), simple


def event_scalars(data: bytes) -> list[Scalar]:
    """The scalars of one Event record (none for the file's header, images, histograms...)."""
    wall_time, step, summary = 0.0, 0, b""
    for number, wire, value in fields(data):
        if number == 1 and wire == 1 and isinstance(value, int):
            wall_time = _double(value)
        elif number == 2 and wire == 0 and isinstance(value, int):
            step = _signed64(value)
        elif number == 5 and isinstance(value, bytes):
            summary = value
    found = []
    for number, _, value in fields(summary):
        if number == 1 and isinstance(value, bytes):
            scalar = _value(value)
            if scalar is not None:
                found.append(Scalar(scalar[0], step, wall_time, scalar[1]))
    return found


def encode_scalar_event(tag: str, value: float, step: int, wall_time: float) -> bytes:
    """An Event with one `simple_value`, as `SummaryWriter.add_scalar` writes it (for tests
    and benchmarks)."""

    def field(number: int, wire: int, payload: bytes) -> bytes:
        return _encode_varint(number << 3 | wire) + payload

    def delimited(number: int, payload: bytes) -> bytes:
        return field(number, 2, _encode_varint(len(payload)) + payload)

    summary_value = delimited(1, tag.encode()) + field(2, 5, struct.pack("<f", value))
    summary = delimited(1, summary_value)
    return (
        field(1, 1, struct.pack("<d", wall_time))
        + field(2, 0, _encode_varint(step & ((1 << 64) - 1)))
        + delimited(5, summary)
    )


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
