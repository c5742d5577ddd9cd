#!/usr/bin/env python3
"""Checks that PNG files show something: decodes each (8-bit RGB or RGBA,
any filter; python3's zlib only) and requires at least MIN_INK of its
pixels to be non-white and at least MIN_COLOUR of them to be coloured (not
grey: the plots' series, not just text and axes).

    png_stats.py MIN_INK MIN_COLOUR FILE...

Prints one line per file; exits 1 if any file falls short or is not a PNG
it can read."""
import struct
import sys
import zlib


def decode(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG signature")
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if struct.unpack(">I", data[at + 8 + length:at + 12 + length])[0] != zlib.crc32(kind + body):
            raise ValueError("bad CRC in chunk %r" % kind)
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError("unsupported PNG: depth %d colour type %d interlace %d" % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            elif kind != 0:
                raise ValueError("bad filter type %d" % kind)
        rows.append(line)
        prev = line
    return width, height, bpp, rows


def main():
    min_ink, min_colour = float(sys.argv[1]), float(sys.argv[2])
    failed = False
    for path in sys.argv[3:]:
        try:
            width, height, bpp, rows = decode(path)
        except (ValueError, zlib.error, struct.error, TypeError) as e:
            print("FAIL: %s: %s" % (path, e))
            failed = True
            continue
        ink = colour = 0
        for line in rows:
            for x in range(0, width * bpp, bpp):
                r, g, b = line[x], line[x + 1], line[x + 2]
                if min(r, g, b) < 200:
                    ink += 1
                if max(r, g, b) - min(r, g, b) > 60:
                    colour += 1
        total = width * height
        ok = ink >= min_ink * total and colour >= min_colour * total
        print("%s: %dx%d, %.1f%% ink, %.1f%% colour%s" %
              (path, width, height, 100.0 * ink / total, 100.0 * colour / total, "" if ok else "  FAIL"))
        failed = failed or not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
