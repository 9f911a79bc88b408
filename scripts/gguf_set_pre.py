#!/usr/bin/env python3
"""gguf_set_pre.py IN OUT PRE — copy a vocabulary-only GGUF (no tensors),
changing only the string value of tokenizer.ggml.pre to PRE.

Standard library only (gguf-py needs numpy, which the build machine lacks).
Every other key/value is copied byte for byte; files with tensors are refused
(their data offsets and alignment would move)."""
import struct
import sys

# GGUF value types -> fixed size in bytes (strings and arrays handled apart)
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


def skip_value(buf, off, vtype):
    if vtype in FIXED:
        return off + FIXED[vtype]
    if vtype == STRING:
        (n,) = struct.unpack_from("<Q", buf, off)
        return off + 8 + n
    if vtype == ARRAY:
        etype, count = struct.unpack_from("<IQ", buf, off)
        off += 12
        if etype in FIXED:
            return off + FIXED[etype] * count
        for _ in range(count):
            off = skip_value(buf, off, etype)
        return off
    raise SystemExit(f"unknown GGUF value type {vtype} at offset {off}")


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    src, dst, pre = sys.argv[1], sys.argv[2], sys.argv[3].encode()
    buf = open(src, "rb").read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version != 3:
        raise SystemExit(f"{src}: not a GGUF v3 file")
    if n_tensors != 0:
        raise SystemExit(f"{src}: has {n_tensors} tensors; only vocabulary-only files are handled")
    out = bytearray(buf[:24])
    off, found = 24, False
    for _ in range(n_kv):
        start = off
        (klen,) = struct.unpack_from("<Q", buf, off)
        key = buf[off + 8: off + 8 + klen]
        off += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, off)
        end = skip_value(buf, off + 4, vtype)
        if key == b"tokenizer.ggml.pre":
            if vtype != STRING:
                raise SystemExit(f"{src}: tokenizer.ggml.pre is not a string")
            out += buf[start:off + 4] + struct.pack("<Q", len(pre)) + pre
            found = True
        else:
            out += buf[start:end]
        off = end
    if not found:
        raise SystemExit(f"{src}: no tokenizer.ggml.pre key")
    out += buf[off:]  # vocabulary-only: nothing or padding follows
    open(dst, "wb").write(out)


if __name__ == "__main__":
    main()
