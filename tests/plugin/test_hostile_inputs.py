"""Hostile inputs end to end: a seeded, time-bounded fuzz of whole sessions.

Benchmark names, parametrize ids and values, and marker values with control characters,
``::``, path separators and CSV formula starts; output paths that are devices, FIFOs,
links, folders, baselines and read-only places; ``GPUPERF_*`` environment values (among
them lock folders that are a file, a FIFO, a link to a folder elsewhere, under a file or
with control characters, and the A/B base process's check file at any of those places).
None may raise a traceback, touch a non-regular file, or change a baseline; a lock folder
no lock can be taken in fails the session once, at its start, naming the fix; the JUnit
XML stays well-formed, the terminal shows no raw control character and no line starts with
``::error``/``::warning`` (GitHub's workflow commands) from a name.

``GPUPERF_FUZZ_SEED`` picks another seed (the failing seed is in the assertion message);
``GPUPERF_FUZZ_BUDGET_S`` the time spent on sessions after the first two.
"""

from __future__ import annotations

import os
import random
import re
import socket
import stat
import threading
import time
import xml.dom.minidom
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FAST, VIRTUAL_TIME_CONFTEST

SEED = int(os.environ.get("GPUPERF_FUZZ_SEED", "24"))
BUDGET_S = float(os.environ.get("GPUPERF_FUZZ_BUDGET_S", "25"))
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

#: Pieces of hostile text: terminal escapes, line breaks before workflow commands, ``::``,
#: path separators, CSV formula starts, bidirectional controls, markup.
PIECES = [
    "\x1b[31m", "\x1b]0;t\x07", "\n::error::n", "\r::warning::r", "::", "a::b", "/", "..\\",
    "=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)", "\t", "\x00", "\x7f", "\u202e",
    "\u2028", "<script>", "%0A::error::p", "|", "`", " ", "w", "7",
]  # fmt: skip


def hostile(rng: random.Random, n: int = 3) -> str:
    return "".join(rng.choice(PIECES) for _ in range(n))


BENCH = """
import os
import pytest

@pytest.mark.parametrize("p", {values!r}, ids={ids!r})
@pytest.mark.gpuperf(rounds=5, numerics={numerics!r})
def test_hostile(gpu_bench, clock, p):
    def work():
        clock.ns += int(os.environ.get("NS", "1000000"))
    gpu_bench(work, name={name!r})
"""


def bench_file(rng: random.Random, numerics: str) -> str:
    values = [hostile(rng) for _ in range(2)]
    ids = [hostile(rng) + str(i) for i in range(2)]  # unique: pytest would number them
    return BENCH.format(values=values, ids=ids, numerics=numerics, name=hostile(rng, 4))


