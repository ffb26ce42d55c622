// The kit's test main (target distlab_test_main, linked into every test program instead of
// GoogleTest's gtest_main).
//
// Run by a person or by CTest it is gtest_main. Run by the grader (DISTLAB_REPORT_CHANNEL set), it
// first joins a session keyring of its own; with DISTLAB_REPORT_CHANNEL=stdin the report channel
// is set up, before any code of a submission runs:
//   - the earliest initializer of the program (priority 101, in this object; a submitted object
//     with prioritized init sections is refused by the grader's build) reads one line from stdin,
//     `DISTLAB1 <nonce> <fd>`: a random nonce of this run and the descriptor of the report pipe;
//     stdin then reads /dev/null, the report pipe moves to a random descriptor number, and the
//     pipe's identity (st_dev, st_ino of a FIFO) is recorded;
//   - GoogleTest writes no report through any descriptor: after the tests main() builds the XML
//     report itself from GoogleTest's public API (the subset the grader reads), then, in a child
//     process of its own (one thread: nothing of the submission runs there), checks that the
//     descriptor still is the very pipe recorded, and only then writes the report and the trailer
//     `DISTLAB-TRAILER <nonce> <tests run>` with raw system calls. A descriptor swapped for another
//     pipe (or anything else) gets nothing: no report reaches the grader, and it fails the item.
// The grader refuses a report without the trailer of its own nonce (grader/pydistlab/gtest_report.py).
// What remains possible from inside the process (reading or patching its memory) is stated in
// docs/instructor-guide.md, "Threat model".
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>

// The channel is set up with raw system calls and no library function but getenv: a submitted
// object that defines read(), sscanf() or memset() (taking the place of the C library's in this
// program) must not see the nonce pass by.
namespace {

__attribute__((always_inline)) inline long sys3(long n, long a = 0, long b = 0, long c = 0,
                                                long d = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 asm("r10") = d;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10)
               : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 asm("x8") = n;
  register long x0 asm("x0") = a;
  register long x1 asm("x1") = b;
  register long x2 asm("x2") = c;
  register long x3 asm("x3") = d;
  asm volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
  return x0;
#else
  return syscall(n, a, b, c, d);
#endif
}

bool g_active = false;  // constant-initialized: valid before any initializer runs
int g_fd = -1;
char g_nonce[72] = {};
unsigned long g_pipe_dev = 0;  // the report pipe's identity, recorded in the constructor
unsigned long g_pipe_ino = 0;
char g_filter[8192] = {};  // the grader's --gtest_filter, copied from argv before any other code

long say(int fd, const char* text) {
  long n = 0;
  while (text[n] != '\0') ++n;
  return sys3(SYS_write, fd, reinterpret_cast<long>(text), n);
}

[[noreturn]] void refuse(const char* why) {
  say(2, "distlab test main: ");
  say(2, why);
  say(2, " (run by the grader without its report channel?)\n");
  _exit(121);
}

// glibc passes an initializer the program's argc, argv and envp: argv as the grader wrote it, before
// any code of the program could rewrite it (main's argv is the same array, by then writable by all).
__attribute__((constructor(101))) void distlab_take_report_channel(int argc, char** argv, char**) {
  const char* flag = std::getenv("DISTLAB_REPORT_CHANNEL");
  if (flag == nullptr) return;  // not run by the grader
  const char key[] = "--gtest_filter=";
  for (int a = 1; a < argc && argv != nullptr && argv[a] != nullptr; ++a) {
    long k = 0;
    while (key[k] != '\0' && argv[a][k] == key[k]) ++k;
    if (key[k] != '\0') continue;
    long n = 0;
    while (argv[a][k + n] != '\0' && n + 1 < static_cast<long>(sizeof g_filter)) {
      g_filter[n] = argv[a][k + n];
      ++n;
    }
    g_filter[n] = '\0';
  }
  // A session keyring of its own (the one it was started with may be the grader's, without
  // namespaces): no key passes between tests or from the grader through it.
#ifdef SYS_keyctl
  sys3(SYS_keyctl, 1 /* KEYCTL_JOIN_SESSION_KEYRING */, 0);
#endif
  if (flag[0] != 's') return;  // "stdin": the report channel; "none": a listing of the tests
  char line[160] = {};
  long n = 0;
  while (n + 1 < static_cast<long>(sizeof line)) {
    long got =
        sys3(SYS_read, 0, reinterpret_cast<long>(line + n), static_cast<long>(sizeof line) - 1 - n);
    if (got <= 0) break;
    bool newline = false;
    for (long i = n; i < n + got; ++i) newline = newline || line[i] == '\n';
    n += got;
    if (newline) break;
  }
  long null = sys3(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/dev/null"), O_RDONLY);
  if (null < 0 || sys3(SYS_dup3, null, 0, 0) < 0) refuse("cannot replace stdin");
  sys3(SYS_close, null);
  // "DISTLAB1 <nonce> <fd>\n"
  const char magic[] = "DISTLAB1 ";
  long i = 0;
  for (; magic[i] != '\0'; ++i) {
    if (line[i] != magic[i]) refuse("no report channel on stdin");
  }
  long k = 0;
  while (line[i] != ' ' && line[i] != '\0' && k + 1 < static_cast<long>(sizeof g_nonce))
    g_nonce[k++] = line[i++];
  int fd = 0;
  if (k == 0 || line[i++] != ' ') refuse("no report channel on stdin");
  for (; line[i] >= '0' && line[i] <= '9' && fd < 100000; ++i) fd = fd * 10 + (line[i] - '0');
  for (auto& c : line) *static_cast<volatile char*>(&c) = 0;
  if (fd < 3) refuse("no report descriptor on stdin");
  unsigned r = 0;
  if (sys3(SYS_getrandom, reinterpret_cast<long>(&r), sizeof r, 0) != static_cast<long>(sizeof r)) {
    refuse("getrandom failed");
  }
  long moved = sys3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 64 + static_cast<long>(r % 900));
  if (moved < 0) refuse("cannot move the report descriptor");
  sys3(SYS_close, fd);
  struct stat st = {};
  if (sys3(SYS_fstat, moved, reinterpret_cast<long>(&st)) != 0 || !S_ISFIFO(st.st_mode)) {
    refuse("the report descriptor is not a pipe");
  }
  g_pipe_dev = static_cast<unsigned long>(st.st_dev);
  g_pipe_ino = static_cast<unsigned long>(st.st_ino);
  g_fd = static_cast<int>(moved);
  g_active = true;
}

