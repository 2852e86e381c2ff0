/* gate.c: the server's front door (see srv_internal.h).
 *
 * libmicrohttpd runs one thread per connection and counts only idle time against a
 * connection, so a client that trickles its headers a byte at a time holds a thread and
 * a connection slot for as long as it likes. The gate keeps such clients out of
 * libmicrohttpd altogether: one thread polls every new connection, peeks at what has
 * arrived (nothing is consumed, so libmicrohttpd later reads the request exactly as
 * sent), and hands the socket over with MHD_add_connection only once the request line
 * and headers are complete, within the header timeout, and their framing is sound. A
 * connection still waiting costs a poll entry. SO_RCVLOWAT set just above what has been
 * peeked makes poll wake only when more bytes arrive.
 *
 * Every answer carries "Connection: close" (http.c), so each connection carries one
 * request and every request passes the gate. The gate answers what it refuses itself
 * (400, 408, 431, 503, each with an OpenAI-shaped JSON body), reads what the client still
 * sends for a moment so that closing does not reset the answer, and closes.
 *
 * The same thread checks the minimum body rate of the requests libmicrohttpd is reading
 * (srv_upload) and shuts down the socket of one that falls behind. */
#include "srv_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define GATE_HEAD_MAX (32 * 1024) /* request line and headers */
#define GATE_LINGER_S 2.0         /* how long a refused connection is drained */
#define GATE_TICK_MS 200          /* deadline checks */
#define GATE_ACCEPT_BURST 64      /* connections accepted per wake */
#define GATE_REFUSED_MAX 64       /* refused connections drained at once, beyond the limits */

/* The address a limit counts: IPv4, or IPv6's first 64 bits (one host's usual share). */
struct addr_key {
    uint8_t b[8];
    uint8_t len;
};

struct peer {
    struct addr_key key;
    int open; /* waiting in the gate or held by libmicrohttpd */
};

struct pend {
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    struct addr_key key;
    double t0;         /* accepted, or answered (draining) */
    double t_last;     /* the last new bytes (or the accept) */
    size_t seen;       /* bytes peeked so far */
    double quiet_until;/* poll skips it until then (a wake without new bytes) */
    bool draining;     /* answered: reading what still comes, then closing */
    bool counted;      /* in the limits' counts (not a refused one) */
};

struct gate {
    struct srv *s;
    int lfd;
    int wake[2];
    pthread_t thread;
    bool running;
    volatile int stop;
    pthread_mutex_t mu; /* guards peers, n_waiting, n_active and the upload list */
    struct peer *peers;
    int n_peers;
    int n_waiting, n_active;
    struct srv_upload *uploads;
    /* The gate thread's own. */
    struct pend *pend;
    int n_pend, cap_pend;
    int n_refused; /* entries of pend not counted */
    struct pollfd *pfd;
    char buf[GATE_HEAD_MAX];
};

/* ---------------------------------------------------------------- the head */

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

static void trim(const char **p, size_t *n)
{
    while (*n && is_space(**p)) {
        (*p)++;
        (*n)--;
    }
    while (*n && is_space((*p)[*n - 1]))
        (*n)--;
}

