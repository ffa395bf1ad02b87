"""Cross-checks deepinfer's safetensors reader and writer against the reference
`safetensors` library (HF's Rust implementation, through its Python binding).

1. The reference serialises one tensor per dtype (random bytes, metadata); our reader
   must report the same names, dtypes, shapes, bytes and metadata.
2. Our writer writes one tensor per dtype; the reference must accept the file (it checks
   the header, the ordering and that the data section has no holes) and return the same
   dtypes, shapes and bytes.
3. A file the reference produces and then gets truncated is rejected by both.

Usage: check_safetensors.py PATH/TO/safetensors_tool   (exit 77 = skipped)
"""
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    from safetensors import _safetensors_rust as st
except ImportError:
    print("safetensors not installed: skipped")
    sys.exit(77)

# our dtype name -> (reference TensorSpec dtype, element size)
DTYPES = {
    "F64": ("float64", 8), "F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
    "F8_E4M3": ("float8_e4m3fn", 1), "F8_E8M0": ("float8_e8m0fnu", 1), "I64": ("int64", 8),
    "I32": ("int32", 4), "I16": ("int16", 2), "I8": ("int8", 1), "U8": ("uint8", 1), "BOOL": ("bool", 1),
}
ORDER = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E8M0", "I64", "I32", "I16", "I8", "U8", "BOOL"]


def run_tool(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True)


def reference_writes_we_read(tool, tmp):
    rng = random.Random(1234)
    buffers, specs, expected = [], {}, {}
    for k, ours in enumerate(ORDER):
        ref_dtype, size = DTYPES[ours]
        shape = [rng.randint(1, 4), rng.randint(1, 7)]
        n = shape[0] * shape[1] * size
        data = bytes(rng.randint(0, 1) if ours == "BOOL" else rng.randint(0, 255) for _ in range(n))
        buf = ctypes.create_string_buffer(data, n)
        buffers.append(buf)
        specs[f"x{k}.{ours.lower()}"] = st.TensorSpec(dtype=ref_dtype, shape=shape,
                                                      data_ptr=ctypes.addressof(buf), data_len=n)
        expected[f"x{k}.{ours.lower()}"] = (ours, shape, data.hex())
    blob = st.serialize(specs, {"format": "pt", "origin": "reference"})
    path = os.path.join(tmp, "ref.safetensors")
    with open(path, "wb") as f:
        f.write(blob)
    res = run_tool(tool, "dump", path)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["metadata"] == {"format": "pt", "origin": "reference"}, got["metadata"]
    assert set(got["tensors"]) == set(expected), (sorted(got["tensors"]), sorted(expected))
    for name, (dtype, shape, hexdata) in expected.items():
        t = got["tensors"][name]
        assert t["dtype"] == dtype, (name, t["dtype"], dtype)
        assert t["shape"] == shape, (name, t["shape"], shape)
        assert t["hex"] == hexdata, name

    truncated = os.path.join(tmp, "truncated.safetensors")
    with open(truncated, "wb") as f:
        f.write(blob[:-3])
    try:
        st.deserialize(blob[:-3])
        raise AssertionError("reference accepted a truncated file")
    except st.SafetensorError:
        pass
    res = run_tool(tool, "dump", truncated)
    assert res.returncode == 1 and "truncated.safetensors" in res.stderr, res.stderr
    return len(expected)


def we_write_reference_reads(tool, tmp):
    path = os.path.join(tmp, "ours.safetensors")
    res = run_tool(tool, "write", path)
    assert res.returncode == 0, res.stderr
    with open(path, "rb") as f:
        blob = f.read()
    got = dict(st.deserialize(blob))
    assert set(got) == {f"t_{d}" for d in ORDER}, sorted(got)
    for k, ours in enumerate(ORDER):
        t = got[f"t_{ours}"]
        size = DTYPES[ours][1]
        n = 15 * size
        want = bytes(((i + k) % 2) if ours == "BOOL" else (37 * i + 11 * k) % 256 for i in range(n))
        assert t["dtype"] == ours, (ours, t["dtype"])
        assert list(t["shape"]) == [3, 5], t["shape"]
        assert bytes(t["data"]) == want, ours
    with st.safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"format": "pt", "writer": "deepinfer"}, f.metadata()
    return len(ORDER)


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        a = reference_writes_we_read(tool, tmp)
        b = we_write_reference_reads(tool, tmp)
    print(f"safetensors interop OK: read {a} reference tensors, reference read {b} of ours")


if __name__ == "__main__":
    main()
