"""Owned headers and submitted objects judged by the compiler and the linker's view, not by lines.

An owned header is compiled into the trusted test translation units, and a submission's objects
are linked into the test programs; sandbox.header_rule / header_view / symbols decide what they
may add. Here adversarial headers and sources are fuzzed against those rules, first on the
compiler directly (fast), then graded on the miniature kit in both sandbox modes: each attack
gets zero points for its module with a reason, and honest headers keep full marks.

Run: cd grader/selftest && python3 -m unittest test_header_rule -v
"""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pydistlab.sandbox import check_header, cpp_tokens, header_code, header_view, symbols  # noqa: E402
from pydistlab.sandbox.cpp_tokens import tokenize  # noqa: E402
from pydistlab.sandbox.header_rule import _code  # noqa: E402
from test_grader import KIT, SOLUTION, GraderTestCase, _kit_snapshot  # noqa: E402

FIXTURE = HERE / "fixture_kit"
KIT_DEP = (FIXTURE / "solutions/02_dep/dep.hpp").read_text()       # stub and reference are equal
HONEST = KIT_DEP.replace("#pragma once\n", "#pragma once\n#include <mutex>\n").replace(
    "  int total_ = 0;\n", "  int total_ = 0;\n  mutable std::mutex m_;   // a private member of my own\n")
# Do-nothing implementation of 02_dep: only a header trick could give it marks.
LAZY_DEP = '#include "dep.hpp"\nint quadruple(int a) { return a; }\n'
OVERLOAD = "namespace distlab::testing {\ninline bool same(int, int) { return true; }\n}\n"
# A weak std:: instance (allowed as such) that takes the place of GoogleTest's own COMDAT copy when
# the module's library is loaded first: failures are never stored, every test passes.
DROP_FAILURES = ("#include <gtest/gtest.h>\nnamespace std {\ntemplate <>\ntemplate <>\n"
                 "inline __attribute__((used)) void vector<testing::TestPartResult>::_M_realloc_insert<"
                 "const testing::TestPartResult&>(\n    iterator, const testing::TestPartResult&) {}\n}\n")
# Weak definitions over a kit-only type (distlab::, allowed): the class redeclared with its own
# what(), so the vtable distlab_dist's throw_not_implemented uses would be the submission's.
FORGED_TODO = ("#include <stdexcept>\nnamespace distlab {\nstruct NotImplemented : std::logic_error {\n"
               "  using std::logic_error::logic_error;\n"
               "  const char* what() const noexcept override { return \"forged by the submission\"; }\n};\n"
               "[[noreturn]] void throw_not_implemented(const char* what);\n}\n"
               "__attribute__((used)) void forge() { throw distlab::NotImplemented(\"x\"); }\n"
               "int add(int, int) { return 0; }\nint twice(int) { distlab::throw_not_implemented(\"twice\"); }\n")
# b16: an inline variable whose dynamic initialiser runs before the kit's test main reads its control line.
#: A test macro used in the header: in the tests (which include GoogleTest first) it expands to code
#: that names ::testing (here it makes a never-deleted reporter that drops every failure); alone, the
#: header shows only the macro's name and a fallback variable.
MACRO_DEP = ("namespace dep {\ninline constexpr int gtest_fatal_failure_checker = 0;\n"
             "inline void(EXPECT_NO_FATAL_FAILURE)(int) {}\n"
             "template <class C, class R> R report_arg(void (C::*)(const R&));\n"
             "template <class H> struct Quiet : H {\n"
             "  using Part = decltype(report_arg(&H::ReportTestPartResult));\n"
             "  void ReportTestPartResult(const Part&) override {}\n};\n"
             "struct Hook {\n  Hook() {\n    EXPECT_NO_FATAL_FAILURE(\n"
             "        (void)sizeof(decltype(gtest_fatal_failure_checker)));\n  }\n};\ninline Hook hook;\n}\n")
SETENV_DEP = '#include <cstdlib>\nnamespace dep {\ninline const int defaults = setenv("GTEST_REPEAT", "0", 1);\n}\n'
# b09: a type whose templated comparisons are always true and that converts to what the test wants,
# found by the tests' EXPECT_* through argument-dependent lookup.
ADL_DEP = ("namespace dep {\nstruct Measured {\n  int v = 0;\n  constexpr operator int() const { return 12; }\n"
           "  template <class T> friend constexpr bool operator==(const Measured&, const T&) { return true; }\n};\n}\n")