int gate_check_head(const char *buf, size_t n, size_t *head_len, char *msg, size_t cap)
{
    size_t pos = 0;
    while (pos < n && (buf[pos] == '\r' || buf[pos] == '\n'))
        pos++; /* empty lines before the request line are ignored (RFC 9112 2.2) */
    bool have_cl = false, have_te = false;
    unsigned long long cl = 0;
    for (int line_no = 0;; line_no++) {
        const char *nl = memchr(buf + pos, '\n', n - pos);
        if (!nl)
            return 0;
        const char *line = buf + pos;
        size_t len = (size_t)(nl - line);
        pos = (size_t)(nl - buf) + 1;
        if (len && line[len - 1] == '\r')
            len--;
        if (memchr(line, '\0', len)) {
            snprintf(msg, cap, "the request holds a NUL byte");
            return 400;
        }
        if (line_no == 0) {
            const char *sp = memchr(line, ' ', len);
            const char *target = sp ? sp + 1 : line + len;
            size_t tlen = (size_t)(line + len - target);
            const char *sp2 = memchr(target, ' ', tlen);
            if (sp2)
                tlen = (size_t)(sp2 - target);
            for (size_t i = 0; i + 2 < tlen; i++)
                if (target[i] == '%' && target[i + 1] == '0' && target[i + 2] == '0') {
                    snprintf(msg, cap, "the request target holds %%00 (a NUL byte)");
                    return 400;
                }
            continue;
        }
        if (len == 0)
            break; /* the end of the head */
        if (is_space(line[0])) {
            snprintf(msg, cap, "header line %d is folded (starts with white space); send "
                               "each header on one line", line_no);
            return 400;
        }
        const char *colon = memchr(line, ':', len);
        if (!colon) {
            snprintf(msg, cap, "header line %d has no ':'", line_no);
            return 400;
        }
        size_t name_len = (size_t)(colon - line);
        if (name_len == 0 || is_space(line[name_len - 1])) {
            snprintf(msg, cap, "header line %d has %s before its ':'", line_no,
                     name_len ? "white space" : "no name");
            return 400;
        }
        const char *v = colon + 1;
        size_t vlen = len - name_len - 1;
        trim(&v, &vlen);
        if (name_len == 14 && strncasecmp(line, "Content-Length", 14) == 0) {
            unsigned long long x = 0;
            bool digits = vlen >= 1 && vlen <= 19;
            for (size_t i = 0; digits && i < vlen; i++) {
                digits = v[i] >= '0' && v[i] <= '9';
                x = x * 10 + (unsigned)(v[i] - '0');
            }
            if (!digits) {
                snprintf(msg, cap, "Content-Length '%.*s' is not a number of bytes (1 to 19 "
                                   "digits)", (int)(vlen < 40 ? vlen : 40), v);
                return 400;
            }
            if (have_cl && x != cl) {
                snprintf(msg, cap, "two different Content-Length headers (%llu and %llu): "
                                   "the body's length is ambiguous", cl, x);
                return 400;
            }
            have_cl = true;
            cl = x;
        } else if (name_len == 17 && strncasecmp(line, "Transfer-Encoding", 17) == 0) {
            if (have_te) {
                snprintf(msg, cap, "more than one Transfer-Encoding header");
                return 400;
            }
            if (vlen != 7 || strncasecmp(v, "chunked", 7) != 0) {
                snprintf(msg, cap, "Transfer-Encoding '%.*s' is not supported; send chunked "
                                   "or a Content-Length", (int)(vlen < 40 ? vlen : 40), v);
                return 400;
            }
            have_te = true;
        }
    }
    if (have_cl && have_te) {
        snprintf(msg, cap, "both Content-Length and Transfer-Encoding: the body's length is "
                           "ambiguous");
        return 400;
    }
    *head_len = pos;
    return 1;
}

/* ---------------------------------------------------------------- counts */

static void addr_key(const struct sockaddr *sa, struct addr_key *k)
{
    memset(k, 0, sizeof *k);
    if (sa->sa_family == AF_INET) {
        memcpy(k->b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        k->len = 4;
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(k->b, a->s6_addr + 12, 4);
            k->len = 4;
        } else {
            memcpy(k->b, a->s6_addr, 8);
            k->len = 8;
        }
    }
}

/* The peer entry of k (created when add > 0), with its count moved by add; called with
 * g->mu held. Returns the count after. */