def places(root: Path) -> dict[str, Path]:
    """The output places a session may be pointed at, made in ``root`` (never real nodes)."""
    root.mkdir()
    p = {"new": root / "new" / "r.out", "regular": root / "regular.txt", "folder": root / "dir"}
    p["regular"].write_text("mine\n")
    p["folder"].mkdir()
    p["fifo"] = root / "fifo"
    os.mkfifo(p["fifo"])
    p["fifo-link"] = root / "fifo-link"
    p["fifo-link"].symlink_to("fifo")
    p["under-file"] = p["regular"] / "x.json"
    p["dangling"] = root / "dangling"
    p["dangling"].symlink_to(root / "gone" / "x")
    p["copy"] = root / "copy.json"  # a minified baseline outside the store: filled later
    p["read-only"] = root / "ro" / "r.out"
    p["read-only"].parent.mkdir()
    p["read-only"].parent.chmod(0o555)
    if IS_ROOT:
        p["device"] = root / "null"
        os.mknod(p["device"], 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    p["socket"] = root / "sock"
    p["elsewhere"] = root.parent / f"elsewhere-{root.name}"  # a folder of another place
    p["elsewhere"].mkdir()
    p["folder-link"] = root / "folder-link"
    p["folder-link"].symlink_to(p["elsewhere"])
    return p


def snapshot(root: Path) -> dict[str, Any]:
    """What may not change: every non-regular file's kind, every link's target, baselines'
    bytes."""
    out: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            out[str(path)] = ("link", os.readlink(path))
        elif not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            out[str(path)] = (stat.S_IFMT(st.st_mode), st.st_rdev)
        elif path.suffix == ".json" and (".gpuperf" in path.parts or path.name == "copy.json"):
            out[str(path)] = path.read_bytes()
    return out


def drain(fifo: Path, stop: threading.Event) -> threading.Thread:
    """A reader of ``fifo`` for as long as the session may write to it."""

    def read() -> None:
        while not stop.is_set():
            fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            try:
                while not stop.is_set():
                    try:
                        if not os.read(fd, 1 << 16):
                            time.sleep(0.02)
                    except BlockingIOError:
                        time.sleep(0.02)
            finally:
                os.close(fd)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t


def environment(rng: random.Random, p: dict[str, Path]) -> dict[str, str]:
    """GPUPERF_* values: paths from the places, junk text, the internal switches, lock
    folders that are no folder of one's own, the A/B base process's check file."""
    pool = {
        "GPUPERF_LOCK_LOG": lambda: str(rng.choice(list(p.values()))),
        "GPUPERF_NO_LOCK": lambda: rng.choice(["1", "0", hostile(rng)]),
        "GPUPERF_DEMO_PLANT": lambda: hostile(rng),
        "GPUPERF_CAPTURE": lambda: rng.choice(['{"bogus": 1}', hostile(rng), "{"]),
        "GPUPERF_GROUP_PROFILE": lambda: hostile(rng),
        "GITHUB_STEP_SUMMARY": lambda: str(rng.choice(list(p.values()))),
        "GPUPERF_CHILD": lambda: rng.choice(["1", "0", hostile(rng)]),
        "GPUPERF_LOCK_DIR": lambda: rng.choice(lock_dirs(p, rng)),
        "GPUPERF_AB_CHECK": lambda: (
            str(p[rng.choice(CHECK_PLACES)]) if rng.random() < 0.8 else hostile(rng)
        ),
        "GPUPERF_AB_BASE": lambda: rng.choice([str(p["folder"]), hostile(rng)]),
        "GPUPERF_PARENT": lambda: rng.choice(["1:0", f"{os.getpid()}:1", hostile(rng)]),
    }
    # an environment value cannot hold a NUL byte: the OS refuses it before any plugin runs
    return {k: make().replace("\x00", "") for k, make in pool.items() if rng.random() < 0.6}


#: GPUPERF_AB_CHECK places: none may be written (a session is no A/B base process).
CHECK_PLACES = ["fifo", "folder", "copy", "baseline", "fifo-link", "regular", "dangling"] + (
    ["device"] if IS_ROOT else []
)
#: GPUPERF_LOCK_DIR values no lock can be taken in: each fails the session once, at its
#: start, naming the fix (unless GPUPERF_NO_LOCK=1 turns the locks off).
BAD_LOCK_DIRS = ("regular", "fifo", "folder-link", "under-file")


def lock_dirs(p: dict[str, Path], rng: random.Random) -> list[str]:
    good = ["", str(p["folder"] / "locks"), "rel_locks", str(p["folder"] / "a" / "b" / "c" / "d")]
    bad = [str(p[name]) for name in BAD_LOCK_DIRS] + ["locks" + hostile(rng) + "\n"]
    if not IS_ROOT:
        bad.append(str(p["read-only"].parent))
    return good + bad


def bad_lock_dir(env: dict[str, str], p: dict[str, Path]) -> bool:
    value = env.get("GPUPERF_LOCK_DIR", "")
    if any(not c.isprintable() for c in value):
        return True  # refused as it is, locks or not
    if env.get("GPUPERF_NO_LOCK") == "1":
        return False
    return value in {str(p[n]) for n in BAD_LOCK_DIRS} or (
        not IS_ROOT and value == str(p["read-only"].parent)
    )


#: Places a session writes into; the others it refuses (at its start, before measuring).
WRITABLE = ("new", "regular", "fifo", "fifo-link", "device", "dangling", "read-only")


def outputs(rng: random.Random, p: dict[str, Path]) -> list[str]:
    """--gpuperf-json/-markdown/-html/-csv at places, mostly writable ones; at most one at
    each place (two writes into one FIFO would interleave)."""
    good = [n for n in WRITABLE if n in p]
    rng.shuffle(good)
    bad = sorted(set(p) - set(good))
    rng.shuffle(bad)
    picked = [good.pop() if good and rng.random() < 0.85 else bad.pop() for _ in range(4)]
    return [
        f"--gpuperf-{option}={p[name]}"
        for option, name in zip(("json", "markdown", "html", "csv"), picked, strict=True)
    ]


UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\u2028\u202e]")


