"""What a test process can do at run time (docs/instructor-guide.md, "Threat model"): planted
submissions graded on the miniature kit (test_grader.py's), in both sandbox modes where they apply.

- the grader's environment does not reach a test (an allowlist);
- a report forged from inside the test process (the /proc/self/cmdline attack, a fake XML written to
  every open descriptor, a pipe of its own swapped in for the report's descriptor) scores zero with
  a reason, and so does a main() of its own; the report the kit's main builds carries any failure
  message (markup, control characters, UTF-8) to the student; checks of the
  report itself (DOCTYPE, size cap, nonce, test count, the program's own list) without a build;
- nothing passes from one test or grade to the next: kernel keyrings, SysV shared memory, POSIX
  message queues, processes (one that tries to kill the sweeper included).

Run: cd grader/selftest && python3 -m unittest test_runtime -v
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # grader/: pydistlab

from pydistlab import gtest_report, sandbox  # noqa: E402
from test_grader import FIX_HEAD, GraderTestCase, _kit_snapshot, _sandboxed  # noqa: E402

#: As test_grader.TestSandbox: without namespaces a root grader still runs tests as another uid.
MODES = ("auto", "limits") if os.geteuid() == 0 else ("auto",)
STUBS = 'int add(int, int) { DISTLAB_TODO("add"); }\nint twice(int) { DISTLAB_TODO("twice"); }\n'


def _no_test_processes_left(test: unittest.TestCase) -> None:
    uids = ",".join(str(sandbox.TEST_UID_BASE + i) for i in range(8))
    left = ""
    for _ in range(50):
        left = subprocess.run(["pgrep", "-u", uids], capture_output=True, text=True).stdout.strip()
        if not left:
            break
        time.sleep(0.1)
    test.assertEqual(left, "", "processes of the tests are still running")


class TestRunTime(GraderTestCase):
    def attack(self, body: str, *extra: str, prelude: str = "") -> dict[str, dict]:
        """Grades 01_fix (with hidden items) of a planted fix.cpp; the kit must stay unchanged."""
        before = _kit_snapshot()
        _, tests = self.grade({"exercises/01_fix/fix.cpp": prelude + FIX_HEAD + body}, "--hidden",
                              *extra, modules=("01_fix",))
        self.assertEqual(_kit_snapshot(), before, "the grade changed the kit")
        return tests

    def test_the_graders_environment_does_not_reach_a_test(self) -> None:
        secrets = {"DISTLAB_SELFTEST_SECRET": "s3cret-of-the-grader", "AWS_SECRET_ACCESS_KEY": "AKIA-not-for-tests"}
        body = ("#include <cstdlib>\n#include <string>\nextern char** environ;\n"
                "static std::string leaked() {\n  std::string all;\n"
                "  for (char** e = environ; *e; ++e) { std::string v = *e;\n"
                '    if (v.find("SECRET") != std::string::npos) all += v + " "; }\n  return all;\n}\n'
                "int add(int a, int b) {\n  if (!leaked().empty()) throw std::runtime_error(\"leaked: \" + leaked());\n"
                '  const char* home = std::getenv("HOME");\n'
                '  if (!home || std::string(home) != "/tmp") throw std::runtime_error("HOME is not /tmp");\n'
                "  return a + b;\n}\nint twice(int a) { return leaked().empty() ? 2 * a : -1; }\n")
        saved = {k: os.environ.get(k) for k in secrets}
        os.environ.update(secrets)
        try:
            for mode in MODES:
                with self.subTest(f"--sandbox {mode}"):
                    tests = self.attack(body, "--sandbox", mode)
                    for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                        self.assertEqual(tests[name]["status"], "passed", tests[name]["output"][:500])
                        for value in secrets.values():
                            self.assertNotIn(value, tests[name]["output"])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def test_a_report_forged_from_inside_the_test_scores_zero(self) -> None:
        # A static initializer looks for the report's descriptor in /proc/self/cmdline (where
        # --gtest_output=xml:/dev/fd/N used to be) and for the control line on stdin (the kit's
        # main has read it already), writes a passing report for the filter's test, with a
        # trailer, to it and to every open descriptor, and exits 0.
        forge = r'''#include <fcntl.h>
#include <unistd.h>
#include <cstring>
#include <string>
namespace {
int forge() {
  char buf[8192] = {};
  int fd = open("/proc/self/cmdline", O_RDONLY);
  long n = read(fd, buf, sizeof buf - 1);
  close(fd);
  std::string filter, report;
  for (long i = 0; i < n; i += long(std::strlen(buf + i)) + 1) {
    if (std::strncmp(buf + i, "--gtest_filter=", 15) == 0) filter = buf + i + 15;
    if (std::strncmp(buf + i, "--gtest_output=xml:", 19) == 0) report = buf + i + 19;
  }
  if (filter.empty()) return 0;
  std::string trailer;   // only if stdin still holds the control line
  char ctl[256] = {};
  if (read(0, ctl, sizeof ctl - 1) > 9 && std::strncmp(ctl, "DISTLAB1 ", 9) == 0) {
    std::string nonce = ctl + 9;
    trailer = "\nDISTLAB-TRAILER " + nonce.erase(nonce.find(' ')) + " 1\n";
  }
  std::string suite = filter.substr(0, filter.find('.')), test = filter.substr(filter.find('.') + 1);
  if (test.find('*') != std::string::npos) test.erase(test.find('*'));
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites tests=\"1\" failures=\"0\">"
      "<testsuite name=\"" + suite + "\" tests=\"1\"><testcase name=\"" + test + "\" classname=\"" + suite +
      "\" status=\"run\" result=\"completed\"/></testsuite></testsuites>\n" + trailer;
  if (!report.empty()) {
    int r = open(report.c_str(), O_WRONLY);
    (void)!write(r, xml.data(), xml.size());
  } else {
    for (int d = 0; d < 1024; ++d) (void)!write(d, xml.data(), xml.size());
  }
  _exit(0);
}
const int forged = forge();
}  // namespace
'''
        for mode in MODES:
            with self.subTest(f"--sandbox {mode}"):
                tests = self.attack(STUBS, "--sandbox", mode, prelude=forge)
                for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                    self.assertEqual(tests[name]["score"], 0, tests[name]["output"][:500])
                    self.assertIn("not written by the kit's test main", tests[name]["output"])

    def test_a_test_may_write_its_private_tmp(self) -> None:
        # The threat model promises each test a private /tmp: an honest test that writes a scratch
        # file there must pass (bubblewrap makes a fresh tmpfs root's 0755 unless told otherwise).
        body = ("#include <cstdio>\n#include <fstream>\n#include <string>\n"
                "static int scratch() {\n  { std::ofstream f(\"/tmp/distlab-scratch\"); f << 41; }\n"
                "  std::ifstream g(\"/tmp/distlab-scratch\"); int v = 0; g >> v;\n"
                "  std::remove(\"/tmp/distlab-scratch\");\n"
                '  if (v != 41) throw std::runtime_error("/tmp is not writable");\n  return 0;\n}\n'
                "int add(int a, int b) { return scratch() + a + b; }\nint twice(int a) { return 2 * a; }\n")
        for mode in MODES:
            with self.subTest(f"--sandbox {mode}"):
                tests = self.attack(body, "--sandbox", mode)
                self.assertEqual(tests["01_fix/add"]["status"], "passed", tests["01_fix/add"]["output"][:500])

    def test_a_rewritten_argv_or_environment_does_not_keep_tests_from_running(self) -> None:
        # GoogleTest reads its flags from argv (in main) and from GTEST_* variables: a static
        # initializer that rewrites argv (it lies just below environ) to --gtest_repeat=0, or asks
        # for a shard of the tests, would have every selected test skipped and reported as passed.
        # The kit's main takes the grader's filter from argv as its earliest initializer saw it
        # and sets the flags that decide what runs; a test selected but not started fails.
        body = ("#include <cstdlib>\n#include <cstring>\nextern char** environ;\n"
                "static char repeat0[] = \"--gtest_repeat=0\";\n"
                "static int rewrite() {\n  setenv(\"GTEST_TOTAL_SHARDS\", \"1000\", 1);\n"
                "  setenv(\"GTEST_SHARD_INDEX\", \"999\", 1);\n  setenv(\"GTEST_REPEAT\", \"0\", 1);\n"
                "  char** envp = environ;\n  for (long k = 1; envp && k < 64; ++k) {\n"
                "    if (reinterpret_cast<long>(envp[-(k + 2)]) != k) continue;\n"
                "    char** argv = envp - (k + 1);\n"
                "    for (long i = 1; i < k; ++i) if (argv[i]) argv[i] = repeat0;\n    return 1;\n  }\n"
                "  return 0;\n}\nstatic const int rewritten = rewrite();\n"
                'int add(int, int) { throw std::runtime_error("not implemented: add"); }\n'
                'int twice(int) { throw std::runtime_error("not implemented: twice"); }\n')
        for mode in MODES:
            with self.subTest(f"--sandbox {mode}"):
                tests = self.attack(body, "--sandbox", mode)
                for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                    self.assertEqual(tests[name]["score"], 0, tests[name]["output"][:500])
                    self.assertIn("not implemented", tests[name]["output"])

    def test_a_swapped_report_descriptor_gets_no_report(self) -> None:
        # A man in the middle: a static initializer finds the report pipe (the first FIFO at
        # descriptor 64 or above), keeps a copy of it elsewhere, puts a pipe of its own on that
        # number and drains what arrives there. Were the kit's main to write its report and trailer
        # (with this run's nonce) to that number, the attacker would rewrite the report as all
        # passed, append the real trailer, send it to the real pipe and _exit(0). The kit's main
        # writes only to the very pipe it was given (st_dev, st_ino): here nothing at all.
        mitm = r"""#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdlib>
