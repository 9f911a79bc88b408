"""gguf_meta.py — what the serve tests read from a GGUF file's header
(tools_check.py, tools_family.py)."""
import struct


def gguf_template(path):
    """tokenizer.chat_template from the GGUF header (a minimal reader)."""
    f = open(path, "rb")
    _, _, _, nkv = struct.unpack("<4sIQQ", f.read(24))
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def rstr(): return f.read(struct.unpack("<Q", f.read(8))[0]).decode()
    def skip(t):
        if t == 8: rstr()
        elif t == 9:
            et, n = struct.unpack("<IQ", f.read(12))
            for _ in range(n): skip(et)
        else: f.read(sizes[t])
    for _ in range(nkv):
        k = rstr(); t = struct.unpack("<I", f.read(4))[0]
        if k == "tokenizer.chat_template": return rstr()
        skip(t)
    return None