# b07 in a header: the header's inline code runs inside the trusted test objects.
REPORTER_DEP = ("namespace dep {\nstruct Quiet {\n  Quiet() { new ::testing::ScopedFakeTestPartResultReporter(\n"
                "      ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, nullptr); }\n};\n}\n")
# An honest header may add private members, member functions with bodies, static constexpr members,
# default member initialisers, constexpr variables, helper functions and copy assignment.
HONEST_MORE = KIT_DEP + (
    "#include <vector>\nnamespace dep {\nconstexpr int limit(int a) { return a * 2; }\n"
    "inline constexpr int kLimit = limit(4);\ninline int helper(int a) { int x = limit(a); return x + 1; }\n"
    "struct Stats {\n  static constexpr int kMax = 4;\n  int count = 0;\n  double scale{1.5};\n"
    "  Stats& operator=(const Stats&) = default;\n  double mean() const { return count ? scale / count : 0.0; }\n"
    "  void push(int v) { values_.push_back(v); count = static_cast<int>(values_.size()); }\n\n private:\n"
    "  std::vector<int> values_{};\n  int cap_ = limit(kMax);\n  static inline int made_ = 0;\n};\n"
    "template <class T>\nconcept Countable = requires(T t) { t.size(); };\n}\n")
RAW_HIDDEN_DEFINE = ('inline const char* note = R"x(\n)x" R"y(\n#undef EXPECT_TRUE\n)y";\n'
                     '#undef EXPECT_TRUE\n#define EXPECT_TRUE(c) (void)0\n')


def preprocessed_view(text: str, kit_texts: tuple[str, ...] = (KIT_DEP,)) -> str:
    """The reason an owned header dep.hpp with this text is refused ("" when it is not): the
    directive rule, then the compiler's view (c++ -E, the fixture's include folders)."""
    problem = check_header("dep.hpp", text, list(kit_texts))
    return problem or compiler_view(text, kit_texts)


