"""Whether a data file is the one a record (a manifest, a marker) described when it was made.

Owns the rule the env servers' data checks share: the same size, and the same mtime or, where a
copy changed the mtime (tar keeps it to the second, `cp` and `git` not at all: a data folder
prepared on one machine and copied to a GPU node), the same sha256. The mtime is the cheap
first test; the content decides, so neither a copy nor a move makes data look changed, and an
edit that kept the size and mtime is the one case missed (as before the digests).
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def same_file(path: Path, size: int, mtime_ns: int, sha256: str | None) -> bool:
    """`path` has `size` and `mtime_ns`, or `size` and the content `sha256` (None: a record
    from before the digests, which only the mtime can confirm)."""
    stat = path.stat()
    if stat.st_size != size:
        return False
    return stat.st_mtime_ns == mtime_ns or (sha256 is not None and file_sha256(path) == sha256)
