/*
 * cutproxy.c — a fault-injecting TCP proxy for skiplock's tests
 *
 * Sits between a libpq client and PostgreSQL and, on command, breaks the
 * connection in the ways a network does: a silent partition (blackhole),
 * refused connections, RST of every open connection, added latency, and the
 * "ambiguous COMMIT": the COMMIT reaches the server but its reply never
 * reaches the client.  toxiproxy and tc netem are not available where the
 * tests run, so this is ours.  It grew out of a small Python prototype with
 * the modes pass, blackhole, reset and drop-commit-reply.
 * User guide: docs/testing-cutproxy.md.
 *
 *   cutproxy --listen 127.0.0.1:PORT --upstream HOST:PORT --control PATH
 *            [--ttl SECONDS] [--port-file PATH]
 *   cutproxy ctl PATH COMMAND [ARG...]     send one control command
 *   cutproxy selftest                      check the protocol parser
 *
 * Design
 *   One thread, one poll() loop, non-blocking sockets.  All state lives in
 *   one struct proxy owned by main(); there is no other mutable global.
 *   Each proxied connection (struct conn) has two sides, CLI and SRV, and
 *   one queue per direction: out[s] holds bytes read from the other side and
 *   not yet written to side s.  A queue is a list of chunks, each stamped
 *   with the time it may be written (read time + the delay then in force),
 *   so `delay` is a per-chunk timestamp and the poll timeout is the earliest
 *   pending stamp.  A queue holds at most DIR_CAP bytes; while it is full the
 *   side feeding it is not read (back-pressure through TCP).
 *
 *   The end of a stream is in-band: when reading side s ends, in_end[s]
 *   records how (FIN or RST) and it is delivered to the other side only
 *   after every byte queued before it, as shutdown(SHUT_WR) or as an RST.
 *   A connection is finished when both ends have been delivered.
 *
 *   Blackhole stops all writes and end deliveries but keeps reading until the
 *   queues are full: bytes are HELD, not dropped, so `mode pass` resumes an
 *   intact stream (this is also what TCP does across a healed partition).
 *
 *   The client->server stream is fed to a small PostgreSQL frontend-protocol
 *   parser (struct pgparse) that only recognises COMMIT.  It never changes
 *   the bytes; it survives arbitrary read boundaries by accumulating headers,
 *   and gives up (PG_OPAQUE) on anything it does not understand, such as TLS.
 *
 * Invariants
 *   - out[s].bytes <= DIR_CAP, and side !s is polled for input only below it.
 *   - fd[s] == -1 implies out[s] is empty; bytes read for a closed side are
 *     discarded.
 *   - end_done[s] implies in_end[s] != END_NONE.
 *   - Every wait is bounded: upstream connects (CONNECT_MS), idle control
 *     clients (CTL_IDLE_MS), the process itself (--ttl).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define READ_MAX      (64 * 1024)   /* bytes read per recv() */
#define DIR_CAP       (256 * 1024)  /* bytes held per direction */
#define MAX_CONNS     4096          /* upper bound; the fd limit may lower it */
#define MAX_CTL       8             /* concurrent control clients */
#define CTL_LINE      512           /* longest control command */
#define CTL_IDLE_MS   5000          /* control client idle timeout */
#define CTL_WAIT_MS   5000          /* `ctl` client: wait for the reply */
#define CONNECT_MS    10000         /* upstream connect timeout */
#define MAX_DELAY_MS  600000
#define PG_KEEP       1024          /* bytes of a message body kept for parsing */
#define PG_MAX_START  10000         /* longest startup packet we believe */
#define PG_NAMES      8             /* named COMMIT statements tracked */
#define PG_NAMELEN    64

#define PG_SSL_REQUEST    80877103u
#define PG_GSSENC_REQUEST 80877104u

enum side { CLI = 0, SRV = 1 };
enum mode { MODE_PASS, MODE_BLACKHOLE, MODE_REFUSE };
enum end { END_NONE, END_FIN, END_RST };

static const char *const mode_names[] = { "pass", "blackhole", "refuse" };
static const char *const side_names[] = { "client", "server" };

/* ---------------------------------------------------------------- chunks */

struct chunk {
    struct chunk *next;
    int64_t at;                 /* may be written at this monotonic ms */
    size_t len, off;            /* data[off..len) is still to be written */
    unsigned char data[];
};

struct queue {
    struct chunk *head, *tail;
    size_t bytes;               /* unwritten bytes in all chunks */
};

/* ------------------------------------------------------ protocol parser */

/*
 * Parser states (client->server direction only):
 *   PG_STARTUP_HDR   start of connection, or after an SSL/GSS request that
 *                    the server declined: collecting int32 length + int32 code.
 *   PG_STARTUP_BODY  skipping the rest of a startup-phase packet; left for
 *                    PG_STARTUP_HDR (SSL/GSS request), PG_MSG_HDR (protocol 3
 *                    startup) or PG_OPAQUE (cancel request, anything else).
 *   PG_MSG_HDR       collecting type byte + int32 length of a regular message.
 *   PG_MSG_BODY      consuming a body; Q/P/B/E/C bodies are partly kept.
 *   PG_OPAQUE        gave up (TLS, garbage): bytes pass unexamined.  Final.
 */
enum pg_state { PG_STARTUP_HDR, PG_STARTUP_BODY, PG_MSG_HDR, PG_MSG_BODY,
                PG_OPAQUE };

struct pgparse {
    enum pg_state st;
    unsigned char hdr[8];
    size_t hdr_len;
    unsigned char type;         /* message type; 0 in the startup phase */
    uint32_t code;              /* startup packet request code */
    uint32_t remaining;         /* body bytes not yet consumed */
    bool truncated;             /* body was longer than keep[] */
    size_t keep_len;
    char keep[PG_KEEP];         /* tail of a Q body, head of P/B/E/C */
    bool unnamed_commit;        /* unnamed statement's text is a COMMIT */
    const char *match;          /* also treat statements containing this
                                   text as a COMMIT (drop-reply-matching) */
    bool portal_commit;         /* unnamed portal is bound to such a statement */
    char named[PG_NAMES][PG_NAMELEN]; /* named statements that are a COMMIT */
};

/* ----------------------------------------------------------- the proxy */

struct conn {
    uint64_t id;
    int fd[2];
    bool connecting;            /* SRV: non-blocking connect in progress */
    int64_t connect_deadline;
    struct queue out[2];        /* out[s]: waiting to be written to side s */
    enum end in_end[2];         /* how reading side s ended */
    int64_t end_at[2];          /* in_end[s] may be delivered from then */
    bool end_done[2];           /* in_end[s] has been delivered to side !s */
    uint64_t up_read;           /* client->server bytes read */
    uint64_t up_written;        /* client->server bytes written */
    uint64_t commit_end;        /* up_read offset past an armed COMMIT, or 0 */
    bool commit_sent;           /* that COMMIT is wholly written upstream */
    uint64_t bytes_up, bytes_down;
    struct pgparse pg;
};

struct ctl_client {
    int fd;                     /* -1: free slot */
    int64_t deadline;
    size_t len;
    char buf[CTL_LINE];
};

