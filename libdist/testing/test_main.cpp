// The kit's test main (target distlab_test_main, linked into every test program instead of
// GoogleTest's gtest_main).
//
// Run by a person or by CTest it is gtest_main. Run by the grader (DISTLAB_REPORT_CHANNEL set), it
// first joins a session keyring of its own; with DISTLAB_REPORT_CHANNEL=stdin the report channel
// is set up, before any code of a submission runs:
//   - the earliest initializer of the program (priority 101, in this object; a submitted object
//     with prioritized init sections is refused by the grader's build) reads one line from stdin,
//     `DISTLAB1 <nonce> <fd>`: a random nonce of this run and the descriptor of the report pipe;
//     stdin then reads /dev/null, and the report pipe moves to a random descriptor number;
//   - main() tells GoogleTest to write its XML report there (nothing in argv or the environment
//     names it), and after the tests writes a trailer line `DISTLAB-TRAILER <nonce> <tests run>`.
// The grader refuses a report without the trailer of its own nonce (grader/pydistlab/gtest_report.py).
// What remains possible from inside the process (reading this object's memory) is stated in
// docs/instructor-guide.md, "Threat model".
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

// The channel is set up with raw system calls and no library function but getenv: a submitted
// object that defines read(), sscanf() or memset() (taking the place of the C library's in this
// program) must not see the nonce pass by.
namespace {

long sys3(long n, long a = 0, long b = 0, long c = 0, long d = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 asm("r10") = d;
  asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
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

bool g_active = false;      // constant-initialized: valid before any initializer runs
int g_fd = -1;
char g_nonce[72] = {};

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

__attribute__((constructor(101))) void distlab_take_report_channel() {
  const char* flag = std::getenv("DISTLAB_REPORT_CHANNEL");
  if (flag == nullptr) return;   // not run by the grader
  // A session keyring of its own (the one it was started with may be the grader's, without
  // namespaces): no key passes between tests or from the grader through it.
#ifdef SYS_keyctl
  sys3(SYS_keyctl, 1 /* KEYCTL_JOIN_SESSION_KEYRING */, 0);
#endif
  if (flag[0] != 's') return;    // "stdin": the report channel; "none": a listing of the tests
  char line[160] = {};
  long n = 0;
  while (n + 1 < static_cast<long>(sizeof line)) {
    long got = sys3(SYS_read, 0, reinterpret_cast<long>(line + n), static_cast<long>(sizeof line) - 1 - n);
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
  while (line[i] != ' ' && line[i] != '\0' && k + 1 < static_cast<long>(sizeof g_nonce)) g_nonce[k++] = line[i++];
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

}  // namespace

int main(int argc, char** argv) {
  // (InitGoogleTest reads the flag to set up the XML printer: set before, checked after, so that
  // neither argv nor GTEST_OUTPUT moves the report.)
  const std::string report = "xml:/dev/fd/" + std::to_string(g_fd);
  if (g_active) GTEST_FLAG_SET(output, report);
  testing::InitGoogleTest(&argc, argv);
  if (g_active && GTEST_FLAG_GET(output) != report) refuse("--gtest_output must not be given");
  int rc = RUN_ALL_TESTS();
  if (g_active) {
    char trailer[128];
    char* p = trailer;
    for (const char* s = "\nDISTLAB-TRAILER "; *s != '\0'; ++s) *p++ = *s;
    for (const char* s = g_nonce; *s != '\0'; ++s) *p++ = *s;
    *p++ = ' ';
    put_number(p, testing::UnitTest::GetInstance()->test_to_run_count());
    *p++ = '\n';
    sys3(SYS_write, g_fd, reinterpret_cast<long>(trailer), p - trailer);
    sys3(SYS_close, g_fd);
  }
  return rc;
}
