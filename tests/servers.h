/* tests/servers.h - real servers on loopback for the remote-I/O tests:
 * nginx serving a folder (ranges, keep-alive, an access log that names each
 * request's connection), moto's S3 server (SigV4 checked against an IAM
 * key made at start), and tests/servers/faultproxy.py (delays, 503s, resets,
 * short bodies) in front of either.
 *
 * Each server is a child process on an ephemeral port, killed by srv_stop
 * and, should the test die first, by PR_SET_PDEATHSIG. A start returns once
 * the port accepts connections.
 *
 * Finding the programs: nginx is SLUICE_TEST_NGINX or /usr/sbin/nginx
 * (Debian nginx-light); moto is the Python of SLUICE_TEST_MOTO, or else
 * $SLUICE_CACHE/venv-s3/bin/python (default cache ~/.cache/sluice), made by
 * `tools/dev s3venv` (tools/dev test does it and exports SLUICE_TEST_MOTO);
 * the proxy runs under python3 from PATH. A missing program fails the test
 * with what to install, or skips it when SLUICE_SKIP_SERVERS=1.
 *
 * The start functions fail (or skip) the calling Criterion test themselves
 * on any error; they return only on success.
 */
#ifndef SL_TEST_SERVERS_H
#define SL_TEST_SERVERS_H

#include <sys/types.h>

typedef struct srv {
    pid_t pid;
    int port;
    char url[64];       /* "http://127.0.0.1:PORT" */
    char dir[256];      /* the server's own temp folder (config, logs) */
    char log[320];      /* nginx: access log, "$connection $request $status" per line */
    char control[320];  /* proxy: its control file (srv_proxy_mode) */
    char key[128];      /* s3: the access key id made at start */
    char secret[128];   /* s3: its secret */
} srv;

/* nginx serving root at s->url. */
void srv_nginx_start(const char *root, srv *s);
/* moto's S3 server at s->url, with signature checks on and a key made. */
void srv_s3_start(srv *s);
/* Upload every file under local_dir to s3://bucket/prefix<relative path>
 * (the bucket made when missing). */
void srv_s3_put_dir(const srv *s, const char *bucket, const char *prefix, const char *local_dir);
/* Download every object under s3://bucket/prefix into local_dir (names
 * relative to prefix); returns their count. */
long srv_s3_get_dir(const srv *s, const char *bucket, const char *prefix, const char *local_dir);
/* Multipart uploads in progress (neither completed nor aborted) in bucket. */
long srv_s3_uploads(const srv *s, const char *bucket);
/* AWS_ENDPOINT_URL=endpoint (NULL: s->url), AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY = s's key, AWS_REGION us-east-1, no session token. */
void srv_s3_env(const srv *s, const char *endpoint);
/* The fault proxy in front of upstream_url ("http://127.0.0.1:PORT"),
 * faults as faultproxy.py's MODE ("pass", "503=2", "delay=500,reset=1"...). */
void srv_proxy_start(const char *upstream_url, const char *mode, srv *s);
/* New faults from the next request on (the proxy's counter restarts). */
void srv_proxy_mode(const srv *s, const char *mode);
/* Kill the server, wait for it, remove its folder. A zeroed srv is a no-op. */
void srv_stop(srv *s);

#endif