/*
 * Counters.  accepted = connections the listener accepted (refused ones
 * included); refused = accepted, then RST because of `mode refuse` or the
 * connection limit; reset = connections RST by the `reset` command;
 * commit_drops = times drop-commit-reply fired; bytes_up / bytes_down =
 * bytes written to the server / to clients.  active = conns open now.
 */
struct stats {
    uint64_t accepted, refused, reset, commit_drops, bytes_up, bytes_down;
};

struct proxy {
    const char *listen_spec, *upstream_spec, *control_path, *port_file;
    long ttl_s;
    struct sockaddr_storage up_addr;
    socklen_t up_len;
    int listen_fd, ctl_fd, sig_fd;
    enum mode mode;
    int delay_ms;
    bool armed;                 /* drop-commit-reply waits for a COMMIT */
    char match[128];            /* drop-reply-matching: statement text */
    bool quit;
    int64_t deadline;           /* --ttl, monotonic ms */
    int64_t accept_paused_until;
    struct conn **conns;
    size_t nconns, max_conns;
    struct ctl_client ctl[MAX_CTL];
    struct pollfd *pfd;
    uint64_t next_id;
    struct stats st;
    unsigned char *rbuf;        /* READ_MAX scratch */
};

/* poll set layout: fixed slots, then two per connection (CLI, SRV) */
enum { P_LISTEN = 0, P_CTL = 1, P_SIG = 2, P_CTLCLI = 3,
       P_CONN = P_CTLCLI + MAX_CTL };

/* ------------------------------------------------------------ utilities */

__attribute__((format(printf, 1, 2)))
static void log_event(const char *fmt, ...)
{
    char msg[600], ts[32];
    struct timespec t;
    struct tm tm;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &t);
    gmtime_r(&t.tv_sec, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s.%03ldZ cutproxy[%ld]: %s\n", ts,
            (long)(t.tv_nsec / 1000000), (long)getpid(), msg);
}

static int64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static bool would_block(int err)
{
    return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

/* Parse a decimal in [lo, hi]; false on anything else. */
static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Split "host:port" or "[v6]:port"; false if malformed. */
static bool split_hostport(const char *spec, char *host, size_t hsz,
                           char *port, size_t psz)
{
    const char *colon = strrchr(spec, ':');
    size_t hl;

    if (!colon || colon == spec || !colon[1] || strlen(colon + 1) >= psz)
        return false;
    hl = (size_t)(colon - spec);
    if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']') {
        spec++;
        hl -= 2;
    }
    if (hl >= hsz)
        return false;
    memcpy(host, spec, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return strspn(port, "0123456789") == strlen(port);
}

static bool resolve(const char *spec, bool passive,
                    struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256], port[16];
    struct addrinfo hints = { 0 }, *res;

    if (!split_hostport(spec, host, sizeof host, port, sizeof port))
        return false;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    if (getaddrinfo(host, port, &hints, &res) != 0)
        return false;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return true;
}

static void format_addr(const struct sockaddr_storage *ss, char *out,
                        size_t sz)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(out, sz, "%s:%u", host, port);
}