void put_number(char*& p, long v) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0);
  while (n > 0) *p++ = digits[--n];
}

// ---- The report, built from GoogleTest's public API (the subset gtest_report.py reads). ----

// Text for an XML attribute or element: markup characters as references, characters XML 1.0
// does not allow (and bytes that are not UTF-8) as '?'.
void put_escaped(std::string& out, const char* text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text == nullptr ? "" : text);
  while (*s != 0) {
    unsigned char c = *s;
    if (c < 0x80) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        case '\'':
          out += "&apos;";
          break;
        case '\n':
          out += "&#10;";
          break;
        case '\r':
          out += "&#13;";
          break;
        case '\t':
          out += "&#9;";
          break;
        default:
          out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
      }
      ++s;
      continue;
    }
    // A UTF-8 sequence: copied whole when well formed (no overlong forms, surrogates, or values
    // over U+10FFFF), else one '?' for its first byte.
    int len = (c >= 0xc2 && c <= 0xdf)   ? 2
              : (c >= 0xe0 && c <= 0xef) ? 3
              : (c >= 0xf0 && c <= 0xf4) ? 4
                                         : 0;
    bool ok = len > 0;
    for (int i = 1; ok && i < len; ++i) ok = (s[i] & 0xc0) == 0x80;
    if (ok && len == 3)
      ok = !(c == 0xe0 && s[1] < 0xa0) && !(c == 0xed && s[1] >= 0xa0) &&
           !(c == 0xef && s[1] == 0xbf && s[2] >= 0xbe);  // U+FFFE, U+FFFF
    if (ok && len == 4) ok = !(c == 0xf0 && s[1] < 0x90) && !(c == 0xf4 && s[1] >= 0x90);
    if (!ok) {
      out += '?';
      ++s;
      continue;
    }
    out.append(reinterpret_cast<const char*>(s), static_cast<std::size_t>(len));
    s += len;
  }
}

// One <failure> or <skipped> child, as GoogleTest writes it: "file:line\nsummary" in message,
// "file:line\nmessage" as its text.
void put_part(std::string& out, const char* tag, const testing::TestPartResult& part) {
  std::string where = part.file_name() == nullptr ? "unknown file" : part.file_name();
  if (part.line_number() >= 0) where += ":" + std::to_string(part.line_number());
  out += "      <";
  out += tag;
  out += " message=\"";
  put_escaped(out, (where + "\n" + part.summary()).c_str());
  out += "\">";
  put_escaped(out, (where + "\n" + part.message()).c_str());
  out += "</";
  out += tag;
  out += ">\n";
}

void put_parts(std::string& out, const testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const testing::TestPartResult& part = result.GetTestPartResult(i);
    if (part.failed())
      put_part(out, "failure", part);
    else if (part.skipped())
      put_part(out, "skipped", part);
  }
}

