"""Runs one compiler or linker command of a grading build under limits of its own.

The grading trees name this file as CMake's compiler and linker launcher (limits.guard_launcher):
    python3 -I -S compile_guard.py compile|link COMMAND...
Without DISTLAB_GUARD in the environment the command simply runs (./distlab build, the kit's own
parts). The grader's build steps set it (limits.guard_prefix): JSON {"compile": [wall_s, cpu_s,
memory_mb, file_size_mb]} on the step that compiles a submission's files, {"link": [...]} on the
step that links the kit's programs with them. Then:
  - every process of the command gets the CPU, address-space and file-size limits (a 900 MiB
    `.skip` cannot be written, a template bomb cannot take the machine);
  - the command is stopped after wall_s seconds (a compiler reading a pipe uses no CPU);
  - a compile that holds a file open that is not a regular file (`#include "/dev/zero"`,
    `#include "/proc/self/fd/1"`, a FIFO) for two looks in a row (0.1 s apart) is stopped at once;
and the reason is printed as a compiler error, naming the source file.
Standard library only, no import of pydistlab: it runs inside the build sandbox.
"""
from __future__ import annotations

import json
import os
import resource
import select
import signal
import stat
import sys
import time

POLL_S = 0.1
PATTERNS = {"File size limit exceeded": "wrote a file larger than the file-size limit of {fsize} MiB",
            "File too large": "wrote a file larger than the file-size limit of {fsize} MiB",
            "CPU time limit exceeded": "used more than its {cpu} s of CPU time",
            "out of memory": "needed more than the memory limit of {mem} MiB",
            "Cannot allocate memory": "needed more than the memory limit of {mem} MiB",
            "std::bad_alloc": "needed more than the memory limit of {mem} MiB"}


def _source(cmd: list[str], flags: tuple[str, ...] = ("-c", "-o")) -> str:
    """The file a compile reads (after -c), else the output (after -o), else the program."""
    for flag in flags:
        if flag in cmd[:-1]:
            return cmd[cmd.index(flag) + 1]
    return cmd[0]


def _tree(pid: int) -> list[int]:
    """pid and its descendants (through /proc/<pid>/task/<tid>/children); [pid] without /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return out


def _odd_files(pid: int) -> set[str]:
    """'pid fd target' of each open descriptor (past 0-2) of the command's processes that is not a
    regular file, a folder or /dev/null."""
    found = set()
    for p in _tree(pid):
        try:
            fds = os.listdir(f"/proc/{p}/fd")
        except OSError:
            continue
        for fd in fds:
            if not fd.isdigit() or int(fd) < 3:
                continue
            path = f"/proc/{p}/fd/{fd}"
            try:
                target = os.readlink(path)
                mode = os.stat(path).st_mode
            except OSError:
                continue
            if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or target == "/dev/null":
                continue
            found.add(f"{p} {fd} {target}")
    return found


def _limit(name: int, value: int) -> None:
    try:
        resource.setrlimit(name, (value, value))
    except (ValueError, OSError):
        pass


def main() -> int:
    kind, cmd = sys.argv[1], sys.argv[2:]
    try:
        limits = json.loads(os.environ.get("DISTLAB_GUARD", "{}")).get(kind)
    except (ValueError, AttributeError):
        print("compile_guard: DISTLAB_GUARD is not valid JSON", file=sys.stderr)
        return 2
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):   # Python ignores them; a compiler must not
        signal.signal(sig, signal.SIG_DFL)
    if not limits:
        os.execvp(cmd[0], cmd)
    wall, cpu, mem, fsize = (int(x) for x in limits)
    what = f"the compile of {_source(cmd)}" if kind == "compile" else f"the link of {_source(cmd, ('-o',))}"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            os.close(read_end)
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(write_end)
            _limit(resource.RLIMIT_CPU, cpu)
            _limit(resource.RLIMIT_AS, mem * 1024 * 1024)
            _limit(resource.RLIMIT_FSIZE, fsize * 1024 * 1024)
            _limit(resource.RLIMIT_CORE, 0)
            env = {k: v for k, v in os.environ.items() if k != "DISTLAB_GUARD"}
            os.execvpe(cmd[0], cmd, env)
        except BaseException as e:
            os.write(2, f"compile_guard: cannot run {cmd[0]}: {e}\n".encode())
        os._exit(127)
    os.close(write_end)
    start, tail, seen, reason, status, open_ = time.monotonic(), b"", set(), "", None, True
    while status is None:
        ready, _, _ = select.select([read_end] if open_ else [], [], [], POLL_S)
        if ready:
            data = os.read(read_end, 65536)
            open_ = bool(data)   # at the end of the output, only wait
            if data:
                os.write(1, data)
                tail = (tail + data)[-8192:]
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
            break
        if time.monotonic() - start > wall:
            reason = f"took longer than {wall} s (a file that never ends, or runaway templates)"
        elif kind == "compile":
            odd = _odd_files(pid)
            stuck = odd & seen
            seen = odd
            if stuck:
                target = sorted(stuck)[0].split(" ", 2)[2]
                reason = (f"read {target}, which is not a regular file (an #include or .incbin of a "
                          f"device, a pipe or a /proc file)")
        if reason:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
    while open_:   # what is left in the pipe (the command's last words)
        ready, _, _ = select.select([read_end], [], [], 0.5)
        data = os.read(read_end, 65536) if ready else b""
        if not data:
            break
        os.write(1, data)
        tail = (tail + data)[-8192:]
    code = os.waitstatus_to_exitcode(status)
    if not reason and code != 0:
        text = tail.decode(errors="replace")
        reason = next((r for p, r in PATTERNS.items() if p in text), "")
        if -code == signal.SIGXFSZ:
            reason = PATTERNS["File size limit exceeded"]
        elif -code == signal.SIGXCPU:
            reason = PATTERNS["CPU time limit exceeded"]
        reason = reason.format(fsize=fsize, cpu=cpu, mem=mem)
    if reason:
        os.write(1, f"{_source(cmd) if kind == 'compile' else cmd[0]}: error: {what} {reason}; "
                    f"stopped by the grader's sandbox\n".encode())
        return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