static int peer_move(struct gate *g, const struct addr_key *k, int add)
{
    int i = 0;
    while (i < g->n_peers && memcmp(&g->peers[i].key, k, sizeof *k) != 0)
        i++;
    if (i == g->n_peers) {
        if (add <= 0)
            return 0;
        /* Every open connection has an entry at most: max_connections bound them. */
        if (g->n_peers >= g->s->cfg.max_connections)
            return -1;
        g->peers[i].key = *k;
        g->peers[i].open = 0;
        g->n_peers++;
    }
    g->peers[i].open += add;
    int now = g->peers[i].open;
    if (now <= 0)
        g->peers[i] = g->peers[--g->n_peers];
    return now;
}

static int peer_open(struct gate *g, const struct addr_key *k)
{
    for (int i = 0; i < g->n_peers; i++)
        if (memcmp(&g->peers[i].key, k, sizeof *k) == 0)
            return g->peers[i].open;
    return 0;
}

void gate_conn_count(struct gate *g, const struct sockaddr *addr, int delta)
{
    struct addr_key k;
    addr_key(addr, &k);
    pthread_mutex_lock(&g->mu);
    g->n_active += delta;
    peer_move(g, &k, delta);
    pthread_mutex_unlock(&g->mu);
}

void gate_counts(struct gate *g, int *waiting, int *active)
{
    pthread_mutex_lock(&g->mu);
    *waiting = g->n_waiting;
    *active = g->n_active;
    pthread_mutex_unlock(&g->mu);
}

/* ---------------------------------------------------------------- uploads */

void gate_upload_begin(struct gate *g, struct srv_upload *u, int fd)
{
    pthread_mutex_lock(&g->mu);
    u->fd = fd;
    u->t0 = kn_now();
    u->got = 0;
    u->prev = NULL;
    u->next = g->uploads;
    if (g->uploads)
        g->uploads->prev = u;
    g->uploads = u;
    u->on = true;
    pthread_mutex_unlock(&g->mu);
}

void gate_upload_add(struct gate *g, struct srv_upload *u, size_t n)
{
    pthread_mutex_lock(&g->mu);
    u->got += n;
    pthread_mutex_unlock(&g->mu);
}

static void upload_unlink(struct gate *g, struct srv_upload *u)
{
    if (!u->on)
        return;
    if (u->prev)
        u->prev->next = u->next;
    else
        g->uploads = u->next;
    if (u->next)
        u->next->prev = u->prev;
    u->on = false;
}

void gate_upload_end(struct gate *g, struct srv_upload *u)
{
    pthread_mutex_lock(&g->mu);
    upload_unlink(g, u);
    pthread_mutex_unlock(&g->mu);
}

/* Shuts down the socket of every body that has fallen behind the minimum rate; the
 * connection's thread then sees the end of the stream and closes it. Under g->mu, so
 * that the socket is still libmicrohttpd's (a request leaves the list before its
 * connection is closed). */
static void sweep_uploads(struct gate *g, double now)
{
    double grace = g->s->cfg.header_timeout_s;
    pthread_mutex_lock(&g->mu);
    for (struct srv_upload *u = g->uploads, *next; u; u = next) {
        next = u->next;
        double late = now - u->t0 - grace;
        if (late > 0 && (double)u->got < SRV_MIN_BODY_RATE * late) {
            kn_log(KN_LOG_DEBUG, "http: a request body came at %.0f bytes/s, under %d: closed",
                   (double)u->got / (now - u->t0), SRV_MIN_BODY_RATE);
            shutdown(u->fd, SHUT_RDWR);
            upload_unlink(g, u);
        }
    }
    pthread_mutex_unlock(&g->mu);
}

/* ---------------------------------------------------------------- connections */

static void set_lowat(int fd, size_t n)
{
    int v = n > INT32_MAX ? INT32_MAX : (int)n;
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v);
}

/* Forgets pend[i] (closing its socket when close_fd) and its count. What the client sent
 * is read first: closing a socket with unread bytes resets the connection instead of
 * ending it. */