def check_session(result: pytest.RunResult, junit: Path, label: str) -> None:
    text = "\n".join(result.outlines + result.errlines)
    # 0, 1 (a regression), 4 (a usage error: an output refused at the start), 2 only for
    # a marker value refused at collection (its error names the value, escaped)
    allowed = (0, 1, 4, 2) if "error during collection" in text else (0, 1, 4)
    assert result.ret in allowed, f"{label}: exit {result.ret}\n{text[-3000:]}"
    assert "Traceback" not in text and "INTERNALERROR" not in text, f"{label}\n{text[-3000:]}"
    bad = [line for line in result.outlines if UNPRINTABLE.search(line)]
    assert not bad, f"{label}: raw control characters on the terminal: {bad[:3]!r}"
    commands = [x for x in result.outlines if x.lstrip().startswith(("::error", "::warning"))]
    assert not commands, f"{label}: lines GitHub would run as commands: {commands[:3]!r}"
    if junit.exists():
        xml.dom.minidom.parse(str(junit))  # well-formed


def one_session(pytester: pytest.Pytester, rng: random.Random, index: int) -> None:
    root = pytester.path / f"places{index}"
    p = places(root)
    stop = threading.Event()
    readers = [drain(p["fifo"], stop)] if rng.random() < 0.7 else []
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(p["socket"]))
        baseline = pytester.path / ".gpuperf" / "baselines" / "main.json"
        p["copy"].write_text(baseline.read_text().replace("\n", "").replace("  ", ""))
        p["baseline"] = baseline
        p["segment-place"] = baseline.parent / "main.runs" / "x.json"
        store = pytester.path / ".gpuperf"
        before = snapshot(root) | snapshot(store)
        env = environment(rng, p) | {"GITHUB_ACTIONS": "true"}
        env["NS"] = str(rng.choice([1_000_000, 3_000_000]))  # the same, or 3x slower
        args = [*outputs(rng, p), f"--junitxml={root / 'j.xml'}", "--gpuperf-github=off"]
        label = f"seed {SEED}, session {index}: {env} {args}"
        if not readers:
            env["GPUPERF_FUZZ_NO_READER"] = "1"  # the FIFO waits FIFO_WAIT_S, then an error
        result = run_with_env(pytester, env, *COMMON, "--gpuperf-baseline=main", *args)
        stop.set()
        for t in readers:
            t.join(5)
        check_session(result, root / "j.xml", label)
        assert snapshot(root) | snapshot(store) == before, label
        if bad_lock_dir(env, p):
            text = "\n".join(result.outlines + result.errlines)
            assert result.ret == 4, f"{label}: a bad lock folder did not stop the start"
            assert text.count("cannot use GPUPERF_LOCK_DIR") <= 1, label
            if "cannot use GPUPERF_LOCK_DIR" in text:  # (else another usage error came first)
                assert "Point GPUPERF_LOCK_DIR at a folder that root or you own" in text, label
    p["read-only"].parent.chmod(0o755)
    pytester.path.joinpath(f"places{index}").rename(pytester.path / f"done{index}")
    assert not any(p["elsewhere"].iterdir()), "written into the folder a link points at"


def run_with_env(pytester: pytest.Pytester, env: dict[str, str], *args: str) -> pytest.RunResult:
    """A fresh pytest process with ``env`` added; one that hangs (a FIFO opened for reading)
    fails the test after 120 s instead of hanging the suite."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        try:
            return pytester.runpytest_subprocess(*args, timeout=120)
        except pytester.TimeoutExpired:
            pytest.fail(f"seed {SEED}: a session hung for 120 s with {env} {args}")


COMMON = [
    "-p", "no:cacheprovider", *FAST, "--gpuperf-capture=never", "--gpuperf-inventory=never",
    "--gpuperf-reruns=0",
]  # fmt: skip
FIFO_CONFTEST = """
import os
from pytest_gpuperf.baseline import fileio

if os.environ.get("GPUPERF_FUZZ_NO_READER"):
    fileio.FIFO_WAIT_S = 0.5
