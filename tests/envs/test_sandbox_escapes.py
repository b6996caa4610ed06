"""Known ways out of the DeepCoder sandbox, under every isolation this machine supports.

The audit hook of the driver is a Python-level policy and can be switched off from inside the
program (module-global tampering, helper code replacement, ``str`` subclasses passing the
import check, thread races on its re-entrancy flag, frame walks to its globals, ``marshal``
code forgery). So each payload below runs twice per isolation: with the hook installed,
through a real route around it where one is short (``tamper``, ``str-subclass``), and with
the hook off (``audit_hook=False``: the state every one of those routes reaches). Under
``isolation="bwrap"`` the kernel must hold either way: the secret file outside the run's
directory and the shipped problem file cannot be read (they are not in its filesystem),
nothing is written outside, no process or file is left behind. Under ``"weak"`` the payloads
of :data:`WEAK_ESCAPES` are not guaranteed to be stopped (the fallback is documented as not a
security boundary): the test is reported as an expected failure when they get out (they do
on a root machine with ``unshare``, this project's CI), and every other payload must still
be stopped; no process or file may be left behind in either mode.

``RAGEN_REQUIRE_BWRAP=1`` (set by ``.ci/run``) turns a missing kernel sandbox into a failure
instead of a skip.
"""

from __future__ import annotations

import os
import sys
import uuid

import psutil
import pytest

from ragen_torchrl.envs.games.deepcoder_data import SHIPPED_PATH, CodingProblem, TestCase
from ragen_torchrl.envs.games.deepcoder_grading import Grader
from ragen_torchrl.envs.games.sandbox import Sandbox, SandboxLimits
from ragen_torchrl.envs.games.sandbox_box import _interpreter, _probe_bwrap

LIMITS = SandboxLimits(timeout_s=2.0, memory_mb=256, max_output_bytes=1 << 16)
WHY_NO_BWRAP = _probe_bwrap(_interpreter(None))
pytestmark = pytest.mark.filterwarnings("ignore:DeepCoder sandbox. isolation=weak")

# a payload prints LEAK:<what it got> when it got out; the secret never appears otherwise
PAYLOADS = {
    "read-secret": "print('LEAK:' + open({secret!r}).read())",
    "read-problem-file": "print('LEAK:' + open({problem!r}).read()[:100])",
    "write-outside": "open({outside!r}, 'w').write('x'); print('LEAK:wrote')",
    "shell": "import os\nos.system('cat {secret} > /dev/stderr; echo LEAK:shell')",
    "ctypes-libc": "import ctypes\nlibc = ctypes.CDLL(None)\nif libc.fork() >= 0: print('LEAK:forked')",
    "parent-proc": (
        "import os\nfor pid in os.listdir('/proc'):\n"
        "    if pid.isdigit() and pid not in ('1', str(os.getpid())):\n"
        "        try: print('LEAK:' + open(f'/proc/{{pid}}/root{secret}').read())\n"
        "        except OSError: pass"
    ),
    "parent-environ": (
        "import os\nfor pid in os.listdir('/proc'):\n"
        "    if pid.isdigit():\n"
        "        try: env = open(f'/proc/{{pid}}/environ', 'rb').read()\n"
        "        except OSError: continue\n"
        "        if b'PATH=' in env: print('LEAK:environ')"
    ),
    "double-fork-setsid": (
        "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(20)', {token!r}])\n"
        "    os._exit(0)\ntime.sleep(0.2)\nprint('LEAK:forked')"
    ),
    "pdeathsig": (
        "import ctypes, os, sys, time\nlibc = ctypes.CDLL(None)\nif os.fork() == 0:\n"
        "    libc.prctl(1, 0)  # PR_SET_PDEATHSIG 0\n"
        "    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(20)', {token!r}])\n"
        "time.sleep(0.2)\nprint('LEAK:forked')"
    ),
    "immutable-file": (
        "import fcntl, os, struct\nfd = os.open('stuck', os.O_CREAT | os.O_RDONLY)\n"
        "fcntl.ioctl(fd, 0x40086602, struct.pack('i', 0x10))  # FS_IOC_SETFLAGS FS_IMMUTABLE_FL\n"
        "print('LEAK:immutable')"
    ),
    "nice": "import os\nos.setpriority(os.PRIO_PROCESS, 0, -10)\nprint('LEAK:nice', os.getpriority(os.PRIO_PROCESS, 0))",
}
# real routes around the hook, put before a payload
ROUTES = {
    # the hook reads the driver module's globals at every event: empty them
    "tamper": (
        "import sys\nd = sys.modules['sandbox_driver']\n"
        "d.DENIED_PREFIXES = ()\nd.DENIED_IMPORTS = frozenset()\nd.WRITE_EVENTS = {{}}\n"
    ),
    # a str whose split() hides the real module name from the import check
    "str-subclass": (
        "class S(str):\n    def split(self, *a, **k):\n        return ['harmless']\n"
        "import sys, posix\nsys.modules.pop('ctypes', None)\n"
        "ps = __import__(S('_posixsubprocess'))\n"
    ),
}
ROUTE_PAYLOAD = {
    # a process started through _posixsubprocess raises no audit event at all
    "str-subclass": (
        "import os\nr, w = os.pipe()\ner, ew = os.pipe()\n"
        "pid = ps.fork_exec(['/bin/cat', {secret!r}], [b'/bin/cat'], True, (), None, None, -1, -1, -1, w, -1, -1,"
        " er, ew, True, False, -1, None, None, None, -1, None, False)\n"
        "os.close(w)\nprint('LEAK:' + os.read(r, 100).decode())"
    ),
    "tamper": PAYLOADS["shell"],
}
# not guaranteed under the weak fallback (on a root machine with unshare all of them get out)
WEAK_ESCAPES = {
    "read-secret",
    "read-problem-file",
    "write-outside",
    "shell",
    "ctypes-libc",
    "parent-proc",
    "double-fork-setsid",
    "pdeathsig",
    "tamper",
    "str-subclass",
}