static void pend_drop(struct gate *g, int i, bool close_fd)
{
    struct pend *p = &g->pend[i];
    if (close_fd) {
        for (int k = 0; k < 4 && recv(p->fd, g->buf, sizeof g->buf, MSG_DONTWAIT) > 0; k++)
            ;
        close(p->fd);
    }
    if (p->counted) {
        pthread_mutex_lock(&g->mu);
        peer_move(g, &p->key, -1);
        g->n_waiting--;
        pthread_mutex_unlock(&g->mu);
    } else {
        g->n_refused--;
    }
    g->pend[i] = g->pend[--g->n_pend];
}

static const char *reason(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
    }
}

/* Writes a whole small answer to a fresh socket (its send buffer is empty, so it fits). */
static void send_answer(struct gate *g, int fd, int status, const char *code, const char *msg)
{
    struct srv_error e = {status, status == 503 ? "server_error" : "invalid_request_error", code,
                          NULL, {0}};
    snprintf(e.message, sizeof e.message, "%s", msg);
    char *body = api_error_json(&e);
    char date[64] = "";
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(date, sizeof date, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    char head[320];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\n%sContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n",
                      status, reason(status), date, body ? strlen(body) : 0,
                      status == 503 ? "Retry-After: 1\r\n" : "");
    (void)!send(fd, head, (size_t)hn, MSG_DONTWAIT | MSG_NOSIGNAL | (body ? MSG_MORE : 0));
    if (body)
        (void)!send(fd, body, strlen(body), MSG_DONTWAIT | MSG_NOSIGNAL);
    free(body);
    srv_count_status(g->s, status);
}

/* Answers pend[i] and lets it drain: what the client already sent is read first, so
 * that closing does not reset the answer before the client has read it. */
static void pend_answer(struct gate *g, int i, int status, const char *code, const char *msg,
                        double now)
{
    struct pend *p = &g->pend[i];
    kn_log(KN_LOG_DEBUG, "http: %d before the handler: %s", status, msg);
    set_lowat(p->fd, 1);
    for (int k = 0; k < 4 && recv(p->fd, g->buf, sizeof g->buf, MSG_DONTWAIT) > 0; k++)
        ; /* a few reads at most: the rest drains as it comes */
    send_answer(g, p->fd, status, code, msg);
    shutdown(p->fd, SHUT_WR);
    p->draining = true;
    p->t0 = now;
}

static void pend_hand_over(struct gate *g, int i)
{
    struct pend p = g->pend[i];
    set_lowat(p.fd, 1);
    pend_drop(g, i, false);
    /* libmicrohttpd's connection notices count it from here (gate_conn_count); it closes
     * the socket itself when it cannot take it. */
    if (MHD_add_connection(g->s->d, p.fd, (const struct sockaddr *)&p.addr, p.addr_len) != MHD_YES)
        kn_log(KN_LOG_DEBUG, "http: libmicrohttpd refused a connection: %s", strerror(errno));
}

static void pend_readable(struct gate *g, int i, short revents, double now)
{
    struct pend *p = &g->pend[i];
    if (p->draining) {
        ssize_t r;
        int rounds = 0;
        while ((r = recv(p->fd, g->buf, sizeof g->buf, MSG_DONTWAIT)) > 0 && ++rounds < 4)
            ;
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            pend_drop(g, i, true);
        return;
    }
    ssize_t r = recv(p->fd, g->buf, sizeof g->buf, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        pend_drop(g, i, true); /* gone before its request was complete */
        return;
    }
    if (r < 0)
        return;
    size_t n = (size_t)r, head_len = 0;
    char msg[300];
    int v = gate_check_head(g->buf, n, &head_len, msg, sizeof msg);
    if (v == 1) {
        pend_hand_over(g, i);
    } else if (v != 0) {
        pend_answer(g, i, v, "bad_request", msg, now);
    } else if (n >= sizeof g->buf) {
        snprintf(msg, sizeof msg, "the request line and headers are larger than %d bytes",
                 GATE_HEAD_MAX);
        pend_answer(g, i, 431, "headers_too_large", msg, now);
    } else if (n == p->seen) {
        if (revents & (POLLRDHUP | POLLHUP | POLLERR))
            pend_drop(g, i, true); /* closed its side with the head incomplete */
        else
            p->quiet_until = now + 0.05; /* woken without new bytes: no busy loop */
    } else {
        p->seen = n;
        p->t_last = now;
        set_lowat(p->fd, n + 1);
    }
}