#include <string>
#include <thread>
namespace {
int g_real = -1, g_rd = -1;
std::string* g_buf = nullptr;
std::thread* g_th = nullptr;
void drain() {
  char b[65536];
  long n;
  while ((n = read(g_rd, b, sizeof b)) > 0) g_buf->append(b, size_t(n));
}
void at_end() {
  if (g_th) g_th->join();
  const std::string& s = *g_buf;
  size_t t = s.rfind("\nDISTLAB-TRAILER ");
  std::string forged;
  if (t != std::string::npos) {   // every test passed, the kit's own trailer kept
    std::string x = s.substr(0, t);
    for (size_t p; (p = x.find("<failure")) != std::string::npos;) x.erase(p, x.find("</failure>", p) + 10 - p);
    forged = x + s.substr(t);
  }
  (void)!write(g_real, forged.data(), forged.size());
  _exit(0);
}
struct Mitm {
  Mitm() {
    int fd = -1;
    for (int i = 64; i < 1024 && fd < 0; ++i) {
      struct stat st;
      if (fstat(i, &st) == 0 && S_ISFIFO(st.st_mode)) fd = i;
    }
    if (fd < 0) return;
    int p[2];
    g_real = fcntl(fd, F_DUPFD_CLOEXEC, 1000);
    if (g_real < 0 || pipe2(p, O_CLOEXEC) != 0) return;
    dup3(p[1], fd, O_CLOEXEC);
    close(p[1]);
    g_rd = p[0];
    g_buf = new std::string;
    g_th = new std::thread(drain);
    std::atexit(at_end);
  }
} mitm_instance;
}  // namespace
"""
        for mode in MODES:
            with self.subTest(f"--sandbox {mode}"):
                tests = self.attack(STUBS, "--sandbox", mode, prelude=mitm)
                for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                    self.assertEqual(tests[name]["score"], 0, tests[name]["output"][:500])
                    self.assertIn("not written by the kit's test main", tests[name]["output"])
                    self.assertIn("its report descriptor was replaced", tests[name]["output"])
                    self.assertIn("no longer the report pipe", tests[name]["output"])   # the test main's word

    def test_the_kit_mains_report_carries_any_failure_message(self) -> None:
        # The kit's main writes the XML itself: a message with markup, a CDATA end, a control
        # character and UTF-8 reaches the student as written (control characters as '?').
        body = ("int add(int a, int b) {\n"
                '  if (a + b == 5) throw std::runtime_error("bad <x> & \\"q\\" ]]> --> \\x01 é");\n'
                "  return a + b;\n}\nint twice(int a) { return 2 * a; }\n")
        tests = self.attack(body)
        self.assertEqual(tests["01_fix/twice"]["status"], "passed", tests["01_fix/twice"]["output"][:500])
        self.assertEqual(tests["01_fix/add"]["score"], 0)
        self.assertIn('bad <x> & "q" ]]> --> ? é', tests["01_fix/add"]["output"])

    def test_a_main_of_its_own_does_not_link(self) -> None:
        # A submitted main() would take the kit's place (and read the control line on stdin): the
        # object rule refuses it before the link (sandbox/symbols.py); were it let through, the
        # kit's test main is an object that is always linked, so a second main is a link error.
        body = ("int add(int a, int b) { return a + b; }\nint twice(int a) { return 2 * a; }\n"
                "int main() { return 0; }\n")
        tests = self.attack(body)
        for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
            self.assertEqual(tests[name]["score"], 0)
            self.assertIn("defines the C-level symbol `main`", tests[name]["output"])

    def test_nothing_passes_from_one_test_or_grade_to_the_next(self) -> None:
        # Each item first looks for what an earlier one left (a key in the uid's and the session
        # keyring, a SysV shared memory segment, a POSIX message queue, files in the world-writable
        # folders), then leaves them itself.
        # One worker: every item runs as the same uid; two grades in a row.
        def body(mqueue: bool) -> str:
            return ("#include <fcntl.h>\n#include <mqueue.h>\n#include <sys/ipc.h>\n#include <sys/shm.h>\n"
                    "#include <sys/stat.h>\n#include <sys/syscall.h>\n#include <unistd.h>\n#include <string>\n"
                    "static std::string leftovers() {\n  std::string seen;\n"
                    '  if (syscall(SYS_keyctl, 10, -4, "user", "distlab-leak", 0) >= 0) seen += "a key in @u; ";\n'
                    '  if (syscall(SYS_keyctl, 10, -3, "user", "distlab-leak", 0) >= 0) seen += "a key in @s; ";\n'
                    '  if (shmget(0x5eed, 0, 0) >= 0) seen += "SysV shared memory; ";\n'
                    '  for (const char* f : {"/tmp/distlab-leak", "/var/tmp/distlab-leak", "/dev/shm/distlab-leak",\n'
                    '                        "/run/lock/distlab-leak", "/tmp/distlab-leak-dir/f"})\n'
                    '    if (access(f, F_OK) == 0) seen += std::string("a file ") + f + "; ";\n' +
                    ('  mqd_t q = mq_open("/distlab-leak", O_RDONLY);\n'
                     '  if (q != (mqd_t)-1) { seen += "a message queue; "; mq_close(q); }\n' if mqueue else "") +
                    "  return seen;\n}\nstatic void leave() {\n"
                    '  syscall(SYS_add_key, "user", "distlab-leak", "x", 1, -4);\n'
                    '  syscall(SYS_add_key, "user", "distlab-leak", "x", 1, -3);\n'
                    '  if (shmget(0x5eed, 4096, IPC_CREAT | 0666) < 0) throw std::runtime_error("shmget");\n'
                    '  for (const char* f : {"/tmp/distlab-leak", "/var/tmp/distlab-leak", "/dev/shm/distlab-leak",\n'
                    '                        "/run/lock/distlab-leak"})\n'
                    '    if (int fd = open(f, O_CREAT | O_WRONLY, 0644); fd >= 0) close(fd);   // where it may\n'
                    '  mkdir("/tmp/distlab-leak-dir", 0755);\n'
                    '  if (int fd = open("/tmp/distlab-leak-dir/f", O_CREAT | O_WRONLY, 0644); fd >= 0) close(fd);\n' +
                    ('  mqd_t q = mq_open("/distlab-leak", O_CREAT | O_RDONLY, 0666, nullptr);\n'
                     '  if (q != (mqd_t)-1) mq_close(q);\n' if mqueue else "") +
                    "}\nstatic int check() {\n  std::string s = leftovers();\n"
                    '  if (!s.empty()) throw std::runtime_error("left by an earlier test: " + s);\n'
                    "  leave();\n  return 0;\n}\n"
                    "static int once() { static const int r = check(); return r; }   // the first call of a process\n"
                    "int add(int a, int b) { return once() + a + b; }\nint twice(int a) { return once() + 2 * a; }\n")
        for mode in MODES:
            # Without namespaces the uid's message queues cannot be listed where /dev/mqueue is not
            # mounted (the threat model says so): queues are left out there.
            text = body(mqueue=mode == "auto" or os.path.isdir("/dev/mqueue"))
            for grade in (1, 2):
                with self.subTest(f"--sandbox {mode}, grade {grade}"):
                    tests = self.attack(text, "--sandbox", mode, "--jobs", "1")
                    for name in ("01_fix/add", "01_fix/twice", "01_fix/add_large"):
                        self.assertEqual(tests[name]["status"], "passed", tests[name]["output"][:500])

    def test_a_process_that_fights_the_sweeper_does_not_outlive_its_test(self) -> None:
        # add() starts a process that predicts the sweeper: it ends the test, then, for three
        # seconds, SIGKILLs the next pids of its pid namespace (where a sweeper forked by the agent
        # that drops to the test's uid would appear) as fast as it can. One worker: twice, the item
        # after it, runs as the same uid and would be killed if the process lived on.
        fighter = ("#include <chrono>\n#include <csignal>\n#include <thread>\n#include <unistd.h>\n"
                   "static void fight(bool kill_all) {\n  if (fork() != 0) {\n"
                   "    std::this_thread::sleep_for(std::chrono::seconds(1));\n    return;\n  }\n"
                   "  setsid();\n  pid_t me = getpid();\n  if (kill_all) kill(getppid(), SIGKILL);\n"
                   "  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);\n"
                   "  while (std::chrono::steady_clock::now() < end) {\n"
                   "    if (!kill_all) { usleep(1000); continue; }\n"
                   "    for (pid_t p = me + 1; p < me + 40; ++p) kill(p, SIGKILL);\n  }\n  _exit(0);\n}\n")
        for mode in MODES:
            with self.subTest(f"--sandbox {mode}"):
                # kill(-1) as the test uid without a pid namespace would reach other work's tests
                # on this machine that use the same uids: there the fighters only live on.
                kill_all = "true" if mode == "auto" and _sandboxed() else "false"
                body = fighter + (f"int add(int a, int b) {{ fight({kill_all}); return a + b; }}\n"
                                  "int twice(int a) { return 2 * a; }\n")
                tests = self.attack(body, "--sandbox", mode, "--jobs", "1")
                # (add_large calls add() too: it fights, and loses, on its own.)
                self.assertEqual(tests["01_fix/twice"]["status"], "passed", tests["01_fix/twice"]["output"][:500])
                _no_test_processes_left(self)


class TestReportChecks(unittest.TestCase):
    """gtest_report.check on reports made by hand (no build)."""

    NONCE = "00112233445566778899aabbccddeeff"
    XML = (b'<?xml version="1.0" encoding="UTF-8"?>\n<testsuites tests="2">'
           b'<testsuite name="Fix"><testcase name="Add" classname="Fix" status="run" result="completed"/>'
           b'<testcase name="Twice" classname="Fix" status="run" result="completed"/></testsuite></testsuites>\n')

    def report(self, xml: bytes = XML, nonce: str = NONCE, count: int = 2) -> bytes:
        return xml + f"\nDISTLAB-TRAILER {nonce} {count}\n".encode()

    def check(self, data: bytes, expected: set[str] | None = None, over_cap: bool = False) -> gtest_report.Checked:
        return gtest_report.check(data, over_cap, self.NONCE, "Fix.*",
                                  {"Fix.Add", "Fix.Twice"} if expected is None else expected)

    def test_an_honest_report_passes(self) -> None:
        self.assertEqual(self.check(self.report()).parsed, (2, 0, [], []))

    def test_forged_or_inconsistent_reports_are_refused(self) -> None:
        cases = {
            "no trailer": (self.XML, None, "no trailer with this run's nonce"),
            "another nonce": (self.report(nonce="ffffffffffffffffffffffffffffffff"), None, "this run's nonce"),
            "count": (self.report(count=3), None, "lists 2 tests but the test main ran 3"),
            "missing test": (self.report(), {"Fix.Add", "Fix.Twice", "Fix.Third"}, "missing: Fix.Third"),
            "no list": (self.report(), set(), "does not list exactly"),
        }
        for what, (data, expected, reason) in cases.items():
            with self.subTest(what):
                checked = self.check(data, expected)
                self.assertIsNone(checked.parsed)
                self.assertIn(reason, checked.refused)
        listing_failed = gtest_report.check(self.report(), False, self.NONCE, "Fix.*", None)
        self.assertIn("list of tests could not be read", listing_failed.refused)

    def test_a_doctype_or_an_oversized_report_is_refused_unparsed(self) -> None:
        # The root grader peaked at 2.7 GiB parsing entity-expanded reports: refused before parsing.
        entity = b"A" * 1_000_000
        bomb = (b'<?xml version="1.0"?>\n<!DOCTYPE testsuites [<!ENTITY big "' + entity + b'">]>\n'
                b'<testsuites><testsuite name="Fix"><testcase name="Add" classname="Fix" status="run">'
                + b"&big;" * 90 + b"</testcase></testsuite></testsuites>\n")
        import resource
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        checked = self.check(self.report(bomb))
        self.assertIsNone(checked.parsed)
        self.assertIn("DOCTYPE", checked.refused)
        self.assertLess(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, 50_000)   # KiB
        checked = self.check(self.report(), over_cap=True)
        self.assertIn("over 4 MiB (refused unread)", checked.refused)

    def test_the_program_list_is_read_as_gtest_prints_it(self) -> None:
        listing = ("Fix.\n  Add\n  Twice\n  DISABLED_Slow\nParam/Dist.\n  Sum/0  # GetParam() = 1\n"
                   "Typed/0.  # TypeParam = int\n  Works\nnoise printed by a static initializer\n")
        names = gtest_report.parse_listing(listing)
        self.assertEqual(names, ["Fix.Add", "Fix.Twice", "Fix.DISABLED_Slow", "Param/Dist.Sum/0", "Typed/0.Works"])
        self.assertEqual(gtest_report.selected(names, "Fix.*"), {"Fix.Add", "Fix.Twice"})


class TestEnvironment(unittest.TestCase):
    def test_only_allowlisted_variables(self) -> None:
        os.environ["DISTLAB_SELFTEST_SECRET"] = "x"
        try:
            env = sandbox.test_env({"DISTLAB_ROOT": "/kit", "TSAN_OPTIONS": "halt_on_error=1"})
        finally:
            del os.environ["DISTLAB_SELFTEST_SECRET"]
        self.assertNotIn("DISTLAB_SELFTEST_SECRET", env)
        self.assertEqual((env["HOME"], env["DISTLAB_ROOT"]), ("/tmp", "/kit"))
        self.assertTrue(set(env) <= {"PATH", "LANG", "LANGUAGE", "TZ", "HOME", "TMPDIR", "DISTLAB_ROOT",
                                     "TSAN_OPTIONS"} | {k for k in env if k.startswith("LC_")})
        with self.assertRaises(ValueError):
            sandbox.test_env({"LD_PRELOAD": "/tmp/x.so"})


if __name__ == "__main__":
    unittest.main()
