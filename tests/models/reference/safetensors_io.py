"""Minimal, dependency-free (numpy only) safetensors reader/writer.

Format (https://github.com/huggingface/safetensors):
  8 bytes   little-endian u64 N = header length
  N bytes   UTF-8 JSON header: {name: {"dtype": "F32"|"BF16"|"F16"|..., "shape": [...],
            "data_offsets": [begin, end]}, optional "__metadata__": {str: str}}
            (we pad it with spaces so that 8 + N is a multiple of 8)
  rest      data buffer; offsets are relative to its start; tensors are packed
            contiguously, row-major, little-endian.

BF16 is the upper 16 bits of an IEEE f32, produced here with round-to-nearest-even.
F8_E4M3 is OCP's e4m3fn byte: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
subnormal (m/8 * 2^-6), S.1111.111 is NaN, no infinities (largest value 448). It is written from
uint8 bit patterns (e4m3_encode makes them) and read back as its values.
"""
import json
import struct

import numpy as np

_NP_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_ITEMSIZE = {"BF16": 2, "F8_E4M3": 1, **{k: v.itemsize for k, v in _NP_DTYPES.items()}}


def e4m3_decode(bits):
    """uint8 e4m3fn bit patterns -> float64 values (NaN for 0x7F / 0xFF)."""
    b = np.asarray(bits, dtype=np.uint8).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    e, m = (b >> 3) & 0xF, b & 7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * 2.0 ** (e - 7.0))
    mag = np.where((e == 15) & (m == 7), np.nan, mag)
    return sign * mag


_E4M3_GRID = e4m3_decode(np.arange(0x7F))  # the 127 finite non-negative values, ascending


def e4m3_encode(x):
    """float array -> uint8 e4m3fn bits: round to nearest (ties to the even bit pattern),
    saturating at +-448. NaN is not accepted."""
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        raise ValueError("e4m3_encode: NaN")
    a = np.minimum(np.abs(x), 448.0)
    hi = np.clip(np.searchsorted(_E4M3_GRID, a), 1, 0x7E)
    lo = hi - 1
    dlo, dhi = a - _E4M3_GRID[lo], _E4M3_GRID[hi] - a
    pick = np.where(dlo < dhi, lo, np.where(dhi < dlo, hi, np.where(lo % 2 == 0, lo, hi)))
    return (pick | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def f32_to_bf16_bits(x):
    """float array -> uint16 bf16 bit patterns (round to nearest, ties to even)."""
    x = np.asarray(x, dtype=np.float64)
    f = np.ascontiguousarray(x.astype("<f4")).reshape(-1)
    u = f.view("<u4").astype(np.uint64)
    nan = np.isnan(f)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    rounded = np.where(nan, (u >> 16) | 0x40, rounded)  # keep NaN a (quiet) NaN
    return rounded.astype("<u2").reshape(x.shape)


def bf16_bits_to_f32(bits):
    b = np.asarray(bits, dtype="<u2")
    return (b.astype(np.uint32) << 16).astype("<u4").reshape(-1).view("<f4").reshape(b.shape)


def round_to_dtype(x, dtype):
    """Return float64 values of `x` after rounding to the storage dtype."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "F32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "F16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "BF16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x)).astype(np.float64)
    if dtype == "F64":
        return x.copy()
    raise ValueError(f"unsupported float dtype {dtype}")


def _encode(arr, dtype):
    arr = np.asarray(arr)
    if dtype == "BF16":
        return np.ascontiguousarray(f32_to_bf16_bits(arr)).tobytes()
    if dtype == "F8_E4M3":
        if arr.dtype != np.uint8:
            raise ValueError("F8_E4M3 tensors are written from their uint8 bit patterns (e4m3_encode)")
        return np.ascontiguousarray(arr).tobytes()
    if dtype not in _NP_DTYPES:
        raise ValueError(f"unsupported dtype {dtype}")
    return np.ascontiguousarray(arr.astype(_NP_DTYPES[dtype])).tobytes()


def save_file(tensors, path, dtype="F32", metadata=None, dtypes=None):
    """Write `tensors` (name -> array) to `path`.

    dtype: default storage dtype for every tensor; dtypes: optional per-name override.
    Tensors are written in sorted-name order (as the reference implementation does).
    """
    dtypes = dtypes or {}
    header = {}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        dt = dtypes.get(name, dtype)
        blob = _encode(arr, dt)
        assert len(blob) == int(np.prod(arr.shape, dtype=np.int64)) * _ITEMSIZE[dt]
        header[name] = {"dtype": dt, "shape": [int(s) for s in arr.shape],
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata is not None:
        header = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}, **header}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-(8 + len(hbytes))) % 8
    hbytes += b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)


def load_file(path, as_float64=True):
    """Read a safetensors file. Returns (tensors, dtypes, metadata).

    tensors: name -> np.ndarray (float64 if as_float64 and the dtype is a float type)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("header length exceeds file size")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    buf = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", None)
    tensors, dtypes = {}, {}
    for name, info in header.items():
        dt, shape = info["dtype"], tuple(info["shape"])
        b, e = info["data_offsets"]
        count = int(np.prod(shape, dtype=np.int64))
        if e - b != count * _ITEMSIZE[dt] or e > len(buf):
            raise ValueError(f"bad offsets for {name}")
        raw = bytes(buf[b:e])
        if dt == "BF16":
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
        elif dt == "F8_E4M3":
            arr = e4m3_decode(np.frombuffer(raw, dtype=np.uint8)).reshape(shape)
        else:
            arr = np.frombuffer(raw, dtype=_NP_DTYPES[dt]).reshape(shape)
        if as_float64 and dt in ("BF16", "F16", "F32", "F64", "F8_E4M3"):
            arr = arr.astype(np.float64)
        tensors[name] = arr
        dtypes[name] = dt
    return tensors, dtypes, metadata