/* Room for one more entry in pend (and its poll slot). */
static bool pend_room(struct gate *g)
{
    if (g->n_pend < g->cap_pend)
        return true;
    int cap = g->cap_pend ? 2 * g->cap_pend : 64;
    struct pend *np = realloc(g->pend, (size_t)cap * sizeof *np);
    if (np)
        g->pend = np;
    struct pollfd *nf = np ? realloc(g->pfd, (size_t)(cap + 2) * sizeof *nf) : NULL;
    if (nf)
        g->pfd = nf;
    if (!np || !nf)
        return false;
    g->cap_pend = cap;
    return true;
}

static void admit(struct gate *g, int fd, const struct sockaddr_storage *ss, socklen_t len,
                  double now)
{
    struct srv *s = g->s;
    struct pend p = {.fd = fd, .addr = *ss, .addr_len = len, .t0 = now, .t_last = now};
    addr_key((const struct sockaddr *)ss, &p.key);
    char msg[200] = "";
    bool room = pend_room(g);
    pthread_mutex_lock(&g->mu);
    int open_all = g->n_waiting + g->n_active, open_here = peer_open(g, &p.key);
    if (open_all >= s->cfg.max_connections)
        snprintf(msg, sizeof msg, "the server has %d connections open (--max-connections); "
                                  "retry in a moment", open_all);
    else if (open_here >= s->cfg.max_connections_per_ip)
        snprintf(msg, sizeof msg, "this address has %d connections open "
                                  "(--max-connections-per-ip); retry in a moment", open_here);
    else if (!room || peer_move(g, &p.key, 1) < 0)
        snprintf(msg, sizeof msg, "out of memory");
    else
        g->n_waiting++;
    pthread_mutex_unlock(&g->mu);
    if (!msg[0]) {
        p.counted = true;
        g->pend[g->n_pend++] = p;
        return;
    }
    kn_log(KN_LOG_DEBUG, "http: refused a connection: %s", msg);
    if (room && g->n_refused < GATE_REFUSED_MAX) {
        /* Drained like any answered one (a bounded few), so the 503 is read, not reset. */
        g->pend[g->n_pend++] = p;
        g->n_refused++;
        pend_answer(g, g->n_pend - 1, 503, "too_many_connections", msg, now);
    } else {
        send_answer(g, fd, 503, "too_many_connections", msg);
        close(fd);
    }
}

