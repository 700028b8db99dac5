"""A dependency-free writer of password-protected (ZipCrypto) zip archives.

Owns one thing: `write_encrypted_zip`, which deflates files from disk into an archive encrypted
with traditional PKWARE encryption — the scheme the official Mind2Web test zip uses and the one
Python's `zipfile` reads with `pwd=`. Output is deterministic for a given seed (fixed
timestamps, seeded encryption headers). Encryption runs byte by byte in Python (a few MB/s of
compressed data): meant for test-set sized archives, not for multi-GB ones.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from random import Random

_CHUNK = 1 << 20
_DOS_TIME, _DOS_DATE = 0, (2023 - 1980) << 9 | 6 << 5 | 1  # 2023-06-01 00:00
_CRC_TABLE = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0xEDB88320 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


class _Encrypter:
    """The PKWARE traditional cipher's three-key state."""

    def __init__(self, password: bytes):
        self.k0, self.k1, self.k2 = 0x12345678, 0x23456789, 0x34567890
        for byte in password:
            self._update(byte)

    def _update(self, byte: int) -> None:
        self.k0 = (self.k0 >> 8) ^ _CRC_TABLE[(self.k0 ^ byte) & 0xFF]
        self.k1 = ((self.k1 + (self.k0 & 0xFF)) * 134775813 + 1) & 0xFFFFFFFF
        self.k2 = (self.k2 >> 8) ^ _CRC_TABLE[(self.k2 ^ (self.k1 >> 24)) & 0xFF]

    def __call__(self, data: bytes) -> bytes:
        out = bytearray(len(data))
        for i, byte in enumerate(data):
            temp = (self.k2 | 2) & 0xFFFF
            out[i] = byte ^ (((temp * (temp ^ 1)) >> 8) & 0xFF)
            self._update(byte)
        return bytes(out)


def _crc_and_size(path: Path) -> tuple[int, int]:
    crc, size = 0, 0
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return crc, size


def _local_header(name: bytes, crc: int, csize: int, size: int) -> bytes:
    return struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 1, 8, _DOS_TIME, _DOS_DATE,
                       crc, csize, size, len(name), 0) + name


def _central_entry(name: bytes, crc: int, csize: int, size: int, offset: int) -> bytes:
    return struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 1, 8, _DOS_TIME, _DOS_DATE,
                       crc, csize, size, len(name), 0, 0, 0, 0, 0, offset) + name


def _write_member(out, path: Path, name: bytes, password: bytes, rng: Random) -> bytes:
    """Write one encrypted, deflated member; returns its central directory entry."""
    crc, size = _crc_and_size(path)
    offset = out.tell()
    out.write(_local_header(name, crc, 0, size))
    encrypt = _Encrypter(password)
    header = bytes(rng.getrandbits(8) for _ in range(11)) + bytes([crc >> 24])
    written = out.write(encrypt(header))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            written += out.write(encrypt(deflate.compress(chunk)))
    written += out.write(encrypt(deflate.flush()))
    end = out.tell()
    out.seek(offset)
    out.write(_local_header(name, crc, written, size))
    out.seek(end)
    return _central_entry(name, crc, written, size, offset)


def write_encrypted_zip(archive: Path, members: dict[str, Path], password: str,
                        seed: int = 0) -> None:
    """Write `archive` holding each `members[name]` file under `name` (sorted, deflated)."""
    rng = Random(seed)
    with archive.open("wb") as out:
        central = [_write_member(out, members[name], name.encode(), password.encode(), rng)
                   for name in sorted(members)]
        start = out.tell()
        directory = b"".join(central)
        out.write(directory)
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central),
                              len(directory), start, 0))
