/*
 * A small Criterion-compatible test API, used only by `make SANITIZE=thread`.
 *
 * Why: Criterion 2.4 cannot start under ThreadSanitizer (its boxfort arena mmaps at addresses
 * TSan reserves: "Could not initialize inheritable arena", upstream Criterion issue #274), yet
 * the TSan build must run the same test sources. With -Itests/shim first on the include path,
 * `#include <criterion/criterion.h>` finds this file, and tests/shim/shim_runner.c provides
 * main(): the runner (fork per test, timeouts, Criterion's report lines and exit status).
 *
 * What it covers: Test(suite, name, .init, .fini, .timeout, .description, .disabled, .signal,
 * .exit_code), TestSuite(suite, .init, .fini, .timeout, .description, .disabled), the old-style
 * (criterion/assert.h) cr_assert_* / cr_expect_* family, cr_log*, cr_skip_test. Not covered:
 * theories, parameterized tests, the new cr_assert(eq(...)) API, redirections, hooks.
 *
 * Semantics as in Criterion: a failed cr_expect_* records "file:line: Assertion Failed" and the
 * message and continues; a failed cr_assert_* records it and ends the test (its .fini still
 * runs). The optional message is a printf format and its arguments (checked by the compiler);
 * without it a default names the expression. Every operand is evaluated exactly once. String
 * comparisons fail (rather than crash) on a NULL operand.
 *
 * Threads: assertions and logs may be called from any thread of a test. A fatal assertion on a
 * thread other than the one running the test cannot unwind that thread: it records the failure
 * and ends the test process at once (no .fini).
 *
 * Like Criterion's headers this one is a system header, so its macro expansions do not raise
 * the project's warnings (-Wsign-compare on `(a) == (b)`, -Wshadow on its locals) where
 * Criterion would not; message formats are still checked.
 */
#ifndef DSTL_TESTS_SHIM_CRITERION_H
#define DSTL_TESTS_SHIM_CRITERION_H
#pragma GCC system_header

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* One Test(): its identity (set by the macro) and Criterion's designated options. */
struct cr_shim_test {
    const char *suite_;
    const char *name_;
    void (*fn_)(void);
    const char *file_;
    int line_;
    struct cr_shim_test *next_;
    void (*init)(void);      /* runs after the suite's .init, in the test's process */
    void (*fini)(void);      /* runs before the suite's .fini, also after a failed cr_assert */
    double timeout;          /* seconds; 0 = the suite's, then --timeout, then none */
    const char *description; /* printed with --verbose */
    bool disabled;           /* not run, not counted */
    int signal;              /* the test passes only if it dies of this signal */
    int exit_code;           /* the test passes only if its process exits with this status */
};

/* One TestSuite(): options shared by every test of the suite. */
struct cr_shim_suite {
    const char *name_;
    struct cr_shim_suite *next_;
    void (*init)(void);
    void (*fini)(void);
    double timeout;
    const char *description;
    bool disabled;
};

enum criterion_severity { CR_LOG_INFO, CR_LOG_WARNING, CR_LOG_ERROR };

/* Adds a test / a suite's options to the runner's lists. Called from constructors, before
 * main(); never fails; the object must live for the whole program (it is static). */
void cr_shim_test_register_(struct cr_shim_test *t);
void cr_shim_suite_register_(struct cr_shim_suite *s);

/* Notes the location of an assertion that held (named in the report if the test then
 * crashes). Thread-safe, non-blocking. */
void cr_shim_pass_(const char *file, int line);

/* Records a failed assertion at file:line with the formatted message; the test goes on.
 * Thread-safe; blocks only on the write of the record. */
