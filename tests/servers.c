/* tests/servers.c - nginx, moto's S3 server and the fault proxy as child
 * processes on loopback for the remote-I/O tests (servers.h).
 *
 * DESIGN: a port is picked by binding port 0 and closing the socket, then
 * handed to the server (a tiny window in which another process could take
 * it: the start is tried again, three times). The child asks for SIGKILL
 * when the test process dies (PR_SET_PDEATHSIG), so a crashed or timed-out
 * Criterion test leaves no server behind. Output goes to a log in the
 * server's folder, whose tail the failure message quotes. */
#include "servers.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define START_TIMEOUT_MS 20000

static void missing(const char *what)
{
    const char *skip = getenv("SLUICE_SKIP_SERVERS");
    if (skip && !strcmp(skip, "1"))
        cr_skip_test("%s (skipped: SLUICE_SKIP_SERVERS=1)", what);
    cr_assert_fail("%s; or set SLUICE_SKIP_SERVERS=1 to skip the tests that need it", what);
}

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int port_open(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), ok;

    if (fd < 0)
        return 0;
    ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The last ~1500 bytes of the server's log, for a failure message. */
static void log_tail(const srv *s, char *out, size_t cap)
{
    char path[320];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/server.log", s->dir);
    uint8_t *b = tu_read_file(path, &len);
    size_t from = len > 1500 ? len - 1500 : 0;
    snprintf(out, cap, "%.*s", (int)(len - from), b ? (const char *)b + from : "(no log)");
    free(b);
}

/* Start argv (with the NAME=VALUE strings of env added) in s->dir; 0 when
 * the port answers, -1 when the child died first (log in *why). */
static int spawn_wait(srv *s, char *const argv[], char *const env[], char *why, size_t cap)
{
    pid_t parent = getpid();
    char logp[320];
    snprintf(logp, sizeof logp, "%s/server.log", s->dir);
    pid_t pid = fork();
    cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(1);
        int lf = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0644), nul = open("/dev/null", O_RDONLY);
        if (lf < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(lf, 1) < 0 || dup2(lf, 2) < 0)
            _exit(126);
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        execvp(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    for (int waited = 0; waited < START_TIMEOUT_MS; waited += 20) {
        int st;
        if (port_open(s->port))
            return 0;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            log_tail(s, why, cap);
            return -1;
        }
        sleep_ms(20);
    }
    log_tail(s, why, cap);
    srv_stop(s);
    cr_assert_fail("%s did not open port %d within %d ms; its log:\n%s", argv[0], s->port,
                   START_TIMEOUT_MS, why);
    return -1;
}

static void srv_init(srv *s)
{
    memset(s, 0, sizeof *s);
    char *d = tu_tmpdir();
    snprintf(s->dir, sizeof s->dir, "%s", d);
    free(d);
}

/* Pick a port, fill s->port/url and start; tried three times (port races). */
static void start(srv *s, const char *what, char **argv, int port_arg, char *const env[],
                  const char *fmt_port)
{
    char why[2048] = "";
    char portbuf[32];

    for (int attempt = 0; attempt < 3; attempt++) {
        s->port = free_port();
        snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
        snprintf(portbuf, sizeof portbuf, fmt_port, s->port);
        if (port_arg >= 0)
            argv[port_arg] = portbuf;
        if (spawn_wait(s, argv, env, why, sizeof why) == 0)
            return;
    }
    cr_assert_fail("%s did not start; its log:\n%s", what, why);
}

/* ---------------------------------------------------------------- nginx */

