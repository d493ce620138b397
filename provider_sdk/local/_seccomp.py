"""The seccomp filter every isolated local sandbox runs under, as a classic BPF program.

In the spirit of Docker's default profile: system calls that administer the machine
(modules, kexec, mounts, swap, clocks, keyrings, quotas, BPF, perf) fail with ``EPERM``;
so do new user namespaces (``unshare`` and ``clone`` with ``CLONE_NEWUSER``, and
``setns``), which would hand the code inside a fresh set of capabilities. ``clone3``
fails with ``ENOSYS``, so the C library falls back to ``clone``, whose flags a classic
filter can inspect (``clone3`` passes them in memory). Other namespace flags, and
``fork``/``clone`` without any, are allowed: the agent uses them. A mode with the setuid
or setgid bit fails with ``EPERM`` wherever a call sets one (``chmod`` and its kin,
``mknod``, and ``open``/``openat``/``creat`` when they create a file), so no file made
inside carries those bits onto the host; ``openat2``, which passes its mode in memory,
fails with ``ENOSYS`` (callers fall back to ``openat``), and io_uring, which would do the
same out of the filter's sight, with ``EPERM``.

The program is built here in pure Python (no libseccomp) and handed to bubblewrap with
``--seccomp FD``. It knows x86_64 and aarch64; any other architecture (including the
i386 and x32 ABIs on an x86_64 kernel) is killed.
"""

from __future__ import annotations

import errno
import platform
import struct

__all__ = ["CREATORS", "DENIED", "MODE_SETTERS", "SUPPORTED", "program"]

# Architectures (linux/audit.h) and their seccomp_data offsets (linux/seccomp.h).
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000
_NR, _ARCH = 0, 4


def _arg(index: int) -> int:
    """Offset of an argument's low 32 bits (both architectures are little-endian)."""
    return 16 + 8 * index


# Filter actions.
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

# Classic BPF opcodes used here.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JSET_K = 0x45
_RET_K = 0x06

CLONE_NEWUSER = 0x10000000
TIOCSTI = 0x5412
# personality() values Docker allows: the default, UNAME26, ADDR_NO_RANDOMIZE, both, and
# the query (0xffffffff) that changes nothing.
PERSONALITY_ALLOWED = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)

#: Denied outright with EPERM: name -> (x86_64 number, aarch64 number or None).
DENIED: dict[str, tuple[int, int | None]] = {
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "move_mount": (429, 429), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "open_tree": (428, 428),
    "mount_setattr": (442, 442),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "acct": (163, 89),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "adjtimex": (159, 171),
    "clock_adjtime": (305, 266),
    "iopl": (172, None), "ioperm": (173, None),
    "quotactl": (179, 60), "quotactl_fd": (443, 443), "lookup_dcookie": (212, 18),
    "setns": (308, 268), "syslog": (103, 116), "vhangup": (153, 58),
    "uselib": (134, None), "_sysctl": (156, None), "nfsservctl": (180, 42),
    # io_uring opens, creates and changes files without system calls a filter can see.
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
}
#: Calls that set a file's mode: name -> ((x86_64, aarch64 number), the mode's argument).
#: A mode with the setuid or setgid bit fails with EPERM.
MODE_SETTERS: dict[str, tuple[tuple[int | None, int | None], int]] = {
    "chmod": ((90, None), 1), "fchmod": ((91, 52), 1), "fchmodat": ((268, 53), 2),
    "fchmodat2": ((452, 452), 2), "mknod": ((133, None), 1), "mknodat": ((259, 33), 2),
    "creat": ((85, None), 1),
}
#: Calls that create a file only with O_CREAT or O_TMPFILE in their flags: name ->
#: ((x86_64, aarch64 number), the flags' argument, the mode's argument).
CREATORS: dict[str, tuple[tuple[int | None, int | None], int, int]] = {
    "open": ((2, None), 1, 2), "openat": ((257, 56), 2, 3),
}
S_ISUID_ISGID = 0o6000
O_CREAT_OR_TMPFILE = 0o100 | 0o20000000  # the same bits on x86_64 and aarch64
#: Checked by their arguments: name -> (x86_64 number, aarch64 number).
_UNSHARE = (272, 97)
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_OPENAT2 = (437, 437)
_PERSONALITY = (135, 92)
_IOCTL = (16, 29)

SUPPORTED = {"x86_64": AUDIT_ARCH_X86_64, "amd64": AUDIT_ARCH_X86_64,
             "aarch64": AUDIT_ARCH_AARCH64, "arm64": AUDIT_ARCH_AARCH64}