def compiler_view(text: str, kit_texts: tuple[str, ...] = (KIT_DEP,)) -> str:
    """The compiler-view judgement alone (what a header that fooled the directive rule meets)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "dep.hpp"
        path.write_text(text)
        output, failed = header_view.preprocess(path, "c++", ["-std=gnu++20", f"-I{FIXTURE}/support"], [], Path(d))
        return failed or header_view.judge("dep.hpp", output, path, list(kit_texts))


class TestTokenizer(unittest.TestCase):
    def test_directives_are_found_where_the_compiler_finds_them(self) -> None:
        cases = {
            "#define A 1\n": ["define A 1"],
            "  %:  define A 1\n": ["define A 1"],
            "#\\\ndefine A 1\n": ["define A 1"],
            "# /* c */ define A 1\n": ["define A 1"],
            "// a comment \\\n#define A 1\n": [],                     # the splice continues the comment
            'auto s = R"x(\n#define A 1\n)x";\n': [],                  # inside a raw string
            'auto s = R"x( )\\\nx" \n#define A 1\n)x";\n': [],         # no splice inside a raw string
            'auto s = "\\"#define A";\n#undef B\n': ["undef B"],
            "??=define A 1\n": [],                                      # no trigraphs in C++17 and later
            "int a<::b>; /* \n#define X */\n%:%:\n": [],
        }
        for text, want in cases.items():
            with self.subTest(text=text):
                self.assertEqual([d for _, d in cpp_tokens.directives(cpp_tokens.tokenize(text))], want)

    def test_the_rule_sees_every_define_the_compiler_sees(self) -> None:
        # Differential fuzz: random mixtures of the lexical tricks; whenever the compiler's own
        # output holds a #define from the header, the directive rule refused the header too.
        pieces = ['R"x(', ')x"', '"', "'", "//", "/*", "*/", "\\\n", "\n", "#define A 1", "%:define B 2",
                  "??=define C 3", " ", 'R"(', ')"', 'u8R"y(', ')y"', "#", "define", " D 4", "\\", "x", ";",
                  "%:", "\\\ndefine E"]
        rng = random.Random(26)
        texts = ["#pragma once\n" + "".join(rng.choice(pieces) for _ in range(rng.randint(3, 10))) + "\n"
                 for _ in range(160)]

        def judge(text: str) -> tuple[bool, bool]:
            """(the compiler's output holds a #define or #undef from the header, the rule refused it)"""
            with tempfile.TemporaryDirectory() as d:
                path = Path(d) / "dep.hpp"
                path.write_text(text)
                output, failed = header_view.preprocess(path, "c++", ["-std=gnu++20"], [], Path(d))
                if failed:
                    return False, False
                seen = header_view.header_lines(output, path)
                assert seen is not None
                _, kept, _ = seen
                if not any(k.startswith(("define", "undef")) for _, k in kept):
                    return False, False
                return True, check_header("dep.hpp", text, [KIT_DEP]) != ""

        seen_defines = 0
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:   # compiler runs
            for text, (defines, refused) in zip(texts, pool.map(judge, texts)):
                if defines:
                    seen_defines += 1
                    self.assertTrue(refused, repr(text))
        self.assertGreater(seen_defines, 8, "the fuzz produced too few compiled defines to mean anything")


class TestHeaderRule(unittest.TestCase):
    """The rule on the compiler's view, without a grade."""

    def test_honest_headers_pass(self) -> None:
        for text in (KIT_DEP, HONEST, HONEST_MORE,
                     KIT_DEP.replace("int quadruple", "// #define EXPECT_EQ(a, b)\nint quadruple"),
                     KIT_DEP + "namespace dep::detail {\ntemplate <class T> T twice(T a) { return a + a; }\n}\n"):
            with self.subTest(text=text):
                self.assertEqual(preprocessed_view(text), "")

    def test_adversarial_headers_are_refused_with_the_line_and_the_rule(self) -> None:
        attacks = {
            "raw string hides a #undef": (RAW_HIDDEN_DEFINE, f"dep.hpp:{KIT_DEP.count(chr(10)) + 5}:",
                                          "#undef EXPECT_TRUE"),
            "splice": ("#\\\ndefine EXPECT_TRUE(c) 1\n", "dep.hpp:", "#define"),
            "digraph": ("%:define EXPECT_TRUE(c) 1\n", "dep.hpp:", "#define"),
            # Not a directive (C++20 has no trigraphs): EXPECT_TRUE expands as in the tests, to ::testing.
            "trigraph": ("??=define EXPECT_TRUE(c) 1\n", "dep.hpp:", "testing"),
            "comment inside": ("# /* x */ undef EXPECT_TRUE\n", "dep.hpp:", "#undef"),
            "conditional": ("#ifdef EXPECT_TRUE\nint x;\n#endif\n", "dep.hpp:", "#ifdef"),
            "line": ('#line 1 "/usr/include/c++/12/vector"\n', "dep.hpp:", "#line"),
            "_Pragma": ('_Pragma("GCC poison quadruple")\n', "dep.hpp:", "_Pragma"),
            "pragma": ("#pragma GCC system_header\n", "dep.hpp:", "#pragma"),
            "gtest include": ("#include <gtest/gtest.h>\n", "dep.hpp:", "#include <gtest/gtest.h>"),
            "proc include": ('#include "/proc/self/fd/1"\n', "dep.hpp:", "/proc/self/fd/1"),
            "device include": ('#include "/dev/zero"\n', "dep.hpp:", "/dev/zero"),
            "overload in the tests' namespace": (OVERLOAD, "dep.hpp:", "namespace `distlab::testing`"),
            "gtest namespace": ("namespace testing::internal { inline int x = 1; }\n", "dep.hpp:",
                                "`testing::internal`"),
            "std": ("namespace std { inline int x = 1; }\n", "dep.hpp:", "namespace `std`"),
            "unnamed namespace": ("namespace {\nbool same(int, int) { return true; }\n}\n", "dep.hpp:", "unnamed"),
            "global overload": ("bool same(int, int);\n", "dep.hpp:", "`same` at global scope"),
            "using": ("namespace dep { bool same(int, int); }\nusing dep::same;\n", "dep.hpp:", "using dep :: same"),
            "specialization": ("#include <string>\ntemplate <> inline bool std::operator==<char>(const std::string&, "
                               "const char*) { return true; }\n", "dep.hpp:", "explicit specialization"),
            "qualified definition": ("#include <string>\nnamespace dep {}\nbool testing::FLAGS_gtest_x = true;\n",
                                     "dep.hpp:", "`testing::FLAGS_gtest_x`"),
            "incbin": ('asm(".incbin \\"/etc/hostname\\"");\n', "dep.hpp:", "`asm`"),
            "asm volatile": ("namespace dep { inline void f() { __asm__ volatile(\"nop\"); } }\n", "dep.hpp:",
                             "`__asm__`"),
            "asm label": ("namespace dep { int g() __asm(\"write\"); }\n", "dep.hpp:", "`__asm`"),
            "constructor": ("namespace dep { [[gnu::constructor]] inline void f() {} }\n", "dep.hpp:", "constructor"),
            "init_priority": ("namespace dep { struct S { S(); }; inline S s __attribute__((init_priority(101))); }\n",
                              "dep.hpp:", "init_priority"),
            "weak": ("namespace dep { __attribute__((weak)) int f(); }\n", "dep.hpp:", "`weak`"),
            "extern C": ('namespace dep { extern "C" int write(int, const void*, unsigned long); }\n', "dep.hpp:",
                         'extern "C"'),
            "inline variable calls setenv": (SETENV_DEP, "dep.hpp:", "initialiser calls a function"),
            "static variable": ("namespace dep { int g(); static int y = g(); }\n", "dep.hpp:", "static int y = g"),
            "brace initialiser": ("namespace dep { int g(); inline int z{ g() }; }\n", "dep.hpp:", "dynamic"),
            "static data member": ("namespace dep { int g();\nstruct S { static inline int n = g(); };\n}\n",
                                   "dep.hpp:", "static inline int n = g"),
            "called lambda": ("namespace dep { inline int w = [] { return 1; }(); }\n", "dep.hpp:", "dynamic"),
            "always-true comparison": (ADL_DEP.replace("  constexpr operator int() const { return 12; }\n", ""),
                                       "dep.hpp:", "declares `operator==`"),
            "conversion operator": (ADL_DEP, "dep.hpp:", "declares `operator int`"),
            "GoogleTest's reporter": (REPORTER_DEP, "dep.hpp:", "names `testing`"),
        }
        for what, (text, where, word) in attacks.items():
            with self.subTest(what):
                problem = preprocessed_view(KIT_DEP + text)
                self.assertIn(where, problem)
                self.assertIn(word, problem)

    def test_every_kit_header_passes_the_code_rule(self) -> None:
        # The real kit's stubs and references, each against the kit's two versions of it: no
        # `testing`, no operator and no dynamic initialiser that the rule would refuse.
        root = HERE.parent.parent
        headers = sorted((root / "exercises").glob("*/*.hpp")) + sorted((root / "solutions").glob("*/*.hpp"))
        self.assertGreater(len(headers), 20)
        for path in headers:
            module, name = path.parent.name, path.name
            kit = [_code(tokenize(p.read_text())) for p in (root / "exercises" / module / name,
                                                            root / "solutions" / module / name) if p.is_file()]
            with self.subTest(str(path.relative_to(root))):
                tokens = _code(tokenize(path.read_text()))
                self.assertEqual(header_code.problems(tokens, kit), [])
                self.assertEqual(header_code.dynamic_inits(tokens), {})
                self.assertNotIn("testing", {t.text for t in tokens})

    def test_the_compiler_view_alone_refuses_what_hides_from_the_directive_rule(self) -> None:
        # Were the directive rule fooled, the compiler's output still shows the macro, the include
        # and the pragma; and a header that reads a device or its own output fails fast.
        for text, word in ((RAW_HIDDEN_DEFINE, "#undef EXPECT_TRUE"), ("%:define X 1\n", "#define X 1"),
                           ("#include <sys/socket.h>\n", "sys/socket.h"), ("#pragma GCC visibility push(default)\n"
                                                                          "#pragma GCC visibility pop\n", "#pragma")):
            with self.subTest(text=text):
                self.assertIn(word, compiler_view(KIT_DEP + text))
        # Fail closed: output that never enters the header (a failed or empty run) is refused.
        self.assertIn("does not show this header", header_view.judge("dep.hpp", "", Path("/x/dep.hpp"), [KIT_DEP]))
        for device in ("/proc/self/fd/1", "/dev/zero", "/dev/stdin", "/proc/self/fd/2"):
            with self.subTest(device=device):
                t0 = time.monotonic()
                problem = compiler_view(f'#include "{device}"\n' + KIT_DEP)
                self.assertLess(time.monotonic() - t0, header_view.PREPROCESS_TIMEOUT_S + 5)
                self.assertNotEqual(problem, "")


# b05: code in the legacy `.init` section (DT_INIT runs before every .init_array entry).
INIT_SECTION = ('#include <cstdlib>\nvoid early_start() { setenv("GTEST_REPEAT", "0", 1); }\n'
                'asm(".pushsection .init,\\"ax\\",@progbits\\n\\tcall _Z11early_startv\\n\\t.popsection\\n");\n')
# b11: an IFUNC resolver runs while the dynamic loader relocates the program.
IFUNC = ('#include <cstdlib>\nstatic void early_hook_impl() {}\nextern "C" {\nstatic void (*pick_early_hook())() {\n'
         '  setenv("GTEST_REPEAT", "0", 1);\n  return &early_hook_impl;\n}\n}\n'
         'void early_hook() __attribute__((ifunc("pick_early_hook")));\n')
# b07: GoogleTest's SPI from a static initialiser: every failure goes to a fake reporter.
SWALLOW = ("#include <gtest/gtest-spi.h>\nnamespace {\nstruct Swallow {\n  Swallow() {\n"
           "    new testing::ScopedFakeTestPartResultReporter(\n"
           "        testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS,\n"
           "        new testing::TestPartResultArray);\n"
           "  }\n} swallow;\n}  // namespace\n")


class TestObjectRule(unittest.TestCase):
    """The submitted-object rule on objects compiled here."""

    def compile(self, source: str, *flags: str) -> str:
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / "fix.cpp").write_text(source)
            subprocess.run(["c++", "-std=gnu++20", "-O2", *flags, "-c", "fix.cpp", "-o", "fix.o"], cwd=d, check=True)
            return symbols.check_objects(Path(d), {"fix.o": "exercises/01_fix/fix.cpp"})

    def test_honest_objects_pass_also_under_sanitizers(self) -> None:
        honest = ("#include <map>\n#include <memory>\n#include <mutex>\n#include <string>\n"
                  "namespace { std::mutex m; std::map<std::string, int> cache; }\n"
                  "int calls = 0;\n"
                  "int add(int a, int b) { std::lock_guard g(m); cache[std::to_string(a)] = b; ++calls;"
                  " return *std::make_shared<int>(a + b); }\nint twice(int a) { return add(a, a); }\n"
                  "namespace { struct Setup { Setup() { cache[\"x\"] = 1; } } setup; }\n")
        for flags in ((), ("-fsanitize=thread",), ("-fsanitize=address,undefined",)):
            with self.subTest(flags=flags):
                self.assertEqual(self.compile(honest, *flags), "")

    def test_symbols_that_replace_the_kit_or_early_code_are_refused(self) -> None:
        attacks = {
            "testing::internal::CmpHelperEQ": "#include <gtest/gtest.h>\nnamespace testing::internal {\ntemplate <>\n"
            "AssertionResult CmpHelperEQ<int, int>(const char*, const char*, const int&, const int&) {\n"
            "  return AssertionSuccess();\n}\n}\n",
            "distlab::testing::same": "namespace distlab::testing { bool same(int, int) { return true; } }\n",
            "weak symbol": "namespace testing { __attribute__((weak)) int helper() { return 1; } }\n",
            "`std::": "#include <string>\nnamespace std { int my_own = 1; }\n",
            "`write`": '#include <cstddef>\nextern "C" long write(int, const void*, std::size_t) { return 0; }\n',
            "`main`": "int main() { return 0; }\n",
            "names a type of GoogleTest": DROP_FAILURES,
            "the C++ runtime's shared library exports": "#include <string>\nnamespace std {\ntemplate <>\n"
            "__attribute__((weak)) string::size_type string::find(const char*, size_type, size_type) const noexcept"
            " {\n  return 0;\n}\n}\n",
            "`operator new(unsigned long)`": "#include <cstdlib>\n#include <new>\n"
            "void* operator new(std::size_t n) { return std::malloc(n ? n : 1); }\n",
            ".init_array.00101": '#include <cstdio>\n__attribute__((constructor(101))) static void early() '
                                 '{ std::puts("early"); }\n',
            ".init_array.00200": "struct S { S(); };\nS s __attribute__((init_priority(200)));\n",
            ".preinit_array": '#include <cstdio>\nstatic void early() { std::puts("x"); }\n'
                              '__attribute__((section(".preinit_array"), used)) static void (*p)() = early;\n',
            "section `.init`": INIT_SECTION,
            "section `.fini`": INIT_SECTION.replace(".init", ".fini"),
            "indirect function (IFUNC) `_Z10early_hookv`": IFUNC,
            "calls GoogleTest's testing::": SWALLOW,
            "a submission may not use the test framework": "#include <gtest/gtest.h>\n"
            "bool ok() { return ::testing::UnitTest::GetInstance()->Passed(); }\n",
        }
        for word, source in attacks.items():
            with self.subTest(word):
                problem = self.compile(source)
                self.assertIn("exercises/01_fix/fix.cpp: ", problem)
                self.assertIn(word.strip("`"), problem)