void srv_nginx_start(const char *root, srv *s)
{
    const char *nginx = getenv("SLUICE_TEST_NGINX");
    char conf[320], rootabs[PATH_MAX], why[2048] = "";

    if (!nginx || !*nginx)
        nginx = "/usr/sbin/nginx";
    if (access(nginx, X_OK) != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "nginx not found at %s: install Debian's nginx-light "
                 "(tools/dev deps) or point SLUICE_TEST_NGINX at an nginx", nginx);
        missing(msg);
    }
    cr_assert_not_null(realpath(root, rootabs), "%s: %s", root, strerror(errno));
    srv_init(s);
    snprintf(conf, sizeof conf, "%s/nginx.conf", s->dir);
    snprintf(s->log, sizeof s->log, "%s/access.log", s->dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        s->port = free_port();
        snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
        FILE *f = fopen(conf, "w");
        cr_assert_not_null(f, "%s: %s", conf, strerror(errno));
        fprintf(f,
                "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                "pid %1$s/nginx.pid;\nerror_log %1$s/error.log warn;\n"
                "events { worker_connections 512; }\n"
                "http {\n"
                "  log_format sl '$connection $request $status';\n"
                "  access_log %1$s/access.log sl;\n"
                "  client_body_temp_path %1$s/body; proxy_temp_path %1$s/proxy;\n"
                "  fastcgi_temp_path %1$s/fastcgi; uwsgi_temp_path %1$s/uwsgi;\n"
                "  scgi_temp_path %1$s/scgi;\n"
                "  keepalive_requests 100000; keepalive_timeout 60s;\n"
                "  default_type application/octet-stream;\n"
                "  server { listen 127.0.0.1:%2$d; root %3$s; location / { } }\n"
                "}\n",
                s->dir, s->port, rootabs);
        fclose(f);
        char *argv[] = {(char *)nginx, "-p", s->dir, "-c", conf, "-e", "stderr", NULL};
        if (spawn_wait(s, argv, NULL, why, sizeof why) == 0)
            return;
    }
    cr_assert_fail("nginx did not start; its log:\n%s", why);
}

/* ---------------------------------------------------------------- moto */

static const char *moto_python(char *buf, size_t cap)
{
    const char *py = getenv("SLUICE_TEST_MOTO");
    if (py && *py)
        return py;
    const char *cache = getenv("SLUICE_CACHE"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (cache && *cache)
        snprintf(buf, cap, "%s/venv-s3/bin/python", cache);
    else if (xdg && *xdg)
        snprintf(buf, cap, "%s/sluice/venv-s3/bin/python", xdg);
    else
        snprintf(buf, cap, "%s/.cache/sluice/venv-s3/bin/python", home ? home : "");
    return buf;
}

void srv_s3_start(srv *s)
{
    char pybuf[512], *out = NULL;
    const char *py = moto_python(pybuf, sizeof pybuf);

    if (access(py, X_OK) != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "moto's S3 server not found (%s, from %s): run `tools/dev "
                 "s3venv` (tools/dev test makes it and sets SLUICE_TEST_MOTO)", py,
                 getenv("SLUICE_TEST_MOTO") ? "SLUICE_TEST_MOTO" : "the default cache");
        missing(msg);
    }
    srv_init(s);
    /* The first three actions (s3put.py init's IAM calls) go unchecked;
     * every later request must carry a valid SigV4 signature of that key. */
    /* Parts of any size (S3's 5 MiB minimum per part but the last would
     * need shards of 10 MiB for a two-part upload): convert's multipart
     * tests use parts of a few KB (SLUICE_PUT_PART_BYTES). */
    char *env[] = {"INITIAL_NO_AUTH_ACTION_COUNT=3", "S3_UPLOAD_PART_MIN_SIZE=1024", NULL};
    char *argv[] = {(char *)py, "-m", "moto.server", "-H", "127.0.0.1", "-p", NULL, NULL};
    start(s, "moto's S3 server", argv, 6, env, "%d");
    int rc = tu_run(&out, "'%s' '%s/tests/servers/s3put.py' init %s", py, SLUICE_SOURCE_DIR,
                    s->url);
    cr_assert_eq(rc, 0, "s3put.py init: %s", out);
    const char *last = out, *nl;
    while ((nl = strchr(last, '\n')) && nl[1])
        last = nl + 1;
    cr_assert_eq(sscanf(last, "%127s %127s", s->key, s->secret), 2, "s3put.py init: %s", out);
    free(out);
}