class _Asm:
    """A tiny assembler: instructions whose jump targets are labels, resolved at the end
    (classic BPF jumps forward only, by at most 255 instructions)."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.code.append((_LD_W_ABS, 0, 0, offset))

    def jump(self, op: int, k: int, true: str | int = 0, false: str | int = 0) -> None:
        self.code.append((op, true, false, k))

    def ret(self, action: int) -> None:
        self.code.append((_RET_K, 0, 0, action))

    def assemble(self) -> bytes:
        out = []
        for index, (op, true, false, k) in enumerate(self.code):
            jt, jf = (self._offset(index, t) for t in (true, false))
            out.append(struct.pack("=HBBI", op, jt, jf, k))
        return b"".join(out)

    def _offset(self, index: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp jump to {target} out of range ({offset})")
        return offset


def _arch_block(asm: _Asm, name: str, column: int) -> None:
    """The checks for one architecture (``column`` 0: x86_64, 1: aarch64)."""
    asm.label(name)
    asm.load(_NR)
    if column == 0:
        asm.jump(_JSET_K, X32_SYSCALL_BIT, "kill")
    for numbers in DENIED.values():
        nr = numbers[column]
        if nr is not None:
            asm.jump(_JEQ_K, nr, "eperm")
    asm.jump(_JEQ_K, _CLONE3[column], "enosys")
    asm.jump(_JEQ_K, _OPENAT2[column], "enosys")
    for setter, mode in MODE_SETTERS.values():
        if (nr := setter[column]) is not None:
            asm.jump(_JEQ_K, nr, f"mode{mode}")
    for creator, flags, mode in CREATORS.values():
        if (nr := creator[column]) is not None:
            asm.jump(_JEQ_K, nr, f"create{flags}_{mode}")
    asm.jump(_JEQ_K, _UNSHARE[column], "flags")
    asm.jump(_JEQ_K, _CLONE[column], "flags")
    asm.jump(_JEQ_K, _PERSONALITY[column], f"personality_{name}")
    asm.jump(_JEQ_K, _IOCTL[column], "ioctl")
    asm.ret(RET_ALLOW)
    asm.label(f"personality_{name}")
    asm.load(_arg(0))
    for value in PERSONALITY_ALLOWED:
        asm.jump(_JEQ_K, value, "allow")
    asm.ret(RET_ERRNO | errno.EPERM)


def program() -> bytes:
    """The filter as ``struct sock_filter`` records, in this machine's byte order."""
    asm = _Asm()
    asm.load(_ARCH)
    asm.jump(_JEQ_K, AUDIT_ARCH_X86_64, "x86_64")
    asm.jump(_JEQ_K, AUDIT_ARCH_AARCH64, "aarch64")
    asm.ret(RET_KILL_PROCESS)
    _arch_block(asm, "x86_64", 0)
    _arch_block(asm, "aarch64", 1)
    asm.label("flags")  # unshare(flags) and clone(flags, ...): no new user namespace
    asm.load(_arg(0))
    asm.jump(_JSET_K, CLONE_NEWUSER, "eperm")
    asm.ret(RET_ALLOW)
    asm.label("ioctl")  # TIOCSTI would type into a terminal the sandbox was given
    asm.load(_arg(1))
    asm.jump(_JEQ_K, TIOCSTI, "eperm")
    asm.ret(RET_ALLOW)
    # A mode argument: no setuid or setgid bit, so nothing made inside can carry one
    # onto the host. open and openat look at their mode only when they create a file.
    for flags, mode in sorted({(f, m) for _, f, m in CREATORS.values()}):
        asm.label(f"create{flags}_{mode}")
        asm.load(_arg(flags))
        asm.jump(_JSET_K, O_CREAT_OR_TMPFILE, f"mode{mode}")
        asm.ret(RET_ALLOW)
    for mode in sorted({m for _, m in MODE_SETTERS.values()} |
                       {m for _, _, m in CREATORS.values()}):
        asm.label(f"mode{mode}")
        asm.load(_arg(mode))
        asm.jump(_JSET_K, S_ISUID_ISGID, "eperm")
        asm.ret(RET_ALLOW)
    asm.label("allow")
    asm.ret(RET_ALLOW)
    asm.label("eperm")
    asm.ret(RET_ERRNO | errno.EPERM)
    asm.label("enosys")
    asm.ret(RET_ERRNO | errno.ENOSYS)
    asm.label("kill")
    asm.ret(RET_KILL_PROCESS)
    return asm.assemble()


def supported() -> bool:
    """Whether this machine's architecture is one the filter knows."""
    return platform.machine().lower() in SUPPORTED
