"""What the audit looks for in a submitted file: constructs no honest solution of the course needs.

Each rule names a construct (`what`: the name, header or path as written), its family (`rule`) and
why it is suspicious. Names are matched as tokens of lexer.py, so a comment never triggers a
finding and a string, raw string or line splice never hides one. A module may allow names its
reference legitimately uses (manifest key `audit_allow`, e.g. 01_threads' fork and waitpid).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from . import lexer
from .lexer import HEADER, IDENT, PUNCT, STRING, Lexed, Token


@dataclass(frozen=True)
class Finding:
    file: str      # the owned path
    line: int
    rule: str      # the family: asm, path, syscall, signal, fd, exit, attribute, dynamic, trace,
    #                process, environment, file, network, ipc, testing, directive, lexical, namespace
    what: str      # the construct as written (the name an allowlist names)
    why: str

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line, "rule": self.rule, "what": self.what, "why": self.why}


_WHY = {
    "asm": "inline assembly: can include any file's bytes at compile time (.incbin) or patch code",
    "path": "names a system path: reads the process's own state or devices (e.g. /proc/self/cmdline, /dev/fd/N)",
    "syscall": "a raw system call: bypasses the library functions a reader recognises",
    "signal": "a signal handler or signal sent: can turn a crash or a time limit into something else",
    "fd": "manipulates file descriptors: can reach the test's report or output channel",
    "exit": "ends or hooks the end of the process: a library has no reason to (the tests decide when to stop)",
    "attribute": "runs code before main or after exit, or changes which symbol the tests call",
    "dynamic": "loads or looks up symbols at run time: can replace the test framework's functions",
    "trace": "traces or changes another process",
    "process": "starts a program or a process, or signals one",
    "environment": "reads or changes the environment (secrets of the grader, the report's location)",
    "file": "reads or writes files: exercises compute in memory",
    "network": "uses the network",
    "ipc": "a kernel channel that can outlive the test (keyring, shared memory, message queue)",
    "testing": "names the test framework or the kit's test helpers: can change what a test checks",
    "directive": "a preprocessor directive that can change the meaning of the code around it",
    "lexical": "makes the code read differently to a person and to the compiler",
    "namespace": "adds declarations to a kit, standard or test namespace: can change what the tests call",
}

_NAMES: dict[str, str] = {}
for _rule, _names in {
    "asm": "asm __asm__ __asm",
    "syscall": "syscall __syscall",
    "signal": "sigaction sigaltstack signal sigset sigsetjmp siglongjmp bsd_signal sysv_signal",
    "fd": "dup dup2 dup3 fcntl ioctl close close_range",
    "exit": "exit _exit _Exit quick_exit abort atexit at_quick_exit set_terminate terminate",
    "dynamic": "dlsym dlvsym dlopen dlmopen dladdr dlinfo",
    "trace": "ptrace process_vm_readv process_vm_writev prctl",
    "process": "fork vfork clone clone3 execl execlp execle execv execvp execvpe execve fexecve system "
               "popen pclose posix_spawn posix_spawnp kill killpg tgkill tkill daemon setsid setpgid",
    "environment": "getenv secure_getenv environ __environ setenv putenv unsetenv clearenv",
    "file": "fopen fopen64 freopen fdopen creat creat64 open open64 openat openat2 ifstream ofstream "
            "fstream basic_ifstream basic_ofstream basic_fstream filebuf basic_filebuf filesystem "
            "opendir readlink readlinkat mkfifo memfd_create unlink unlinkat remove rename "
            "truncate ftruncate mmap sendfile splice read pread write pwrite",
    "network": "socket socketpair connect bind listen accept accept4 getaddrinfo gethostbyname",
    "ipc": "keyctl add_key request_key shmget shmat shm_open shm_unlink semget semop msgget msgsnd "
           "mq_open",
    "testing": "testing gtest RUN_ALL_TESTS TEST TEST_F TEST_P TYPED_TEST TYPED_TEST_P FAIL SUCCEED "
               "ADD_FAILURE ADD_FAILURE_AT INSTANTIATE_TEST_SUITE_P FRIEND_TEST SCOPED_TRACE "
               "distlab_testing",
    "directive": "_Pragma __pragma",
}.items():
    for _n in _names.split():
        _NAMES[_n] = _rule

#: Names that are common words: a finding only when called (followed by `(`), not as a member
#: (`x.close()`) or in another namespace (`dist::send`).
_CALL_ONLY = {"signal", "sigset", "close", "open", "read", "write", "pread", "pwrite", "remove", "rename",
              "exit", "abort", "terminate", "system", "kill", "connect", "bind", "listen", "accept",
              "socket", "truncate", "splice", "unlink", "daemon", "clone", "dup", "mmap", "TEST",
              "FAIL", "SUCCEED"}
_PREFIXES = {"EXPECT_": "testing", "ASSERT_": "testing", "GTEST_": "testing", "SYS_": "syscall",
             "__NR_": "syscall"}
_ATTRIBUTES = {"constructor", "destructor", "section", "init_priority", "alias", "weak", "weakref",
               "ifunc", "symver", "visibility", "used", "retain", "cleanup"}
_NAMESPACES = {"std", "dist", "distlab", "testing", "gtest", "Eigen", "CLI", "nlohmann"}
_HEADERS = {
    "syscall": r"(sys/)?syscall\.h|linux/.*|asm/.*|asm-generic/.*",
    "signal": r"signal\.h|csignal|sys/signalfd\.h",
    "fd": r"fcntl\.h|sys/ioctl\.h",
    "dynamic": r"dlfcn\.h|link\.h",
    "trace": r"sys/ptrace\.h|sys/prctl\.h|sys/uio\.h",
    "process": r"spawn\.h|sys/wait\.h",
    "file": r"fstream|filesystem|dirent\.h|sys/mman\.h",
    "network": r"sys/socket\.h|netinet/.*|arpa/.*|netdb\.h|sys/un\.h",
    "ipc": r"sys/(shm|ipc|msg|sem)\.h|mqueue\.h|keyutils\.h|linux/keyctl\.h",
    "testing": r"gtest/.*|gmock/.*|.*distlab_testing.*",
}
# (<cstdlib>, <cstdio>, <unistd.h> serve ordinary code too: what is called from them is the finding.)
_PATH = re.compile(r"(?:^|[^\w.])/+(proc|dev|sys|etc|tmp|run|var|home|root|autograder|usr|boot|mnt)(?:/|$)")
_ABSOLUTE = re.compile(r"\s*/+[\w.-]+/")   # "/any/absolute/path": outside the test's view
_SECRET_WORDS = re.compile(r"gtest_output|GTEST_|\.incbin|\.include|xml:|/fd/")
_DIRECTIVES_ANYWHERE = {"include_next", "embed", "line", "import", "ident", "sccs", "assert", "unassert"}
_HEADER_EXTENSIONS = (".hpp", ".h", ".hh", ".hxx", ".cuh", ".ipp", ".tpp", ".inl")


def audit_text(path: str, text: str, stub: str | None = None) -> list[Finding]:
    """The findings of one owned file. stub: the kit's version of the file (exercises/), whose
    directives a header may keep."""
    lx = lexer.lex(text)
    found: list[Finding] = []

    def add(line: int, rule: str, what: str, why: str = "") -> None:
        found.append(Finding(path, line, rule, what, why or _WHY[rule]))

    for trick in lx.tricks:
        add(trick.line, "lexical", trick.what.split("`")[1] if "`" in trick.what else trick.what,
            f"{trick.what}: {_WHY['lexical']}")
    _tokens(lx.tokens, add)
    stub_directives = {d.text for d in lexer.lex(stub).directives} if stub is not None else set()
    _directives(lx, path.endswith(_HEADER_EXTENSIONS), stub_directives, add)
    found.sort(key=lambda f: (f.line, f.rule, f.what))
    unique: list[Finding] = []
    for f in found:
        if not unique or (f.line, f.rule, f.what) != (unique[-1].line, unique[-1].rule, unique[-1].what):
            unique.append(f)
    return unique


def _qualified_elsewhere(toks: list[Token], i: int) -> bool:
    """True when toks[i] is a member (`x.f`, `p->f`) or in a namespace other than std and the
    global one (`dist::send`)."""
    if i == 0:
        return False
    prev = toks[i - 1]
    if prev.kind == PUNCT and prev.text in (".", "->", ".*", "->*"):
        return True
    if prev.kind == PUNCT and prev.text == "::" and i >= 2 and toks[i - 2].kind == IDENT:
        return toks[i - 2].text != "std"
    return False


#: Words after which a name followed by `(` is called, not declared.
_BEFORE_CALL = {"return", "co_return", "co_await", "co_yield", "throw", "else", "do", "case", "not",
                "and", "or", "sizeof", "decltype", "noexcept", "new", "delete"}


def _declared(toks: list[Token], i: int) -> bool:
    """True when toks[i] is the name in a declaration (`void write(...)`): a C++ function of that
    name has its own (mangled) symbol and replaces no C function (`extern "C"` is a finding)."""
    prev = toks[i - 1] if i else None
    return prev is not None and prev.kind == IDENT and prev.text not in _BEFORE_CALL


def _tokens(toks: list[Token], add, in_macro: bool = False) -> None:  # type: ignore[no-untyped-def]
    """The findings of a token sequence; in_macro: a #define's body, where a name is a finding even
    when it is not called there (the macro's user calls it)."""
    i = 0
    while i < len(toks):
        t = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == IDENT:
            rule = _NAMES.get(t.text) or next((r for p, r in _PREFIXES.items() if t.text.startswith(p)), None)
            if rule and (rule == "testing" or not _qualified_elsewhere(toks, i)):
                called = nxt is not None and nxt.kind == PUNCT and nxt.text == "(" and not _declared(toks, i)
                taken = i > 0 and toks[i - 1].text in ("::", "&")   # ::exit, &exit: a function named
                if t.text not in _CALL_ONLY or called or taken or in_macro:
                    add(t.line, rule, t.text)
            if t.text in ("__attribute__", "__attribute", "__declspec"):
                i = _attributes(toks, i + 1, add)
                continue
            if t.text == "namespace" and nxt is not None and nxt.kind == IDENT and nxt.text in _NAMESPACES:
                add(t.line, "namespace", f"namespace {nxt.text}")
            if t.text == "extern" and nxt is not None and nxt.kind == STRING:
                add(t.line, "attribute", f"extern {nxt.text}",
                    "C linkage: can define a function of the C library or the test framework")
            if t.text.startswith("_Z") and len(t.text) > 3:
                add(t.line, "attribute", t.text, "a mangled symbol name: can replace a function the tests call")
        elif t.kind == STRING:
            j = i
            value = ""
            while j < len(toks) and toks[j].kind == STRING:   # adjacent literals are one string
                value += lexer.string_value(toks[j])
                j += 1
            _strings(t.line, value, add)
            i = j
            continue
        elif t.kind == PUNCT and t.text == "[" and nxt is not None and nxt.text == "[":
            i = _attributes(toks, i + 1, add, closing="]")
            continue
        elif t.kind == PUNCT and t.text == "\\":
            add(t.line, "lexical", "\\u", f"a universal character name in a name: {_WHY['lexical']}")
        i += 1


def _attributes(toks: list[Token], i: int, add, closing: str = ")") -> int:  # type: ignore[no-untyped-def]
    """Looks for the dangerous attributes in the balanced brackets starting at toks[i]; returns
    the index after them."""
    opening = "(" if closing == ")" else "["
    depth = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == PUNCT and t.text == opening:
            depth += 1
        elif t.kind == PUNCT and t.text == closing:
            depth -= 1
            if depth <= 0:
                return i + 1
        elif t.kind == IDENT and t.text.strip("_") in _ATTRIBUTES:
            add(t.line, "attribute", t.text.strip("_"))
        elif t.kind == STRING:
            _strings(t.line, lexer.string_value(t), add)
        if depth == 0 and not (t.kind == PUNCT and t.text == opening):
            return i
        i += 1
    return i


_ESCAPE = re.compile(r"\\(x[0-9A-Fa-f]+|[0-7]{1,3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)")


def _unescape(value: str) -> str:
    """A string literal's characters with \\x2f, \\057, \\u002f... decoded (so "\\x2fproc" is "/proc")."""
    def one(m: re.Match[str]) -> str:
        e = m.group(1)
        try:
            if e[0] in "xuU":
                return chr(int(e[1:], 16))
            if e[0].isdigit():
                return chr(int(e, 8))
        except (ValueError, OverflowError):
            return ""
        return {"n": "\n", "t": "\t", "0": "\0"}.get(e, e)
    return _ESCAPE.sub(one, value)


def _strings(line: int, value: str, add) -> None:  # type: ignore[no-untyped-def]
    value = _unescape(value)
    if _PATH.search(value) or _ABSOLUTE.match(value):
        add(line, "path", value.strip()[:60])
    w = _SECRET_WORDS.search(value)
    if w:
        add(line, "asm" if "inc" in w.group(0) else "fd", w.group(0),
            "a string naming the test report or a file to embed: " +
            ("can include a file's bytes at compile time" if "inc" in w.group(0)
             else "can write a passing report"))


def _directives(lx: Lexed, header: bool, stub_directives: set[str], add) -> None:  # type: ignore[no-untyped-def]
    for d in lx.directives:
        if d.name in ("include", "include_next", "import", "embed") and d.tokens:
            _include(d, add)
        if d.name in _DIRECTIVES_ANYWHERE:
            add(d.line, "directive", f"#{d.name}")
        elif d.name == "pragma" and d.text not in stub_directives:
            add(d.line, "directive", d.text[:60], "a pragma the kit's file does not have: can change "
                "warnings, code generation or symbols (e.g. #pragma weak)")
        elif header and d.name in ("define", "undef") and d.text not in stub_directives:
            add(d.line, "directive", d.text[:60], "a macro in a header: changes the meaning of the kit's "
                "tests that include it (e.g. redefining EXPECT_EQ)")
        if d.name == "define":
            for t in d.tokens:
                if t.kind == PUNCT and t.text == "##":
                    add(t.line, "lexical", "##", "token pasting: can build a name this audit cannot see")
        if d.name == "define":
            _tokens(d.tokens[1:], add, in_macro=True)
        elif d.name not in ("include", "include_next", "import", "embed"):
            _tokens(d.tokens, add)


def _include(d: lexer.Directive, add) -> None:  # type: ignore[no-untyped-def]
    t = d.tokens[0]
    if t.kind == HEADER:
        name = t.text.strip("<>")
    elif t.kind == STRING:
        name = lexer.string_value(t)
    else:
        add(d.line, "directive", d.text[:60], "an include through a macro: the audit cannot see the file")
        return
    if name.startswith("/") or ".." in name.split("/"):
        add(d.line, "path", name, "includes a file outside the kit's folders (the reference, hidden tests, "
            "/proc or /dev)")
        return
    for rule, pattern in _HEADERS.items():
        if re.fullmatch(pattern, name):
            add(d.line, rule, f"<{name}>" if t.kind == HEADER else f'"{name}"')
            return