static void set_nodelay(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Close with SO_LINGER {1, 0}: the peer gets an RST, not a FIN. */
static void close_rst(int fd)
{
    struct linger lg = { .l_onoff = 1, .l_linger = 0 };

    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    close(fd);
}

/* --------------------------------------------------------------- queues */

static bool q_push(struct queue *q, const unsigned char *d, size_t n,
                   int64_t at)
{
    struct chunk *k = malloc(sizeof *k + n);

    if (!k)
        return false;
    k->next = NULL;
    k->at = at;
    k->len = n;
    k->off = 0;
    memcpy(k->data, d, n);
    if (q->tail)
        q->tail->next = k;
    else
        q->head = k;
    q->tail = k;
    q->bytes += n;
    return true;
}

static void q_pop(struct queue *q)
{
    struct chunk *k = q->head;

    q->head = k->next;
    if (!q->head)
        q->tail = NULL;
    q->bytes -= k->len - k->off;
    free(k);
}

static void q_clear(struct queue *q)
{
    while (q->head)
        q_pop(q);
}

/* The head chunk if it may be written at `now`. */
static struct chunk *q_ready(const struct queue *q, int64_t now)
{
    return q->head && q->head->at <= now ? q->head : NULL;
}

/* ----------------------------------------------- COMMIT recognition */

static bool word_is(const char *w, size_t len, const char *kw)
{
    return strlen(kw) == len && strncasecmp(w, kw, len) == 0;
}

/* True for "COMMIT" or "END", optionally followed by WORK or TRANSACTION. */
static bool words_are_commit(const char *s, size_t len)
{
    const char *w[2];
    size_t wl[2], i = 0, nw = 0;

    while (i < len) {
        size_t b;

        while (i < len && isspace((unsigned char)s[i]))
            i++;
        if (i == len)
            break;
        if (nw == 2)
            return false;
        b = i;
        while (i < len && !isspace((unsigned char)s[i]))
            i++;
        w[nw] = s + b;
        wl[nw++] = i - b;
    }
    if (nw == 0 || !(word_is(w[0], wl[0], "commit") ||
                     word_is(w[0], wl[0], "end")))
        return false;
    return nw == 1 || word_is(w[1], wl[1], "work") ||
           word_is(w[1], wl[1], "transaction");
}

/*
 * Is the last statement of s[0..len) a COMMIT?  Trailing NULs, blanks and
 * semicolons are ignored; statements are split at ';' without regard to
 * quotes or comments (a false match needs a final "commit" token anyway).
 * `partial`: s is only the tail of the text, so a match needs a ';' in it.
 * `whole`: the text must be one statement (Parse cannot hold several).
 */
static bool sql_is_commit(const char *s, size_t len, bool partial, bool whole)
{
    size_t start;

    while (len > 0 && (s[len - 1] == '\0' || s[len - 1] == ';' ||
                       isspace((unsigned char)s[len - 1])))
        len--;
    start = len;
    while (start > 0 && s[start - 1] != ';')
        start--;
    if (start == 0 && partial)
        return false;           /* the last statement may begin before s */
    if (start > 0 && whole)
        return false;
    return words_are_commit(s + start, len - start);
}

/* ------------------------------------- prepared statement bookkeeping */

static bool stmt_is_commit(const struct pgparse *p, const char *name)
{
    if (!name[0])
        return p->unnamed_commit;
    for (int i = 0; i < PG_NAMES; i++)
        if (p->named[i][0] && strcmp(p->named[i], name) == 0)
            return true;
    return false;
}

/* Record whether statement `name` is a COMMIT (false also forgets it). */
static void stmt_set(struct pgparse *p, const char *name, bool is_commit)
{
    int free_slot = -1;

    if (!name[0]) {
        p->unnamed_commit = is_commit;
        return;
    }
    if (strlen(name) >= PG_NAMELEN)
        return;
    for (int i = 0; i < PG_NAMES; i++) {
        if (!p->named[i][0]) {
            if (free_slot < 0)
                free_slot = i;
        } else if (strcmp(p->named[i], name) == 0) {
            if (!is_commit)
                p->named[i][0] = '\0';
            return;
        }
    }
    if (is_commit && free_slot >= 0)
        strcpy(p->named[free_slot], name);
}

/* The i-th NUL-terminated string of keep[], or NULL if not all kept. */
static const char *keep_cstr(const struct pgparse *p, int i)
{
    size_t off = 0;

    for (;;) {
        const char *s = p->keep + off;
        size_t l = strnlen(s, p->keep_len - off);

        if (off + l == p->keep_len)
            return NULL;
        if (i-- == 0)
            return s;
        off += l + 1;
    }
}

/* True when drop-reply-matching is armed and query contains its text. */
static bool text_matches(const struct pgparse *p, const char *query)
{
    return p->match && p->match[0] && strstr(query, p->match) != NULL;
}

/* Parse: name, query, ...  Bind: portal, statement, ... */
static void on_parse(struct pgparse *p)
{
    const char *name = keep_cstr(p, 0), *query = keep_cstr(p, 1);

    if (name)
        stmt_set(p, name, query && (sql_is_commit(query, strlen(query),
                                                  false, true) ||
                                    text_matches(p, query)));
}

static void on_bind(struct pgparse *p)
{
    const char *portal = keep_cstr(p, 0), *stmt = keep_cstr(p, 1);

    if (portal && !portal[0])
        p->portal_commit = stmt && stmt_is_commit(p, stmt);
}

/* Execute: portal, max rows.  Only the unnamed portal is tracked. */
static bool on_execute(struct pgparse *p)
{
    const char *portal = keep_cstr(p, 0);
    bool hit = portal && !portal[0] && p->portal_commit;

    if (hit)
        p->portal_commit = false;
    return hit;
}

/* Close: 'S' statement-name, or 'P' portal-name. */
static void on_close(struct pgparse *p)
{
    const char *what = keep_cstr(p, 0);

    if (p->keep_len > 1 && p->keep[0] == 'S' && what)
        stmt_set(p, what + 1, false);
}

/* ------------------------------------------------ message framing */

static void keep_head(struct pgparse *p, const unsigned char *d, size_t n)
{
    size_t room = PG_KEEP - p->keep_len, k = n < room ? n : room;

    memcpy(p->keep + p->keep_len, d, k);
    p->keep_len += k;
    if (k < n)
        p->truncated = true;
}

static void keep_tail(struct pgparse *p, const unsigned char *d, size_t n)
{
    if (n >= PG_KEEP) {
        memcpy(p->keep, d + n - PG_KEEP, PG_KEEP);
        p->truncated = p->truncated || p->keep_len > 0 || n > PG_KEEP;
        p->keep_len = PG_KEEP;
        return;
    }
    if (p->keep_len + n > PG_KEEP) {
        size_t drop = p->keep_len + n - PG_KEEP;

        memmove(p->keep, p->keep + drop, p->keep_len - drop);
        p->keep_len -= drop;
        p->truncated = true;
    }
    memcpy(p->keep + p->keep_len, d, n);
    p->keep_len += n;
}

static enum pg_state startup_next(uint32_t code)
{
    if (code == PG_SSL_REQUEST || code == PG_GSSENC_REQUEST)
        return PG_STARTUP_HDR;  /* declined: another packet follows */
    if (code >> 16 == 3)
        return PG_MSG_HDR;
    return PG_OPAQUE;           /* CancelRequest or unknown */
}

/* A whole message was consumed; *commit is set if it runs a COMMIT. */
static void pg_end(struct pgparse *p, bool *commit)
{
    if (p->st == PG_STARTUP_BODY) {
        p->st = startup_next(p->code);
        return;
    }
    p->st = PG_MSG_HDR;
    switch (p->type) {
    case 'Q':
        *commit = sql_is_commit(p->keep, p->keep_len, p->truncated, false) ||
                  (p->keep_len < PG_KEEP && memchr(p->keep, '\0', p->keep_len) &&
                   text_matches(p, p->keep));
        break;
    case 'P': on_parse(p); break;
    case 'B': on_bind(p); break;
    case 'E': *commit = on_execute(p); break;
    case 'C': on_close(p); break;
    default: break;
    }
}

/* The header in hdr[] is complete: validate it and start the body. */
static void pg_begin(struct pgparse *p, bool *commit)
{
    uint32_t len;

    if (p->st == PG_STARTUP_HDR) {
        len = be32(p->hdr);
        p->code = be32(p->hdr + 4);
        p->type = 0;
        if (len < 8 || len > PG_MAX_START) {
            p->st = PG_OPAQUE;
            return;
        }
        p->remaining = len - 8;
        p->st = PG_STARTUP_BODY;
    } else {
        p->type = p->hdr[0];
        len = be32(p->hdr + 1);
        if (len < 4) {
            p->st = PG_OPAQUE;
            return;
        }
        p->remaining = len - 4;
        p->st = PG_MSG_BODY;
    }
    p->keep_len = 0;
    p->truncated = false;
    if (p->remaining == 0)
        pg_end(p, commit);
}

static size_t pg_header(struct pgparse *p, const unsigned char *d, size_t n,
                        size_t need, bool *commit)
{
    size_t k = need - p->hdr_len < n ? need - p->hdr_len : n;

    memcpy(p->hdr + p->hdr_len, d, k);
    p->hdr_len += k;
    if (p->hdr_len == need) {
        p->hdr_len = 0;
        pg_begin(p, commit);
    }
    return k;
}

static size_t pg_body(struct pgparse *p, const unsigned char *d, size_t n,
                      bool *commit)
{
    size_t k = n < p->remaining ? n : p->remaining;

    if (p->type == 'Q')
        keep_tail(p, d, k);
    else if (p->type && strchr("PBEC", p->type))
        keep_head(p, d, k);
    p->remaining -= (uint32_t)k;
    if (p->remaining == 0)
        pg_end(p, commit);
    return k;
}

/*
 * Consume a prefix of d[0..n) (at least one byte when n > 0), stopping
 * right after a message that completes.  *commit tells whether that
 * message runs a COMMIT; the caller knows its end from the return value.
 */
static size_t pg_feed(struct pgparse *p, const unsigned char *d, size_t n,
                      bool *commit)
{
    *commit = false;
    switch (p->st) {
    case PG_STARTUP_HDR: return pg_header(p, d, n, 8, commit);
    case PG_MSG_HDR: return pg_header(p, d, n, 5, commit);
    case PG_STARTUP_BODY:
    case PG_MSG_BODY: return pg_body(p, d, n, commit);
    case PG_OPAQUE: break;
    }
    return n;
}

/* ------------------------------------------------------- connections */

static bool forwarding(const struct proxy *px)
{
    return px->mode != MODE_BLACKHOLE;
}

/* Side s is gone: close it hard, drop what was queued for it. */
static void side_close(struct conn *c, int s)
{
    if (c->fd[s] >= 0)
        close_rst(c->fd[s]);
    c->fd[s] = -1;
    q_clear(&c->out[s]);
    if (s == SRV)
        c->connecting = false;
}

/* Reading or writing side s failed: pass an RST on, after held bytes. */
static void side_failed(struct proxy *px, struct conn *c, int s, int err,
                        int64_t now)
{
    log_event("conn=%llu %s %s: %s", (unsigned long long)c->id,
              side_names[s], c->connecting ? "connect failed" : "error",
              strerror(err));
    side_close(c, s);
    c->in_end[s] = END_RST;
    c->end_at[s] = now + px->delay_ms;
    c->end_done[s] = false;
}

/* Close what is still open and free; `active` is the count left after. */
static void conn_free(struct conn *c, const char *how, size_t active)
{
    log_event("close conn=%llu how=%s up=%llu down=%llu active=%zu",
              (unsigned long long)c->id, how,
              (unsigned long long)c->bytes_up,
              (unsigned long long)c->bytes_down, active);
    for (int s = CLI; s <= SRV; s++) {
        if (c->fd[s] >= 0)
            close(c->fd[s]);
        q_clear(&c->out[s]);
    }
    free(c);
}

/* Start the non-blocking upstream connect; false if it failed at once. */
static bool upstream_start(struct proxy *px, struct conn *c, int64_t now)
{
    int fd = socket(px->up_addr.ss_family,
                    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    c->fd[SRV] = fd;
    if (fd < 0)
        return false;
    set_nodelay(fd);
    c->connecting = true;
    c->connect_deadline = now + CONNECT_MS;
    if (connect(fd, (struct sockaddr *)&px->up_addr, px->up_len) == 0)
        c->connecting = false;
    else if (errno != EINPROGRESS)
        return false;
    return true;
}

static void upstream_finish(struct proxy *px, struct conn *c, int64_t now)
{
    int err = 0;
    socklen_t len = sizeof err;

    if (getsockopt(c->fd[SRV], SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err == EINPROGRESS)
        return;
    if (err)
        side_failed(px, c, SRV, err, now);
    else
        c->connecting = false;
}

static void conn_new(struct proxy *px, int fd, const char *peer, int64_t now)
{
    struct conn *c = calloc(1, sizeof *c);

    if (!c) {
        log_event("accept from %s: out of memory, reset", peer);
        close_rst(fd);
        return;
    }
    c->id = ++px->next_id;
    c->fd[CLI] = fd;
    set_nodelay(fd);
    c->pg.st = PG_STARTUP_HDR;
    px->conns[px->nconns++] = c;
    log_event("accept conn=%llu from %s active=%zu",
              (unsigned long long)c->id, peer, px->nconns);
    if (!upstream_start(px, c, now))
        side_failed(px, c, SRV, errno, now);
}

/* Feed client bytes to the parser; remember where an armed COMMIT ends. */
static void scan_client(struct proxy *px, struct conn *c,
                        const unsigned char *d, size_t n)
{
    size_t off = 0;

    while (off < n) {
        bool commit;

        c->pg.match = px->match;
        off += pg_feed(&c->pg, d + off, n - off, &commit);
        if (commit && px->armed) {
            px->armed = false;
            px->match[0] = '\0';
            c->commit_end = c->up_read + off;
            log_event("conn=%llu COMMIT seen; its reply will be dropped",
                      (unsigned long long)c->id);
        }
    }
    c->up_read += n;
}

/* The server answered the COMMIT: RST the client, FIN the server. */
static void drop_commit_reply(struct proxy *px, struct conn *c, size_t n,
                              int64_t now)
{
    log_event("conn=%llu dropped %zu byte reply to COMMIT; "
              "client reset, server closed", (unsigned long long)c->id, n);
    px->st.commit_drops++;
    c->commit_sent = false;
    side_close(c, CLI);
    c->in_end[CLI] = END_FIN;   /* the server sees an orderly EOF */
    c->end_at[CLI] = now;
    c->end_done[CLI] = false;
}

static void conn_read(struct proxy *px, struct conn *c, int s, int64_t now)
{
    size_t room = DIR_CAP - c->out[!s].bytes;
    ssize_t n = recv(c->fd[s], px->rbuf, room < READ_MAX ? room : READ_MAX, 0);

    if (n < 0) {
        if (!would_block(errno))
            side_failed(px, c, s, errno, now);
        return;
    }
    if (n == 0) {
        c->in_end[s] = END_FIN;
        c->end_at[s] = now + px->delay_ms;
        return;
    }
    if (s == SRV && c->commit_sent && c->fd[CLI] >= 0) {
        drop_commit_reply(px, c, (size_t)n, now);
        return;
    }
    if (s == CLI)
        scan_client(px, c, px->rbuf, (size_t)n);
    if (c->fd[!s] < 0)
        return;                 /* nobody to deliver to */
    if (!q_push(&c->out[!s], px->rbuf, (size_t)n, now + px->delay_ms))
        side_failed(px, c, s, ENOMEM, now);
}

static void account(struct proxy *px, struct conn *c, int s, size_t n)
{
    if (s == CLI) {
        c->bytes_down += n;
        px->st.bytes_down += n;
        return;
    }
    c->bytes_up += n;
    px->st.bytes_up += n;
    c->up_written += n;
    if (c->commit_end && c->up_written >= c->commit_end) {
        c->commit_end = 0;
        c->commit_sent = true;
    }
}

/* Write what is due to side s until the kernel pushes back. */
static void flush_side(struct proxy *px, struct conn *c, int s, int64_t now)
{
    struct chunk *k;

    if (!forwarding(px) || c->fd[s] < 0 || (s == SRV && c->connecting))
        return;
    while ((k = q_ready(&c->out[s], now)) != NULL) {
        ssize_t n = send(c->fd[s], k->data + k->off, k->len - k->off,
                         MSG_NOSIGNAL);

        if (n < 0) {
            if (!would_block(errno))
                side_failed(px, c, s, errno, now);
            return;
        }
        account(px, c, s, (size_t)n);
        k->off += (size_t)n;
        c->out[s].bytes -= (size_t)n;
        if (k->off < k->len)
            return;
        q_pop(&c->out[s]);
    }
}

/* Deliver the end of stream s -> !s once everything before it is out. */
static void deliver_end(struct proxy *px, struct conn *c, int s, int64_t now)
{
    int p = !s;

    if (c->in_end[s] == END_NONE || c->end_done[s] || !forwarding(px) ||
        now < c->end_at[s] || c->out[p].head)
        return;
    if (c->fd[p] >= 0 && p == SRV && c->connecting)
        return;
    if (c->fd[p] >= 0 && c->in_end[s] == END_FIN) {
        shutdown(c->fd[p], SHUT_WR);
    } else if (c->fd[p] >= 0) {
        side_close(c, p);
        if (c->in_end[p] == END_NONE)
            c->in_end[p] = END_RST;
        c->end_done[p] = true;  /* s is gone: nothing to tell it */
    }
    c->end_done[s] = true;
}

/* Advance one connection; true when it is finished. */
static bool pump_conn(struct proxy *px, struct conn *c, int64_t now)
{
    if (c->connecting && now >= c->connect_deadline)
        side_failed(px, c, SRV, ETIMEDOUT, now);
    flush_side(px, c, SRV, now);
    flush_side(px, c, CLI, now);
    deliver_end(px, c, CLI, now);
    deliver_end(px, c, SRV, now);
    return c->end_done[CLI] && c->end_done[SRV];
}

static void pump_all(struct proxy *px, int64_t now)
{
    size_t kept = 0, removed = 0, n = px->nconns;

    for (size_t i = 0; i < n; i++) {
        struct conn *c = px->conns[i];

        if (pump_conn(px, c, now)) {
            bool rst = c->in_end[CLI] == END_RST || c->in_end[SRV] == END_RST;

            conn_free(c, rst ? "rst" : "fin", n - ++removed);
        } else {
            px->conns[kept++] = c;
        }
    }
    px->nconns = kept;
}

/* RST both sides of every connection. */
static size_t reset_all(struct proxy *px)
{
    size_t n = px->nconns;

    for (size_t i = 0; i < n; i++) {
        struct conn *c = px->conns[i];

        side_close(c, CLI);
        side_close(c, SRV);
        conn_free(c, "reset", n - i - 1);
    }
    px->nconns = 0;
    px->st.reset += n;
    log_event("reset %zu connection(s)", n);
    return n;
}

/* ------------------------------------------------------- control */

static int split_words(char *line, char **argv, int max)
{
    int argc = 0;
    char *save;

    for (char *tok = strtok_r(line, " \t\r", &save); tok;
         tok = strtok_r(NULL, " \t\r", &save)) {
        if (argc == max)
            return max + 1;
        argv[argc++] = tok;
    }
    return argc;
}

static void cmd_mode(struct proxy *px, int argc, char **argv, char *r,
                     size_t rsz)
{
    for (int m = MODE_PASS; argc == 2 && m <= MODE_REFUSE; m++) {
        if (strcmp(argv[1], mode_names[m]) == 0) {
            log_event("mode %s -> %s", mode_names[px->mode], mode_names[m]);
            px->mode = (enum mode)m;
            snprintf(r, rsz, "ok mode %s", mode_names[m]);
            return;
        }
    }
    snprintf(r, rsz, "error usage: mode pass|blackhole|refuse");
}

static void cmd_delay(struct proxy *px, int argc, char **argv, char *r,
                      size_t rsz)
{
    long ms;

    if (argc != 2 || !parse_long(argv[1], 0, MAX_DELAY_MS, &ms)) {
        snprintf(r, rsz, "error usage: delay MS (0..%d)", MAX_DELAY_MS);
        return;
    }
    log_event("delay %d -> %ld ms", px->delay_ms, ms);
    px->delay_ms = (int)ms;
    snprintf(r, rsz, "ok delay %ld", ms);
}

static void cmd_drop(struct proxy *px, int argc, char **argv, char *r,
                     size_t rsz)
{
    if (argc == 1 || (argc == 2 && strcmp(argv[1], "off") == 0)) {
        px->armed = argc == 1;
        log_event("drop-commit-reply %s", px->armed ? "armed" : "disarmed");
        snprintf(r, rsz, "ok drop-commit-reply %s",
                 px->armed ? "armed" : "off");
        return;
    }
    snprintf(r, rsz, "error usage: drop-commit-reply [off]");
}

static void cmd_stats(struct proxy *px, char *r, size_t rsz)
{
    snprintf(r, rsz, "ok mode=%s delay_ms=%d armed=%d accepted=%llu "
             "active=%zu refused=%llu reset=%llu commit_drops=%llu "
             "bytes_up=%llu bytes_down=%llu", mode_names[px->mode],
             px->delay_ms, px->armed ? 1 : 0,
             (unsigned long long)px->st.accepted, px->nconns,
             (unsigned long long)px->st.refused,
             (unsigned long long)px->st.reset,
             (unsigned long long)px->st.commit_drops,
             (unsigned long long)px->st.bytes_up,
             (unsigned long long)px->st.bytes_down);
}

/* Run one command line; the one-line reply goes to r. */
static void run_command(struct proxy *px, char *line, char *r, size_t rsz)
{
    char *argv[3];
    int argc = split_words(line, argv, 2);

    if (argc == 0 || argc > 2)
        snprintf(r, rsz, "error %s", argc ? "too many arguments"
                                          : "empty command");
    else if (strcmp(argv[0], "mode") == 0)
        cmd_mode(px, argc, argv, r, rsz);
    else if (strcmp(argv[0], "delay") == 0)
        cmd_delay(px, argc, argv, r, rsz);
    else if (strcmp(argv[0], "drop-commit-reply") == 0)
        cmd_drop(px, argc, argv, r, rsz);
    else if (strcmp(argv[0], "drop-reply-matching") == 0 && argc == 2) {
        snprintf(px->match, sizeof(px->match), "%s", argv[1]);
        px->armed = true;
        log_event("drop-reply-matching '%s' armed", px->match);
        snprintf(r, rsz, "ok drop-reply-matching armed");
    }
    else if (argc != 1)
        snprintf(r, rsz, "error %s takes no argument", argv[0]);
    else if (strcmp(argv[0], "reset") == 0)
        snprintf(r, rsz, "ok reset %zu", reset_all(px));
    else if (strcmp(argv[0], "stats") == 0)
        cmd_stats(px, r, rsz);
    else if (strcmp(argv[0], "quit") == 0) {
        log_event("quit requested");
        px->quit = true;
        snprintf(r, rsz, "ok bye");
    } else if (strcmp(argv[0], "help") == 0)
        snprintf(r, rsz, "ok commands: mode pass|blackhole|refuse; reset; "
                 "delay MS; drop-commit-reply [off]; drop-reply-matching TEXT; "
                 "stats; quit");
    else
        snprintf(r, rsz, "error unknown command '%.40s' (try help)",
                 argv[0]);
}

static void ctl_drop(struct ctl_client *cc)
{
    close(cc->fd);
    cc->fd = -1;
    cc->len = 0;
}

static void ctl_exec(struct proxy *px, struct ctl_client *cc, char *line)
{
    char reply[CTL_LINE + 64];
    size_t n;

    run_command(px, line, reply, sizeof reply - 1);
    n = strlen(reply);
    reply[n++] = '\n';
    if (send(cc->fd, reply, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n)
        log_event("control: reply not sent in full");
}

/* Run every complete line in the client's buffer; false to hang up. */
static bool ctl_lines(struct proxy *px, struct ctl_client *cc, bool eof)
{
    char *nl;

    while ((nl = memchr(cc->buf, '\n', cc->len)) != NULL) {
        size_t used = (size_t)(nl - cc->buf) + 1;

        *nl = '\0';
        ctl_exec(px, cc, cc->buf);
        memmove(cc->buf, cc->buf + used, cc->len - used);
        cc->len -= used;
    }
    if (eof && cc->len > 0) {
        cc->buf[cc->len] = '\0';
        ctl_exec(px, cc, cc->buf);
    }
    if (!eof && cc->len == CTL_LINE - 1) {
        static const char too_long[] = "error command too long\n";

        send(cc->fd, too_long, sizeof too_long - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        return false;
    }
    return !eof;
}

static void ctl_read(struct proxy *px, struct ctl_client *cc, int64_t now)
{
    ssize_t n = recv(cc->fd, cc->buf + cc->len, CTL_LINE - 1 - cc->len, 0);

    if (n < 0 && would_block(errno))
        return;
    if (n > 0)
        cc->len += (size_t)n;
    cc->deadline = now + CTL_IDLE_MS;
    if (!ctl_lines(px, cc, n <= 0))
        ctl_drop(cc);
}

static void ctl_accept(struct proxy *px, int64_t now)
{
    int fd;

    while ((fd = accept4(px->ctl_fd, NULL, NULL,
                         SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
        struct ctl_client *cc = NULL;

        for (int i = 0; i < MAX_CTL && !cc; i++)
            if (px->ctl[i].fd < 0)
                cc = &px->ctl[i];
        if (!cc) {
            send(fd, "error busy\n", 11, MSG_NOSIGNAL | MSG_DONTWAIT);
            close(fd);
            continue;
        }
        cc->fd = fd;
        cc->len = 0;
        cc->deadline = now + CTL_IDLE_MS;
    }
}

/* -------------------------------------------------------- event loop */

static void accept_clients(struct proxy *px, int64_t now)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage sa;
        socklen_t sl = sizeof sa;
        char peer[64];
        int fd = accept4(px->listen_fd, (struct sockaddr *)&sa, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) {
                log_event("accept: %s; pausing 100 ms", strerror(errno));
                px->accept_paused_until = now + 100;
            }
            return;
        }
        px->st.accepted++;
        format_addr(&sa, peer, sizeof peer);
        if (px->mode == MODE_REFUSE || px->nconns >= px->max_conns) {
            px->st.refused++;
            log_event("refuse %s (%s)", peer, px->mode == MODE_REFUSE ?
                      "mode refuse" : "connection limit");
            close_rst(fd);
            continue;
        }
        conn_new(px, fd, peer, now);
    }
}

static short conn_events(const struct proxy *px, const struct conn *c,
                         int s, int64_t now)
{
    short ev = 0;

    if (c->fd[s] < 0)
        return 0;
    if (s == SRV && c->connecting)
        return POLLOUT;
    if (c->in_end[s] == END_NONE && c->out[!s].bytes < DIR_CAP)
        ev |= POLLIN;
    if (forwarding(px) && q_ready(&c->out[s], now))
        ev |= POLLOUT;
    return ev;
}

static void pfd_set(struct pollfd *p, int fd, short events)
{
    p->fd = events ? fd : -1;
    p->events = events;
    p->revents = 0;
}

static nfds_t fill_pollset(struct proxy *px, int64_t now)
{
    pfd_set(&px->pfd[P_LISTEN], px->listen_fd,
            now >= px->accept_paused_until ? POLLIN : 0);
    pfd_set(&px->pfd[P_CTL], px->ctl_fd, POLLIN);
    pfd_set(&px->pfd[P_SIG], px->sig_fd, POLLIN);
    for (int i = 0; i < MAX_CTL; i++)
        pfd_set(&px->pfd[P_CTLCLI + i], px->ctl[i].fd,
                px->ctl[i].fd >= 0 ? POLLIN : 0);
    for (size_t i = 0; i < px->nconns; i++)
        for (int s = CLI; s <= SRV; s++)
            pfd_set(&px->pfd[P_CONN + 2 * i + (size_t)s], px->conns[i]->fd[s],
                    conn_events(px, px->conns[i], s, now));
    return (nfds_t)(P_CONN + 2 * px->nconns);
}

/* Earliest moment a connection needs attention without any I/O. */
static int64_t conn_timer(const struct proxy *px, const struct conn *c,
                          int64_t now)
{
    int64_t t = c->connecting ? c->connect_deadline : INT64_MAX;

    if (!forwarding(px))
        return t;
    for (int s = CLI; s <= SRV; s++) {
        const struct chunk *k = c->out[s].head;

        if (k && k->at > now && k->at < t)
            t = k->at;
        if (c->in_end[s] != END_NONE && !c->end_done[s] &&
            !c->out[!s].head && c->end_at[s] > now && c->end_at[s] < t)
            t = c->end_at[s];
    }
    return t;
}

static int poll_timeout(const struct proxy *px, int64_t now)
{
    int64_t t = px->deadline, d;

    if (px->accept_paused_until > now && px->accept_paused_until < t)
        t = px->accept_paused_until;
    for (int i = 0; i < MAX_CTL; i++)
        if (px->ctl[i].fd >= 0 && px->ctl[i].deadline < t)
            t = px->ctl[i].deadline;
    for (size_t i = 0; i < px->nconns; i++) {
        int64_t ct = conn_timer(px, px->conns[i], now);

        if (ct < t)
            t = ct;
    }
    d = t - now;
    return d < 0 ? 0 : d > 60000 ? 60000 : (int)d;
}

static void conn_events_done(struct proxy *px, size_t polled, int64_t now)
{
    for (size_t i = 0; i < polled; i++) {
        struct conn *c = px->conns[i];

        for (int s = CLI; s <= SRV; s++) {
            const struct pollfd *p = &px->pfd[P_CONN + 2 * i + (size_t)s];

            if (!p->revents || c->fd[s] < 0)
                continue;
            if (s == SRV && c->connecting)
                upstream_finish(px, c, now);
            else if ((p->events & POLLIN) && c->in_end[s] == END_NONE)
                conn_read(px, c, s, now);
        }
    }
}

static void control_events(struct proxy *px, int64_t now)
{
    struct signalfd_siginfo si;

    if (px->pfd[P_SIG].revents &&
        read(px->sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
        log_event("signal %u, exiting", si.ssi_signo);
        px->quit = true;
    }
    if (px->pfd[P_CTL].revents)
        ctl_accept(px, now);
    for (int i = 0; i < MAX_CTL; i++)
        if (px->ctl[i].fd >= 0 && px->pfd[P_CTLCLI + i].revents)
            ctl_read(px, &px->ctl[i], now);
    for (int i = 0; i < MAX_CTL; i++)
        if (px->ctl[i].fd >= 0 && now >= px->ctl[i].deadline)
            ctl_drop(&px->ctl[i]);
}

static int proxy_run(struct proxy *px)
{
    while (!px->quit) {
        int64_t now = now_ms();
        nfds_t nfds;
        size_t polled = px->nconns;
        int r;

        if (now >= px->deadline) {
            log_event("ttl of %ld s expired, exiting", px->ttl_s);
            break;
        }
        nfds = fill_pollset(px, now);
        r = poll(px->pfd, nfds, poll_timeout(px, now));
        if (r < 0 && errno != EINTR) {
            log_event("poll: %s", strerror(errno));
            return 1;
        }
        now = now_ms();
        if (r > 0) {
            conn_events_done(px, polled, now);
            if (px->pfd[P_LISTEN].revents)
                accept_clients(px, now);
        }
        control_events(px, now);
        pump_all(px, now);
    }
    return 0;
}

/* ------------------------------------------------------ setup / teardown */

/* Raise the fd limit and derive how many connections fit in it. */
static size_t fit_conn_limit(void)
{
    struct rlimit rl;
    rlim_t want = 2 * MAX_CONNS + 64;
    size_t n;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 256;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < 64)
        return 8;
    n = (size_t)(rl.rlim_cur - 32 - MAX_CTL) / 2;   /* two fds per conn */
    return n < MAX_CONNS ? n : MAX_CONNS;
}

static bool write_port_file(const char *path, int port)
{
    char tmp[PATH_MAX];
    FILE *f;
    int n = snprintf(tmp, sizeof tmp, "%s.tmp", path);

    if (n < 0 || (size_t)n >= sizeof tmp || !(f = fopen(tmp, "w")))
        return false;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return false;
    return true;
}

static int open_listener(struct proxy *px)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int one = 1, fd;

    if (!resolve(px->listen_spec, true, &ss, &len)) {
        log_event("cannot resolve --listen %s", px->listen_spec);
        return -1;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&ss, len) == 0 &&
            listen(fd, 512) == 0)
            return fd;
        close(fd);
    }
    log_event("cannot listen on %s: %s", px->listen_spec, strerror(errno));
    return -1;
}

static int open_control(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct stat stb;
    int fd;

    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    strcpy(sa.sun_path, path);
    if (lstat(path, &stb) == 0 && S_ISSOCK(stb.st_mode))
        unlink(path);           /* stale socket from an earlier run */
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
            listen(fd, MAX_CTL) == 0)
            return fd;
        close(fd);
    }
    log_event("cannot listen on control socket %s: %s", path,
              strerror(errno));
    return -1;
}