class TestLinkOrder(unittest.TestCase):
    """Without the object rule: the miniature kit's test program, built by CMake from a submission
    with weak definitions of what GoogleTest and distlab_dist also define, uses the trusted copies
    (they are linked whole before the module's library, as in cmake/DistlabModule.cmake)."""

    def test_trusted_copies_win_over_submitted_weak_definitions(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            src, build = Path(d) / "kit", Path(d) / "build"
            shutil.copytree(FIXTURE, src)
            shutil.copy(HERE.parent.parent / "libdist/testing/test_main.cpp", src / "support/test_main.cpp")
            (src / "solutions/01_fix/fix.cpp").write_text(FORGED_TODO + DROP_FAILURES)
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.run(["cmake", "-S", src, "-B", build, *generator, "-DDISTLAB_IMPL=solutions"],
                           check=True, capture_output=True)
            subprocess.run(["cmake", "--build", build, "--target", "test_01_fix"], check=True, capture_output=True)
            run = subprocess.run([build / "bin/test_01_fix"], capture_output=True, text=True, timeout=60)
            self.assertNotEqual(run.returncode, 0, run.stdout[-2000:])
            self.assertIn("3 FAILED TESTS", run.stdout)                          # GoogleTest's vector copy
            self.assertIn('description "not implemented: twice"', run.stdout)   # distlab_dist's vtable
            self.assertNotIn("forged", run.stdout)
            if generator:
                line = subprocess.run(["ninja", "-C", build, "-t", "commands", "bin/test_01_fix"],
                                      capture_output=True, text=True, check=True).stdout.splitlines()[-1]
                self.assertLess(line.index("--whole-archive"), line.index("libdistlab_01_fix.a"), line)
                self.assertLess(line.index("libgtest"), line.index("libdistlab_01_fix.a"), line)


class TestGradedAttacks(GraderTestCase):
    """Each attack graded on the miniature kit: zero for the module, with the reason."""

    MODES = ("auto", "limits") if os.geteuid() == 0 else ("auto",)

    def graded(self, files: dict[str, str], module: str, mode: str) -> dict[str, dict]:
        before = _kit_snapshot()
        _, tests = self.grade(files, "--sandbox", mode, modules=(module,))
        self.assertEqual(_kit_snapshot(), before, "the grade changed the kit")
        return tests

    def test_honest_headers_keep_full_marks(self) -> None:
        for mode in self.MODES:
            for name, header in (("reference", KIT_DEP), ("private member and <mutex>", HONEST),
                                 ("members, bodies, constexpr, operator=", HONEST_MORE)):
                with self.subTest(f"{name}, --sandbox {mode}"):
                    tests = self.graded({"exercises/02_dep/dep.hpp": header,
                                         "exercises/02_dep/dep.cpp": SOLUTION["exercises/02_dep/dep.cpp"]},
                                        "02_dep", mode)
                    self.assertEqual(tests["02_dep/quadruple"]["status"], "passed", tests["02_dep/quadruple"])

    def test_header_attacks_get_zero_with_a_reason(self) -> None:
        hidden = f"{KIT}/grader/hidden/01_fix/test_fix_hidden.cpp"
        attacks = {
            "raw string": (RAW_HIDDEN_DEFINE, "`#undef EXPECT_TRUE` is not allowed"),
            "overload": (OVERLOAD, "opens namespace `distlab::testing`"),
            "incbin": (f'asm(".incbin \\"{hidden}\\"");\n', "`asm` is not allowed"),
            "proc": ('#include "/proc/self/fd/1"\n', '`#include "/proc/self/fd/1"` is not allowed'),
            "inline variable calls setenv": (SETENV_DEP, "initialiser calls a function runs code before the tests"),
            "always-true operators": (ADL_DEP, "declares `operator int`, which the kit's version"),
            "GoogleTest's reporter": (REPORTER_DEP, "names `testing`"),
            "a test macro expanded in the tests": (MACRO_DEP, "names `testing`"),
        }
        for mode in self.MODES:
            for what, (text, reason) in attacks.items():
                with self.subTest(f"{what}, --sandbox {mode}"):
                    t0 = time.monotonic()
                    tests = self.graded({"exercises/02_dep/dep.hpp": KIT_DEP + text,
                                         "exercises/02_dep/dep.cpp": LAZY_DEP}, "02_dep", mode)
                    item = tests["02_dep/quadruple"]
                    self.assertEqual(item["score"], 0, item["output"][:600])
                    self.assertIn("not gradable", item["output"])
                    self.assertIn("exercises/02_dep/dep.hpp:", item["output"])
                    self.assertIn(reason, item["output"])
                    self.assertNotIn("FixHidden", item["output"])
                    self.assertLess(time.monotonic() - t0, 120, "the grade took too long")

    def test_object_attacks_get_zero_with_a_reason(self) -> None:
        lazy = "int add(int, int) { return 0; }\nint twice(int) { return 0; }\n"
        attacks = {
            "strong testing::": ("#include <gtest/gtest.h>\nnamespace testing::internal {\ntemplate <>\n"
                                 "AssertionResult CmpHelperEQ<int, int>(const char*, const char*, const int&, "
                                 "const int&) {\n  return AssertionSuccess();\n}\n}\n" + lazy,
                                 "defines `testing::internal::CmpHelperEQ<int, int>`"),
            "weak std:: over testing::": (DROP_FAILURES + lazy,
                                          "defines `void std::vector<testing::TestPartResult"),
            "constructor(101)": ('#include <cstdio>\n__attribute__((constructor(101))) static void early() '
                                 '{ std::puts("early"); }\n' + SOLUTION["exercises/01_fix/fix.cpp"],
                                 "the object holds the section `.init_array.00101`"),
            ".init section": (INIT_SECTION + SOLUTION["exercises/01_fix/fix.cpp"],
                              "the object holds the section `.init`"),
            "IFUNC resolver": (IFUNC + SOLUTION["exercises/01_fix/fix.cpp"],
                               "defines the indirect function (IFUNC) `_Z10early_hookv`"),
            "GoogleTest's fake reporter": (SWALLOW + lazy, "calls GoogleTest's testing::... "),
        }
        for mode in self.MODES:
            for what, (source, reason) in attacks.items():
                with self.subTest(f"{what}, --sandbox {mode}"):
                    tests = self.graded({"exercises/01_fix/fix.cpp": source}, "01_fix", mode)
                    for name in ("01_fix/add", "01_fix/twice"):
                        self.assertEqual(tests[name]["score"], 0, tests[name]["output"][:600])
                    self.assertIn("not gradable", tests["01_fix/add"]["output"])
                    self.assertIn(f"exercises/01_fix/fix.cpp: {reason}", tests["01_fix/add"]["output"])


if __name__ == "__main__":
    unittest.main()
