/*
 * tests/tools/s3proxy.c — a fault-injecting HTTP/1.1 proxy for the S3 tests.
 *
 *   s3proxy --upstream http://127.0.0.1:PORT [--script "RULE; RULE; ..."] [--port N]
 *
 * Listens on 127.0.0.1 (a free port unless --port), prints "port N" on stdout once it
 * accepts connections, and forwards each request to the upstream S3 server, unless a rule of
 * the script says otherwise. Runs until SIGTERM/SIGINT. Test tooling only.
 *
 * Script: rules separated by ';'. A rule is  FILTER FAULT [xN]  (N defaults to 1):
 *   FILTER   METHOD or METHOD?TEXT ("PUT", "POST?uploads", "PUT?partNumber", "*"): the request
 *            method, and TEXT somewhere in its target (path and query)
 *   FAULT    pass          forward untouched
 *            500           answer 500 InternalError without forwarding
 *            503           answer 503 SlowDown without forwarding
 *            nosuchupload  answer 404 NoSuchUpload without forwarding (what AWS answers a
 *                          Complete re-sent after the first was carried out; RGW 16 answers
 *                          such a re-send with 200, so a script pairs drop-reused with this)
 *            delay=MS      forward, then hold the answer MS milliseconds before sending it
 *            reset         forward, send half of the answer, then reset the connection (RST)
 *            truncate      forward, send the head and half of the body, then close (FIN)
 *            corrupt       flip one byte in the middle of the request body, then forward it
 *                          (a body damaged in transit: the server stores what it got)
 *            drop-reused   on a connection that already carried a request: forward, read the
 *                          answer, then close without sending any of it — the client sees a
 *                          reused connection die before the first response byte, which libcurl
 *                          re-sends by itself on a fresh connection (the server has carried it
 *                          out already); a first request on a connection passes and leaves the
 *                          rule unused
 * Each request takes the first rule that matches it and has uses left, and uses it up once;
 * a request no rule takes passes. Example: "PUT 500 x2" fails the first two PUTs.
 *
 * Why it buffers: the proxy reads a whole request (answering Expect: 100-continue itself and
 * dropping that header, which the client does not sign) and a whole answer before acting,
 * so every fault lands at a known point: before the server saw the request (500, 503) or
 * after it carried it out (delay, reset, truncate).
 *
 * Threads: one per client connection (blocking I/O); the rule table is under a mutex.
 * Bounds: requests and answers up to 256 MiB; every socket has a 60 s timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 32
#define MAX_MSG_BYTES (256u << 20)

typedef enum { F_PASS, F_500, F_503, F_DELAY, F_RESET, F_TRUNCATE, F_CORRUPT, F_DROP_REUSED, F_NO_SUCH_UPLOAD } fault;

typedef struct rule {
    char method[16];
    char text[64];
    fault f;
    int delay_ms;
    int left;
} rule;

static rule rules[MAX_RULES];
static int n_rules;
static pthread_mutex_t rules_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sockaddr_in upstream;
static unsigned long req_seq;

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static int buf_add(buf *b, const void *p, size_t n)
{
    if (b->len + n > MAX_MSG_BYTES) return -1;
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 65536;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads from fd into b until b holds at least `want` bytes. 0, or -1 on EOF/error. */
static int fill(int fd, buf *b, size_t want)
{
    char tmp[65536];
    while (b->len < want) {
        ssize_t r = recv(fd, tmp, sizeof tmp, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        if (buf_add(b, tmp, (size_t)r)) return -1;
    }
    return 0;
}

/* Reads until the end of the head; returns the head's length (through "\r\n\r\n"). */
static long read_head(int fd, buf *b)
{
    for (;;) {
        char *e = b->len ? strstr(b->p, "\r\n\r\n") : NULL;
        if (e) return (long)(e - b->p) + 4;
        if (b->len > (1u << 20)) return -1;
        if (fill(fd, b, b->len + 1)) return -1;
    }
}

/* The value of header name in head (case-insensitive), copied into out; 0 if found. */
static int header(const char *head, size_t head_len, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    const char *p = strstr(head, "\r\n");
    while (p && (size_t)(p - head) < head_len) {
        p += 2;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            while (*v == ' ') v++;
            const char *e = strstr(v, "\r\n");
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= cap) n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
        p = strstr(p, "\r\n");
    }
    return -1;
}

/* Removes the header line `name` from the head at the start of b (fixing b's length). */
static void drop_header(buf *b, size_t *head_len, const char *name)
{
    size_t nl = strlen(name);
    char *p = strstr(b->p, "\r\n");
    while (p && (size_t)(p - b->p) < *head_len - 2) {
        char *line = p + 2;
        char *e = strstr(line, "\r\n");
        if (!e) return;
        if (strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            size_t cut = (size_t)(e + 2 - line);
            memmove(line, e + 2, b->len - (size_t)(e + 2 - b->p) + 1);
            b->len -= cut;
            *head_len -= cut;
            return;
        }
        p = e;
    }
}

