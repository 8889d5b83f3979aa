"""Keep freed large buffers in the process instead of handing them back to the kernel.

glibc returns a large freed buffer (an HTTP body, a 16 MB block of a log file, a page
cut into pieces) to the kernel at once, so the next buffer of that size is faulted in
again, page by page. Where page faults are dear (about 1 ms per MB on the virtual
machines we measured) that costs more than parsing: a 6 MB v2 page took 20 ms to decode
instead of 12. Raising glibc's mmap and trim thresholds keeps up to
``DEFAULT_TRIM_BYTES`` of freed memory for reuse. The cost is memory held back: peak
memory of a 10M-line ``import-v1`` measured 0.8 to 1.3 GB with these settings (1.17 GB
without), still under its 1.5 GB bound.

Only glibc has ``mallopt``; anywhere else (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys

DEFAULT_MMAP_BYTES = 32 << 20  # buffers below this come from the heap, not mmap
DEFAULT_TRIM_BYTES = 64 << 20  # free heap kept for reuse before it is given back
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_freed_memory(
    mmap_bytes: int = DEFAULT_MMAP_BYTES, trim_bytes: int = DEFAULT_TRIM_BYTES
) -> bool:
    """Tune glibc's allocator for this process; True when it took the settings."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_bytes)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_bytes)
    )
