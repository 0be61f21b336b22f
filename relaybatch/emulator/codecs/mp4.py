"""Small, real MP4 files for the video content routes, built by hand (no encoder needed).

The file is a standard ISO base media file (ftyp, moov, mdat) with one H.264 video track. Every
frame is an IDR picture whose macroblocks are all I_PCM: raw 8-bit samples that any H.264 decoder
reads without prediction or entropy-coded residuals. That keeps the encoder to a few dozen lines
while the result plays in ordinary players. Size shortcut (documented): frames are drawn with a
longest edge of ``FRAME_MAX_EDGE`` pixels (rounded to whole 16-pixel macroblocks, aspect kept
approximately) at ``FRAMES_PER_SECOND``; the duration is the requested number of seconds.
"""

from __future__ import annotations

import hashlib
import re
import struct

FRAME_MAX_EDGE = 96
FRAMES_PER_SECOND = 2
TIMESCALE = 1000
_PROFILE_BASELINE, _CONSTRAINTS, _LEVEL = 66, 0xC0, 30
_I_PCM_MB_TYPE = 25


class _BitWriter:
    """Big-endian bit writer with the H.264 Exp-Golomb codes."""

    def __init__(self) -> None:
        self._bytes = bytearray()
        self._current = 0
        self._used = 0

    def bits(self, count: int, value: int) -> None:
        for shift in range(count - 1, -1, -1):
            self._current = (self._current << 1) | ((value >> shift) & 1)
            self._used += 1
            if self._used == 8:
                self._bytes.append(self._current)
                self._current, self._used = 0, 0

    def ue(self, value: int) -> None:
        code = value + 1
        self.bits(code.bit_length() - 1, 0)
        self.bits(code.bit_length(), code)

    def se(self, value: int) -> None:
        self.ue(2 * value - 1 if value > 0 else -2 * value)

    def align_with_zeros(self) -> None:
        while self._used:
            self.bits(1, 0)

    def raw(self, data: bytes) -> None:
        """Whole bytes; the writer must be byte-aligned."""
        assert self._used == 0, "raw bytes need byte alignment"
        self._bytes += data

    def trailing_bits(self) -> bytes:
        self.bits(1, 1)
        self.align_with_zeros()
        return bytes(self._bytes)


# Two zero bytes followed by a byte 0-3 would read as a start code: an emulation-prevention byte
# (0x03) goes between them. Non-overlapping matches reproduce the standard's byte-by-byte rule.
_START_CODE_PREFIX = re.compile(b"\x00\x00(?=[\x00-\x03])")


def _nal(header: int, rbsp: bytes) -> bytes:
    """NAL unit = header byte + RBSP with emulation-prevention bytes inserted."""
    return bytes([header]) + _START_CODE_PREFIX.sub(b"\x00\x00\x03", rbsp)


def _sps(mb_width: int, mb_height: int) -> bytes:
    bits = _BitWriter()
    bits.bits(8, _PROFILE_BASELINE)
    bits.bits(8, _CONSTRAINTS)
    bits.bits(8, _LEVEL)
    bits.ue(0)  # seq_parameter_set_id
    bits.ue(0)  # log2_max_frame_num_minus4
    bits.ue(2)  # pic_order_cnt_type 2: output order = decoding order
    bits.ue(1)  # max_num_ref_frames
    bits.bits(1, 0)  # gaps_in_frame_num_value_allowed_flag
    bits.ue(mb_width - 1)
    bits.ue(mb_height - 1)
    bits.bits(1, 1)  # frame_mbs_only_flag
    bits.bits(1, 1)  # direct_8x8_inference_flag
    bits.bits(1, 0)  # frame_cropping_flag
    bits.bits(1, 0)  # vui_parameters_present_flag
    return _nal(0x67, bits.trailing_bits())


