"""Writes safetensors files for graph-file.test byte by byte (struct + json: an
independent writer), for Inputs/affine.kir (%x: f32[2, 3], %w0, %w1: f32[3]).

usage: write_safetensors.py PREFIX
  PREFIX.params.safetensors   w0 = [1, 2, 3], w1 = [0.5, 0.5, 0.5], plus an unused 'extra'
  PREFIX.inputs.safetensors   x = [[1, 2, 3], [4, 5, 6]]
  PREFIX.missing.safetensors  w0 only
  PREFIX.shape.safetensors    w0: f32[4], w1
  PREFIX.dtype.safetensors    w0: f64[3], w1
  PREFIX.bad.safetensors      a header length past the end of the file
"""
import json
import struct
import sys


def write(path, tensors):
    header, data = {}, b""
    for name, (dtype, shape, values) in tensors.items():
        fmt = {"F32": "<%df", "F64": "<%dd"}[dtype] % len(values)
        raw = struct.pack(fmt, *values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


prefix = sys.argv[1]
w0 = ("F32", [3], [1.0, 2.0, 3.0])
w1 = ("F32", [3], [0.5, 0.5, 0.5])
write(prefix + ".params.safetensors", {"w0": w0, "w1": w1, "extra": ("F32", [1], [9.0])})
write(prefix + ".inputs.safetensors", {"x": ("F32", [2, 3], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])})
write(prefix + ".missing.safetensors", {"w0": w0})
write(prefix + ".shape.safetensors", {"w0": ("F32", [4], [1.0, 2.0, 3.0, 4.0]), "w1": w1})
write(prefix + ".dtype.safetensors", {"w0": ("F64", [3], [1.0, 2.0, 3.0]), "w1": w1})
with open(prefix + ".bad.safetensors", "wb") as f:
    f.write(struct.pack("<Q", 4096) + b"{}")
