"""A seccomp filter for the kernel sandbox (classic BPF, built in pure Python, no libseccomp).

:func:`deny_filter` returns the raw ``struct sock_filter`` array that ``bwrap --seccomp FD``
loads before it starts the interpreter. It refuses, with ``EPERM``, every way out of the
sandbox's namespaces or past its limits that the kernel would otherwise still offer a
process without capabilities: new processes (``fork``, ``vfork``, ``clone`` without
``CLONE_THREAD``; ``clone3`` answers ``ENOSYS`` so the C library falls back to ``clone``,
whose flags the filter can read), namespace and mount calls, ``ptrace`` and cross-process
memory access, ``io_uring`` (whose operations bypass seccomp), kernel keyrings, ``bpf``,
``perf_event_open``, ``userfaultfd``, module loading, priority changes (``nice``), memory
that would live outside the run's limits (System V shared memory, message queues and
semaphores, POSIX message queues, ``memfd_create``: kernel or tmpfs memory that neither
``RLIMIT_AS`` nor the run's size-limited directory counts), and sockets of any family but
``AF_UNIX`` (the network namespace already has no interface).
Threads still work. A foreign architecture (x32 system calls included) is refused.

Only x86-64 has a table: elsewhere :func:`deny_filter` returns ``None`` and the sandbox runs
without a filter (the namespaces, the non-root uid and ``no_new_privs`` still hold).

Example:
    >>> prog = deny_filter("x86_64")
    >>> len(prog) % 8, deny_filter("sparc") is None
    (0, True)
"""

from __future__ import annotations

import platform
import struct

__all__ = ["deny_filter", "DENIED_SYSCALLS_X86_64"]

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 1, 38
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_AF_UNIX = 1
# seccomp_data offsets: nr, arch, then args[i] at 16 + 8 i (low word first on little endian)
_NR, _ARCH, _ARG0 = 0, 4, 16

#: system call name -> x86-64 number, all refused with EPERM
DENIED_SYSCALLS_X86_64 = {
    "shmget": 29,
    "shmat": 30,
    "shmctl": 31,
    "fork": 57,
    "vfork": 58,
    "semget": 64,
    "msgget": 68,
    "ptrace": 101,
    "syslog": 103,
    "personality": 135,
    "mknod": 133,
    "setpriority": 141,
    "sched_setscheduler": 144,
    "pivot_root": 155,
    "chroot": 161,
    "acct": 163,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "mq_open": 240,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "ioprio_set": 251,
    "mknodat": 259,
    "unshare": 272,
    "perf_event_open": 298,
    "fanotify_init": 300,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "sched_setattr": 314,
    "kexec_file_load": 320,
    "memfd_create": 319,
    "bpf": 321,
    "userfaultfd": 323,
    "pidfd_send_signal": 424,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "pidfd_open": 434,
    "pidfd_getfd": 438,
    "mount_setattr": 442,
    "memfd_secret": 447,
}
_CLONE, _CLONE3, _SOCKET = 56, 435, 41


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def deny_filter(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one), or ``None`` where there is no table."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64"):
        return None
    prog = [
        _ins(_LD_ABS, _ARCH),
        _ins(_JEQ, _AUDIT_ARCH_X86_64, 1, 0),
        _ins(_RET, _KILL),
        _ins(_LD_ABS, _NR),
        _ins(_JGE, _X32_BIT, 0, 1),  # x32 ABI numbers
        _ins(_RET, 0x00050000 | _EPERM),
        _ins(_JEQ, _CLONE3, 0, 1),
        _ins(_RET, 0x00050000 | _ENOSYS),
        # clone: threads only
        _ins(_JEQ, _CLONE, 0, 4),
        _ins(_LD_ABS, _ARG0),
        _ins(_JSET, _CLONE_THREAD, 0, 1),
        _ins(_RET, _ALLOW),
        _ins(_RET, 0x00050000 | _EPERM),
        # socket: AF_UNIX only
        _ins(_JEQ, _SOCKET, 0, 4),
        _ins(_LD_ABS, _ARG0),
        _ins(_JEQ, _AF_UNIX, 0, 1),
        _ins(_RET, _ALLOW),
        _ins(_RET, 0x00050000 | _EPERM),
    ]
    for nr in sorted(DENIED_SYSCALLS_X86_64.values()):
        prog.append(_ins(_JEQ, nr, 0, 1))
        prog.append(_ins(_RET, 0x00050000 | _EPERM))
    prog.append(_ins(_RET, _ALLOW))
    return b"".join(prog)
