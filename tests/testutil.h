/* tests/testutil.h - helpers shared by the Criterion tests. */
#ifndef SL_TESTUTIL_H
#define SL_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Make a fresh temporary directory ("/tmp/sluice-test-XXXXXX"); the path is
 * malloc'd. Aborts the test on failure. */
char *tu_tmpdir(void);
/* rm -rf path (NULL is a no-op); frees nothing. */
void tu_rmrf(const char *path);
/* Path join into a malloc'd string. */
char *tu_join(const char *a, const char *b);
/* The whole file, malloc'd, with a NUL after its *len bytes (text parses as a
 * string); NULL when it cannot be read. */
uint8_t *tu_read_file(const char *path, size_t *len);
/* Write a whole file; 0 on success. */
int tu_write_file(const char *path, const void *data, size_t len);
/* dir/name with size pseudo-random bytes (tu_rand from seed); returns them
 * (malloc'd). */
uint8_t *tu_random_file(const char *dir, const char *name, size_t size, uint64_t seed);
/* Run a shell command (printf format); returns its exit status (or -1). The
 * command's stdout+stderr are captured into a malloc'd *out when out != NULL. */
int tu_run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Run fn(arg, fd) in a forked child, which writes what it measured to fd
 * (its own peak RSS, say, where the parent's would count the parent's
 * allocations too); returns all it wrote, malloc'd and NUL-terminated, its
 * length in *len. Asserts that the child exited 0. */
char *tu_in_child(void (*fn)(void *arg, int fd), void *arg, size_t *len);
/* Deterministic PRNG (splitmix64). */
uint64_t tu_rand(uint64_t *state);
/* The TensorBoard event file a training run wrote into logdir (the first
 * events.out.tfevents.*; malloc'd); asserts there is one. */
char *tu_events_file(const char *logdir);
/* Path of the sluice binary under test. */
const char *tu_sluice(void);
/* Fashion-MNIST from Debian's dataset-fashion-mnist, or NULL when absent. */
const char *tu_fmnist_dir(void);

/* Float comparison against a reference, llm.c's |got - want| <= atol +
 * rtol*|want| per element (in double; a NaN on either side is never close).
 * tu_first_far: the first index that is not close, or -1 when all are (for
 * tests that word their own message: shapes, steps). tu_assert_close fails
 * the test at the first such index: "what[i]: got .. want .. (diff ..)". */
int64_t tu_first_far(const float *got, const float *want, int64_t n, double atol, double rtol);
void tu_assert_close(const float *got, const float *want, int64_t n, double atol, double rtol,
                     const char *what);

#endif
