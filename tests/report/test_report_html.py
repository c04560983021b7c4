"""The HTML sweep page: autoescaped, self-contained, and checked in a real headless browser."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from report_fixtures import HOSTILE_IMG, HOSTILE_SCRIPT, make_sweep, simple
from kvdiag.records.verdict import Evidence, Verdict
from kvdiag.report.formats import SweepFormat
from kvdiag.store.sweeps import Sweep


def render(sweep: Sweep) -> str:
    return SweepFormat.HTML.to_formatter().format(sweep)


def test_page_is_self_contained_and_shows_counts_entries_and_fingerprint(sweep: Sweep) -> None:
    html = render(sweep)
    assert html.startswith("<!doctype html>")
    assert "<script" not in html and "http://" not in html and "https://" not in html
    counts = dict(re.findall(r'data-verdict="([a-z-]+)" data-count="(\d+)"', html))
    assert counts == {"confirmed": "2", "error": "1", "inconclusive": "1", "not-reproduced": "1", "skipped": "1",
                      "not-applicable": "1"}
    assert html.count('<details class="entry') == 7
    assert 'id="entry-D2" open' in html and 'id="entry-D13">' in html  # folded: nothing to see
    assert "<pre>========= Barrier error detected. Divergent thread(s) in block.\n" in html
    assert "2025.3.1" in html and "580.159.04 (supports CUDA 13.0)" in html and "d99724f2" in html
    assert "flash_attn_ext_f16_process_tile&lt;(int)256, (int)256, (int)4, (int)4, (int)2" in html


def test_hostile_log_text_is_escaped_never_tags(hostile_sweep: Sweep) -> None:
    html = render(hostile_sweep)
    assert "<script" not in html.lower()
    assert "<img" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html        # in the quoted line (<pre>) and the reason
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html  # the quote cannot close an attribute either
    assert "A title with &lt;b&gt;markup&lt;/b&gt; &amp; ampersand" in html
    pre = re.findall(r"<pre>(.*?)</pre>", html, re.S)
    assert any("&lt;script&gt;" in p for p in pre)


def test_hostile_text_in_an_attribute_position_stays_in_it() -> None:
    html = render(make_sweep([simple(HOSTILE_IMG, Verdict.CONFIRMED, HOSTILE_SCRIPT,
                                     evidence=Evidence(quoted=(HOSTILE_IMG,)))]))
    assert "<img" not in html and 'id="entry-&#34;&gt;&lt;img' in html


# --------------------------------------------------------------------------- a real browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def png_pixels_vary(data: bytes, rows: int = 400) -> tuple[int, int, bool]:
    """(width, height, not a single colour) read with zlib/struct: unfilter the top `rows` scanlines
    (the header, the verdict cards and the first table rows) and count distinct pixel colours."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = depth = ctype = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    for row in range(min(height, rows)):
        start = row * (stride + 1)
        f, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if row % 40 == 0:
            colours.update(bytes(line[j:j + 3]) for j in range(0, stride, bpp * 16))
        prev = line
    return width, height, len(colours) > 8


def _png(width: int, height: int, pixel) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    raw = b"".join(b"\x00" + b"".join(pixel(x, y) for x in range(width)) for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def test_png_check_tells_a_blank_image_from_a_varied_one() -> None:
    assert png_pixels_vary(_png(64, 64, lambda x, y: b"\xff\xff\xff")) == (64, 64, False)
    assert png_pixels_vary(_png(256, 160, lambda x, y: bytes((x, y, 0))))[2] is True


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)")
def test_page_renders_in_headless_chromium(sweep: Sweep, tmp_path: Path) -> None:
    page = tmp_path / "sweep.html"
    page.write_text(render(sweep), encoding="utf-8")
    shot = tmp_path / "sweep.png"
    common = [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    proc = subprocess.run([*common, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri()],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert shot.is_file(), proc.stderr[-2000:]
    data = shot.read_bytes()
    assert len(data) > 30_000
    width, height, varied = png_pixels_vary(data)
    assert (width, height) == (1280, 1600) and varied
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path).stdout
    counts = dict(re.findall(r'data-verdict="([a-z-]+)" data-count="(\d+)"', dom))
    assert counts["confirmed"] == "2" and counts["not-reproduced"] == "1"
    assert "2048 error(s) at fattn-mma-f16.cuh:1538" in dom