static int open_signals(void)
{
    sigset_t set;

    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, NULL);
    return signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
}

static int listen_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -1;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* Everything that can fail at start-up; false after logging why. */
static bool proxy_open(struct proxy *px)
{
    int port;

    px->max_conns = fit_conn_limit();
    px->conns = calloc(px->max_conns, sizeof *px->conns);
    px->pfd = calloc(P_CONN + 2 * px->max_conns, sizeof *px->pfd);
    px->rbuf = malloc(READ_MAX);
    if (!px->conns || !px->pfd || !px->rbuf) {
        log_event("out of memory");
        return false;
    }
    px->sig_fd = open_signals();
    if (px->sig_fd < 0) {
        log_event("signalfd: %s", strerror(errno));
        return false;
    }
    px->ctl_fd = open_control(px->control_path);
    if (px->ctl_fd < 0)
        return false;
    px->listen_fd = open_listener(px);
    if (px->listen_fd < 0)
        return false;
    port = listen_port(px->listen_fd);
    if (px->port_file && !write_port_file(px->port_file, port)) {
        log_event("cannot write --port-file %s: %s", px->port_file,
                  strerror(errno));
        return false;
    }
    px->deadline = now_ms() + px->ttl_s * 1000;
    log_event("listening on port %d, upstream %s, control %s, ttl %ld s, "
              "max %zu connections", port, px->upstream_spec,
              px->control_path, px->ttl_s, px->max_conns);
    return true;
}