/* Reads a chunked body that starts at b->p + off; returns the total message length. */
static long read_chunked(int fd, buf *b, size_t off)
{
    size_t pos = off;
    for (;;) {
        char *e;
        while (!(e = b->len > pos ? strstr(b->p + pos, "\r\n") : NULL))
            if (fill(fd, b, b->len + 1)) return -1;
        size_t n = strtoul(b->p + pos, NULL, 16);
        pos = (size_t)(e - b->p) + 2;
        if (n == 0) {
            /* trailers until an empty line */
            for (;;) {
                while (!(e = b->len > pos ? strstr(b->p + pos, "\r\n") : NULL))
                    if (fill(fd, b, b->len + 1)) return -1;
                bool empty = e == b->p + pos;
                pos = (size_t)(e - b->p) + 2;
                if (empty) return (long)pos;
            }
        }
        if (fill(fd, b, pos + n + 2)) return -1;
        pos += n + 2;
    }
}

static int connect_upstream(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&upstream, sizeof upstream)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* reused: the connection carried a request before this one (drop-reused applies only then) */
static rule take_rule(const char *method, const char *target, bool reused)
{
    rule r = {.f = F_PASS};
    pthread_mutex_lock(&rules_mu);
    for (int i = 0; i < n_rules; i++) {
        rule *x = &rules[i];
        if (x->left <= 0) continue;
        if (strcmp(x->method, "*") && strcmp(x->method, method)) continue;
        if (x->text[0] && !strstr(target, x->text)) continue;
        if (x->f == F_DROP_REUSED && !reused) continue;
        x->left--;
        r = *x;
        break;
    }
    pthread_mutex_unlock(&rules_mu);
    return r;
}

static int send_error(int fd, int status, const char *code, const char *message)
{
    char body[512], msg[1024];
    unsigned long id = __atomic_add_fetch(&req_seq, 1, __ATOMIC_RELAXED);
    int bl = snprintf(body, sizeof body,
                      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>%s</Code>"
                      "<Message>%s</Message><RequestId>s3proxy-%lu</RequestId></Error>",
                      code, message, id);
    int ml = snprintf(msg, sizeof msg,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
                      "x-amz-request-id: s3proxy-%lu\r\n\r\n%s",
                      status,
                      status == 500   ? "Internal Server Error"
                      : status == 404 ? "Not Found"
                                      : "Service Unavailable",
                      bl,
                      id, body);
    return write_all(fd, msg, (size_t)ml);
}

/* Sends the request in req to the upstream (reconnecting once) and reads the whole answer
 * into resp; returns the answer's length or -1. */
static long exchange(int *up, const buf *req, bool is_head, buf *resp)
{
    for (int tries = 0; tries < 2; tries++) {
        if (*up < 0) *up = connect_upstream();
        if (*up < 0) return -1;
        resp->len = 0;
        long hl = -1;
        if (write_all(*up, req->p, req->len) == 0) hl = read_head(*up, resp);
        if (hl < 0) {
            close(*up);
            *up = -1;
            continue; /* the kept-alive upstream connection was closed: once more */
        }
        int status = atoi(resp->p + 9);
        char v[64];
        if (is_head || status == 204 || status == 304 || (status >= 100 && status < 200))
            return hl;
        if (header(resp->p, (size_t)hl, "Transfer-Encoding", v, sizeof v) == 0 &&
            strcasecmp(v, "chunked") == 0)
            return read_chunked(*up, resp, (size_t)hl);
        size_t cl = header(resp->p, (size_t)hl, "Content-Length", v, sizeof v) == 0
                        ? strtoul(v, NULL, 10) : 0;
        if (fill(*up, resp, (size_t)hl + cl)) return -1;
        return hl + (long)cl;
    }
    return -1;
}

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg, up = -1;
    buf in = {0}, out = {0};
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (unsigned long served = 0;; served++) {
        long hl = read_head(fd, &in);
        if (hl < 0) break;
        size_t head_len = (size_t)hl;
        char method[16] = "", target[2048] = "", v[64];
        sscanf(in.p, "%15s %2047s", method, target);
        if (header(in.p, head_len, "Expect", v, sizeof v) == 0) {
            drop_header(&in, &head_len, "Expect");
            if (write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25)) break;
        }
        size_t cl = header(in.p, head_len, "Content-Length", v, sizeof v) == 0
                        ? strtoul(v, NULL, 10) : 0;
        if (fill(fd, &in, head_len + cl)) break;
        buf req = {in.p, head_len + cl, in.cap};
        rule r = take_rule(method, target, served > 0);
        bool close_after = false;
        if (r.f == F_CORRUPT && cl > 0) in.p[head_len + cl / 2] ^= 0x01;
        if (r.f == F_500 || r.f == F_503 || r.f == F_NO_SUCH_UPLOAD) {
            int rc = r.f == F_500   ? send_error(fd, 500, "InternalError", "injected by s3proxy")
                     : r.f == F_503 ? send_error(fd, 503, "SlowDown", "Please reduce your request rate.")
                                    : send_error(fd, 404, "NoSuchUpload",
                                                 "The specified upload does not exist.");
            if (rc) break;
        } else {
            long n = exchange(&up, &req, strcmp(method, "HEAD") == 0, &out);
            if (n < 0) break;
            long ohl = read_head(-1, &out); /* already complete: finds the head's end */
            switch (r.f) {
            case F_DELAY: {
                struct timespec ts = {r.delay_ms / 1000, (long)(r.delay_ms % 1000) * 1000000};
                while (nanosleep(&ts, &ts) && errno == EINTR) {}
                if (write_all(fd, out.p, (size_t)n)) close_after = true;
                break;
            }
            case F_RESET: {
                size_t half = n > ohl ? (size_t)ohl + (size_t)(n - ohl) / 2 : (size_t)ohl / 2;
                write_all(fd, out.p, half);
                struct linger lg = {1, 0};
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
                close_after = true;
                break;
            }
            case F_DROP_REUSED:
                close_after = true; /* carried out upstream; the client gets nothing */
                break;
            case F_TRUNCATE: {
                size_t half = n > ohl ? (size_t)ohl + (size_t)(n - ohl) / 2 : (size_t)ohl / 2;
                write_all(fd, out.p, half);
                shutdown(fd, SHUT_WR);
                close_after = true;
                break;
            }
            default:
                if (write_all(fd, out.p, (size_t)n)) close_after = true;
            }
            /* keep what the upstream sent beyond this answer (nothing, with HTTP/1.1) */
            out.len = 0;
        }
        /* drop the consumed request, keep any pipelined bytes */
        size_t used = head_len + cl;
        memmove(in.p, in.p + used, in.len - used + 1);
        in.len -= used;
        if (close_after) break;
    }
    if (up >= 0) close(up);
    close(fd);
    free(in.p);
    free(out.p);
    return NULL;
}

