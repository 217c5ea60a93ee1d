"""Build sgl_kernel_importstub-0.0.0-py3-none-any.whl (not the real sglang-kernel distribution)."""
import base64
import hashlib
import os
import sys
import zipfile

here = os.path.dirname(os.path.abspath(__file__))
out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(here)
name, ver = "sgl_kernel_importstub", "0.0.0"
di = f"{name}-{ver}.dist-info"
with open(os.path.join(here, "sgl_kernel/__init__.py"), "rb") as f:
    stub = f.read()
metadata = (
    f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n"
    "Summary: import stub for sgl_kernel (not the real kernels)\n"
)
files = {
    "sgl_kernel/__init__.py": stub,
    f"{di}/METADATA": metadata.encode(),
    f"{di}/WHEEL": (
        b"Wheel-Version: 1.0\nGenerator: manual\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ),
    f"{di}/top_level.txt": b"sgl_kernel\n",
}
rec = []
for p, d in files.items():
    h = base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
    rec.append(f"{p},sha256={h},{len(d)}")
rec.append(f"{di}/RECORD,,")
files[f"{di}/RECORD"] = ("\n".join(rec) + "\n").encode()
path = os.path.join(out, f"{name}-{ver}-py3-none-any.whl")
with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    for p, d in files.items():
        zi = zipfile.ZipInfo(p, (2020, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        z.writestr(zi, d, zipfile.ZIP_DEFLATED)
print(path)