def _pps() -> bytes:
    bits = _BitWriter()
    bits.ue(0)  # pic_parameter_set_id
    bits.ue(0)  # seq_parameter_set_id
    bits.bits(1, 0)  # entropy_coding_mode_flag: CAVLC
    bits.bits(1, 0)  # bottom_field_pic_order_in_frame_present_flag
    bits.ue(0)  # num_slice_groups_minus1
    bits.ue(0)  # num_ref_idx_l0_default_active_minus1
    bits.ue(0)  # num_ref_idx_l1_default_active_minus1
    bits.bits(1, 0)  # weighted_pred_flag
    bits.bits(2, 0)  # weighted_bipred_idc
    bits.se(0)  # pic_init_qp_minus26
    bits.se(0)  # pic_init_qs_minus26
    bits.se(0)  # chroma_qp_index_offset
    bits.bits(1, 0)  # deblocking_filter_control_present_flag
    bits.bits(1, 0)  # constrained_intra_pred_flag
    bits.bits(1, 0)  # redundant_pic_cnt_present_flag
    return _nal(0x68, bits.trailing_bits())


def _macroblock_colour(seed: bytes, frame: int, mb_x: int, mb_y: int) -> tuple[int, int, int]:
    """Y, Cb, Cr of one flat macroblock: a moving diagonal band tinted by the seed.

    Samples stay within 16..240, so raw PCM bytes never form a start code.
    """
    luma = 16 + (mb_x * 23 + mb_y * 17 + frame * 29 + seed[0]) % 220
    return luma, 16 + (seed[1] + frame * 3) % 224, 16 + (seed[2] + mb_x * 5) % 224


def _idr_slice(seed: bytes, frame: int, mb_width: int, mb_height: int) -> bytes:
    bits = _BitWriter()
    bits.ue(0)  # first_mb_in_slice
    bits.ue(7)  # slice_type: I, every slice of the picture
    bits.ue(0)  # pic_parameter_set_id
    bits.bits(4, 0)  # frame_num (IDR)
    bits.ue(frame % 2)  # idr_pic_id: consecutive IDR pictures must differ
    bits.bits(1, 0)  # no_output_of_prior_pics_flag
    bits.bits(1, 0)  # long_term_reference_flag
    bits.se(0)  # slice_qp_delta
    for mb_y in range(mb_height):
        for mb_x in range(mb_width):
            luma, cb, cr = _macroblock_colour(seed, frame, mb_x, mb_y)
            bits.ue(_I_PCM_MB_TYPE)
            bits.align_with_zeros()  # pcm_alignment_zero_bit
            bits.raw(bytes([luma]) * 256 + bytes([cb]) * 64 + bytes([cr]) * 64)
    return _nal(0x65, bits.trailing_bits())


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def _full_box(kind: bytes, version: int, flags: int, payload: bytes) -> bytes:
    return _box(kind, struct.pack(">I", (version << 24) | flags) + payload)


_MATRIX = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)


def _sample_entry(width: int, height: int, sps: bytes, pps: bytes) -> bytes:
    avcc = _box(
        b"avcC",
        bytes([1, _PROFILE_BASELINE, _CONSTRAINTS, _LEVEL, 0xFF, 0xE1])
        + struct.pack(">H", len(sps))
        + sps
        + bytes([1])
        + struct.pack(">H", len(pps))
        + pps,
    )
    name = b"relaybatch emulator"
    payload = (
        bytes(6)
        + struct.pack(">H", 1)  # data_reference_index
        + bytes(16)
        + struct.pack(">HHII", width, height, 0x00480000, 0x00480000)
        + bytes(4)
        + struct.pack(">H", 1)  # frame_count
        + bytes([len(name)])
        + name.ljust(31, b"\0")
        + struct.pack(">Hh", 0x18, -1)
        + avcc
    )
    return _box(b"avc1", payload)


