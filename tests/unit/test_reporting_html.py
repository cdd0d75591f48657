"""The HTML report: content, escaping, self-containment; rendered in a real headless Chromium."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from pytest_gpuperf.reporting import html, svg
from pytest_gpuperf.reporting import verdicts as v
from pytest_gpuperf.reporting.history import histories
from tests.unit.reporting_data import HOSTILE, result, rounds, save_history, session


def report(tmp_path: Path) -> str:
    results = [*session(), result(HOSTILE, kind="regression", ratio=1.1, line=80)]
    results[1].artifacts = [
        {
            "kind": "nsys",
            "path": "gpuperf-artifacts/test mm/trace#1.nsys-rep",
            "summary": ["sm90_gemm: 92 % of GPU time (+6 %)"],
        },
        {"kind": "ncu", "path": "/abs/path/gemm.ncu-rep"},
    ]
    results[1].with_run(
        telemetry={
            "available": True,
            "sm_clock_mhz": {"min": 1755.0, "median": 1980.0, "max": 1980.0},
            "power_w": {"min": 310.0, "median": 452.5, "max": 690.0},
            "throttled_share": 0.02,
            "clock_events": {"sw_power_cap": 0.02},
            "sm_clock_max_mhz": 1980,
            "samples": 120,
            "rounds_checked": 30,
            "throttled_rounds": [3, 4],
        }
    )
    results[2].with_run(telemetry={"available": False, "reason": "NVML not installed"})
    base = save_history(tmp_path / "baselines", results)
    return html.render(results, histories=histories(results, base), baseline="main")


def test_sections_in_report_order_with_plots_and_numbers(tmp_path: Path) -> None:
    page = report(tmp_path)
    order = [m.group(1) for m in re.finditer(r'<section class="bench kind-([a-z-]+)"', page)]
    assert order[:4] == ["regression"] * 3 + ["inconclusive"]
    assert order[-1] == "no-baseline"
    assert page.count("<svg") >= 3 * len(order) - 1  # medians, rounds, history (no-baseline: 2)
    assert "REGRESSION, confirmed" in page  # the verdict's explanation
    assert "sm90_gemm: 92 % of GPU time (+6 %)" in page
    assert "1980 MHz" in page and "452.5 W" in page and "rounds throttled: 2 of 30" in page
    assert "Telemetry unavailable: NVML not installed" in page
    assert "history of test_mm[4096-bf16]" in page


def test_self_contained(tmp_path: Path) -> None:
    page = report(tmp_path)
    assert "<script" not in page  # no script at all (the hostile id is escaped)
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "<link" not in page and "@import" not in page
    assert "default-src 'none'" in page


def test_hostile_test_id_is_escaped(tmp_path: Path) -> None:
    page = report(tmp_path)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "[link](http://evil)" in page  # shown as text, not a link
    assert 'href="http://evil"' not in page


def test_artifact_links_are_relative_and_quoted(tmp_path: Path) -> None:
    page = report(tmp_path)
    assert 'href="gpuperf-artifacts/test%20mm/trace%231.nsys-rep"' in page
    # an absolute path is shown, not linked
    assert "/abs/path/gemm.ncu-rep" in page and 'href="/abs' not in page
    assert html.default_href("javascript:alert(1)") == "javascript%3Aalert%281%29"


def test_nice_ticks() -> None:
    assert svg.nice_ticks(0.0, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert svg.nice_ticks(4.93e-4, 5.12e-4)[0] >= 4.93e-4
    assert svg.nice_ticks(1.0, 1.0) == [1.0]


def test_nice_ticks_of_medians_one_float_step_apart_end() -> None:
    # a run file compared with a copy of itself: its medians differ in the last bit, and the
    # tick step was too small to move a tick, so the loop never ended
    lo = 0.0006510799999999998
    hi = 0.00065108
    assert lo < hi
    assert svg.nice_ticks(lo, hi) == [lo]
    assert svg.nice_ticks(1e-3, 1e-3 * (1 + 1e-12)) == [1e-3]


def test_tick_labels_are_short_and_exact() -> None:
    assert svg.time_tick_labels([2e-3, 4e-3, 6e-3, 8e-3]) == ["2 ms", "4 ms", "6 ms", "8 ms"]
    assert svg.time_tick_labels([2.5e-4, 5e-4, 7.5e-4, 1e-3]) == [
        "0.25 ms", "0.50 ms", "0.75 ms", "1.00 ms",
    ]  # fmt: skip
    assert svg.time_tick_labels([4.95e-4, 5.0e-4, 5.05e-4]) == ["495 µs", "500 µs", "505 µs"]
    assert svg.number_tick_labels([0.0, 50.0, 100.0]) == ["0", "50", "100"]


def test_no_tick_label_is_clipped_at_the_right_edge() -> None:
    """The rightmost tick of a box plot used to be cut to '8.000 m'."""
    picture = svg.strip_box(
        [svg.Group("current", [2e-3, 5e-3, 8e-3], svg.CURRENT)], title="t", width=360
    )
    labels = re.findall(r'<text x="([\d.]+)" text-anchor="(\w+)" y="[\d.]+" font-size="10"[^>]*>'
                        r"([^<]+)</text>", picture)  # fmt: skip
    assert labels, picture
    for x, anchor, text in labels:
        half = 0.6 * 10 * len(text) / 2
        right = float(x) + {"end": 0, "middle": half, "start": 2 * half}[anchor]
        assert right <= 360, (x, anchor, text)
        assert "000" not in text


def test_history_axis_names_dates_and_commits(tmp_path: Path) -> None:
    results = session()[:1]
    base = save_history(tmp_path / "b", results, runs=6)
    page = html.render(results, histories=histories(results, base), baseline="main")
    history = page[page.index("history of test_add[1M]") :]
    history = history[: history.index("</svg>")]
    assert "oldest" not in history and "newest" not in history
    # Six runs of one day, an hour apart: the axis tells them apart by the time of day ...
    assert ">11-29 19:38<" in history and ">11-30 00:38<" not in history
    assert ">this run<" in history  # ... and names the current run at the end


def test_history_axis_shows_commits_when_runs_recorded_them() -> None:
    points = [
        svg.Point(1e-3 * (1 + i / 100), f"run {i}", when=f"2025-12-0{i + 1}", commit=f"abc{i}def")
        for i in range(6)
    ]
    picture = svg.history(points, title="h")
    assert ">abc0def<" in picture and ">abc5def<" in picture  # first and last labelled
    assert ">2025-12-01<" in picture and ">2025-12-06<" in picture
    assert picture.count(">abc") <= 4  # a few labels, not one per run


def test_environment_table_leaves_out_what_was_not_recorded() -> None:
    env = {"gpu_name": "NVIDIA H200", "triton": None, "cudnn": None}
    r = result("test_a", kind=None, measured={"environment": env})
    page = html.render([r])
    env = page[page.index("<h3>Environment</h3>") :]
    assert "NVIDIA H200" in env and "None" not in env and "triton" not in env


def test_a_shapes_sweep_gets_a_throughput_by_shape_plot() -> None:
    from pytest_gpuperf.model import BenchId

    results = []
    for dtype, speed in (("bfloat16", 2.0), ("float32", 1.0)):
        for i, n in enumerate((256, 1024, 4096)):
            bid = BenchId(
                f"tests/test_mm.py::test_mm[{n}-{dtype}]",
                None,
                "cuda-events",
                (("shape", f"{n}x{n}x{n}"), ("dtype", dtype)),
            )
            measured = {"id": bid, "flops": 2.0 * n**3}
            level = 1e-5 * 4**i / speed
            results.append(result("x", kind="no-change", ratio=1.0, level=level, measured=measured))
    results.append(result("test_other", kind=None))  # no shapes: no plot
    page = html.render(results)
    assert "<h2>By shape</h2>" in page
    sweep = page[page.index("<h2>By shape</h2>") :]
    assert "TFLOP/s by shape: test_mm [cuda-events]" in sweep
    for label in ("256x256x256", "1024x1024x1024", "4096x4096x4096"):
        assert f">{label}<" in sweep
    assert ">dtype=bfloat16<" in sweep and ">dtype=bfloat16 (baseline)<" in sweep
    assert sweep.count("<polyline") == 4  # two dtypes, each current and baseline


# --- in a real browser ---------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs chromium (apt-get install chromium)"
)


def chromium(tmp_path: Path, page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,2000",
        *args,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def read_png(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) pixels of an 8-bit, non-interlaced PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, chunk = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = chunk
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
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
        rows.append(bytes(line if bpp == 3 else bytes(x for j, x in enumerate(line) if j % 4 != 3)))
        prev = line
    return width, height, rows


def colour_count(rows: list[bytes], rgb: tuple[int, int, int], tol: int = 12) -> int:
    n = 0
    for row in rows:
        for i in range(0, len(row), 3):
            if all(abs(row[i + k] - rgb[k]) <= tol for k in range(3)):
                n += 1
    return n


def hex_rgb(colour: str) -> tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


@needs_chromium
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(report(tmp_path), encoding="utf-8")

    dom = chromium(tmp_path, page, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = re.sub(r"<[^>]+>", " ", dom.stdout)
    assert "3 regressions, 1 inconclusive" in text
    assert "test_mm[8192-bf16]" in text and "Where the time went" in text
    assert "<script>alert(1)</script>" not in dom.stdout  # still text, never an element
    assert dom.stdout.count("<svg") >= 20

    shot = tmp_path / "shot.png"
    run = chromium(tmp_path, page, f"--screenshot={shot}")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, rows = read_png(shot)
    assert (width, height) == (1280, 2000)
    # Not blank: many pixels differ from the page's white, in more than a few colours.
    non_white = sum(
        1 for row in rows for i in range(0, len(row), 3) if row[i : i + 3] != b"\xff\xff\xff"
    )
    assert non_white > 0.03 * width * height
    # The content drawn: regression badges, and both plot series.
    assert colour_count(rows, hex_rgb(v.KINDS["regression"].color)) > 500
    assert colour_count(rows, hex_rgb(svg.CURRENT)) > 200
    assert colour_count(rows, hex_rgb(svg.BASELINE)) > 200


def test_few_rounds_have_no_interval_in_the_html_either() -> None:
    r = result("test_few", kind=None, measured={"rounds": rounds(5.0e-4)[:5]})
    assert "- (fewer than 6 rounds: no such interval exists)" in html.render([r])


def test_history_axis_never_shows_two_equal_ticks() -> None:
    """Three saves in one minute (the review's ``12-01 18:39`` twice): the seconds tell them
    apart; runs saved within one second get one tick between them, not two equal ones."""
    minute = [
        svg.Point(1e-3, f"run {i}", when=f"2026-12-01T18:39:{10 * i:02d}+00:00") for i in range(3)
    ]
    axis = [lines for _, lines in svg._time_axis(minute, 3)]
    assert axis == [["12-01 18:39:00", ""], ["12-01 18:39:10", ""], ["12-01 18:39:20", ""]]
    second = [svg.Point(1e-3, f"run {i}", when="2026-12-01T18:39:05+00:00") for i in range(6)]
    picture = svg.history(second, title="h")
    labels = re.findall(r'font-size="10" fill="[^"]+">([^<]+)</text>', picture)
    axis_labels = [x for x in labels if x.startswith("12-01")]
    assert axis_labels and len(axis_labels) == len(set(axis_labels))


def test_the_by_shape_series_never_take_the_baseline_or_current_colours() -> None:
    from pytest_gpuperf.model import BenchId

    results = []
    for dtype in ("bfloat16", "float32", "float16"):
        for n in (256, 1024):
            bid = BenchId(f"t.py::test_mm[{n}-{dtype}]", None, "cuda-events",
                          (("shape", f"{n}x{n}"), ("dtype", dtype)))  # fmt: skip
            measured = {"id": bid, "flops": 2.0 * n**3}
            level = 1e-5 * n / 256
            results.append(result("x", kind="no-change", ratio=1.0, level=level, measured=measured))
    page = html.render(results)
    sweep = page[page.index("<h2>By shape</h2>") :]
    sweep = sweep[: sweep.index("</figure>")]
    assert "<polyline" in sweep
    for colour in (svg.BASELINE, svg.CURRENT):
        assert colour not in sweep


def test_the_summary_table_fits_a_narrow_window() -> None:
    """At 800 px the verdict table scrolls in its own box (the page never runs off sideways),
    long names break, and narrow windows get tighter cells."""
    page = html.render(session())
    table = page.index('<table class="verdicts">')
    assert page[:table].endswith('<div class="scroll">')
    assert ".scroll { overflow-x: auto;" in html.CSS and "@media (max-width: 900px)" in html.CSS
    assert "word-break: break-all" in html.CSS.split("table.verdicts td:nth-child(2)")[1]
