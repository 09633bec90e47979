"""int8 dot products of a fixed matrix with one query, on onnxruntime's packed int8 kernel.

``toolroute._core.recall.vectors.Int8Index`` scores 100k tools from int8 rows; numpy has no fast int8
matrix product, so this builds a one-node ONNX graph (``MatMulInteger``) whose weight is the
matrix itself: onnxruntime packs it once when the session loads and then streams a quarter of
fp32's bytes per query (measured ~4x faster than numpy's fp32 product at 100k x 384 on the
shared 2-core machine; ``tests/bench/bench_load.py``). The graph is written as protobuf bytes
here, so no ``onnx`` package is needed.

Queries arrive in [1, 127] (``quantize_query``): on CPUs without VNNI onnxruntime's u8 x s8
kernel adds pairs of products in a saturating int16, exact only while no pair passes 32,767.
``int8_kernel_faults`` checks the kernel against numpy's exact product whenever an index is
built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._core.errors import ConfigError, EmbedderError
from ..._core.recall.quantize import QUERY_ZERO_POINT, Int8Product

_INT8, _UINT8, _INT32 = 3, 2, 6  # ONNX TensorProto data types

#: ``run(feed)``: the ``MatMulInteger`` of one ``(1, dim)`` uint8 query with the matrix the
#: session holds, zero point ``QUERY_ZERO_POINT``; ``(1, n)`` int32 back.
Runner = Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.int32]]


class OnnxInt8Kernel:
    """onnxruntime's int8 kernel as a ``toolroute.providers.Int8Kernel``.

    ``OnnxInt8Kernel()(rows)`` is ``onnx_int8_product(rows)``. The queries it is given never
    exceed 127 (``quantize_query``), where onnxruntime's u8 x s8 kernel is exact on every
    CPU, with or without VNNI.

    Args:
        threads: intra-op threads of each session.
    """

    def __init__(self, *, threads: int = 1) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"threads must be an int >= 1, got {threads!r}")
        self.threads = threads

    def __call__(self, rows: npt.NDArray[np.int8]) -> Int8Product:
        return onnx_int8_product(rows, threads=self.threads)

    def __repr__(self) -> str:
        return f"OnnxInt8Kernel(threads={self.threads})"


def onnx_int8_product(rows: npt.NDArray[np.int8], *, threads: int = 1) -> Int8Product:
    """An ``Int8Product`` for ``rows`` (``(n, dim)`` int8) on onnxruntime.

    Args:
        rows: the quantised matrix; copied into the session (about ``n * dim`` bytes).
        threads: intra-op threads of the session.

    Raises:
        ConfigError: ``rows`` is not a 2-d int8 matrix.
        EmbedderError: onnxruntime is missing or rejects the graph.

    **Threads:** the returned function may be called from several threads at once.
    """
    matrix = np.asarray(rows)
    if matrix.ndim != 2 or matrix.dtype != np.int8:
        raise ConfigError(
            f"expected a 2-d int8 matrix of rows, got {matrix.dtype} of shape {matrix.shape}"
        )
    dim = matrix.shape[1]
    run = _matmul_integer(np.ascontiguousarray(matrix.T), threads)

    def product(query: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        feed = np.ascontiguousarray(query, dtype=np.uint8)
        if feed.size != dim:
            raise ValueError(f"expected a query of {dim} values, got {feed.size}")
        out: npt.NDArray[np.int32] = run(feed.reshape(1, dim))[0]
        return out

    return product


def _matmul_integer(weights: npt.NDArray[np.int8], threads: int) -> Runner:
    """A session running ``MatMulInteger`` over ``weights`` (``(dim, n)``, int8)."""
    try:
        import onnxruntime as ort  # type: ignore[import-untyped]
    except ImportError as exc:
        raise EmbedderError(
            "int8 scoring needs onnxruntime; run `pip install onnxruntime`"
        ) from exc
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    dim, n = weights.shape
    try:
        session: Any = ort.InferenceSession(
            _model(weights, n, dim), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own untyped exceptions
        raise EmbedderError(f"onnxruntime rejected the int8 scoring graph: {exc}") from exc

    def run(feed: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        out: npt.NDArray[np.int32] = session.run(None, {"q": feed})[0]
        return out

    return run


# -- protobuf, by hand: just the ModelProto fields this graph needs --------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | 0x80 if value else low)
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _text(number: int, value: str) -> bytes:
    return _field(number, value.encode())


def _value_info(name: str, elem_type: int, dims: list[int]) -> bytes:
    shape = b"".join(_field(1, _int(1, d)) for d in dims)
    return _text(1, name) + _field(2, _field(1, _int(1, elem_type) + _field(2, shape)))


def _tensor(name: str, elem_type: int, dims: list[int], raw: bytes) -> bytes:
    return b"".join(_int(1, d) for d in dims) + _int(2, elem_type) + _text(8, name) + _field(9, raw)


def _model(weights: npt.NDArray[np.int8], n: int, dim: int) -> bytes:
    node = (
        _text(1, "q") + _text(1, "m") + _text(1, "zero") + _text(2, "scores")
        + _text(3, "scores") + _text(4, "MatMulInteger")
    )  # fmt: skip
    graph = (
        _field(1, node)
        + _text(2, "int8_scores")
        + _field(5, _tensor("m", _INT8, [dim, n], weights.tobytes()))
        + _field(5, _tensor("zero", _UINT8, [], bytes([QUERY_ZERO_POINT])))
        + _field(11, _value_info("q", _UINT8, [1, dim]))
        + _field(12, _value_info("scores", _INT32, [1, n]))
    )
    opset = _text(1, "") + _int(2, 13)
    return _int(1, 8) + _field(8, opset) + _field(7, graph)  # ir_version 8, opset 13
