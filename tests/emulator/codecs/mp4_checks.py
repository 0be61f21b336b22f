"""Structural checks of the MP4 files the emulator serves (ISO BMFF boxes and the H.264 samples)."""

from __future__ import annotations

import struct

from relaybatch.emulator.codecs.mp4 import iter_boxes

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


class BitReader:
    """Reads an H.264 RBSP bit by bit (fixed-width and Exp-Golomb fields)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0  # in bits

    def bits(self, count: int) -> int:
        value = 0
        for _ in range(count):
            byte = self.data[self.position // 8]
            value = (value << 1) | ((byte >> (7 - self.position % 8)) & 1)
            self.position += 1
        return value

    def ue(self) -> int:
        zeros = 0
        while self.bits(1) == 0:
            zeros += 1
        return (1 << zeros) - 1 + self.bits(zeros)

    def se(self) -> int:
        code = self.ue()
        return (code + 1) // 2 if code % 2 else -(code // 2)

    def align_zeros(self) -> None:
        while self.position % 8:
            assert self.bits(1) == 0, "alignment bits must be zero"

    def skip_bytes(self, count: int) -> None:
        assert self.position % 8 == 0
        self.position += 8 * count

    def trailing(self) -> None:
        assert self.bits(1) == 1, "rbsp_stop_one_bit"
        self.align_zeros()
        assert self.position == 8 * len(self.data), "data after the trailing bits"


def rbsp(nal: bytes) -> bytes:
    """The NAL payload without its header byte and emulation-prevention bytes."""
    return nal[1:].replace(b"\x00\x00\x03", b"\x00\x00")


def parse_sps(nal: bytes) -> tuple[int, int, int]:
    """(macroblocks across, macroblocks down, log2_max_frame_num) of our SPS subset."""
    assert nal[0] & 0x1F == 7
    bits = BitReader(rbsp(nal))
    assert bits.bits(8) == 66  # baseline profile
    bits.bits(16)  # constraint flags, level
    assert bits.ue() == 0  # seq_parameter_set_id
    log2_max_frame_num = bits.ue() + 4
    assert bits.ue() == 2  # pic_order_cnt_type
    bits.ue()  # max_num_ref_frames
    bits.bits(1)
    mb_width, mb_height = bits.ue() + 1, bits.ue() + 1
    assert bits.bits(1) == 1  # frame_mbs_only_flag
    bits.bits(1)
    assert bits.bits(2) == 0  # no cropping, no VUI
    bits.trailing()
    return mb_width, mb_height, log2_max_frame_num


def parse_idr_slice(nal: bytes, macroblocks: int, log2_max_frame_num: int) -> int:
    """Walk one all-I_PCM IDR slice to its trailing bits; returns its idr_pic_id."""
    assert nal[0] & 0x1F == 5
    bits = BitReader(rbsp(nal))
    assert bits.ue() == 0  # first_mb_in_slice
    assert bits.ue() in (2, 7)  # I slice
    assert bits.ue() == 0  # pic_parameter_set_id
    assert bits.bits(log2_max_frame_num) == 0  # frame_num of an IDR picture
    idr_pic_id = bits.ue()
    bits.bits(2)  # dec_ref_pic_marking of an IDR picture
    bits.se()  # slice_qp_delta
    for _ in range(macroblocks):
        assert bits.ue() == 25, "mb_type I_PCM"
        bits.align_zeros()
        bits.skip_bytes(384)  # 256 luma + 2 x 64 chroma samples
    bits.trailing()
    return idr_pic_id


def check_h264_samples(data: bytes) -> int:
    """Decode the bitstream syntax of every sample against the SPS in avcC; returns frames walked."""
    avcc = data.index(b"avcC") + 4
    sps_length = struct.unpack(">H", data[avcc + 6 : avcc + 8])[0]
    mb_width, mb_height, log2_max_frame_num = parse_sps(data[avcc + 8 : avcc + 8 + sps_length])
    pps_at = avcc + 8 + sps_length
    assert data[pps_at] == 1 and data[pps_at + 3] & 0x1F == 8  # one PPS NAL unit
    boxes = box_tree(data)
    stsz = boxes[b"stsz"][0]
    count = struct.unpack(">I", data[stsz + 8 : stsz + 12])[0]
    sizes = struct.unpack(f">{count}I", data[stsz + 12 : stsz + 12 + 4 * count])
    position, previous_id = boxes[b"mdat"][0], None
    for size in sizes:
        nal = data[position + 4 : position + size]
        idr_pic_id = parse_idr_slice(nal, mb_width * mb_height, log2_max_frame_num)
        assert idr_pic_id != previous_id, "consecutive IDR pictures need different idr_pic_id"
        previous_id = idr_pic_id
        position += size
    return count
