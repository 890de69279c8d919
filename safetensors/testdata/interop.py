#!/usr/bin/python3
"""An independent safetensors reader and writer, for gorun's interop tests.

It follows the format specification only (https://github.com/huggingface/
safetensors, "Format") and uses json, struct, hashlib and numpy: no gorun
code, no safetensors package.

  interop.py read PATH   parse PATH strictly, print a JSON report:
                         {"header_len", "header_keys" (in file order),
                          "padding" (the bytes after the JSON object),
                          "metadata", "tensors": {name: {"dtype", "shape",
                          "data_offsets", "sum" (repr of the float64 sum,
                          null for F8), "sha256"}}}
  interop.py write PATH  write a file with this script's own layout choices
                         (metadata last, keys in reverse order, data in a
                         different order again, spaced-out JSON, padding that
                         is not to 8 bytes), and print a JSON manifest:
                         {"metadata", "tensors": {name: {"dtype", "shape",
                          "values"}}} with values flattened in C order.
"""

import hashlib
import json
import struct
import sys

import numpy as np

# Element sizes of the format's dtypes.
SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}

# numpy types for the dtypes numpy has; BF16 and F8 are handled by hand.
NP = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}


def die(msg):
    sys.stderr.write("interop.py: " + msg + "\n")
    sys.exit(1)


def to_array(dtype, shape, buf):
    """The tensor as a numpy array (float32 for BF16), or None for F8."""
    if dtype == "BF16":
        u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).reshape(shape)
    if dtype in NP:
        return np.frombuffer(buf, dtype=NP[dtype]).reshape(shape)
    return None


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        die("file too short")
    (n,) = struct.unpack("<Q", data[:8])
    if n > 100_000_000 or 8 + n > len(data):
        die("bad header length %d" % n)
    raw = data[8:8 + n].decode("utf-8")
    dec = json.JSONDecoder(object_pairs_hook=lambda pairs: pairs)
    pairs, end = dec.raw_decode(raw)
    padding = raw[end:]
    if padding.strip(" ") != "":
        die("header padding is not spaces: %r" % padding)
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        die("duplicate keys")
    buf = data[8 + n:]
    metadata = None
    tensors = {}
    spans = []
    for name, info in pairs:
        if name == "__metadata__":
            metadata = dict(info)
            for k, v in metadata.items():
                if not isinstance(v, str):
                    die("metadata value for %r is not a string" % k)
            continue
        info = dict(info)
        if sorted(info) != ["data_offsets", "dtype", "shape"]:
            die("tensor %r: fields %r" % (name, sorted(info)))
        dtype, shape, (b, e) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in SIZES:
            die("tensor %r: unknown dtype %r" % (name, dtype))
        count = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                die("tensor %r: bad shape %r" % (name, shape))
            count *= d
        if not (0 <= b <= e <= len(buf)):
            die("tensor %r: offsets [%d, %d] out of range" % (name, b, e))
        if e - b != count * SIZES[dtype]:
            die("tensor %r: %d bytes for shape %r of %s" % (name, e - b, shape, dtype))
        spans.append((b, e, name))
        tb = buf[b:e]
        arr = to_array(dtype, shape, tb)
        # As a string (Python's repr), since JSON has no inf or nan.
        total = None if arr is None else repr(float(arr.astype(np.float64).sum()))
        tensors[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [b, e],
            "sum": total,
            "sha256": hashlib.sha256(tb).hexdigest(),
        }
    pos = 0
    for b, e, name in sorted(spans):
        if b != pos:
            die("tensor %r: begins at %d, expected %d (overlap or hole)" % (name, b, pos))
        pos = e
    if pos != len(buf):
        die("data buffer is %d bytes, tensors cover %d" % (len(buf), pos))
    json.dump({
        "header_len": n,
        "header_keys": keys,
        "padding": padding,
        "metadata": metadata,
        "tensors": tensors,
    }, sys.stdout)


def bf16_bytes(values):
    """bfloat16 encoding of values, which must be exact in bfloat16."""
    f = np.array(values, dtype="<f4")
    u = f.view(np.uint32)
    if np.any(u & 0xFFFF):
        die("value not exact in bfloat16")
    return (u >> 16).astype("<u2").tobytes()


def write(path):
    # name -> (dtype, shape, flat values)
    spec = {
        "conv.weight": ("F32", [2, 1, 2, 3], [i * 0.25 - 1.5 for i in range(12)]),
        "conv.bias": ("F32", [2], [0.1, -0.2]),
        "scale": ("F64", [3], [1.0 / 3.0, -2.5e-300, 1e300]),
        "half": ("F16", [2, 2], [0.5, -1.25, 65504.0, 0.0]),
        "brain": ("BF16", [3], [1.5, -2.0, 3.140625]),
        "step": ("I64", [], [-(2 ** 62) - 7]),
        "ids": ("I64", [2], [2 ** 62 + 1, -1]),
        "counts": ("I32", [4], [0, -1, 2 ** 31 - 1, -(2 ** 31)]),
        "small": ("I16", [2], [-32768, 32767]),
        "tiny": ("I8", [3], [-128, 0, 127]),
        "pixels": ("U8", [2, 2], [0, 1, 128, 255]),
        "mask": ("BOOL", [3], [True, False, True]),
        "empty": ("F32", [0, 3], []),
        "emb.w\u00f6rter \"q\"": ("F32", [1], [7.0]),
    }
    metadata = {"format": "pt", "note": "written by interop.py", "z\u00fcrich": "\u00e9\u00e8"}

    blobs = {}
    for name, (dtype, shape, values) in spec.items():
        if dtype == "BF16":
            blobs[name] = bf16_bytes(values)
        else:
            blobs[name] = np.array(values, dtype=NP[dtype]).reshape(shape).tobytes()

    # Data in insertion order (not sorted); header keys in reverse sorted
    # order with the metadata last.
    offsets, pos = {}, 0
    for name in spec:
        offsets[name] = (pos, pos + len(blobs[name]))
        pos += len(blobs[name])
    header = {}
    for name in sorted(spec, reverse=True):
        dtype, shape, _ = spec[name]
        header[name] = {"shape": shape, "data_offsets": list(offsets[name]), "dtype": dtype}
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(", ", ": "), ensure_ascii=False).encode("utf-8")
    # Pad with at least 4 spaces so that the header length is 3 mod 8: not
    # aligned, as the reference writer would align it.
    pad = (3 - len(text)) % 8
    text += b" " * (pad if pad >= 4 else pad + 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in spec:
            f.write(blobs[name])

    manifest = {"metadata": metadata, "tensors": {}}
    for name, (dtype, shape, values) in spec.items():
        if dtype == "BOOL":
            values = [int(v) for v in values]
        manifest["tensors"][name] = {"dtype": dtype, "shape": shape, "values": values}
    json.dump(manifest, sys.stdout)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("read", "write"):
        die("usage: interop.py read|write PATH")
    if sys.argv[1] == "read":
        read(sys.argv[2])
    else:
        write(sys.argv[2])


if __name__ == "__main__":
    main()