static void *gate_main(void *arg)
{
    struct gate *g = arg;
    double header_timeout = g->s->cfg.header_timeout_s, idle_timeout = g->s->cfg.timeout_s;
    while (!g->stop) {
        double now = kn_now();
        g->pfd[0] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        g->pfd[1] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
        for (int i = 0; i < g->n_pend; i++)
            g->pfd[2 + i] = (struct pollfd){
                .fd = g->pend[i].fd,
                .events = g->pend[i].quiet_until > now ? 0 : POLLIN | POLLRDHUP};
        int n_poll = 2 + g->n_pend;
        if (poll(g->pfd, (nfds_t)n_poll, GATE_TICK_MS) < 0 && errno != EINTR) {
            kn_log(KN_LOG_WARN, "http: poll failed: %s", strerror(errno));
            usleep(10000);
            continue;
        }
        if (g->stop)
            break;
        now = kn_now();
        /* From the end, so that a removal (the last moves into the hole) keeps the
         * entries still to visit at their poll index. */
        for (int i = n_poll - 3; i >= 0; i--) {
            struct pend *p = &g->pend[i];
            short re = g->pfd[2 + i].revents;
            if (re)
                pend_readable(g, i, re, now);
            else if (p->draining && now - p->t0 > GATE_LINGER_S)
                pend_drop(g, i, true);
            else if (!p->draining && now - p->t_last > idle_timeout)
                pend_drop(g, i, true); /* silent for --timeout: closed as an idle one */
            else if (!p->draining && now - p->t0 > header_timeout) {
                char msg[160];
                snprintf(msg, sizeof msg, "the request line and headers did not arrive within "
                                          "%d s (--header-timeout)", g->s->cfg.header_timeout_s);
                pend_answer(g, i, 408, "request_timeout", msg, now);
            }
        }
        if (g->pfd[1].revents & POLLIN) {
            for (int k = 0; k < GATE_ACCEPT_BURST; k++) {
                struct sockaddr_storage ss;
                socklen_t len = sizeof ss;
                int fd = accept4(g->lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                        kn_log(KN_LOG_WARN, "http: cannot accept: %s", strerror(errno));
                        usleep(50000); /* the backlog keeps them; do not spin */
                    }
                    break;
                }
                admit(g, fd, &ss, len, now);
            }
        }
        if (g->pfd[0].revents & POLLIN) {
            char c[64];
            while (read(g->wake[0], c, sizeof c) > 0)
                ;
        }
        sweep_uploads(g, now);
    }
    return NULL;
}

/* ---------------------------------------------------------------- start and stop */

enum kn_status gate_open(struct gate **out, struct srv *s, const struct sockaddr *addr,
                         socklen_t addr_len, int *port, struct kn_err *err)
{
    *out = NULL;
    struct gate *g = kn_calloc(1, sizeof *g, err);
    if (!g)
        return KN_E_NOMEM;
    g->s = s;
    g->lfd = g->wake[0] = g->wake[1] = -1;
    pthread_mutex_init(&g->mu, NULL);
    g->peers = kn_calloc((size_t)s->cfg.max_connections, sizeof *g->peers, err);
    g->pfd = kn_calloc(2, sizeof *g->pfd, err);
    if (!g->peers || !g->pfd) {
        gate_free(g);
        return KN_E_NOMEM;
    }
    if (pipe2(g->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        int e = errno;
        gate_free(g);
        return kn_fail(err, KN_E_IO, "serve: cannot make a pipe: %s", strerror(e));
    }
    g->lfd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (g->lfd >= 0) {
        (void)setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (addr->sa_family == AF_INET6)
            (void)setsockopt(g->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    }
    if (g->lfd < 0 || bind(g->lfd, addr, addr_len) != 0 || listen(g->lfd, SOMAXCONN) != 0) {
        int e = errno;
        gate_free(g);
        errno = e;
        return KN_E_IO; /* the caller names the address */
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    *port = 0;
    if (getsockname(g->lfd, (struct sockaddr *)&ss, &len) == 0)
        *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *out = g;
    return KN_OK;
}

enum kn_status gate_run(struct gate *g, struct kn_err *err)
{
    int e = pthread_create(&g->thread, NULL, gate_main, g);
    if (e)
        return kn_fail(err, KN_E_IO, "serve: cannot start a thread: %s", strerror(e));
    g->running = true;
    return KN_OK;
}

void gate_stop(struct gate *g)
{
    if (!g)
        return;
    if (g->running) {
        g->stop = 1;
        (void)!write(g->wake[1], "x", 1);
        pthread_join(g->thread, NULL);
        g->running = false;
    }
    while (g->n_pend > 0)
        pend_drop(g, g->n_pend - 1, true);
    if (g->lfd >= 0)
        close(g->lfd);
    g->lfd = -1;
}

void gate_free(struct gate *g)
{
    if (!g)
        return;
    gate_stop(g);
    for (int i = 0; i < 2; i++)
        if (g->wake[i] >= 0)
            close(g->wake[i]);
    pthread_mutex_destroy(&g->mu);
    free(g->pend);
    free(g->pfd);
    free(g->peers);
    free(g);
}
