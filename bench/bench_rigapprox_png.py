#!/usr/bin/env python3
"""bench_rigapprox_png.py — join heat-map PPMs side by side into one PNG.

    python3 bench/bench_rigapprox_png.py OUT.png A.ppm B.ppm [C.ppm ...]

`deform train --evaluate MODEL DATA --heatmap X.ppm --pose I` writes a binary
PPM (P6) per model; docs/rigapprox_heatmap.png is ours beside Local made with
this script. Standard library only (zlib + struct): no imaging package needed.
"""
import struct
import sys
import zlib


def read_ppm(path):
    data = open(path, 'rb').read()
    parts = data.split(b'\n', 3)
    if parts[0].strip() != b'P6':
        raise SystemExit(f'{path}: not a binary PPM (P6)')
    w, h = map(int, parts[1].split())
    if int(parts[2]) != 255 or len(parts[3]) < w * h * 3:
        raise SystemExit(f'{path}: unsupported or truncated PPM')
    return w, h, parts[3]


def chunk(tag, body):
    return struct.pack('>I', len(body)) + tag + body + struct.pack('>I', zlib.crc32(tag + body) & 0xffffffff)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    imgs = [read_ppm(p) for p in sys.argv[2:]]
    h = imgs[0][1]
    if any(i[1] != h for i in imgs):
        raise SystemExit('images differ in height')
    width = sum(i[0] for i in imgs)
    rows = []
    for y in range(h):
        rows.append(b'\x00' + b''.join(img[2][y * img[0] * 3:(y + 1) * img[0] * 3] for img in imgs))
    png = (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, h, 8, 2, 0, 0, 0)) +
           chunk(b'IDAT', zlib.compress(b''.join(rows), 9)) + chunk(b'IEND', b''))
    open(sys.argv[1], 'wb').write(png)


if __name__ == '__main__':
    main()
