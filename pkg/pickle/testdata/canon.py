"""Print a pickle's value in memstat's canonical text form (test oracle).

Usage: canon.py FILE            -> canonical text of the pickle in FILE
       canon.py --digest FILE   -> sha256 digest of the canonical form, computed
                                   per container and cached by identity, so that
                                   shared stacks are hashed once
       canon.py --make DIR      -> write the protocol 0-5 sample pickles into DIR

The canonical form is the one pkg/pickle's tests produce from Go values:
N None, T/F bools, i<decimal> ints, f<16 hex digits> floats (IEEE bits),
s<hex utf-8> str, b<hex> bytes, [..] lists, (..) tuples, {k:v,..} dicts in
insertion order, <..> sets with items sorted by their canonical text.
Globals are refused: the oracle loads data only, like memstat.
"""
import io
import pickle
import struct
import sys


class NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def canon(v, out):
    if v is None:
        out.append("N")
    elif v is True:
        out.append("T")
    elif v is False:
        out.append("F")
    elif isinstance(v, int):
        out.append("i%d" % v)
    elif isinstance(v, float):
        out.append("f" + struct.pack(">d", v).hex())
    elif isinstance(v, str):
        out.append("s" + v.encode("utf-8", "surrogatepass").hex())
    elif isinstance(v, (bytes, bytearray)):
        out.append("b" + bytes(v).hex())
    elif isinstance(v, list):
        out.append("[")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            canon(x, out)
        out.append("]")
    elif isinstance(v, tuple):
        out.append("(")
        for i, x in enumerate(v):
            if i:
                out.append(",")
            canon(x, out)
        out.append(")")
    elif isinstance(v, dict):
        out.append("{")
        for i, (k, x) in enumerate(v.items()):
            if i:
                out.append(",")
            canon(k, out)
            out.append(":")
            canon(x, out)
        out.append("}")
    elif isinstance(v, (set, frozenset)):
        items = []
        for x in v:
            o = []
            canon(x, o)
            items.append("".join(o))
        out.append("<" + ",".join(sorted(items)) + ">")
    else:
        raise TypeError(type(v))


def digest(v, cache):
    """sha256 hex of v: scalars hash their canonical text, containers the
    digests of their items (sets: sorted)."""
    import hashlib
    if isinstance(v, (list, tuple, dict, set, frozenset)):
        hit = cache.get(id(v))
        if hit is not None:
            return hit[0]
        if isinstance(v, dict):
            parts = [digest(k, cache) + ":" + digest(x, cache) for k, x in v.items()]
            text = "{" + ",".join(parts) + "}"
        elif isinstance(v, (set, frozenset)):
            text = "<" + ",".join(sorted(digest(x, cache) for x in v)) + ">"
        else:
            o, c = ("[", "]") if isinstance(v, list) else ("(", ")")
            text = o + ",".join(digest(x, cache) for x in v) + c
        h = hashlib.sha256(text.encode()).hexdigest()
        cache[id(v)] = (h, v)  # keep v alive so its id is not reused
        return h
    out = []
    canon(v, out)
    return hashlib.sha256("".join(out).encode()).hexdigest()


def sample():
    shared_frame = {"name": "forward", "filename": "/x/model.py", "line": 42}
    shared_stack = [shared_frame, {"name": "<module>", "filename": "train.py", "line": 7}]
    return {
        "ints": [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31, -2**31 - 1,
                 2**47 + 12345, 2**63 - 1, -2**63, 2**63, 2**64 - 1, 2**64, -2**64 - 7, 10**40, -10**40],
        "floats": [0.0, -0.0, 1.5, -2.25, 1e300, 3.141592653589793, float("inf")],
        "strs": ["", "a", "é", "日本語", "x" * 300, "emoji \U0001F600", "quote ' \" \\ \n"],
        "bytes": [b"", b"\x00\xff", b"y" * 300],
        "bools": [True, False, None],
        "tuples": [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), (0, 0)],
        "nested": {"a": {"b": {"c": [[], [[]], {}]}}},
        "shared": [shared_stack, shared_stack, shared_frame],
        "big_list": list(range(2500)),
        "big_dict": {str(i): i for i in range(2100)},
        "sets": [set(), {1, 2, 3}, frozenset({"x", "y"})],
        "bytearray": bytearray(b"abc"),
        "unicode_keys": {"ключ": 1, "鍵": 2},
    }


def make(dirname):
    data = sample()
    for proto in range(0, 6):
        d = dict(data)
        if proto < 3:
            d.pop("bytes")  # protocol 0-2 write bytes through a global (codecs.encode)
        if proto < 4:
            d.pop("sets")  # protocol < 4 writes sets through REDUCE of builtins.set
        if proto < 5:
            d.pop("bytearray")
        with open(f"{dirname}/proto{proto}.pickle", "wb") as f:
            pickle.dump(d, f, protocol=proto)


if __name__ == "__main__":
    if sys.argv[1] == "--make":
        make(sys.argv[2])
    elif sys.argv[1] == "--digest":
        with open(sys.argv[2], "rb") as f:
            v = NoGlobals(f).load()
        sys.stdout.write(digest(v, {}))
    else:
        with open(sys.argv[1], "rb") as f:
            v = NoGlobals(f).load()
        out = []
        canon(v, out)
        sys.stdout.write("".join(out))