// The tests GoogleTest would report (is_reportable: selected by the filter, DISABLED_ ones as
// status="notrun"); failures outside any test (SetUpTestSuite, an environment) are added to every
// test run in their suite (the whole program's: to every test run), so that those tests fail.
std::string build_report() {
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n";
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const testing::TestSuite& suite = *unit.GetTestSuite(s);
    out += "  <testsuite name=\"";
    put_escaped(out, suite.name());
    out += "\">\n";
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const testing::TestInfo& info = *suite.GetTestInfo(t);
      if (!info.is_reportable()) continue;
      const testing::TestResult& result = *info.result();
      out += "    <testcase name=\"";
      put_escaped(out, info.name());
      // Ran: selected and started (a test GoogleTest was kept from running, e.g. by a repeat
      // count of 0 or a shard set in the environment by code of the program, has no start time).
      const bool skipped_run = info.should_run() && result.start_timestamp() == 0;
      out += "\" status=\"";
      out += info.should_run() ? "run" : "notrun";
      out += "\" result=\"";
      out += !info.should_run() ? "suppressed" : result.Skipped() ? "skipped" : "completed";
      out += "\" classname=\"";
      put_escaped(out, suite.name());
      out += "\">\n";
      if (skipped_run) {
        out +=
            "      <failure message=\"selected but never started: GoogleTest was kept from running "
            "it (its flags or environment changed by code of the program?)\"/>\n";
      }
      if (info.should_run()) {
        put_parts(out, result);
        put_parts(out, suite.ad_hoc_test_result());
        put_parts(out, unit.ad_hoc_test_result());
      }
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>";
  return out;
}

// In a child process (raw clone: no fork handlers; its descriptor table is a copy that no thread
// of the submission shares), writes the report and the trailer to the report pipe, if and only if
// the descriptor still is the pipe recorded in the constructor. Returns whether it wrote them.
__attribute__((no_sanitize("address", "thread", "undefined"))) bool write_report(
    const char* report, long report_len, const char* trailer, long trailer_len) {
  long pid = sys3(SYS_clone, SIGCHLD, 0, 0, 0);
  if (pid < 0) return false;
  if (pid == 0) {
    struct stat st = {};
    if (sys3(SYS_fstat, g_fd, reinterpret_cast<long>(&st)) != 0 || !S_ISFIFO(st.st_mode) ||
        static_cast<unsigned long>(st.st_dev) != g_pipe_dev ||
        static_cast<unsigned long>(st.st_ino) != g_pipe_ino) {
      sys3(SYS_exit_group, 3);
    }
    const char* parts[2] = {report, trailer};
    long lens[2] = {report_len, trailer_len};
    for (int k = 0; k < 2; ++k) {
      long off = 0;
      while (off < lens[k]) {
        long n = sys3(SYS_write, g_fd, reinterpret_cast<long>(parts[k] + off), lens[k] - off);
        if (n == -EINTR) continue;
        if (n <= 0) sys3(SYS_exit_group, 4);
        off += n;
      }
    }
    sys3(SYS_exit_group, 0);
  }
  int status = -1;
  long got;
  do {
    got = sys3(SYS_wait4, pid, reinterpret_cast<long>(&status), 0, 0);
  } while (got == -EINTR);
  return got == -ECHILD || (got == pid && status == 0);  // (ECHILD: reaped unseen)
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (g_active) {
    // What decides which tests run and how is the grader's, whatever the program's code did to
    // argv or the environment before main (GoogleTest reads both): its filter, every test once.
    GTEST_FLAG_SET(filter, std::string(g_filter[0] != '\0' ? g_filter : "*"));
    GTEST_FLAG_SET(repeat, 1);
    GTEST_FLAG_SET(also_run_disabled_tests, false);
    GTEST_FLAG_SET(shuffle, false);
    GTEST_FLAG_SET(fail_fast, false);
    GTEST_FLAG_SET(break_on_failure, false);
    GTEST_FLAG_SET(throw_on_failure, false);
    GTEST_FLAG_SET(catch_exceptions, true);
    GTEST_FLAG_SET(list_tests, false);
    unsetenv("GTEST_TOTAL_SHARDS");
    unsetenv("GTEST_SHARD_INDEX");
  }
  int rc = RUN_ALL_TESTS();
  if (g_active) {
    const std::string report = build_report();
    char trailer[128];
    char* p = trailer;
    for (const char* s = "\nDISTLAB-TRAILER "; *s != '\0'; ++s) *p++ = *s;
    for (const char* s = g_nonce; *s != '\0'; ++s) *p++ = *s;
    *p++ = ' ';
    put_number(p, testing::UnitTest::GetInstance()->test_to_run_count());
    *p++ = '\n';
    if (!write_report(report.data(), static_cast<long>(report.size()), trailer, p - trailer)) {
      say(2,
          "distlab test main: the test report was not written: its descriptor is no longer the "
          "report pipe the grader passed (replaced by code of the program?), or it is closed\n");
    }
    sys3(SYS_close, g_fd);
  }
  return rc;
}
