#!/usr/bin/env python3
"""Builds the malformed-GGUF corpus in tests/data/malformed/ (committed, so
the tests need no Python). Each *.gguf there is a small valid file ("base")
with ONE defect; tests/test_gguf.c holds the expected error code and message
for each. base.valid is the undamaged file; test_gguf checks that the C
writer produces exactly these bytes from the same content.

The odd_*.gguf files are not malformed: valid files with general.alignment
1 or 2 whose F32 (and F16) tensors lie at offsets their element type cannot
be read from directly; test_gguf checks that they open and their data comes
back aligned, with the file's bytes.

Usage: python3 tests/data/make_malformed.py   (from the repository root)
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "malformed")
ALIGN = 32
U32, I32, STRING, ARRAY = 4, 5, 8, 9
F32, F16, Q8_0 = 0, 1, 8


def gstr(b):
    return struct.pack("<Q", len(b)) + b


def tensor_bytes(t, n):
    """Deterministic data: byte i of tensor t is (t*37 + i*11) & 0xff."""
    return bytes(((t * 37 + i * 11) & 0xFF) for i in range(n))


def base_parts():
    """The base file's pieces, each editable: kvs are (key, type, raw value
    bytes); tensors are dicts with name, dims, type, offset, nbytes."""
    kvs = [
        [b"general.architecture", STRING, gstr(b"tiny")],
        [b"general.alignment", U32, struct.pack("<I", 32)],
        [b"tiny.count", U32, struct.pack("<I", 7)],
        [b"tiny.names", ARRAY, struct.pack("<IQ", STRING, 3) + gstr(b"a") + gstr(b"bc") + gstr(b"def")],
        [b"tiny.vals", ARRAY, struct.pack("<IQ", I32, 3) + struct.pack("<3i", 1, 2, 3)],
    ]
    tensors = [
        dict(name=b"w.f32", dims=[8, 2], type=F32, nbytes=64),
        dict(name=b"w.q8", dims=[32, 2], type=Q8_0, nbytes=68),
        dict(name=b"w.f16", dims=[4], type=F16, nbytes=8),
    ]
    off = 0
    for t in tensors:
        t["offset"] = off
        off += (t["nbytes"] + ALIGN - 1) // ALIGN * ALIGN
    return kvs, tensors


def build(kvs, tensors, magic=b"GGUF", version=3, n_tensors=None, n_kv=None):
    """Returns (bytes, marks): marks maps 'kv:KEY' / 'ti:NAME' / 'data' to
    the byte offset where that piece starts."""
    marks = {}
    h = bytearray(magic + struct.pack("<I", version))
    h += struct.pack("<QQ", len(tensors) if n_tensors is None else n_tensors,
                     len(kvs) if n_kv is None else n_kv)
    for key, typ, val in kvs:
        marks.setdefault("kv:" + key.decode("latin-1"), len(h))
        h += gstr(key) + struct.pack("<I", typ) + val
    for t in tensors:
        marks.setdefault("ti:" + t["name"].decode("latin-1"), len(h))
        h += gstr(t["name"]) + struct.pack("<I", len(t["dims"]))
        h += b"".join(struct.pack("<q", d) for d in t["dims"])
        h += struct.pack("<IQ", t["type"], t["offset"])
    h += bytes((-len(h)) % ALIGN)
    marks["data"] = len(h)
    for i, t in enumerate(base_parts()[1]):  # data as in the base layout
        d = tensor_bytes(i, t["nbytes"])
        h += d + bytes((-len(d)) % ALIGN)
    return bytes(h), marks


def odd(align, tensors, want):
    """A valid file with general.alignment `align`: tensors (name, dims,
    type, nbytes) laid out back to back (each offset rounded up to `align`);
    a string kv "odd.pad" is lengthened until the data section starts at
    want(data_offset) True (e.g. odd), which decides where the F32 data lands."""
    for pad in range(8):
        kvs = [
            [b"general.architecture", STRING, gstr(b"tiny")],
            [b"general.alignment", U32, struct.pack("<I", align)],
            [b"odd.pad", STRING, gstr(b"x" * pad)],
        ]
        h = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
        for key, typ, val in kvs:
            h += gstr(key) + struct.pack("<I", typ) + val
        off = 0
        for i, (name, dims, typ, nbytes) in enumerate(tensors):
            h += gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<q", d) for d in dims)
            h += struct.pack("<IQ", typ, off)
            off = (off + nbytes + align - 1) // align * align
        h += bytes((-len(h)) % align)
        if not want(len(h)):
            continue
        for i, (name, dims, typ, nbytes) in enumerate(tensors):
            d = tensor_bytes(i, nbytes)
            h += d + bytes((-len(d)) % align)
        return bytes(h)
    raise AssertionError("no padding gives the wanted data offset")


def cases():
    out = {}
    # alignment 1: Q8_0 (34 bytes) at an odd file offset, then F32 and F16 at odd ones
    out["odd_align1.gguf"] = odd(1, [(b"w.q8", [32, 1], Q8_0, 34), (b"w.f32", [8, 2], F32, 64),
                                     (b"w.f16", [4], F16, 8)], lambda o: o % 2 == 1)
    # alignment 2: F16 (2 bytes) at a multiple of 4, then F32 at 2 mod 4
    out["odd_align2.gguf"] = odd(2, [(b"w.f16", [1], F16, 2), (b"w.f32", [8, 2], F32, 64)],
                                 lambda o: o % 4 == 0)

    kvs, ts = base_parts()
    base, marks = build(kvs, ts)
    out["base.valid"] = base

    def mk(edit, **buildkw):
        kvs, ts = base_parts()
        edit(kvs, ts)
        return build(kvs, ts, **buildkw)[0]

    def kv(kvs, key):
        return next(k for k in kvs if k[0] == key)

    def ti(ts, name):
        return next(t for t in ts if t["name"] == name)

    nop = lambda k, t: None
    out["empty.gguf"] = b""
    out["bad_magic.gguf"] = mk(nop, magic=b"GGUX")
    out["version1.gguf"] = mk(nop, version=1)
    out["version4.gguf"] = mk(nop, version=4)
    out["trunc_header.gguf"] = base[:14]
    # inside the string array's third string
    out["trunc_metadata.gguf"] = base[:marks["kv:tiny.vals"] - 2]
    out["trunc_tensor_info.gguf"] = base[:marks["ti:w.q8"] + 20]
    out["trunc_tensor_data.gguf"] = base[:marks["data"] + 160 + 4]
    out["trunc_data_section.gguf"] = base[:marks["data"] - 3]
    out["absurd_kv_count.gguf"] = mk(nop, n_kv=1 << 60)
    out["absurd_tensor_count.gguf"] = mk(nop, n_tensors=1 << 40)

    b = bytearray(base)
    at = marks["kv:tiny.count"]
    b[at:at + 8] = struct.pack("<Q", 1 << 40)
    out["absurd_key_length.gguf"] = bytes(b)
    b = bytearray(base)
    at = marks["kv:general.architecture"] + 8 + len(b"general.architecture") + 4
    b[at:at + 8] = struct.pack("<Q", 0xFFFFFFFFFFFFFFF0)
    out["absurd_string_length.gguf"] = bytes(b)
    b = bytearray(base)
    at = marks["ti:w.q8"]
    b[at:at + 8] = struct.pack("<Q", 1 << 50)
    out["absurd_tensor_name_length.gguf"] = bytes(b)

    def arr_len(k, t):
        kv(k, b"tiny.vals")[2] = struct.pack("<IQ", I32, 1 << 50) + struct.pack("<3i", 1, 2, 3)
    out["absurd_array_length.gguf"] = mk(arr_len)

    def unk_type(k, t):
        kv(k, b"tiny.count")[1] = 13
    out["unknown_value_type.gguf"] = mk(unk_type)

    def unk_elem(k, t):
        kv(k, b"tiny.vals")[2] = struct.pack("<IQ", 99, 3) + struct.pack("<3i", 1, 2, 3)
    out["unknown_array_type.gguf"] = mk(unk_elem)

    def nested(k, t):
        kv(k, b"tiny.vals")[2] = struct.pack("<IQ", ARRAY, 1) + struct.pack("<IQ", I32, 1) + struct.pack("<i", 5)
    out["nested_array.gguf"] = mk(nested)

    def empty_key(k, t):
        kv(k, b"tiny.count")[0] = b""
    out["empty_key.gguf"] = mk(empty_key)

    def nul_key(k, t):
        kv(k, b"tiny.count")[0] = b"tiny\x00count"
    out["nul_in_key.gguf"] = mk(nul_key)

    def dup_key(k, t):
        kv(k, b"tiny.vals")[0] = b"tiny.count"
    out["duplicate_key.gguf"] = mk(dup_key)

    def align(val, typ=U32, fmt="<I"):
        def e(k, t):
            a = kv(k, b"general.alignment")
            a[1] = typ
            a[2] = struct.pack(fmt, val)
        return e
    out["alignment_not_pow2.gguf"] = mk(align(48))
    out["alignment_zero.gguf"] = mk(align(0))
    out["alignment_type.gguf"] = mk(align(32, I32, "<i"))

    def tedit(tname, **fields):
        def e(k, t):
            ti(t, tname).update(fields)
        return e
    out["unknown_tensor_type.gguf"] = mk(tedit(b"w.q8", type=4))
    out["too_many_dims.gguf"] = mk(tedit(b"w.f16", dims=[4, 1, 1, 1, 1]))
    out["zero_dim.gguf"] = mk(tedit(b"w.f32", dims=[8, 0]))
    out["negative_dim.gguf"] = mk(tedit(b"w.f32", dims=[-8, 2]))
    out["shape_overflow.gguf"] = mk(tedit(b"w.f32", dims=[1 << 32, 1 << 32]))
    out["bad_row_length.gguf"] = mk(tedit(b"w.q8", dims=[16, 4]))
    out["misaligned_offset.gguf"] = mk(tedit(b"w.q8", offset=80))
    out["offset_out_of_range.gguf"] = mk(tedit(b"w.f16", offset=1 << 40))
    out["duplicate_tensor.gguf"] = mk(tedit(b"w.f16", name=b"w.f32", dims=[16]))
    out["nul_in_tensor_name.gguf"] = mk(tedit(b"w.q8", name=b"w\x00q8"))
    out["size_mismatch.gguf"] = mk(tedit(b"w.f32", dims=[8, 1]))
    out["overlap.gguf"] = mk(tedit(b"w.f32", dims=[8, 4]))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(cases().items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d files to %s" % (len(cases()), OUT))


if __name__ == "__main__":
    main()
