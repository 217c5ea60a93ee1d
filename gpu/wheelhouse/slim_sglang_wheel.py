"""Repack the sglang 0.5.23 cp312 wheel without its four Rust extensions (server, bench, grpc,
multimodal: 17 MiB that no ``sglang.srt`` module imports); everything else byte-identical."""
import sys
import zipfile

src, dst = sys.argv[1], sys.argv[2]
drop = {
    f"sglang/srt/rust_extensions/_{n}.cpython-312-x86_64-linux-gnu.so"
    for n in ("server", "bench", "grpc", "multimodal")
}
zin = zipfile.ZipFile(src)
names = {i.filename for i in zin.infolist()}
assert drop <= names, drop - names
with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    for i in zin.infolist():
        if i.filename in drop:
            continue
        data = zin.read(i.filename)
        if i.filename.endswith(".dist-info/RECORD"):
            lines = data.splitlines(keepends=True)
            data = b"".join(ln for ln in lines if ln.split(b",")[0].decode() not in drop)
        zout.writestr(i, data, compress_type=zipfile.ZIP_DEFLATED)
print("dropped", sorted(drop))
