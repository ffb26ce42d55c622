"""`./distlab audit`: every planted attack of the grader's self-test (and of issue reports) is
flagged with file:line, the reference solutions are not, comments and strings neither hide nor
invent a finding, and pairs of submissions sharing their code are listed. No build: fast.

Run: python3 -m unittest discover -s grader/selftest -p test_audit.py -v   (or ./distlab test)
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "grader"))

from pydistlab import manifest as mf  # noqa: E402
from pydistlab.audit import lexer, rules, similarity  # noqa: E402
from pydistlab.commands import audit as audit_cmd  # noqa: E402

KIT = "/autograder/source/distlab"
FIX_HEAD = '#include "fix.hpp"\n#include "todo.hpp"\n#include <cstdio>\n#include <stdexcept>\n'
HONEST_TAIL = "int add(int a, int b) { return a + b; }\nint twice(int a) { return 2 * a; }\n"

#: The attacks the grader's self-test plants (grader/selftest/test_grader.py, TestSandbox) and those
#: of issue 26, each with the rules the audit must report for it.
ATTACKS: dict[str, tuple[str, str, set[str]]] = {
    "a weak std:: instance that replaces GoogleTest's at link time": (
        "fix.cpp", FIX_HEAD + "#include <gtest/gtest.h>\nnamespace std { template <> template <> inline "
        "__attribute__((used)) void\n  vector<testing::TestPartResult>::_M_realloc_insert<const "
        "testing::TestPartResult&>(iterator, const testing::TestPartResult&) {} }\n", {"testing", "namespace"}),
    "swap the report pipe for a pipe of its own": (
        "fix.cpp", FIX_HEAD + "#include <fcntl.h>\n#include <sys/stat.h>\n#include <unistd.h>\n"
        "static int swap() {\n  int p[2];\n  for (int i = 64; i < 1024; ++i) {\n    struct stat st;\n"
        "    if (fstat(i, &st) == 0 && S_ISFIFO(st.st_mode) && pipe(p) == 0) { dup2(p[1], i); return p[0]; }\n"
        "  }\n  return -1;\n}\nstatic const int stolen = swap();\n" + HONEST_TAIL, {"fd"}),
    "incbin what an earlier submission compiled": (
        "fix.cpp", FIX_HEAD + 'asm(".incbin \\"../../build/modules/02_dep/CMakeFiles/'
        'distlab_02_dep.dir/dep.cpp.o\\"");\n' + HONEST_TAIL, {"asm"}),
    "include the reference (absolute)": (
        "fix.cpp", f'#include "{KIT}/solutions/01_fix/fix.cpp"\n' + FIX_HEAD, {"path"}),
    "include the reference (relative)": (
        "fix.cpp", '#include "../../../../../../solutions/01_fix/fix.cpp"\n' + FIX_HEAD, {"path"}),
    "include a hidden test": (
        "fix.cpp", '#include "../../grader/hidden/01_fix/test_fix_hidden.cpp"\n' + FIX_HEAD + HONEST_TAIL,
        {"path"}),
    "incbin a hidden test": (
        "fix.cpp", f'asm(".incbin \\"{KIT}/grader/hidden/01_fix/test_fix_hidden.cpp\\"");\n' + FIX_HEAD +
        HONEST_TAIL, {"asm", "path"}),
    "read hidden tests at run time": (
        "fix.cpp", FIX_HEAD + "#include <fstream>\n#include <sstream>\nstatic std::string steal() {\n"
        f'  for (const char* p : {{"{KIT}/grader/hidden/01_fix/test_fix_hidden.cpp"}}) {{\n'
        "    std::ifstream f(p); std::stringstream s; s << f.rdbuf(); if (f) return s.str();\n  }\n"
        "  return {};\n}\n" + HONEST_TAIL, {"file", "path"}),
    "write into the kit": (
        "fix.cpp", FIX_HEAD + "#include <fstream>\nstatic bool vandalise() {\n"
        f'  std::ofstream f("{KIT}/grader/pwned.txt", std::ios::app); f << 1; return bool(f);\n}}\n'
        "static const bool done = vandalise();\n" + HONEST_TAIL, {"file", "path"}),
    "fork bomb": (
        "fix.cpp", FIX_HEAD + "#include <unistd.h>\nint add(int a, int b) {\n"
        "  for (int i = 0; i < 200; ++i) { pid_t pid = fork(); if (pid == 0) { pause(); _exit(0); } }\n"
        "  return a + b;\n}\n", {"process", "exit"}),
    "network connect": (
        "fix.cpp", FIX_HEAD + "#include <arpa/inet.h>\n#include <sys/socket.h>\n#include <unistd.h>\n"
        "int add(int a, int b) {\n  int s = socket(AF_INET, SOCK_STREAM, 0);\n  sockaddr_in addr{};\n"
        "  connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr);\n  (void)!write(s, \"leak\", 4);"
        " close(s);\n  return a + b;\n}\n", {"network", "file", "fd"}),
    "header redefining EXPECT_EQ": (
        "dep.hpp", "#pragma once\n#include <gtest/gtest.h>\n#undef EXPECT_EQ\n"
        "#define EXPECT_EQ(a, b) (void)0\nint quadruple(int a);\n", {"testing", "directive"}),
    "static initialiser reading /proc/self/cmdline and exiting 0": (
        "fix.cpp", FIX_HEAD + "#include <cstdlib>\n#include <fstream>\n#include <string>\n"
        "static const int hijack = [] {\n  std::ifstream f(\"/proc/self/cmdline\");\n"
        "  std::string arg; while (std::getline(f, arg, '\\0')) {}\n  std::exit(0);\n  return 0;\n}();\n",
        {"path", "file", "exit"}),
    "a raw string spanning lines hides #undef/#define from a line scanner": (
        "dep.hpp", '#pragma once\ninline const char* k = R"x(\n" )x";\n#undef EXPECT_EQ\n'
        "#define EXPECT_EQ(a, b) (void)0\nint quadruple(int a);\n", {"directive"}),
    "an overload of a kit test helper in distlab::testing": (
        "dep.hpp", "#pragma once\nnamespace distlab::testing {\ninline bool expect_close(float, float) "
        "{ return true; }\n}\nint quadruple(int a);\n", {"namespace", "testing"}),
    "incbin in an owned header": (
        "dep.hpp", '#pragma once\nasm(".incbin \\"grader/hidden/02_dep/test_dep_hidden.cpp\\"");\n'
        "int quadruple(int a);\n", {"asm"}),
    "include the compiler's own output pipe": (
        "fix.cpp", '#include "/proc/self/fd/1"\n' + FIX_HEAD + HONEST_TAIL, {"path"}),
    "a 900 MiB .skip": ("fix.cpp", FIX_HEAD + 'asm(".skip 943718400");\n' + HONEST_TAIL, {"asm"}),
    "read the grader's environment": (
        "fix.cpp", FIX_HEAD + "#include <cstdlib>\nextern char** environ;\nint add(int a, int b) {\n"
        '  if (const char* t = std::getenv("CI_TOKEN")) std::puts(t);\n  return a + b + (environ ? 0 : 1);\n}\n',
        {"environment"}),
    "a key in the keyring and shared memory": (
        "fix.cpp", FIX_HEAD + "#include <sys/shm.h>\n#include <keyutils.h>\nint add(int a, int b) {\n"
        '  add_key("user", "x", "v", 1, KEY_SPEC_USER_KEYRING);\n  shmget(42, 4096, IPC_CREAT | 0600);\n'
        "  return a + b;\n}\n", {"ipc"}),
    "kill the sweeper": (
        "fix.cpp", FIX_HEAD + "#include <csignal>\nint add(int a, int b) {\n  kill(-1, SIGKILL);\n"
        "  std::signal(SIGTERM, SIG_IGN);\n  return a + b;\n}\n", {"process", "signal"}),
    "forge the report": (
        "fix.cpp", FIX_HEAD + "#include <fcntl.h>\nstatic int forged = [] {\n"
        '  int fd = open("/dev/fd/3", O_WRONLY); dup2(fd, 1); fcntl(fd, F_GETFL);\n'
        '  std::puts("--gtest_output=xml:/dev/fd/3"); return 0;\n}();\n', {"file", "fd", "path"}),
    "constructors, sections and weak symbols": (
        "fix.cpp", FIX_HEAD + "__attribute__((constructor)) static void early() {}\n"
        "[[gnu::destructor]] static void late() {}\n__attribute__((weak, section(\".x\"))) int y;\n",
        {"attribute"}),
    "C linkage": ("fix.cpp", FIX_HEAD + 'extern "C" int write(int, const void*, unsigned long) { return 0; }\n',
                  {"attribute"}),
    "raw syscalls and the dynamic linker": (
        "fix.cpp", FIX_HEAD + "#include <sys/syscall.h>\n#include <dlfcn.h>\n#include <sys/ptrace.h>\n"
        "int add(int a, int b) {\n  syscall(SYS_getpid);\n  dlsym(RTLD_NEXT, \"x\");\n"
        "  ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);\n  return a + b;\n}\n",
        {"syscall", "dynamic", "trace"}),
    "a name built by token pasting": (
        "fix.cpp", FIX_HEAD + "#define CAT(a, b) a##b\nint add(int a, int b) { CAT(sys, call)(39); "
        "return a + b; }\n", {"lexical"}),
    "a name split by a line splice": (
        "fix.cpp", FIX_HEAD + "int add(int a, int b) { sys\\\ncall(39); return a + b; }\n",
        {"lexical", "syscall"}),
    "a universal character name": (
        "fix.cpp", FIX_HEAD + "int add(int a, int b) { sys\\u0063all(39); return a + b; }\n", {"lexical"}),
    "a digraph directive in a header": (
        "dep.hpp", "#pragma once\n%:define EXPECT_EQ(a, b) (void)0\nint quadruple(int a);\n",
        {"lexical", "directive"}),
    "a path spelled with escapes": (
        "fix.cpp", FIX_HEAD + 'static const char* p = "\\x2fproc\\057self" "\\u002fcmdline";\n' + HONEST_TAIL,
        {"path"}),
    "exit behind a macro": ("fix.cpp", FIX_HEAD + "#define QUIT exit\nstatic int q = (QUIT(0), 0);\n", {"exit"}),
    "exit through a function pointer": (
        "fix.cpp", FIX_HEAD + "static void (*volatile f)(int) = &exit;\nstatic int q = (f(0), 0);\n", {"exit"}),
    "a GoogleTest test in a source": (
        "fix.cpp", FIX_HEAD + "TEST(Fix, Add) { SUCCEED(); }\nstatic int n = RUN_ALL_TESTS();\n",
        {"testing"}),
}
STUBS = {"fix.cpp": FIX_HEAD + "int add(int a, int b);\n", "dep.hpp": "#pragma once\nint quadruple(int a);\n"}


def audit(name: str, text: str) -> list[rules.Finding]:
    return rules.audit_text(f"exercises/m/{name}", text, STUBS[name])


class TestAttacksAreFlagged(unittest.TestCase):
    def test_every_planted_attack_is_flagged_with_its_line(self) -> None:
        for what, (name, text, expected) in ATTACKS.items():
            with self.subTest(what):
                found = audit(name, text)
                self.assertTrue(expected <= {f.rule for f in found},
                                f"{what}: wanted {sorted(expected)}, got {[(f.rule, f.what) for f in found]}")
                lines = text.splitlines()
                for f in found:
                    self.assertTrue(1 <= f.line <= len(lines), f)
                    self.assertTrue(f.why, f)

    def test_findings_point_at_the_right_line(self) -> None:
        found = audit("fix.cpp", ATTACKS["static initialiser reading /proc/self/cmdline and exiting 0"][1])
        by_what = {f.what: f.line for f in found}
        self.assertEqual(by_what["ifstream"], 9)
        self.assertEqual(by_what["/proc/self/cmdline"], 9)
        self.assertEqual(by_what["exit"], 11)
        splice = audit("fix.cpp", ATTACKS["a name split by a line splice"][1])
        self.assertEqual({(f.rule, f.line) for f in splice}, {("lexical", 5), ("syscall", 5)})

    def test_the_raw_string_ends_where_the_compiler_ends_it(self) -> None:
        lx = lexer.lex('auto s = R"x(\n#define A )" "\n)x";\n#undef B\n')
        self.assertEqual([(d.name, d.line) for d in lx.directives], [("undef", 4)])
        self.assertEqual(lx.tokens[3].kind, lexer.STRING)
        self.assertIn("#define A", lexer.string_value(lx.tokens[3]))


class TestHonestCodeIsNotFlagged(unittest.TestCase):
    def test_comments_strings_members_and_other_namespaces(self) -> None:
        text = (FIX_HEAD + "// fork(), exit(0), asm(\".incbin x\"), getenv, /proc/self, #define EXPECT_EQ\n"
                "/* syscall(39); dup2(1, 2); signal(SIGINT, f); testing::Test */\n"
                "#include <vector>\n#include <mutex>\n#include <thread>\n"
                "struct Log { void write(int step); void close(); bool open = false; };\n"
                "int add(int a, int b) {\n  Log log; log.write(a); log.close();\n"
                '  const char* msg = "exit the loop, then close the file";\n  dist::send(a);\n'
                '  auto raw = R"(fork(); system("ls"); #define X)";\n'
                "  std::vector<int> v(std::size_t(a)); std::mutex m; std::lock_guard g(m);\n"
                "  return a + b + (msg && raw ? 0 : 1);\n}\n")
        self.assertEqual([(f.line, f.rule, f.what) for f in audit("fix.cpp", text)], [])

    def test_the_stubs_own_header_directives_are_allowed(self) -> None:
        self.assertEqual(audit("dep.hpp", "#pragma once\n#include <vector>\nint quadruple(int a);\n"), [])
        pragma = audit("dep.hpp", '#pragma once\n#pragma GCC optimize("O0")\nint quadruple(int a);\n')
        self.assertEqual([(f.line, f.rule) for f in pragma], [(2, "directive")])

    def test_the_references_have_no_finding(self) -> None:
        """Every solutions/<module>/ file set, submitted as it is, audits clean."""
        man = mf.load()
        with tempfile.TemporaryDirectory() as tmp:
            subs = Path(tmp) / "subs"
            for m in man.order:
                shutil.copytree(ROOT / "solutions" / m, subs / m)
            out = Path(tmp) / "audit.json"
            rc, text = run_audit("--submissions", str(subs), "--json", str(out))
            data = json.loads(out.read_text())
        self.assertEqual(rc, 0, text)
        files = {s["submission"]: s["files"] for s in data["submissions"]}
        self.assertEqual(files, {m: len(man.modules[m].owned) for m in man.order})
        self.assertEqual([f for s in data["submissions"] for f in s["findings"]], [])
        self.assertEqual(data["similar"], [])

    def test_an_allowance_is_per_module(self) -> None:
        """01_threads' reference forks (audit_allow); the same fork in 03_collectives is a finding."""
        fork = "\nint spawn() { return fork(); }\n"
        with tempfile.TemporaryDirectory() as tmp:
            for m, f in (("01_threads", "threads.cpp"), ("03_collectives", "collectives.cpp")):
                d = Path(tmp) / "sub" / "exercises" / m
                d.mkdir(parents=True, exist_ok=True)
                (d / f).write_text((ROOT / "solutions" / m / f).read_text() + fork)
            rc, text = run_audit(str(Path(tmp) / "sub"))
        self.assertEqual(rc, 1)
        self.assertIn("exercises/03_collectives/collectives.cpp:", text)
        self.assertIn("[process] fork", text)
        self.assertNotIn("exercises/01_threads/threads.cpp:", text)


