#!/usr/bin/env python3
"""iq_tables_check.py HEADER [C_FILE...] — checks the i-quant codebooks.

A one-off verification, not part of the tests (it needs ggml's header,
which this repository does not ship): parses ggml's ggml-common.h (ggml-org/
llama.cpp, MIT; e.g. ../ik-src/ggml/src/ggml-common.h) and the tables of
src/quant/iq3_tables.c, checks that every table holds exactly the header's
values, and prints each table's FNV-1a 64 checksum over its little-endian
bytes. tests/test_iq3.c recomputes those checksums on the compiled tables
and compares them to the figures this script printed."""
import re
import sys

FNV_OFF, FNV_PRIME = 0xcbf29ce484222325, 0x100000001b3
TABLES = [("iq3xxs_grid", "moe_iq3xxs_grid", 4), ("iq3s_grid", "moe_iq3s_grid", 4),
          ("iq1s_grid", "moe_iq1s_grid", 8)]


def fnv1a(values, width):
    h = FNV_OFF
    for v in values:
        for b in v.to_bytes(width, "little"):
            h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


def ggml_table(text, name):
    m = re.search(r"GGML_TABLE_BEGIN\(\w+, " + name + r", \w+\)(.*?)GGML_TABLE_END", text, re.S)
    return [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", m.group(1))]


def c_table(text, name):
    m = re.search(name + r"\[\d+\][^=]*=\s*\{(.*?)\};", text, re.S)
    return [int(v, 16) for v in re.findall(r"0x[0-9a-fA-F]+", m.group(1))] if m else None


def main():
    header = open(sys.argv[1]).read()
    cfiles = sys.argv[2:] or ["src/quant/iq3_tables.c"]
    ctext = "".join(open(p).read() for p in cfiles)
    ok = True
    for gname, cname, width in TABLES:
        want = ggml_table(header, gname)
        got = c_table(ctext, cname)
        if got is None:
            continue
        same = got == want
        ok &= same
        print("%-16s %4d entries  fnv1a64 0x%016x  %s" % (cname, len(want), fnv1a(want, width),
                                                           "equal" if same else "DIFFERENT"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
