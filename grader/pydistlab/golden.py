"""Reference outputs in grader/golden/<module>/: reading them and comparing within tolerances
(the command `./distlab golden` is commands/golden.py).

Convention (see grader/manifest.toml): a module with reference outputs has a generator program,
the CMake target `golden_<module>` (or the manifest's golden_target), built from solutions/ and
run as `golden_<module> OUTDIR [golden_args...]`; it writes every file of grader/golden/<module>/.
`golden` rewrites that folder; `golden --check` (run by ./distlab test) generates into a temporary
folder and compares: the same file names, .npy arrays and numbers in text files within the
tolerances below, everything else byte for byte.

Tolerances follow from the computation, not from one machine. The default build compiles for one
fixed instruction set (DISTLAB_ARCH=portable), so on x86-64 the generator reproduces the committed
files bit for bit whatever the CPU. A build for another ISA (AVX2, AVX-512, FMA: wider vectors,
another summation order, fused multiply-adds) or another compiler rounds differently, and the
error of a float32 sum of K terms computed in another order is bounded by about K * u * (sum of
the terms' magnitudes), u = 2^-24 the unit roundoff. So an element of a floating-point .npy array
passes when |got - want| <= golden_terms * u * max|want over the array| (u of the array's dtype),
or within golden_rtol * |want| + golden_atol; golden_terms (manifest, default 1) is the number of
rounded terms along the longest chain of accumulations that produces an output, stated and
derived per module. Integer arrays and text must match exactly, numbers in text within
golden_rtol / golden_atol.
"""
from __future__ import annotations

import ast
import math
import re
import struct

from .paths import ROOT

GOLDEN = ROOT / "grader" / "golden"
_NPY_TYPES = {"f4": "f", "f8": "d", "i4": "i", "i8": "q", "u1": "B", "i1": "b", "u4": "I", "u8": "Q"}
_UNIT_ROUNDOFF = {"f4": 2.0 ** -24, "f8": 2.0 ** -53}   # integer dtypes: exact


def npy_dtype(data: bytes) -> str:
    """The dtype code ("f4", "i4", ...) of a .npy file's header."""
    start, hlen = (10, struct.unpack("<H", data[8:10])[0]) if data[6] == 1 else \
        (12, struct.unpack("<I", data[8:12])[0])
    return str(ast.literal_eval(data[start:start + hlen].decode("latin1"))["descr"])[1:]


def read_npy(data: bytes) -> tuple[tuple[int, ...], list[float]]:
    """Shape and values of a little-endian numeric .npy file (the formats the kit writes)."""
    if data[:6] != b"\x93NUMPY":
        raise ValueError("not a .npy file")
    major = data[6]
    if major == 1:
        hlen = struct.unpack("<H", data[8:10])[0]
        start = 10
    else:
        hlen = struct.unpack("<I", data[8:12])[0]
        start = 12
    header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
    descr = header["descr"]
    if descr[0] not in "<|" or descr[1:] not in _NPY_TYPES:
        raise ValueError(f"unsupported dtype {descr}")
    code = _NPY_TYPES[descr[1:]]
    shape = tuple(header["shape"])
    count = math.prod(shape) if shape else 1
    body = data[start + hlen:]
    values = list(struct.unpack(f"<{count}{code}", body[:count * struct.calcsize(code)]))
    return shape, values


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= atol + rtol * abs(b)


_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)


def compare_file(got: bytes, want: bytes, name: str, rtol: float, atol: float, terms: int = 1) -> str:
    """"" when got reproduces want, else what differs (tolerances: see the module's docstring)."""
    if got == want:
        return ""
    if name.endswith(".npy"):
        try:
            gs, gv = read_npy(got)
            ws, wv = read_npy(want)
            gd, wd = npy_dtype(got), npy_dtype(want)
        except (ValueError, SyntaxError, KeyError, struct.error) as e:
            return f"{name}: cannot compare ({e})"
        if gs != ws or gd != wd:
            return f"{name}: shape {gs} {gd}, expected {ws} {wd}"
        u = _UNIT_ROUNDOFF.get(wd, 0.0)
        finite = [abs(float(w)) for w in wv if math.isfinite(w)]
        scaled = terms * u * (max(finite) if finite else 0.0)
        for i, (g, w) in enumerate(zip(gv, wv)):
            if u == 0.0:
                if g != w:
                    return f"{name}: element {i} is {g}, expected {w} (integers must match exactly)"
            elif not (_close(float(g), float(w), rtol, atol) or abs(float(g) - float(w)) <= scaled):
                return (f"{name}: element {i} is {g}, expected {w} (differs by {abs(float(g) - float(w)):.3g}; "
                        f"allowed {scaled:.3g} = {terms} terms x u x max|expected|, or rtol {rtol:g})")
        return ""
    try:
        gt, wt = got.decode("utf-8"), want.decode("utf-8")
    except UnicodeDecodeError:
        return f"{name}: binary content differs"
    gtok, wtok = _NUM.split(gt), _NUM.split(wt)
    gnum, wnum = _NUM.findall(gt), _NUM.findall(wt)
    if gtok != wtok or len(gnum) != len(wnum):
        return f"{name}: text differs (not only in numbers)"
    for i, (g, w) in enumerate(zip(gnum, wnum)):
        if not _close(float(g), float(w), rtol, atol):
            return f"{name}: number {i} is {g}, expected {w} (rtol {rtol:g}, atol {atol:g})"
    return ""
