"""Structural checks of the MP4 files the emulator serves (ISO BMFF boxes and the H.264 samples)."""

from __future__ import annotations

import struct

from relaybatch.emulator.media.video_files import iter_boxes

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"dinf"}


def box_tree(data: bytes, start: int = 0, end: int | None = None) -> dict[bytes, tuple[int, int]]:
    """Every box by type (last one wins), descending into the container boxes."""
    found: dict[bytes, tuple[int, int]] = {}
    for kind, payload_start, payload_end in iter_boxes(data, start, end):
        found[kind] = (payload_start, payload_end)
        if kind in CONTAINERS:
            found.update(box_tree(data, payload_start, payload_end))
    return found


def check_mp4(data: bytes) -> dict[str, int]:
    """Assert a playable-looking H.264 MP4; return its duration (ms), frame count and size."""
    top = [kind for kind, _, _ in iter_boxes(data)]
    assert top == [b"ftyp", b"moov", b"mdat"], top
    boxes = box_tree(data)
    for kind in (b"mvhd", b"tkhd", b"mdhd", b"hdlr", b"stsd", b"stts", b"stsc", b"stsz", b"stco"):
        assert kind in boxes, kind
    assert data[boxes[b"ftyp"][0] : boxes[b"ftyp"][0] + 4] == b"isom"
    mvhd = boxes[b"mvhd"][0]
    timescale, duration = struct.unpack(">II", data[mvhd + 12 : mvhd + 20])
    hdlr = boxes[b"hdlr"][0]
    assert data[hdlr + 8 : hdlr + 12] == b"vide"
    stsd = boxes[b"stsd"][0]
    assert data[stsd + 12 : stsd + 16] == b"avc1"
    stsz = boxes[b"stsz"][0]
    count = struct.unpack(">I", data[stsz + 8 : stsz + 12])[0]
    sizes = struct.unpack(f">{count}I", data[stsz + 12 : stsz + 12 + 4 * count])
    offset = struct.unpack(">I", data[boxes[b"stco"][0] + 8 : boxes[b"stco"][0] + 12])[0]
    mdat_start, mdat_end = boxes[b"mdat"]
    assert offset == mdat_start and offset + sum(sizes) == mdat_end
    position = offset
    for size in sizes:  # each sample: one length-prefixed IDR slice NAL unit
        nal_length = struct.unpack(">I", data[position : position + 4])[0]
        assert nal_length == size - 4
        assert data[position + 4] & 0x1F == 5
        position += size
    tkhd = boxes[b"tkhd"][1]
    width, height = (value >> 16 for value in struct.unpack(">II", data[tkhd - 8 : tkhd]))
    return {"duration_ms": duration * 1000 // timescale, "frames": count, "width": width, "height": height}
