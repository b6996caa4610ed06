"""The sandbox's cleanup cannot be defeated by a program or turned against the host.

A run must leave no process and no byte behind, whatever the program did to its directory
(deep nesting, files written until it is killed, symlinks to host files, ``chmod 0``), must
never change a host file or the temporary root's mode, must keep its files within its
memory, and the trainer must decode nothing unbounded from it. Each scenario runs under
every isolation this machine has, a few times where it is a race. ``.ci/run`` runs this
file a second time without the permission-bypass capabilities (as a non-root trainer sees
files: a mode-0 directory cannot be opened by its owner).
"""

from __future__ import annotations

import marshal
import os
import pathlib
import random
import stat
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest

from ragen_torchrl.envs.games import sandbox as sandbox_module
from ragen_torchrl.envs.games.deepcoder_data import CodingProblem, TestCase
from ragen_torchrl.envs.games.deepcoder_grading import SANDBOX_ERROR, Grader
from ragen_torchrl.envs.games.remove_tree import remove_tree
from ragen_torchrl.envs.games.sandbox import (
    MAX_VALUE_DEPTH,
    Sandbox,
    SandboxLimits,
    bwrap_available,
    decode_value,
    kill_box,
    weak_read_policy,
)
from ragen_torchrl.envs.games.sandbox_driver import readable

ISOLATIONS = ["weak"] + (["bwrap"] if bwrap_available() else [])
pytestmark = pytest.mark.filterwarnings("ignore:DeepCoder sandbox. isolation=weak")

# 1,100 directories nested by wrapping the tree in a new parent (each path the program uses
# stays short), one file at the bottom, then files written until the time limit kills it
NEST_AND_FILL = """
import os
os.mkdir('x')
for _ in range(1100):
    os.mkdir('n')
    os.rename('x', 'n/x')
    os.rename('n', 'x')
fd = os.open('x', os.O_RDONLY)
i = 0
while True:
    try:
        with open(f'f{i}', 'wb') as f:
            f.write(b'z' * CHUNK)
    except OSError:
        pass
    i += 1
"""
# files and directories created as fast as possible until the time limit
CREATE_UNTIL_KILLED = """
import os
i = 0
while True:
    try:
        os.mkdir(f'd{i}')
        open(f'd{i}/f', 'w').close()
        open(f'f{i}', 'w').close()
    except OSError:
        pass
    i += 1
"""


def _limits(**kw) -> SandboxLimits:
    # a max_open_files no other test uses names this test's processes (it is in their command line)
    kw.setdefault("max_open_files", random.randrange(100, 1000))
    kw.setdefault("timeout_s", 0.5)
    kw.setdefault("memory_mb", 256)
    return SandboxLimits(**kw)


def _box_processes(limits: SandboxLimits) -> list[psutil.Process]:
    want = (limits.max_open_files, limits.max_open_files)
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        for arg in (proc.info["cmdline"] or [])[-1:]:
            try:
                cfg = marshal.loads(bytes.fromhex(arg))
            except (ValueError, EOFError, TypeError):
                continue
            if isinstance(cfg, dict) and cfg.get("rlimits", {}).get("RLIMIT_NOFILE") == want:
                out.append(proc)
    return out