void srv_s3_put_dir(const srv *s, const char *bucket, const char *prefix, const char *local_dir)
{
    char pybuf[512], *out = NULL;
    const char *py = moto_python(pybuf, sizeof pybuf);
    int rc = tu_run(&out, "AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' '%s' "
                    "'%s/tests/servers/s3put.py' put %s '%s' '%s' '%s'",
                    s->key, s->secret, py, SLUICE_SOURCE_DIR, s->url, bucket, prefix, local_dir);
    cr_assert_eq(rc, 0, "s3put.py put %s: %s", local_dir, out);
    free(out);
}

/* s3put.py CMD ARGS... with s's key; its last line (a count). */
static long s3put(const srv *s, const char *args)
{
    char pybuf[512], *out = NULL;
    const char *py = moto_python(pybuf, sizeof pybuf);
    int rc = tu_run(&out, "AWS_ACCESS_KEY_ID='%s' AWS_SECRET_ACCESS_KEY='%s' '%s' "
                    "'%s/tests/servers/s3put.py' %s", s->key, s->secret, py, SLUICE_SOURCE_DIR, args);
    cr_assert_eq(rc, 0, "s3put.py %s: %s", args, out);
    const char *last = out, *nl;
    while ((nl = strchr(last, '\n')) && nl[1])
        last = nl + 1;
    long n = strtol(last, NULL, 10);
    free(out);
    return n;
}

long srv_s3_get_dir(const srv *s, const char *bucket, const char *prefix, const char *local_dir)
{
    char args[1024];
    snprintf(args, sizeof args, "get %s '%s' '%s' '%s'", s->url, bucket, prefix, local_dir);
    return s3put(s, args);
}

long srv_s3_uploads(const srv *s, const char *bucket)
{
    char args[512];
    snprintf(args, sizeof args, "uploads %s '%s'", s->url, bucket);
    return s3put(s, args);
}

void srv_s3_env(const srv *s, const char *endpoint)
{
    setenv("AWS_ENDPOINT_URL", endpoint ? endpoint : s->url, 1);
    setenv("AWS_ACCESS_KEY_ID", s->key, 1);
    setenv("AWS_SECRET_ACCESS_KEY", s->secret, 1);
    setenv("AWS_REGION", "us-east-1", 1);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_ENDPOINT_URL_S3");
}

/* ---------------------------------------------------------------- proxy */

void srv_proxy_start(const char *upstream_url, const char *mode, srv *s)
{
    char script[PATH_MAX], up[128];
    const char *hp = strstr(upstream_url, "://");

    snprintf(up, sizeof up, "%s", hp ? hp + 3 : upstream_url);
    up[strcspn(up, "/")] = 0;
    snprintf(script, sizeof script, "%s/tests/servers/faultproxy.py", SLUICE_SOURCE_DIR);
    if (tu_run(NULL, "command -v python3") != 0)
        missing("python3 not found on PATH (the fault proxy): install python3 (tools/dev deps)");
    srv_init(s);
    snprintf(s->control, sizeof s->control, "%s/mode", s->dir);
    char *argv[] = {"python3", script, "--upstream", up, "--mode", (char *)mode,
                    "--control", s->control, "--port", NULL, NULL};
    start(s, "tests/servers/faultproxy.py", argv, 9, NULL, "%d");
}

void srv_proxy_mode(const srv *s, const char *mode)
{
    char tmp[340];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->control);
    cr_assert_eq(tu_write_file(tmp, mode, strlen(mode)), 0, "%s", tmp);
    cr_assert_eq(rename(tmp, s->control), 0, "%s: %s", s->control, strerror(errno));
}

/* ---------------------------------------------------------------- stop */

void srv_stop(srv *s)
{
    if (s->pid > 0) {
        int st, reaped = 0;
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 100 && !reaped; i++) {
            reaped = waitpid(s->pid, &st, WNOHANG) == s->pid;
            if (!reaped)
                sleep_ms(20);
        }
        if (!reaped) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
        }
        s->pid = 0;
    }
    if (s->dir[0]) {
        tu_rmrf(s->dir);
        s->dir[0] = 0;
    }
}