def run_audit(*argv: str) -> tuple[int, str]:
    from pydistlab import cli
    a = cli.parser().parse_args(["audit", *argv])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = audit_cmd.main(a)
    return rc, buf.getvalue()


class TestSimilarity(unittest.TestCase):
    def test_renamed_and_reformatted_code_is_the_same(self) -> None:
        ref = (ROOT / "solutions/03_collectives/collectives.cpp").read_text()
        stub = (ROOT / "exercises/03_collectives/collectives.cpp").read_text()
        renamed = ref.replace("buf", "data").replace("rank", "me").replace("  ", "\t").replace(";", " ;\n")
        prints = {n: {"03": similarity.fingerprints(t) - similarity.fingerprints(stub)}
                  for n, t in (("alice", ref), ("bob", renamed), ("carol", stub))}
        pairs = similarity.similar_pairs(prints)
        self.assertEqual([(p.a, p.b) for p in pairs], [("alice", "bob")])
        self.assertGreater(pairs[0].score, 0.95)

    def test_batch_lists_the_pair_that_shares_code(self) -> None:
        ref = (ROOT / "solutions/03_collectives/collectives.cpp").read_text()
        other = (ROOT / "solutions/03_collectives/collectives.cpp").read_text()
        half = other.split("\n")
        other = "\n".join(half[: len(half) // 3])     # a third of the work, still shared
        with tempfile.TemporaryDirectory() as tmp:
            batch = Path(tmp)
            for name, text in (("alice", ref), ("bob", ref.replace("src", "root_rank")), ("dan", other)):
                (batch / name).mkdir()
                (batch / name / "collectives.cpp").write_text(text)
            with zipfile.ZipFile(batch / "erin.zip", "w") as zf:   # the stub only: nothing of her own
                zf.writestr("exercises/03_collectives/collectives.cpp",
                            (ROOT / "exercises/03_collectives/collectives.cpp").read_text())
            out = batch / "a.json"
            rc, text = run_audit("--submissions", str(batch), "--module", "03", "--json", str(out))
            data = json.loads(out.read_text())
        self.assertEqual(rc, 1, text)
        pairs = {(p["a"], p["b"]): p["score"] for p in data["similar"]}
        self.assertIn(("alice", "bob"), pairs)
        self.assertGreaterEqual(pairs[("alice", "bob")], 0.95)
        self.assertNotIn(("alice", "erin"), pairs)
        self.assertIn("alice  ~  bob  03_collectives", text)

    def test_cli_says_what_is_missing(self) -> None:
        from pydistlab.errors import DistlabError
        with self.assertRaises(DistlabError) as e:
            run_audit()
        self.assertIn("nothing to audit", str(e.exception))
        with self.assertRaises(DistlabError):
            run_audit("/nonexistent/submission.zip")


if __name__ == "__main__":
    unittest.main()