def _du(path) -> int:
    """Bytes under ``path`` (iterative: the trees here are deeper than the recursion limit)."""
    total, stack = 0, [os.fspath(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    total += entry.stat(follow_symlinks=False).st_size
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            pass
    return total


@pytest.fixture
def tmp_root(tmp_path):
    root = tmp_path / "runs"
    root.mkdir()
    os.chmod(root, 0o1777)  # like /tmp: the cleanup must never change it
    yield root
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o1777, "the cleanup changed the temporary root's mode"


# ----------------------------------------------------------------------------- S1, S7: nothing left
@pytest.mark.parametrize("mode", ISOLATIONS)
@pytest.mark.parametrize("hook", [True, False], ids=["hook", "no-hook"])
def test_deep_nesting_and_writes_until_killed_leave_nothing(mode, hook, tmp_root):
    limits = _limits(max_file_mb=1)
    box = Sandbox(limits, isolation=mode, tmp_root=tmp_root, audit_hook=hook)
    chunk = 1 << 20 if mode == "bwrap" else 4096  # bwrap: fills its quota; weak: the host's disk
    run = box.run_script(NEST_AND_FILL.replace("CHUNK", str(chunk)))
    assert run.status == "timeout", run.stderr
    assert list(tmp_root.iterdir()) == [], f"{_du(tmp_root)} bytes left"
    assert _box_processes(limits) == []


@pytest.mark.parametrize("mode", ISOLATIONS)
def test_files_created_until_the_time_limit_leave_nothing(mode, tmp_root):
    limits = _limits()
    box = Sandbox(limits, isolation=mode, tmp_root=tmp_root)
    for _ in range(3):
        run = box.run_script(CREATE_UNTIL_KILLED)
        assert run.status == "timeout", run.stderr
        assert list(tmp_root.iterdir()) == []  # checked right after the return: nothing still writing
        assert _box_processes(limits) == []


def test_kill_box_waits_for_the_processes_inside(tmp_path):
    # a PID namespace's init whose child ignores nothing: once kill_box returns, both are gone
    unshare = sandbox_module.shutil.which("unshare")
    if unshare is None or not sandbox_module.namespaces_available():
        pytest.skip("no unshare with user and PID namespaces here")
    marker = f"ragen-kill-{random.randrange(1 << 30)}"
    code = f"import os, time\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(60)  # {marker}"
    proc = subprocess.Popen([unshare, *sandbox_module.UNSHARE_ARGS, sys.executable, "-c", code], start_new_session=True)
    deadline = time.monotonic() + 10
    while len([p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]) < 3:
        assert time.monotonic() < deadline, "the processes did not start"
        time.sleep(0.01)
    assert kill_box(proc) is True
    left = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert left == []


# ----------------------------------------------------------------------------- S2: host files untouched
@pytest.mark.parametrize("mode", ISOLATIONS)
def test_symlink_to_a_host_file_in_a_read_only_dir(mode, tmp_root, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("host file")
    os.chmod(victim, 0o644)
    code = (
        "import os\nos.mkdir('ro')\nos.symlink({v!r}, 'ro/link')\nos.symlink('/', 'ro/root')\n"
        "os.chmod('ro', 0o555)\nprint('made')"
    ).format(v=str(victim))
    run = Sandbox(_limits(), isolation=mode, tmp_root=tmp_root, audit_hook=False).run_script(code)
    assert run.stdout == "made\n", run.stderr
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o644
    assert victim.read_text() == "host file"
    assert list(tmp_root.iterdir()) == []


@pytest.mark.parametrize("mode", ISOLATIONS)
@pytest.mark.parametrize("hook", [True, False], ids=["hook", "no-hook"])
def test_workdir_and_subdirs_made_mode_zero(mode, hook, tmp_root):
    code = (
        "import os\nos.makedirs('a/b/c')\nopen('a/b/c/f', 'w').write('x')\nopen('a/f', 'w').write('x')\n"
        "os.chmod('a/b/c', 0)\nos.chmod('a/b', 0o500)\nos.chmod('a', 0)\nos.chmod(os.getcwd(), 0)\nprint('made')"
    )
    run = Sandbox(_limits(), isolation=mode, tmp_root=tmp_root, audit_hook=hook).run_script(code)
    assert run.stdout == "made\n", run.stderr
    assert list(tmp_root.iterdir()) == []  # the fixture checks the root kept its 1777


@pytest.fixture
def fast_dir(tmp_path):
    # a tmpfs where there is one (a journaling disk spends milliseconds per rmdir)
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(dir="/dev/shm", prefix="ragen_remove_tree_")
        yield pathlib.Path(path)
        remove_tree(path)
    else:
        yield tmp_path


def test_remove_tree_is_safe_and_unbounded(tmp_path, fast_dir):
    victim = tmp_path / "victim.txt"
    victim.write_text("host file")
    os.chmod(victim, 0o600)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    parent = fast_dir / "parent"
    parent.mkdir()
    os.chmod(parent, 0o1777)
    top = parent / "run"
    top.mkdir()
    # 3,000 levels (far beyond the recursion limit and the default descriptor limit) through dir fds
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for i in range(3000):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        if i % 500 == 1:  # links to host files in a read-only directory
            os.symlink(victim, f"/proc/self/fd/{fd}/link")
            os.symlink(outside, f"/proc/self/fd/{fd}/dirlink")
            os.fchmod(fd, 0o555)
        os.close(fd)
        fd = sub
    os.close(fd)
    (top / "weird\nname \udcff").write_text("x")
    os.mkdir(top / "zero")
    (top / "zero" / "f").write_text("x")
    os.chmod(top / "zero", 0)
    os.chmod(top, 0)
    # in a child with 32 descriptors: the removal must not need one per level
    script = (
        "import importlib.util, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))\n"
        "spec = importlib.util.spec_from_file_location('rt', sys.argv[1])\n"
        "rt = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(rt)\n"
        "print(rt.remove_tree(sys.argv[2]))"
    )
    module = os.path.join(os.path.dirname(sandbox_module.__file__), "remove_tree.py")
    done = subprocess.run([sys.executable, "-c", script, module, str(top)], capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr
    assert not os.path.lexists(top)
    assert stat.S_IMODE(os.stat(victim).st_mode) == 0o600 and victim.read_text() == "host file"
    assert (outside / "keep").read_text() == "keep"
    assert stat.S_IMODE(os.stat(parent).st_mode) == 0o1777


def test_remove_tree_of_a_symlink_removes_only_the_link(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "f").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert remove_tree(link) is True
    assert (target / "f").read_text() == "x"
    assert remove_tree(tmp_path / "missing") is True


# ----------------------------------------------------------------------------- S3: files count as memory
def _shmem_kb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1])
    raise AssertionError("no Shmem line in /proc/meminfo")


@pytest.mark.skipif("bwrap" not in ISOLATIONS, reason="the quota is the kernel sandbox's tmpfs")
def test_files_and_shared_memory_stay_within_memory_mb():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    limits = _limits(timeout_s=5.0, memory_mb=256, max_file_mb=16)
    # run dir on a host tmpfs, where the host's shared memory would hold the files
    box = Sandbox(limits, isolation="bwrap", tmp_root="/dev/shm", audit_hook=False)
    code = (
        "import os\nn = 0\nfor where in ('.', '/dev/shm', '/tmp'):\n    for i in range(96):\n"
        "        try:\n            with open(f'{where}/f{i}', 'wb') as f:\n                f.write(b'z' * (16 << 20))\n"
        "            n += 1\n        except OSError:\n            break\n"
        "for call in (lambda: os.memfd_create('m'),):\n    try:\n        call()\n        print('memfd')\n"
        "    except OSError:\n        pass\nprint(n)"
    )
    base, peak, stop = _shmem_kb(), [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _shmem_kb())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        run = box.run_script(code)
    finally:
        stop.set()
        sampler.join()
    assert run.status == "ok", run.stderr
    files = int(run.stdout.split()[-1])
    assert "memfd" not in run.stdout
    assert files * 16 <= limits.disk_mb  # the quota stopped the writes
    assert (peak[0] - base) / 1024 <= limits.memory_mb, f"host shared memory grew {(peak[0] - base) / 1024:.0f} MB"


def test_disk_mb_is_part_of_memory_mb():
    limits = SandboxLimits(memory_mb=256)
    assert limits.disk_mb == 64 and limits.rlimits()["RLIMIT_AS"] == ((256 - 64) << 20,) * 2
    assert SandboxLimits(memory_mb=64).disk_mb == 16
    with pytest.raises(ValueError, match="disk_mb"):
        SandboxLimits(memory_mb=256, disk_mb=200)


# ----------------------------------------------------------------------------- S4: bounded parses
DEEP_RESULT = """
import os, sys
frame = sys._getframe()
while frame is not None and 'token' not in frame.f_locals:
    frame = frame.f_back
token, out = frame.f_locals['token'], frame.f_locals['out']
os.write(out, (token + ' ' + '[' * 100000 + ']' * 100000 + '\\n').encode())
os._exit(0)
def f(x):
    return x
"""


@pytest.mark.parametrize("mode", ISOLATIONS)
def test_a_100000_deep_result_line_is_a_failed_test(mode, tmp_root):
    box = Sandbox(_limits(timeout_s=2.0), isolation=mode, tmp_root=tmp_root, audit_hook=False)
    run = box.call_function(DEEP_RESULT, "f", [1])
    assert (run.status, run.has_value) == ("error", False)
    problem = CodingProblem("Identity.", (), (TestCase([1], 1),), fn_name="f")
    report = Grader(box, cache_size=0).grade(DEEP_RESULT, problem)
    assert report.passed == 0 and report.outcomes[0].status == "error"


def test_decode_value_bounds():
    assert decode_value("[" * MAX_VALUE_DEPTH + "]" * MAX_VALUE_DEPTH)[0] is True
    deeper = MAX_VALUE_DEPTH + 1
    assert decode_value("[" * deeper + "]" * deeper) == (False, None)
    assert decode_value("{" * 10**5) == (False, None)
    # brackets inside strings are not nesting
    text = '["' + "[{" * 1000 + '\\"[", 1]'
    assert decode_value(text) == (True, ["[{" * 1000 + '"[', 1])
    assert decode_value("x" * ((1 << 22) + 1)) == (False, None)
    assert decode_value("[1,") == (False, None)


# ----------------------------------------------------------------------------- grading never raises
def test_errors_while_grading_are_failed_tests_not_cached(monkeypatch):
    box = Sandbox(_limits(), isolation="weak")
    grader = Grader(box)
    problem = CodingProblem("Echo.", (), (TestCase("a\n", "a\n"), TestCase("b\n", "b\n")))

    def broken(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(box, "run_script", broken)
    report = grader.grade("print(input())", problem)
    assert [o.status for o in report.outcomes] == [SANDBOX_ERROR] * 2 and report.passed == 0
    monkeypatch.undo()
    assert grader.grade("print(input())", problem).all_passed  # not cached: graded again


def test_a_run_that_cannot_start_is_a_sandbox_error(monkeypatch, tmp_root):
    box = Sandbox(_limits(), isolation="weak", tmp_root=tmp_root)

    def no_process(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(sandbox_module.subprocess, "Popen", no_process)
    run = box.run_script("print(1)")
    assert run.status == SANDBOX_ERROR and "Too many open files" in run.stderr
    assert list(tmp_root.iterdir()) == []


# ----------------------------------------------------------------------------- S5: weak read roots
@pytest.mark.parametrize("layout", ["non-editable", "venv", "debian"])
def test_weak_read_roots_exclude_package_data_in_every_layout(tmp_path, layout):
    lib = tmp_path / "py" / "lib" / "python3.11"
    site = {
        "non-editable": lib / "site-packages",
        "venv": tmp_path / "venv" / "lib" / "python3.11" / "site-packages",
        "debian": tmp_path / "py" / "lib" / "python3" / "dist-packages",
    }[layout]
    data = site / "ragen_torchrl" / "envs" / "games" / "data" / "problems.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("{}")
    (lib / "lib-dynload").mkdir(parents=True)
    other = lib / "dist-packages" / "hidden.json"  # a package dir the paths dict does not name
    other.parent.mkdir()
    other.write_text("{}")
    paths = {"stdlib": str(lib), "platstdlib": str(lib), "purelib": str(site), "platlib": str(site)}
    roots, denied = weak_read_policy(paths, str(site / "ragen_torchrl"))
    assert readable(str(lib / "os.py"), roots, denied)
    assert readable(str(lib / "lib-dynload" / "x.so"), roots, denied)
    assert not readable(str(data), roots, denied)
    assert not readable(str(other), roots, denied)


def test_weak_hook_refuses_installed_packages():
    # a file of an installed package (in this interpreter's site-packages, wherever that is)
    target = psutil.__file__
    run = Sandbox(_limits(timeout_s=2.0), isolation="weak").run_script(
        f"try:\n    open({target!r}).read()\n    print('read')\nexcept OSError as e:\n    print(type(e).__name__)"
    )
    assert run.stdout == "PermissionError\n"