static void proxy_close(struct proxy *px)
{
    for (size_t i = px->nconns; i > 0; i--)
        conn_free(px->conns[i - 1], "exit", i - 1);
    px->nconns = 0;
    for (int i = 0; i < MAX_CTL; i++)
        if (px->ctl[i].fd >= 0)
            ctl_drop(&px->ctl[i]);
    if (px->ctl_fd >= 0) {
        close(px->ctl_fd);
        unlink(px->control_path);
    }
    if (px->listen_fd >= 0)
        close(px->listen_fd);
    if (px->sig_fd >= 0)
        close(px->sig_fd);
    free(px->conns);
    free(px->pfd);
    free(px->rbuf);
}

/* ------------------------------------------------------- command line */

static const char usage_line[] =
    "usage: cutproxy --listen HOST:PORT --upstream HOST:PORT --control PATH "
    "[--ttl SECONDS] [--port-file PATH] | cutproxy ctl PATH COMMAND [ARG...]"
    " | cutproxy selftest";

static int usage_error(const char *what)
{
    fprintf(stderr, "cutproxy: %s; %s\n", what, usage_line);
    return 2;
}

/* Match "--name value" or "--name=value"; advances *i past the value. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    size_t n = strlen(name);

    if (strncmp(argv[*i], name, n) != 0)
        return NULL;
    if (argv[*i][n] == '=')
        return argv[*i] + n + 1;
    if (argv[*i][n] == '\0' && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

/* Returns 0 on success, else the exit code (after one line on stderr). */
static int parse_args(struct proxy *px, int argc, char **argv)
{
    const char *v, *ttl = "600";

    for (int i = 1; i < argc; i++) {
        if ((v = opt_value(argc, argv, &i, "--listen")))
            px->listen_spec = v;
        else if ((v = opt_value(argc, argv, &i, "--upstream")))
            px->upstream_spec = v;
        else if ((v = opt_value(argc, argv, &i, "--control")))
            px->control_path = v;
        else if ((v = opt_value(argc, argv, &i, "--ttl")))
            ttl = v;
        else if ((v = opt_value(argc, argv, &i, "--port-file")))
            px->port_file = v;
        else
            return usage_error("unknown or incomplete option");
    }
    if (!px->listen_spec || !px->upstream_spec || !px->control_path)
        return usage_error("--listen, --upstream and --control are required");
    if (!parse_long(ttl, 1, 30L * 24 * 3600, &px->ttl_s))
        return usage_error("--ttl must be a whole number of seconds >= 1");
    if (strlen(px->control_path) >= sizeof((struct sockaddr_un){0}.sun_path))
        return usage_error("--control path too long for a UNIX socket");
    if (!resolve(px->upstream_spec, false, &px->up_addr, &px->up_len))
        return usage_error("--upstream must be HOST:PORT and resolvable");
    return 0;
}