void cr_shim_expect_fail_(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records a failed assertion like cr_shim_expect_fail_ and ends the test: on the test's own
 * thread it unwinds to the runner (which then runs the .fini functions); on any other thread
 * it ends the test's process. Does not return. */
_Noreturn void cr_shim_assert_fail_(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Ends the test as skipped, with the formatted reason. Does not return. */
_Noreturn void cr_shim_skip_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Logs a formatted line at the given severity (info only with --verbose). Thread-safe. */
void cr_shim_log_(enum criterion_severity severity, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Formats a default failure message into a buffer owned by the calling thread, valid until
 * its next call on that thread. Never fails (truncates). */
const char *cr_shim_detail_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- registration ---------------------------------------------------------------------- */

#define Test(suite, name, ...)                                                          \
    static void cr_shim_fn_##suite##_##name(void);                                      \
    static struct cr_shim_test cr_shim_test_##suite##_##name = {                        \
        .suite_ = #suite, .name_ = #name, .fn_ = cr_shim_fn_##suite##_##name,            \
        .file_ = __FILE__, .line_ = __LINE__, __VA_ARGS__};                              \
    __attribute__((constructor)) static void cr_shim_register_##suite##_##name(void)    \
    {                                                                                   \
        cr_shim_test_register_(&cr_shim_test_##suite##_##name);                         \
    }                                                                                   \
    static void cr_shim_fn_##suite##_##name(void)

/* The tentative definition first, so the caller's `;` ends the real one. */
#define TestSuite(suite, ...)                                                           \
    static struct cr_shim_suite cr_shim_suite_##suite;                                  \
    __attribute__((constructor)) static void cr_shim_register_suite_##suite(void)       \
    {                                                                                   \
        cr_shim_suite_register_(&cr_shim_suite_##suite);                                \
    }                                                                                   \
    static struct cr_shim_suite cr_shim_suite_##suite = {.name_ = #suite, __VA_ARGS__}

/* ---- messages ---------------------------------------------------------------------------- */

/* CR_SHIM_MSG_(dflt) -> "%s", dflt;  CR_SHIM_MSG_(dflt, fmt, args...) -> fmt, args...
 * (dflt is evaluated only when it is used). */
#define CR_SHIM_CAT_(a, b) CR_SHIM_CAT2_(a, b)
#define CR_SHIM_CAT2_(a, b) a##b
#define CR_SHIM_MSG_(dflt, ...) CR_SHIM_CAT_(CR_SHIM_MSG_DFLT, __VA_OPT__(_USER))(dflt, __VA_ARGS__)
#define CR_SHIM_MSG_DFLT(dflt, ...) "%s", (dflt)
#define CR_SHIM_MSG_DFLT_USER(dflt, ...) __VA_ARGS__

/* ---- the checks (fail is cr_shim_assert_fail_ or cr_shim_expect_fail_) ------------------ */

#define CR_SHIM_CHECK_(fail, cond, dflt, ...)                                          \
    do {                                                                               \
        if (cond)                                                                      \
            cr_shim_pass_(__FILE__, __LINE__);                                         \
        else                                                                           \
            fail(__FILE__, __LINE__, CR_SHIM_MSG_(dflt, __VA_ARGS__));                 \
    } while (0)

#define CR_SHIM_CMP_(fail, a, op, b, ...)                                              \
    CR_SHIM_CHECK_(fail, (a) op (b), "The expression (" #a ") " #op " (" #b ") is false.", \
                   __VA_ARGS__)

#define CR_SHIM_STR_CMP_(fail, a, op, b, ...)                                          \
    do {                                                                               \
        const char *cr_shim_sa_ = (a), *cr_shim_sb_ = (b);                             \
        CR_SHIM_CHECK_(fail, cr_shim_sa_ && cr_shim_sb_ && strcmp(cr_shim_sa_, cr_shim_sb_) op 0, \
                       cr_shim_detail_("The expression (as strings) (%s) %s (%s) is false: " \
                                       "actual=`%s` expected=`%s`.", #a, #op, #b,      \
                                       cr_shim_sa_ ? cr_shim_sa_ : "(null)",            \
                                       cr_shim_sb_ ? cr_shim_sb_ : "(null)"),           \
                       __VA_ARGS__);                                                   \
    } while (0)

#define CR_SHIM_STR_EMPTY_(fail, want_empty, s, ...)                                   \
    do {                                                                               \
        const char *cr_shim_s_ = (s);                                                  \
        CR_SHIM_CHECK_(fail, cr_shim_s_ && (cr_shim_s_[0] == '\0') == (want_empty),    \
                       cr_shim_detail_("%s (`%s`) is %s.", #s,                         \
                                       cr_shim_s_ ? cr_shim_s_ : "(null)",              \
                                       (want_empty) ? "not empty" : "empty"),           \
                       __VA_ARGS__);                                                   \
    } while (0)

#define CR_SHIM_FLOAT_(fail, want_equal, a, b, eps, ...)                               \
    do {                                                                               \
        double cr_shim_fa_ = (a), cr_shim_fb_ = (b), cr_shim_fe_ = (eps);              \
        bool cr_shim_close_ = cr_shim_fa_ - cr_shim_fb_ <= cr_shim_fe_ &&              \
                              cr_shim_fb_ - cr_shim_fa_ <= cr_shim_fe_;                \
        CR_SHIM_CHECK_(fail, cr_shim_close_ == (want_equal),                           \
                       cr_shim_detail_("The expression (%s) %s (%s) within %s is false: " \
                                       "actual=%.17g expected=%.17g.", #a,             \
                                       (want_equal) ? "==" : "!=", #b, #eps,           \
                                       cr_shim_fa_, cr_shim_fb_),                       \
                       __VA_ARGS__);                                                   \
    } while (0)

#define CR_SHIM_ARR_(fail, op, a, b, size, ...)                                        \
    CR_SHIM_CHECK_(fail, memcmp((a), (b), (size)) op 0,                                \
                   "The expression (" #a ")[0.." #size "] " #op " (" #b ")[0.." #size "] is false.", \
                   __VA_ARGS__)

#define CR_SHIM_FAIL_DFLT_ "The conditions for this assertion were not met."

/* ---- Criterion's names ----------------------------------------------------------------- */

#define cr_assert(cond, ...) \
    CR_SHIM_CHECK_(cr_shim_assert_fail_, cond, "The expression " #cond " is false.", __VA_ARGS__)
#define cr_expect(cond, ...) \
    CR_SHIM_CHECK_(cr_shim_expect_fail_, cond, "The expression " #cond " is false.", __VA_ARGS__)
#define cr_assert_not(cond, ...) \
    CR_SHIM_CHECK_(cr_shim_assert_fail_, !(cond), "The expression !(" #cond ") is false.", __VA_ARGS__)
#define cr_expect_not(cond, ...) \
    CR_SHIM_CHECK_(cr_shim_expect_fail_, !(cond), "The expression !(" #cond ") is false.", __VA_ARGS__)

#define cr_assert_fail(...) cr_shim_assert_fail_(__FILE__, __LINE__, CR_SHIM_MSG_(CR_SHIM_FAIL_DFLT_, __VA_ARGS__))
#define cr_expect_fail(...) cr_shim_expect_fail_(__FILE__, __LINE__, CR_SHIM_MSG_(CR_SHIM_FAIL_DFLT_, __VA_ARGS__))
#define cr_skip_test(...) cr_shim_skip_(CR_SHIM_MSG_("", __VA_ARGS__))

#define cr_assert_eq(a, b, ...) CR_SHIM_CMP_(cr_shim_assert_fail_, a, ==, b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...) CR_SHIM_CMP_(cr_shim_expect_fail_, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) CR_SHIM_CMP_(cr_shim_assert_fail_, a, !=, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...) CR_SHIM_CMP_(cr_shim_expect_fail_, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) CR_SHIM_CMP_(cr_shim_assert_fail_, a, <, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...) CR_SHIM_CMP_(cr_shim_expect_fail_, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) CR_SHIM_CMP_(cr_shim_assert_fail_, a, <=, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...) CR_SHIM_CMP_(cr_shim_expect_fail_, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) CR_SHIM_CMP_(cr_shim_assert_fail_, a, >, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...) CR_SHIM_CMP_(cr_shim_expect_fail_, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) CR_SHIM_CMP_(cr_shim_assert_fail_, a, >=, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...) CR_SHIM_CMP_(cr_shim_expect_fail_, a, >=, b, __VA_ARGS__)

#define cr_assert_null(p, ...) \
    CR_SHIM_CHECK_(cr_shim_assert_fail_, (p) == NULL, #p " is not null.", __VA_ARGS__)
#define cr_expect_null(p, ...) \
    CR_SHIM_CHECK_(cr_shim_expect_fail_, (p) == NULL, #p " is not null.", __VA_ARGS__)
#define cr_assert_not_null(p, ...) \
    CR_SHIM_CHECK_(cr_shim_assert_fail_, (p) != NULL, #p " is null.", __VA_ARGS__)
#define cr_expect_not_null(p, ...) \
    CR_SHIM_CHECK_(cr_shim_expect_fail_, (p) != NULL, #p " is null.", __VA_ARGS__)
#define cr_assert_zero(v, ...) \
    CR_SHIM_CHECK_(cr_shim_assert_fail_, !(v), "The value of " #v " is not zero.", __VA_ARGS__)
#define cr_expect_zero(v, ...) \
    CR_SHIM_CHECK_(cr_shim_expect_fail_, !(v), "The value of " #v " is not zero.", __VA_ARGS__)
#define cr_assert_not_zero(v, ...) \
    CR_SHIM_CHECK_(cr_shim_assert_fail_, !!(v), "The value of " #v " is zero.", __VA_ARGS__)
#define cr_expect_not_zero(v, ...) \
    CR_SHIM_CHECK_(cr_shim_expect_fail_, !!(v), "The value of " #v " is zero.", __VA_ARGS__)

#define cr_assert_str_eq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_assert_fail_, a, ==, b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_expect_fail_, a, ==, b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_assert_fail_, a, !=, b, __VA_ARGS__)
#define cr_expect_str_neq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_expect_fail_, a, !=, b, __VA_ARGS__)
#define cr_assert_str_lt(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_assert_fail_, a, <, b, __VA_ARGS__)
#define cr_expect_str_lt(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_expect_fail_, a, <, b, __VA_ARGS__)
#define cr_assert_str_leq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_assert_fail_, a, <=, b, __VA_ARGS__)
#define cr_expect_str_leq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_expect_fail_, a, <=, b, __VA_ARGS__)
#define cr_assert_str_gt(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_assert_fail_, a, >, b, __VA_ARGS__)
#define cr_expect_str_gt(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_expect_fail_, a, >, b, __VA_ARGS__)
#define cr_assert_str_geq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_assert_fail_, a, >=, b, __VA_ARGS__)
#define cr_expect_str_geq(a, b, ...) CR_SHIM_STR_CMP_(cr_shim_expect_fail_, a, >=, b, __VA_ARGS__)
#define cr_assert_str_empty(s, ...) CR_SHIM_STR_EMPTY_(cr_shim_assert_fail_, true, s, __VA_ARGS__)
#define cr_expect_str_empty(s, ...) CR_SHIM_STR_EMPTY_(cr_shim_expect_fail_, true, s, __VA_ARGS__)
#define cr_assert_str_not_empty(s, ...) CR_SHIM_STR_EMPTY_(cr_shim_assert_fail_, false, s, __VA_ARGS__)
#define cr_expect_str_not_empty(s, ...) CR_SHIM_STR_EMPTY_(cr_shim_expect_fail_, false, s, __VA_ARGS__)

#define cr_assert_arr_eq(a, b, size, ...) CR_SHIM_ARR_(cr_shim_assert_fail_, ==, a, b, size, __VA_ARGS__)
#define cr_expect_arr_eq(a, b, size, ...) CR_SHIM_ARR_(cr_shim_expect_fail_, ==, a, b, size, __VA_ARGS__)
#define cr_assert_arr_neq(a, b, size, ...) CR_SHIM_ARR_(cr_shim_assert_fail_, !=, a, b, size, __VA_ARGS__)
#define cr_expect_arr_neq(a, b, size, ...) CR_SHIM_ARR_(cr_shim_expect_fail_, !=, a, b, size, __VA_ARGS__)

#define cr_assert_float_eq(a, b, eps, ...) CR_SHIM_FLOAT_(cr_shim_assert_fail_, true, a, b, eps, __VA_ARGS__)
#define cr_expect_float_eq(a, b, eps, ...) CR_SHIM_FLOAT_(cr_shim_expect_fail_, true, a, b, eps, __VA_ARGS__)
#define cr_assert_float_neq(a, b, eps, ...) CR_SHIM_FLOAT_(cr_shim_assert_fail_, false, a, b, eps, __VA_ARGS__)
#define cr_expect_float_neq(a, b, eps, ...) CR_SHIM_FLOAT_(cr_shim_expect_fail_, false, a, b, eps, __VA_ARGS__)

#define cr_log(severity, ...) cr_shim_log_((severity), __VA_ARGS__)
#define cr_log_info(...) cr_shim_log_(CR_LOG_INFO, __VA_ARGS__)
#define cr_log_warn(...) cr_shim_log_(CR_LOG_WARNING, __VA_ARGS__)
#define cr_log_error(...) cr_shim_log_(CR_LOG_ERROR, __VA_ARGS__)

#endif