def _sample_table(width: int, height: int, sps: bytes, pps: bytes, sizes: list[int], offset: int) -> bytes:
    count = len(sizes)
    return _box(
        b"stbl",
        _full_box(b"stsd", 0, 0, struct.pack(">I", 1) + _sample_entry(width, height, sps, pps))
        + _full_box(b"stts", 0, 0, struct.pack(">III", 1, count, TIMESCALE // FRAMES_PER_SECOND))
        + _full_box(b"stsc", 0, 0, struct.pack(">IIII", 1, 1, count, 1))
        + _full_box(
            b"stsz", 0, 0, struct.pack(">II", 0, count) + b"".join(struct.pack(">I", s) for s in sizes)
        )
        + _full_box(b"stco", 0, 0, struct.pack(">II", 1, offset)),
    )


def _movie(width: int, height: int, sps: bytes, pps: bytes, sizes: list[int], offset: int) -> bytes:
    duration = len(sizes) * TIMESCALE // FRAMES_PER_SECOND
    mvhd = _full_box(
        b"mvhd",
        0,
        0,
        struct.pack(">IIIIIH", 0, 0, TIMESCALE, duration, 0x10000, 0x100)
        + bytes(10)
        + _MATRIX
        + bytes(24)
        + struct.pack(">I", 2),
    )
    tkhd = _full_box(
        b"tkhd",
        0,
        3,
        struct.pack(">IIIII", 0, 0, 1, 0, duration)
        + bytes(8)
        + struct.pack(">hhhH", 0, 0, 0, 0)
        + _MATRIX
        + struct.pack(">II", width << 16, height << 16),
    )
    mdhd = _full_box(b"mdhd", 0, 0, struct.pack(">IIIIHH", 0, 0, TIMESCALE, duration, 0x55C4, 0))
    hdlr = _full_box(b"hdlr", 0, 0, bytes(4) + b"vide" + bytes(12) + b"VideoHandler\0")
    dinf = _box(b"dinf", _full_box(b"dref", 0, 0, struct.pack(">I", 1) + _full_box(b"url ", 0, 1, b"")))
    minf = _box(
        b"minf",
        _full_box(b"vmhd", 0, 1, bytes(8)) + dinf + _sample_table(width, height, sps, pps, sizes, offset),
    )
    trak = _box(b"trak", tkhd + _box(b"mdia", mdhd + hdlr + minf))
    return _box(b"moov", mvhd + trak)


def frame_dimensions(width: int, height: int) -> tuple[int, int]:
    """Macroblocks across and down for a requested size, longest edge about FRAME_MAX_EDGE."""
    scale = FRAME_MAX_EDGE / max(width, height)
    return max(1, round(width * scale / 16)), max(1, round(height * scale / 16))


def build_mp4(width: int, height: int, seconds: int, seed: bytes) -> bytes:
    """A playable H.264 MP4 of ``seconds`` seconds whose picture follows the seed."""
    digest = hashlib.sha256(seed).digest()
    mb_width, mb_height = frame_dimensions(width, height)
    sps, pps = _sps(mb_width, mb_height), _pps()
    samples = []
    for frame in range(max(1, seconds * FRAMES_PER_SECOND)):
        nal = _idr_slice(digest, frame, mb_width, mb_height)
        samples.append(struct.pack(">I", len(nal)) + nal)
    ftyp = _box(b"ftyp", b"isom" + struct.pack(">I", 512) + b"isomiso2avc1mp41")
    sizes = [len(sample) for sample in samples]
    moov_size = len(_movie(mb_width * 16, mb_height * 16, sps, pps, sizes, 0))
    offset = len(ftyp) + moov_size + 8  # first sample follows the mdat header
    moov = _movie(mb_width * 16, mb_height * 16, sps, pps, sizes, offset)
    return ftyp + moov + _box(b"mdat", b"".join(samples))


def iter_boxes(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[bytes, int, int]]:
    """Top-level (type, payload start, payload end) of ISO BMFF boxes in ``data[start:end]``."""
    end = len(data) if end is None else end
    boxes, position = [], start
    while position + 8 <= end:
        size, kind = struct.unpack(">I4s", data[position : position + 8])
        if size < 8 or position + size > end:
            raise ValueError(f"bad box size {size} at byte {position}")
        boxes.append((kind, position + 8, position + size))
        position += size
    if position != end:
        raise ValueError("trailing bytes after the last box")
    return boxes
