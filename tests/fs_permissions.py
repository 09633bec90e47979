"""Let a test see permission bits enforced, as root too (CI runs as root).

Root ignores a directory's permission bits because it holds ``CAP_DAC_OVERRIDE``. Linux
keeps capabilities per thread, so :func:`permission_bits_enforced` lowers that capability
(and ``CAP_DAC_READ_SEARCH``) in the calling thread's effective set for the block and
raises it again afterwards, from the permitted set, which is left alone. Other threads and
the rest of the run keep root's powers.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

_CAPABILITY_VERSION_3 = 0x20080522  # linux/capability.h: two 32-bit words per set
_CAP_DAC_OVERRIDE = 1
_CAP_DAC_READ_SEARCH = 2


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _call(name: str, header: _Header, data: ctypes.Array[_Data]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(ctypes.byref(header), data) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}: {os.strerror(errno)}")


@contextmanager
def permission_bits_enforced() -> Iterator[None]:
    """In this block the calling thread obeys file permission bits, even as root.

    Skips the test where that cannot be arranged (root off Linux).
    """
    if os.geteuid() != 0:
        yield
        return
    if sys.platform != "linux":
        pytest.skip("root ignores permission bits and only Linux lets a thread drop that")
    header = _Header(_CAPABILITY_VERSION_3, 0)  # pid 0: the calling thread
    data = (_Data * 2)()
    _call("capget", header, data)
    saved = data[0].effective
    data[0].effective &= ~((1 << _CAP_DAC_OVERRIDE) | (1 << _CAP_DAC_READ_SEARCH))
    _call("capset", header, data)
    try:
        yield
    finally:
        data[0].effective = saved
        _call("capset", header, data)
