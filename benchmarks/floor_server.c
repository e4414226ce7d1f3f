/* The machine's floor: an HTTP/1.1 server in C that does no work.
 *
 * mcp_throughput.py compiles it (cc -O2) and loads it beside the servers it compares, with the same
 * load generator. It answers every POST carrying a JSON-RPC id with one fixed result (the file named
 * by argv[2], the bare ceiling's prompts/get result), echoing the id; `initialize` also gets an
 * Mcp-Session-Id header; a POST without an id (a notification) gets 202; DELETE 200; anything else
 * 405. No interpreter, no allocation per request, one epoll loop: what is left of its latency is
 * the kernel's, the load generator's and the machine's. Its p99 at one agent is the tail no server
 * on this box can go below.
 *
 *     cc -O2 -o floor_server floor_server.c && ./floor_server 18400 result.json
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define IN_MAX (64 * 1024)   /* a request larger than this closes the connection */
#define OUT_MAX (256 * 1024) /* answers not yet written (a client that does not read) */
#define ID_MAX 128

struct conn {
    int fd, watching_out;
    size_t in_len, out_len, out_sent;
    char in[IN_MAX];
    char out[OUT_MAX];
};

static char *result;
static size_t result_len;

static int set_nonblocking(int fd) { return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static int append(struct conn *c, const char *data, size_t len) {
    if (c->out_len + len > OUT_MAX) return -1;
    memcpy(c->out + c->out_len, data, len);
    c->out_len += len;
    return 0;
}

/* The value after "id": (a number, a string or null) copied into id; 0 if the body has no id. */
static size_t find_id(const char *body, size_t len, char *id) {
    static const char key[] = "\"id\":";
    const char *end = body + len;
    for (const char *p = body; p + sizeof key - 1 <= end; p++) {
        if (memcmp(p, key, sizeof key - 1) != 0) continue;
        const char *v = p + sizeof key - 1, *e = v;
        while (v < end && *v == ' ') v++, e++;
        if (v < end && *v == '"') {
            for (e = v + 1; e < end && *e != '"'; e++)
                if (*e == '\\') e++;
            e++;
        } else {
            while (e < end && *e != ',' && *e != '}' && *e != ' ') e++;
        }
        if (e > end || e == v || (size_t)(e - v) > ID_MAX) return 0;
        memcpy(id, v, e - v);
        return e - v;
    }
    return 0;
}

static int answer(struct conn *c, const char *head, size_t head_len, const char *body, size_t body_len) {
    char line[512], id[ID_MAX];
    if (head_len >= 7 && memcmp(head, "DELETE ", 7) == 0)
        return append(c, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n", 38);
    if (head_len < 5 || memcmp(head, "POST ", 5) != 0)
        return append(c, "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n", 54);
    size_t id_len = find_id(body, body_len, id);
    if (id_len == 0) return append(c, "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n", 45);
    /* the method's value, however the client spaces its JSON ("method": "initialize") */
    int initialize = memmem(body, body_len, "\"initialize\"", 12) != NULL;
    static const char open[] = "{\"jsonrpc\":\"2.0\",\"id\":", middle[] = ",\"result\":";
    size_t length = (sizeof open - 1) + id_len + (sizeof middle - 1) + result_len + 1;
    int n = snprintf(line, sizeof line,
                     "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n%scontent-length: %zu\r\n\r\n",
                     initialize ? "mcp-session-id: floor\r\n" : "", length);
    if (append(c, line, n) || append(c, open, sizeof open - 1) || append(c, id, id_len) ||
        append(c, middle, sizeof middle - 1) || append(c, result, result_len) || append(c, "}", 1))
        return -1;
    return 0;
}

/* Answers every complete request in the input buffer; -1 closes the connection. */
static int serve(struct conn *c) {
    size_t used = 0;
    for (;;) {
        char *start = c->in + used;
        size_t avail = c->in_len - used;
        char *end = memmem(start, avail, "\r\n\r\n", 4);
        if (end == NULL) break;
        size_t head_len = end + 4 - start, body_len = 0;
        for (char *p = start; p < end; p++) {
            if ((p == start || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
                body_len = strtoul(p + 15, NULL, 10);
                break;
            }
        }
        if (body_len > IN_MAX) return -1;
        if (avail < head_len + body_len) break;
        if (answer(c, start, head_len, start + head_len, body_len)) return -1;
        used += head_len + body_len;
    }
    if (used == 0 && c->in_len == IN_MAX) return -1;
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    return 0;
}

static int flush(struct conn *c) {
    while (c->out_sent < c->out_len) {
        ssize_t n = write(c->fd, c->out + c->out_sent, c->out_len - c->out_sent);
        if (n < 0) return errno == EAGAIN ? 1 : -1;
        c->out_sent += n;
    }
    c->out_len = c->out_sent = 0;
    return 0;
}

static void drop(int ep, struct conn *c) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PORT RESULT_FILE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0) return perror(argv[2]), 1;
    long size = ftell(f);
    if (size <= 0) return fprintf(stderr, "%s: empty or unreadable\n", argv[2]), 1;
    result_len = (size_t)size;
    rewind(f);
    result = malloc(result_len);
    if (result == NULL || fread(result, 1, result_len, f) != result_len) return perror(argv[2]), 1;
    fclose(f);
    signal(SIGPIPE, SIG_IGN);

    int one = 1, listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 1024))
        return perror("listen"), 1;
    set_nonblocking(listener);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, events[64];
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);

    for (;;) {
        int n = epoll_wait(ep, events, 64, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c == NULL) {
                int fd;
                while ((fd = accept(listener, NULL, NULL)) >= 0) {
                    set_nonblocking(fd);
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct conn *nc = calloc(1, sizeof *nc);
                    if (nc == NULL) {
                        close(fd);
                        continue;
                    }
                    nc->fd = fd;
                    struct epoll_event cev = {.events = EPOLLIN, .data.ptr = nc};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev);
                }
                continue;
            }
            int closed = 0;
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                ssize_t got = read(c->fd, c->in + c->in_len, IN_MAX - c->in_len);
                if (got == 0 || (got < 0 && errno != EAGAIN)) closed = 1;
                else if (got > 0) {
                    c->in_len += got;
                    closed = serve(c) < 0;
                }
            }
            int pending = closed ? -1 : flush(c);
            if (pending < 0) {
                drop(ep, c);
                continue;
            }
            if (pending != c->watching_out) { /* a syscall only when the answer did not fit the socket */
                struct epoll_event cev = {.events = pending ? EPOLLIN | EPOLLOUT : EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &cev);
                c->watching_out = pending;
            }
        }
    }
}