/* ------------------------------------------------------- `ctl` client */

static int ctl_connect(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fd;

    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    strcpy(sa.sun_path, path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int err = errno;

        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* Read one reply line within CTL_WAIT_MS; false on timeout or EOF. */
static bool ctl_read_reply(int fd, char *buf, size_t sz)
{
    int64_t deadline = now_ms() + CTL_WAIT_MS;
    size_t len = 0;

    while (len < sz - 1) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int64_t left = deadline - now_ms();
        ssize_t n;

        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return false;
        n = recv(fd, buf + len, sz - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if (memchr(buf, '\n', len))
            break;
    }
    buf[len] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    return len > 0;
}

static int ctl_main(int argc, char **argv)
{
    char line[CTL_LINE], reply[CTL_LINE + 64];
    size_t len = 0;
    bool ok;
    int fd;

    if (argc < 4)
        return usage_error("ctl needs a control socket path and a command");
    for (int i = 3; i < argc; i++) {
        int n = snprintf(line + len, sizeof line - len, "%s%s",
                         i > 3 ? " " : "", argv[i]);

        if (n < 0 || (size_t)n >= sizeof line - len - 1)
            return usage_error("ctl command too long");
        len += (size_t)n;
    }
    line[len++] = '\n';
    fd = ctl_connect(argv[2]);
    if (fd < 0) {
        fprintf(stderr, "cutproxy ctl: cannot connect to %s: %s\n", argv[2],
                strerror(errno));
        return 1;
    }
    ok = send(fd, line, len, MSG_NOSIGNAL) == (ssize_t)len;
    shutdown(fd, SHUT_WR);
    ok = ok && ctl_read_reply(fd, reply, sizeof reply);
    close(fd);
    if (!ok) {
        fprintf(stderr, "cutproxy ctl: no reply from %s\n", argv[2]);
        return 1;
    }
    puts(reply);
    return strncmp(reply, "ok", 2) == 0 &&
           (reply[2] == ' ' || reply[2] == '\0') ? 0 : 1;
}

/* ------------------------------------------------------- selftest */

struct wire { unsigned char b[200000]; size_t len; };

static void put_bytes(struct wire *w, const void *d, size_t n)
{
    memcpy(w->b + w->len, d, n);
    w->len += n;
}

static void put32(struct wire *w, uint32_t v)
{
    for (int sh = 24; sh >= 0; sh -= 8)
        w->b[w->len++] = (unsigned char)(v >> sh);
}

static void put_str(struct wire *w, const char *s)
{
    put_bytes(w, s, strlen(s) + 1);
}

/* Start a message (type 0: startup packet); returns where its length goes. */
static size_t msg_begin(struct wire *w, char type)
{
    if (type)
        w->b[w->len++] = (unsigned char)type;
    put32(w, 0);
    return w->len - 4;
}

static void msg_end(struct wire *w, size_t at)
{
    size_t end = w->len;

    w->len = at;
    put32(w, (uint32_t)(end - at));
    w->len = end;
}

/* A message whose body is NUL-terminated strings plus `zeros` zero bytes. */
static void put_msg(struct wire *w, char type, const char *s1, const char *s2,
                    size_t zeros)
{
    static const unsigned char zero[8];
    size_t at = msg_begin(w, type);

    if (s1)
        put_str(w, s1);
    if (s2)
        put_str(w, s2);
    put_bytes(w, zero, zeros);
    msg_end(w, at);
}

static void put_startup(struct wire *w)
{
    size_t at = msg_begin(w, 0);

    put32(w, 3u << 16);
    put_str(w, "user");
    put_str(w, "postgres");
    put_str(w, "");
    msg_end(w, at);
}

/* Feed w in pieces of `step` bytes; list where COMMITs end. */
static int feed_all(const struct wire *w, size_t step, size_t *ends, int max)
{
    struct pgparse p = { .st = PG_STARTUP_HDR };
    size_t off = 0;
    int n = 0;

    while (off < w->len) {
        size_t piece = w->len - off < step ? w->len - off : step, used = 0;

        while (used < piece) {
            bool commit;

            used += pg_feed(&p, w->b + off + used, piece - used, &commit);
            if (commit && n < max)
                ends[n++] = off + used;
        }
        off += piece;
    }
    return n;
}

static void check(bool ok, const char *what, int *checks, int *failed)
{
    ++*checks;
    if (!ok) {
        fprintf(stderr, "selftest: FAIL %s\n", what);
        ++*failed;
    }
}

static void selftest_sql(int *checks, int *failed)
{
    static const struct { const char *sql; bool commit; } cases[] = {
        { "commit", true }, { "  COMMIT;", true }, { "END", true },
        { "commit work", true }, { "End Transaction ;\n", true },
        { "begin; insert into t values (1); commit", true },
        { "select 1;\n  commit ;;", true }, { "rollback", false },
        { "committed", false }, { "select 'commit'", false },
        { "commit prepared 'x'", false }, { "commit and chain", false },
        { "", false }, { "insert into t values(';commit')", false },
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check(sql_is_commit(cases[i].sql, strlen(cases[i].sql), false,
                            false) == cases[i].commit,
              cases[i].sql, checks, failed);
}

/*
 * A session exercising both protocols: SSLRequest (declined), startup,
 * simple queries, unnamed and named prepared COMMITs, a 150 kB query that
 * ends in COMMIT.  Fills want[] with the offsets where COMMITs end.
 */
static int selftest_session(struct wire *w, size_t *want)
{
    static char big[150000];
    int n = 0;

    put32(w, 8);
    put32(w, PG_SSL_REQUEST);
    put_startup(w);
    put_msg(w, 'Q', "begin", NULL, 0);
    put_msg(w, 'Q', "select 'commit'", NULL, 0);
    put_msg(w, 'Q', "  COMMIT;", NULL, 0);
    want[n++] = w->len;
    put_msg(w, 'P', "", "commit", 2);           /* int16 nparams */
    put_msg(w, 'B', "", "", 6);                 /* three int16 counts */
    put_msg(w, 'E', "", NULL, 4);               /* int32 max rows */
    want[n++] = w->len;
    put_msg(w, 'S', NULL, NULL, 0);
    put_msg(w, 'P', "s1", "END", 2);
    put_msg(w, 'P', "s2", "select 1", 2);
    put_msg(w, 'B', "", "s2", 6);
    put_msg(w, 'E', "", NULL, 4);
    put_msg(w, 'B', "", "s1", 6);
    put_msg(w, 'E', "", NULL, 4);
    want[n++] = w->len;
    put_msg(w, 'C', "Ss1", NULL, 0);            /* close statement s1 */
    put_msg(w, 'B', "", "s1", 6);
    put_msg(w, 'E', "", NULL, 4);
    memset(big, 'x', sizeof big - 1);
    memcpy(big, "select '", 8);
    memcpy(big + sizeof big - 20, "'; commit;", 11);
    put_msg(w, 'Q', big, NULL, 0);
    want[n++] = w->len;
    put_msg(w, 'X', NULL, NULL, 0);
    return n;
}

static int selftest(void)
{
    static struct wire w, tls;
    static const size_t steps[] = { 1, 2, 3, 7, 4096, sizeof w.b };
    size_t want[8], got[8];
    int checks = 0, failed = 0, n = selftest_session(&w, want);

    selftest_sql(&checks, &failed);
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int m = feed_all(&w, steps[i], got, 8);
        bool same = m == n;

        for (int j = 0; same && j < n; j++)
            same = got[j] == want[j];
        check(same, "COMMIT offsets in a session", &checks, &failed);
    }
    put32(&tls, 8);
    put32(&tls, PG_SSL_REQUEST);
    put_bytes(&tls, "\x16\x03\x01\x02\x00\x01", 6);   /* TLS ClientHello */
    put_msg(&tls, 'Q', "commit", NULL, 0);      /* encrypted in reality */
    check(feed_all(&tls, 1, got, 8) == 0, "TLS makes the parser opaque",
          &checks, &failed);
    printf("selftest: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}

/* ------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    struct proxy px = { .listen_fd = -1, .ctl_fd = -1, .sig_fd = -1 };
    int rc;

    for (int i = 0; i < MAX_CTL; i++)
        px.ctl[i].fd = -1;
    if (argc >= 2 && strcmp(argv[1], "ctl") == 0)
        return ctl_main(argc, argv);
    if (argc == 2 && strcmp(argv[1], "selftest") == 0)
        return selftest();
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 ||
                      strcmp(argv[1], "-h") == 0)) {
        puts(usage_line);
        return 0;
    }
    rc = parse_args(&px, argc, argv);
    if (rc)
        return rc;
    rc = proxy_open(&px) ? proxy_run(&px) : 1;
    proxy_close(&px);
    return rc;
}