def _modes():
    out = [pytest.param("weak", id="weak")]
    if WHY_NO_BWRAP is None:
        out.append(pytest.param("bwrap", id="bwrap"))
    elif os.environ.get("RAGEN_REQUIRE_BWRAP") == "1":
        out.append(pytest.param("bwrap", id="bwrap"))  # fails in the fixture, naming the reason
    else:
        out.append(
            pytest.param("bwrap", id="bwrap", marks=pytest.mark.skip(reason=f"no kernel sandbox: {WHY_NO_BWRAP}"))
        )
    return out


@pytest.fixture
def world(tmp_path):
    """A secret outside the run directories, a path to write to, a token naming left processes."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    root = tmp_path / "runs"
    root.mkdir()
    token = f"ragen-escape-{uuid.uuid4().hex}"
    yield {"secret": str(secret), "problem": str(SHIPPED_PATH), "outside": str(tmp_path / "pwned"), "token": token}
    left = [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]
    for p in left:
        p.kill()
    assert not left, f"processes left behind: {left}"
    stuck = list(root.iterdir())
    for path in root.rglob("*"):  # an immutable file must not outlive the test either
        os.system(f"chattr -i {path} 2>/dev/null")
    assert not stuck, f"files left behind: {stuck}"


def _box(mode: str, tmp_root, hook: bool) -> Sandbox:
    if mode == "bwrap" and WHY_NO_BWRAP is not None:
        pytest.fail(f"RAGEN_REQUIRE_BWRAP=1 but the kernel sandbox does not work here: {WHY_NO_BWRAP}")
    return Sandbox(LIMITS, isolation=mode, tmp_root=tmp_root, audit_hook=hook)


def _check(run, world, escaped_expected: bool) -> None:
    leaked = "LEAK:" in run.stdout or "TOP-SECRET" in run.stdout + run.stderr
    wrote = os.path.exists(world["outside"])
    if escaped_expected:  # the weak fallback: documented as not a boundary
        if leaked or wrote:
            pytest.xfail("isolation=weak is not a security boundary (documented)")
        return
    assert not leaked, run.stdout + run.stderr
    assert not wrote


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_payload_with_the_hook_switched_off(mode, name, world, tmp_path):
    box = _box(mode, tmp_path / "runs", hook=False)
    run = box.run_script(PAYLOADS[name].format(**world))
    _check(run, world, escaped_expected=mode == "weak" and name in WEAK_ESCAPES)


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_real_routes_around_the_hook(mode, route, world, tmp_path):
    if route == "str-subclass" and sys.version_info[:2] != (3, 11):
        pytest.skip("the payload calls _posixsubprocess.fork_exec with Python 3.11's signature")
    box = _box(mode, tmp_path / "runs", hook=True)
    run = box.run_script((ROUTES[route] + ROUTE_PAYLOAD[route]).format(**world))
    _check(run, world, escaped_expected=mode == "weak" and route in WEAK_ESCAPES)


@pytest.mark.parametrize("mode", _modes())
def test_reading_the_problem_file_scores_zero(mode, world, tmp_path):
    # a program that looks for the expected answers in the problem's data file gets nothing;
    # weak: the hook refuses the package's directory wherever it is installed (site-packages
    # of a normal install lies inside the standard library's directory in many layouts)
    box = _box(mode, tmp_path / "runs", hook=mode == "weak")  # bwrap: the kernel alone
    problem = CodingProblem("Echo.", (TestCase("a\n", "a\n"),), (TestCase("b\n", "b\n"),))
    cheat = (
        "import json\ntry:\n    data = open({problem!r}).read()\n    print('found')\n"
        "except OSError as e:\n    print(type(e).__name__)"
    ).format(**world)
    run = box.run_script(cheat)
    assert run.stdout == ("FileNotFoundError\n" if mode == "bwrap" else "PermissionError\n")
    assert Grader(box).grade(cheat, problem).passed == 0


def test_auto_picks_the_strongest_and_weak_warns():
    with pytest.warns(RuntimeWarning, match="isolation=weak"):
        Sandbox(isolation="weak")
    expected = "bwrap" if WHY_NO_BWRAP is None else "weak"
    assert Sandbox(isolation="auto").isolation == expected


def test_interpreter_is_real():
    assert os.path.realpath(_interpreter(None)) == _interpreter(None) and os.path.exists(sys.executable)
