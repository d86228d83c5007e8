"""CRC32C (Castagnoli), the checksum Pulsar puts in front of every message's metadata."""

from __future__ import annotations

import crc32c as _crc32c


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """The CRC32C of ``data``, continuing from ``value`` so large blocks can be fed in parts.

    The native package is used because the broker checksums every published byte.
    """
    return int(_crc32c.crc32c(data, value))