static int parse_script(const char *s)
{
    char *copy = strdup(s), *save = NULL;
    if (!copy) return -1;
    for (char *tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
        while (*tok == ' ') tok++;
        if (!*tok) continue;
        if (n_rules == MAX_RULES) return -1;
        rule *r = &rules[n_rules++];
        char filter[96] = "", f[32] = "", times[16] = "";
        if (sscanf(tok, "%95s %31s %15s", filter, f, times) < 2) return -1;
        char *q = strchr(filter, '?');
        if (q) {
            *q = '\0';
            snprintf(r->text, sizeof r->text, "%s", q + 1);
        }
        snprintf(r->method, sizeof r->method, "%s", filter);
        if (strcmp(f, "pass") == 0) r->f = F_PASS;
        else if (strcmp(f, "500") == 0) r->f = F_500;
        else if (strcmp(f, "503") == 0) r->f = F_503;
        else if (strncmp(f, "delay=", 6) == 0) r->f = F_DELAY, r->delay_ms = atoi(f + 6);
        else if (strcmp(f, "reset") == 0) r->f = F_RESET;
        else if (strcmp(f, "truncate") == 0) r->f = F_TRUNCATE;
        else if (strcmp(f, "corrupt") == 0) r->f = F_CORRUPT;
        else if (strcmp(f, "drop-reused") == 0) r->f = F_DROP_REUSED;
        else if (strcmp(f, "nosuchupload") == 0) r->f = F_NO_SUCH_UPLOAD;
        else return -1;
        r->left = times[0] == 'x' ? atoi(times + 1) : 1;
        if (r->left <= 0) return -1;
    }
    free(copy);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: s3proxy --upstream http://HOST:PORT [--script RULES] [--port N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *up = NULL, *script = "";
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--upstream") == 0 && i + 1 < argc) up = argv[++i];
        else if (strcmp(argv[i], "--script") == 0 && i + 1 < argc) script = argv[++i];
        else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) port = atoi(argv[++i]);
        else usage();
    }
    char host[64];
    int uport = 0;
    if (!up || sscanf(up, "http://%63[^:]:%d", host, &uport) != 2) usage();
    upstream.sin_family = AF_INET;
    upstream.sin_port = htons((uint16_t)uport);
    if (inet_pton(AF_INET, strcmp(host, "localhost") ? host : "127.0.0.1", &upstream.sin_addr) != 1)
        usage();
    if (parse_script(script)) {
        fprintf(stderr, "s3proxy: bad script '%s'\n", script);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t al = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 64) ||
        getsockname(ls, (struct sockaddr *)&a, &al)) {
        perror("s3proxy: listen");
        return 1;
    }
    printf("port %d\n", ntohs(a.sin_port));
    fflush(stdout);
    for (;;) {
        int fd = accept(ls, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR) continue;
            perror("s3proxy: accept");
            return 1;
        }
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &at, serve, (void *)(intptr_t)fd)) close(fd);
        pthread_attr_destroy(&at);
    }
}
