"""Hostile programs cannot escape the DeepCoder sandbox or stall training.

Every test runs under each available isolation (the kernel sandbox, ``bwrap``, where it works,
and the audit-hook fallback, ``weak``, whose hook blocks these plain attempts), with 1 s limits, in its own ``tmp_root``; an autouse fixture checks
that no child process and no file is left behind.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from ragen_torchrl.envs.games.deepcoder_data import CodingProblem, TestCase
from ragen_torchrl.envs.games.deepcoder_grading import Grader
from ragen_torchrl.envs.games.sandbox import Sandbox, SandboxLimits, bwrap_available

ISOLATIONS = ["weak"] + (["bwrap"] if bwrap_available() else [])
pytestmark = pytest.mark.filterwarnings("ignore:DeepCoder sandbox. isolation=weak")
LIMITS = SandboxLimits(timeout_s=1.0, memory_mb=256, max_output_bytes=1 << 16)


@pytest.fixture(params=ISOLATIONS)
def box(request, tmp_path):
    root = tmp_path / "box"
    root.mkdir()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield Sandbox(LIMITS, isolation=request.param, tmp_root=root)
    assert list(root.iterdir()) == [], "a run left files behind"
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"processes left behind: {left}"


def _secret_file(tmp_path):
    path = tmp_path / "secret.txt"
    path.write_text("TOP-SECRET-42")
    return path


# ----------------------------------------------------------------------------- basics
def test_stdin_stdout_and_function_call(box):
    run = box.run_script("a, b = map(int, input().split())\nprint(a * b)", stdin="6 7\n")
    assert (run.status, run.stdout) == ("ok", "42\n")
    call = box.call_function("class Solution:\n    def f(self, xs):\n        return sorted(xs)", "f", [[3, 1, 2]])
    assert call.has_value and call.value == [1, 2, 3]
    assert box.call_function("def g(x):\n    return x", "missing", [1]).status == "error"
    assert box.run_script("def broken(:\n").status == "compile_error"
    assert box.compiles(["x = 1", "x ="]) == [True, False]


def test_stdlib_imports_work(box):
    code = "import heapq, collections, itertools, math, re, bisect, functools, fractions, decimal, json, typing\nprint('ok')"
    assert box.run_script(code).stdout == "ok\n"


def test_kernel_isolation_is_used_where_available():
    assert Sandbox().isolation == ("bwrap" if bwrap_available() else "weak")
    if not bwrap_available():
        with pytest.raises(RuntimeError, match="bwrap"):
            Sandbox(isolation="bwrap")


def test_bad_limits_and_options_are_value_errors():
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=-1)
    with pytest.raises(ValueError, match="memory_mb"):
        SandboxLimits(memory_mb=1)
    with pytest.raises(ValueError, match="isolation"):
        Sandbox(isolation="docker")


# ----------------------------------------------------------------------------- stalls
@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    pass",
        "import time\ntime.sleep(30)",
        "x = 9**9**9**9",
        "import sys, os\nos.close(1)\nos.close(2)\nwhile True:\n    pass",  # closes its pipes, keeps running
    ],
    ids=["busy-loop", "sleep", "huge-power", "closed-pipes"],
)
def test_infinite_work_times_out(box, code):
    start = time.perf_counter()
    run = box.run_script(code)
    assert run.status == "timeout"
    assert time.perf_counter() - start < LIMITS.timeout_s + 1.5


@pytest.mark.parametrize(
    "code",
    [
        "import os\nwhile True:\n    os.fork()",
        "import subprocess\nsubprocess.run(['sleep', '30'])",
        "import os\nos.system('sleep 30 &')",
        "import os\nos.posix_spawn('/bin/sleep', ['sleep', '30'], {})",
        "import os\nos.execv('/bin/sleep', ['sleep', '30'])",
        "import multiprocessing as mp\np = mp.Process(target=print)\np.start()",
        "import pty\npty.fork()",
        "import threading\nts = [threading.Thread(target=lambda: __import__('time').sleep(30)) for _ in range(4)]\n"
        "[t.start() for t in ts]\nimport os\nos._exit(0)",
    ],
    ids=["fork-bomb", "subprocess", "system", "posix_spawn", "exec", "multiprocessing", "pty", "threads"],
)
def test_no_process_creation_and_nothing_survives(box, code):
    run = box.run_script(code)
    assert run.status in ("error", "timeout", "ok")
    assert "sleep" not in {p.name() for p in psutil.Process().children(recursive=True)}


@pytest.mark.parametrize(
    "code",
    [
        "x = bytearray(10**10)",
        "xs = []\nwhile True:\n    xs.append(' ' * 10**7)",
        "x = [0] * 10**9",
    ],
)
def test_memory_bombs_fail_fast(box, code):
    start = time.perf_counter()
    run = box.run_script(code)
    assert run.status in ("error", "timeout")
    assert time.perf_counter() - start < LIMITS.timeout_s + 1.5


@pytest.mark.parametrize(
    "code",
    [
        "while True:\n    print('x' * 10**5)",
        "import sys\nsys.stderr.write('e' * 10**8)",
        "import os\nwhile True:\n    os.write(1, b'y' * 65536)",
    ],
)
def test_huge_output_is_capped(box, code):
    run = box.run_script(code)
    assert run.status in ("output_limit", "error", "timeout")
    assert len(run.stdout) <= LIMITS.max_output_bytes and len(run.stderr) <= 4096


# ----------------------------------------------------------------------------- secrets and files
def test_parent_environment_is_invisible(box, monkeypatch):
    monkeypatch.setenv("RAGEN_SANDBOX_SECRET", "TOP-SECRET-ENV")
    code = (
        "import os\nprint(sorted(os.environ.items()))\n"
        "for p in ('/proc/self/environ', f'/proc/{os.getppid()}/environ', '/proc/1/environ'):\n"
        "    try:\n        print(open(p, 'rb').read())\n    except Exception as e:\n        print(type(e).__name__)"
    )
    run = box.run_script(code)
    assert run.status == "ok"
    assert "TOP-SECRET-ENV" not in run.stdout + run.stderr
    assert "RAGEN_SANDBOX_SECRET" not in run.stdout


@pytest.mark.parametrize(
    "template",
    [
        "print(open({path!r}).read())",
        "import os\nfd = os.open({path!r}, os.O_RDONLY)\nprint(os.read(fd, 100))",
        "import pathlib\nprint(pathlib.Path({path!r}).read_text())",
        "import os\nprint(os.listdir(os.path.dirname({path!r})))",
        "import os\nrel = os.path.relpath({path!r})\nprint(open(rel).read())",
        "import os\nos.symlink({path!r}, 'link')\nprint(open('link').read())",
        "import os\nos.link({path!r}, 'hard')\nprint(open('hard').read())",
        "import io\nprint(io.open_code({path!r}).read())",
        "import os\nd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)\n"
        "print(os.open(os.path.relpath({path!r}, os.path.dirname(os.__file__)), os.O_RDONLY, dir_fd=d))",
    ],
    ids=["open", "os.open", "pathlib", "listdir", "relative", "symlink", "hardlink", "open_code", "dir_fd"],
)
def test_files_outside_the_workdir_cannot_be_read(box, tmp_path, template):
    secret = _secret_file(tmp_path)
    run = box.run_script(template.format(path=str(secret)))
    assert run.status == "error"
    assert "TOP-SECRET-42" not in run.stdout + run.stderr
    assert "secret.txt" not in run.stdout


@pytest.mark.parametrize(
    "template",
    [
        "open({path!r}, 'w').write('pwned')",
        "import os\nos.close(os.open({path!r}, os.O_WRONLY | os.O_CREAT))",
        "import pathlib\npathlib.Path({path!r}).write_text('pwned')",
        "import os\nopen('x', 'w').close()\nos.rename('x', {path!r})",
        "import shutil\nopen('x', 'w').close()\nshutil.copy('x', {path!r})",
        "import os\nos.mkdir({path!r})",
        "import os\nos.chdir('..')\nopen({name!r}, 'w').write('pwned')",
    ],
    ids=["open", "os.open", "pathlib", "rename", "shutil.copy", "mkdir", "chdir"],
)
def test_files_outside_the_workdir_cannot_be_written(box, tmp_path, template):
    target = tmp_path / "pwned.txt"
    run = box.run_script(template.format(path=str(target), name="pwned.txt"))
    assert run.status == "error"
    assert not target.exists()
    assert not any(p.name == "pwned.txt" for p in tmp_path.rglob("*"))


def test_secret_file_is_not_deleted_or_changed(box, tmp_path):
    secret = _secret_file(tmp_path)
    code = f"import os\nfor f in (os.remove, os.unlink, lambda p: os.truncate(p, 0), lambda p: os.chmod(p, 0)):\n    try:\n        f({str(secret)!r})\n    except Exception:\n        pass"
    assert box.run_script(code).status == "ok"
    assert secret.read_text() == "TOP-SECRET-42"


def test_writing_inside_the_workdir_works_and_is_removed(box):
    code = "import os\nos.mkdir('d')\nopen('d/f.txt', 'w').write('hi')\nos.chmod('d', 0)\nprint(os.getcwd())"
    run = box.run_script(code)
    assert run.status == "ok"
    assert not os.path.exists(run.stdout.strip())  # the fixture checks tmp_root is empty too


# ----------------------------------------------------------------------------- network and signals
def test_no_network(box):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    try:
        for code in (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=0.5)",
            "import _socket",
            f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}', timeout=0.5)",
        ):
            run = box.run_script(code)
            assert run.status == "error", code
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    finally:
        server.close()


def test_signals_cannot_reach_other_processes(box):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        for code in (
            f"import os\nos.kill({victim.pid}, 9)",
            f"import os\nos.killpg({victim.pid}, 9)",
            f"import os, signal\nsignal.pidfd_send_signal(os.pidfd_open({victim.pid}), 9)",
            "import os\nos.kill(os.getppid(), 0)",
        ):
            run = box.run_script(code)
            assert run.status == "error", code
        time.sleep(0.1)
        assert victim.poll() is None, "the victim was killed"
    finally:
        victim.kill()
        victim.wait()


def test_limits_cannot_be_raised(box):
    code = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))"
    assert box.run_script(code).status == "error"


# ----------------------------------------------------------------------------- the verdict
STDIN_PROBLEM = CodingProblem("Print the double.", (), (TestCase("2\n", "4\n"), TestCase("5\n", "10\n")))
CALL_PROBLEM = CodingProblem("Double.", (), (TestCase([2], 4), TestCase([5], 10)), fn_name="double")


@pytest.mark.parametrize(
    "code",
    [
        "import sys\nsys.exit(0)",
        "import os\nos._exit(0)",
        "raise SystemExit",
        "print(4)\nimport sys\nsys.exit(1)",  # right output for test 1, but a runtime error
        "open('expected_output.txt', 'w').write('4')\nopen('../expected.txt', 'w').write('4')",
        "import builtins\nbuiltins.print = lambda *a, **k: None\nprint('x')",
    ],
    ids=["exit0", "os._exit0", "SystemExit", "exit1", "expected-file", "patch-print"],
)
def test_stdin_verdict_cannot_be_faked(box, code):
    report = Grader(box, cache_size=0).grade(code, STDIN_PROBLEM)
    assert report.passed == 0


@pytest.mark.parametrize(
    "code",
    [
        "class Yes:\n    def __eq__(self, other):\n        return True\ndef double(x):\n    return Yes()",
        "class Int(int):\n    def __eq__(self, other):\n        return True\ndef double(x):\n    return Int(0)",
        "import sys\nsys.exit(0)",
        "def double(x):\n    import os\n    os._exit(0)",
        "def double(x):\n    raise SystemExit(0)",
        "import json\njson.dumps = lambda *a, **k: '4'\ndef double(x):\n    return -1",
        "import builtins\nbuiltins.print = None\nbuiltins.repr = None\ndef double(x):\n    print(2 * x)",
        "def double(x):\n    print('4')\n    return None",
    ],
    ids=["eq-object", "eq-int", "exit0", "os._exit", "SystemExit", "patch-json", "patch-builtins", "print-not-return"],
)
def test_function_verdict_cannot_be_faked(box, code):
    report = Grader(box, cache_size=0).grade(code, CALL_PROBLEM)
    assert report.passed == 0, [o.got for o in report.outcomes]


def test_honest_programs_pass(box):
    grader = Grader(box, cache_size=0)
    assert grader.grade("print(2 * int(input()))", STDIN_PROBLEM).all_passed
    assert grader.grade("def double(x):\n    return 2 * x", CALL_PROBLEM).all_passed
