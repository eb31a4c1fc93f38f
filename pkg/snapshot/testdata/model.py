"""Print a snapshot in memstat's normalized model text (test oracle).

Usage: model.py FILE

Reads the file the way PyTorch's own tools do (pickle with every global
refused, gzip, or JSON), applies the legacy rules of _memory_viz.py (2.0
block history, missing block addresses and segment sizes), and prints one
line per segment, block and trace entry. pkg/snapshot's tests print the Go
model the same way and compare.
"""
import gzip
import hashlib
import json
import pickle
import sys


class NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data.lstrip()[:1] == b"{":
        return json.loads(data)
    import io
    return NoGlobals(io.BytesIO(data)).load()


def line(n):
    # The model keeps 64-bit values as int64 bits: PyTorch writes an unknown
    # line as size_t(-1) = 2**64-1, which memstat reads as -1.
    return n - 2**64 if n >= 2**63 else n


def stack_hash(frames):
    if not frames:
        return ""
    text = "\n".join(f"{f['name']}\t{f['filename']}\t{line(f['line'])}" for f in frames)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


STATE = {"active_awaiting_free": "active_pending_free"}


def main(path):
    d = load(path)
    if isinstance(d, list):
        d = {"segments": d, "device_traces": []}
    out = []
    for s in d["segments"]:
        blocks = []
        addr = s["address"]
        alloc = active = req = total = 0
        for b in s["blocks"]:
            if "frames" in b:
                frames, requested = b["frames"], b.get("requested_size", b["size"])
            elif "history" in b and b["history"]:
                frames, requested = b["history"][0].get("frames", []), b["history"][0]["real_size"]
            else:
                frames, requested = [], b.get("requested_size", b["size"])
            a = b.get("address", addr)
            addr = a + b["size"]
            state = STATE.get(b["state"], b["state"])
            total += b["size"]
            if state != "inactive":
                active += b["size"]
                req += requested
                if state == "active_allocated":
                    alloc += b["size"]
            blocks.append(f"blk|{a}|{b['size']}|{requested}|{state}|{stack_hash(frames)}")
        pool = s.get("segment_pool_id", (0, 0))
        out.append("seg|%d|%d|%d|%d|%d|%d|%d|%s|%d,%d|%s|%s" % (
            s["device"], s["address"], s.get("total_size", total) or total,
            s.get("allocated_size", alloc), s.get("active_size", active), s.get("requested_size", req),
            s["stream"], s.get("segment_type", "large"), pool[0], pool[1],
            bool(s.get("is_expandable", False)), stack_hash(s.get("frames", []))))
        out.extend(blocks)
    for dev, trace in enumerate(d.get("device_traces", [])):
        for e in trace:
            addr = e["device_free"] if e["action"] == "oom" and "device_free" in e else e.get("addr", 0)
            cc = e.get("compile_context", "")
            um = e.get("user_metadata", "")
            if not isinstance(um, str):
                um = ""
            out.append(f"ev|{dev}|{e['action']}|{addr}|{e['size']}|{e['stream']}|{e.get('time_us', 0)}|"
                       f"{stack_hash(e.get('frames', []))}|{cc}|{um}")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