"""


def test_hostile_names_paths_and_environment_values(pytester: pytest.Pytester) -> None:
    rng = random.Random(SEED)
    pytester.makeconftest(VIRTUAL_TIME_CONFTEST + FIFO_CONFTEST)
    pytester.makepyfile(test_hostile=bench_file(rng, "report"))  # saved, then compared
    saved = run_with_env(pytester, {}, *COMMON, "--gpuperf-save=main")
    check_session(saved, pytester.path / "none.xml", f"seed {SEED}, the save")
    start = time.monotonic()
    index = 0
    while index < 2 or time.monotonic() - start < BUDGET_S:
        # new names every session, and a marker value of any kind
        numerics = rng.choice(["report", "gate", "off", hostile(rng)])
        pytester.makepyfile(test_more=bench_file(rng, numerics))
        one_session(pytester, rng, index)
        index += 1


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_the_results_json_goes_to_standard_output_in_a_pipe(
    pytester: pytest.Pytester, target: str
) -> None:
    """T22, the session's side: --gpuperf-json=/dev/stdout in a pipe, and - ."""
    import json
    import subprocess
    import sys

    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(
        test_one="def test_one(gpu_bench, clock):\n"
        "    gpu_bench(lambda: setattr(clock, 'ns', clock.ns + 1000))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *COMMON, "-q", f"--gpuperf-json={target}"],
        cwd=pytester.path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    start = done.stdout.index('{\n  "')  # after pytest's progress dots
    doc, _ = json.JSONDecoder().raw_decode(done.stdout[start:])
    assert doc["schema"] == "pytest-gpuperf/results"
    assert [r["id"]["nodeid"] for r in doc["results"]] == ["test_one.py::test_one"]
    assert not (pytester.path / "-").exists()


def test_a_session_never_writes_into_a_baseline_or_over_a_device(
    pytester: pytest.Pytester,
) -> None:
    """T2: GITHUB_STEP_SUMMARY naming the baseline's index appended the Markdown to it; T1:
    --gpuperf-csv=<a copy of /dev/null> replaced the node; T7: a FIFO output hung."""
    import subprocess

    pytester.makeconftest(VIRTUAL_TIME_CONFTEST)
    pytester.makepyfile(
        test_one="def test_one(gpu_bench, clock):\n"
        "    gpu_bench(lambda: setattr(clock, 'ns', clock.ns + 1000))\n"
    )
    run_with_env(pytester, {}, *COMMON, "--gpuperf-save=main").assert_outcomes(passed=1)
    index = pytester.path / ".gpuperf" / "baselines" / "main.json"
    before = index.read_bytes()
    fifo = pytester.path / "report.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    args = [*COMMON, "--gpuperf-baseline=main", f"--gpuperf-html={fifo}"]
    if IS_ROOT:
        os.mknod(pytester.path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        args.append(f"--gpuperf-csv={pytester.path / 'null'}")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(index)}
    try:
        result = run_with_env(pytester, env, *args)
        html, _ = reader.communicate(timeout=60)
    finally:
        reader.kill()  # a reader left waiting on a FIFO nobody writes
    assert index.read_bytes() == before
    result.stdout.fnmatch_lines(
        ["*cannot append to $GITHUB_STEP_SUMMARY: refusing to write *main.json: it is a "
         "pytest-gpuperf baseline*"]
    )  # fmt: skip
    assert result.ret == 1  # a report asked for and not written fails the job
    assert b"<html" in html.lower() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if IS_ROOT:
        assert stat.S_ISCHR(os.lstat(pytester.path / "null").st_mode)


@pytest.mark.parametrize("place", ["fifo", "folder", "copy", "fifo-link", "device"])
def test_an_ab_base_process_writes_its_check_only_into_a_regular_file(
    pytester: pytest.Pytester, place: str
) -> None:
    """GPUPERF_AB_CHECK in a real base process (a --gpuperf-child with the trees' roots):
    a FIFO hung it, a folder raised, a device node or a baseline's copy was written over."""
    if place == "device" and not IS_ROOT:
        pytest.skip("needs root, to make a device node (a copy of /dev/null) in tmp_path")
    pytester.makepyfile(test_one="def test_one(gpu_bench):\n    gpu_bench(lambda: None)\n")
    p = places(pytester.path / "places")
    golden = Path(__file__).parent.parent / "data" / "baseline-v1" / "golden.json"
    p["copy"].write_bytes(golden.read_bytes())
    before = snapshot(pytester.path / "places")
    env = {
        "GPUPERF_AB_CHECK": str(p[place]),
        "GPUPERF_AB_BASE": str(pytester.path),
        "GPUPERF_AB_CURRENT": str(p["folder"]),
    }
    result = run_with_env(pytester, env, "-p", "no:cacheprovider", "--gpuperf-child",
                          "--collect-only", "-q")  # fmt: skip
    text = "\n".join(result.outlines + result.errlines)
    assert result.ret == 0, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text, text[-3000:]
    assert text.count("gpuperf: GPUPERF_AB_CHECK: ") == 1, text[-3000:]  # said once
    assert snapshot(pytester.path / "places") == before
    assert p["copy"].read_bytes() == golden.read_bytes()
