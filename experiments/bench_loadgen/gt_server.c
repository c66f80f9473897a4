/* Ground-truth streaming server for the load-generator benchmark (single thread, epoll + timerfd).
 *
 *   gt_server PORT_FILE LOG_FILE TTFT_US ITL_US [DEFAULT_TOKENS]
 *
 * Listens on 127.0.0.1 (ephemeral port, written to PORT_FILE). Every streaming request gets its tokens on a fixed
 * schedule from the moment the whole request was read: token i (0-based) is written at recv + TTFT + i * ITL.
 * The number of tokens is the request's max_tokens / max_completion_tokens / max_new_tokens (else DEFAULT_TOKENS).
 * Endpoints: POST /v1/completions, /v1/chat/completions (OpenAI SSE, usage when stream_options.include_usage),
 * POST /generate (SGLang native SSE, cumulative text, meta_info.completion_tokens), GET /v1/models, /health,
 * /health_generate, any other GET -> {} (server info probes), POST /flush_cache -> 200.
 * The first token's text is "#<request id>#" so a client's output text names the server request it got.
 *
 * On SIGTERM/SIGINT it writes LOG_FILE: one line per finished request,
 *   <id> <recv_ns> <n_tokens> <write_ns_0> ... <write_ns_n-1>
 * where every *_ns is CLOCK_MONOTONIC (Python's time.perf_counter_ns) taken right after write() returned.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum { EP_NONE, EP_COMPL, EP_CHAT, EP_GEN };

typedef struct Conn {
  int fd;
  char *in; size_t in_len, in_cap;
  char *out; size_t out_len, out_off, out_cap;  /* pending bytes the socket did not take */
  int active;                                   /* a stream is in progress */
  int ep, usage, closed;
  long id; int n, next; int64_t recv_ns, due0; int64_t *w;
  int heap_pos;
} Conn;

static int64_t g_ttft, g_itl; static int g_default_tokens = 50;
static volatile sig_atomic_t g_stop = 0;
static FILE *g_log; static long g_next_id = 0;
static Conn **heap; static int heap_n, heap_cap;
static int g_ep;
static int g_debug;

static int64_t now_ns(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec; }
static int64_t due_of(Conn *c) { return c->due0 + (int64_t)c->next * g_itl; }

static void hswap(int a, int b) { Conn *t = heap[a]; heap[a] = heap[b]; heap[b] = t; heap[a]->heap_pos = a; heap[b]->heap_pos = b; }
static void hup(int i) { while (i > 0) { int p = (i - 1) / 2; if (due_of(heap[p]) <= due_of(heap[i])) break; hswap(i, p); i = p; } }
static void hdown(int i) { for (;;) { int l = 2 * i + 1, r = l + 1, m = i;
    if (l < heap_n && due_of(heap[l]) < due_of(heap[m])) m = l;
    if (r < heap_n && due_of(heap[r]) < due_of(heap[m])) m = r;
    if (m == i) break;
    hswap(i, m); i = m; } }
static void hpush(Conn *c) { if (heap_n == heap_cap) { heap_cap = heap_cap ? heap_cap * 2 : 1024; heap = realloc(heap, heap_cap * sizeof *heap); }
  heap[heap_n] = c; c->heap_pos = heap_n++; hup(c->heap_pos); }
static void hremove(Conn *c) { int i = c->heap_pos; if (i < 0) return; heap_n--; if (i != heap_n) { hswap(i, heap_n); hdown(i); hup(i); } c->heap_pos = -1; }

static void conn_close(Conn *c) {
  if (c->heap_pos >= 0) hremove(c);
  epoll_ctl(g_ep, EPOLL_CTL_DEL, c->fd, NULL); close(c->fd);
  free(c->in); free(c->out); free(c->w); free(c);
}

/* write everything or queue the rest; returns -1 when the connection is dead */
static int send_all(Conn *c, const char *buf, size_t len) {
  if (c->out_len > c->out_off) goto queue;
  while (len > 0) {
    ssize_t k = write(c->fd, buf, len);
    if (k > 0) { buf += k; len -= k; continue; }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return -1;
  }
  if (len == 0) return 0;
queue:
  if (c->out_len + len > c->out_cap) { c->out_cap = (c->out_len + len) * 2; c->out = realloc(c->out, c->out_cap); }
  memcpy(c->out + c->out_len, buf, len); c->out_len += len;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
  epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev);
  return 0;
}

static int respond_simple(Conn *c, const char *status, const char *ctype, const char *body) {
  char hdr[512]; size_t bl = strlen(body);
  int n = snprintf(hdr, sizeof hdr, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", status, ctype, bl);
  if (send_all(c, hdr, n) < 0) return -1;
  return bl ? send_all(c, body, bl) : 0;
}

static int json_int(const char *body, const char *key) {
  const char *p = strstr(body, key); if (!p) return -1;
  p += strlen(key); while (*p == '"' || *p == ':' || *p == ' ') p++;
  if (*p < '0' || *p > '9') return -1;
  return atoi(p);
}

/* append one chunked-encoding frame holding an SSE event */
static size_t frame(char *dst, const char *event, size_t elen) {
  int h = sprintf(dst, "%zx\r\n", elen); memcpy(dst + h, event, elen); memcpy(dst + h + elen, "\r\n", 2); return h + elen + 2;
}

static int emit_token(Conn *c) {
  static char ev[8192], out[16384], text[4096];
  int i = c->next, last = (i == c->n - 1); size_t o = 0; int el;
  char tok[32]; if (i == 0) snprintf(tok, sizeof tok, "#%ld#", c->id); else strcpy(tok, " t");
  if (c->ep == EP_GEN) {
    int tl = snprintf(text, sizeof text, "#%ld#", c->id);
    for (int k = 1; k <= i && tl < (int)sizeof text - 4; k++) { memcpy(text + tl, " t", 2); tl += 2; } text[tl] = 0;
    char fin[64]; if (last) snprintf(fin, sizeof fin, "{\"type\":\"length\",\"length\":%d}", c->n); else strcpy(fin, "null");
    el = snprintf(ev, sizeof ev, "data: {\"text\":\"%s\",\"meta_info\":{\"id\":\"r%ld\",\"finish_reason\":%s,\"prompt_tokens\":16,\"completion_tokens\":%d,\"cached_tokens\":0}}\n\n",
                  text, c->id, fin, i + 1);
  } else if (c->ep == EP_COMPL) {
    el = snprintf(ev, sizeof ev, "data: {\"id\":\"cmpl-%ld\",\"object\":\"text_completion\",\"created\":0,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
                  c->id, tok, last ? "\"length\"" : "null");
  } else {
    el = snprintf(ev, sizeof ev, "data: {\"id\":\"chatcmpl-%ld\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"bench-model\",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
                  c->id, i == 0 ? "\"role\":\"assistant\"," : "", tok, last ? "\"length\"" : "null");
  }
  o += frame(out + o, ev, el);
  if (last) {
    if (c->usage && c->ep != EP_GEN) {
      el = snprintf(ev, sizeof ev, "data: {\"id\":\"%s-%ld\",\"object\":\"%s\",\"created\":0,\"model\":\"bench-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":16,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
                    c->ep == EP_CHAT ? "chatcmpl" : "cmpl", c->id, c->ep == EP_CHAT ? "chat.completion.chunk" : "text_completion", c->n, c->n + 16);
      o += frame(out + o, ev, el);
    }
    o += frame(out + o, "data: [DONE]\n\n", 14);
    memcpy(out + o, "0\r\n\r\n", 5); o += 5;
  }
  if (send_all(c, out, o) < 0) return -1;
  c->w[i] = now_ns();
  c->next++;
  if (last) {
    fprintf(g_log, "%ld %lld %d", c->id, (long long)c->recv_ns, c->n);
    for (int k = 0; k < c->n; k++) fprintf(g_log, " %lld", (long long)c->w[k]);
    fputc('\n', g_log);
    c->active = 0; free(c->w); c->w = NULL;
  }
  return 0;
}

static int handle_requests(Conn *c);

static int start_stream(Conn *c, int ep, const char *body, int64_t t) {
  c->ep = ep; c->active = 1; c->id = g_next_id++; c->recv_ns = t;
  int n = json_int(body, "\"max_tokens\""); if (n < 0) n = json_int(body, "\"max_completion_tokens\"");
  if (n < 0) n = json_int(body, "\"max_new_tokens\"");
  if (n < 1) n = g_default_tokens;
  if (n > 1800) n = 1800;
  c->n = n; c->next = 0; c->usage = strstr(body, "include_usage") != NULL; c->w = calloc(n, sizeof(int64_t));
  c->due0 = t + g_ttft;
  const char *hdr = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
  if (send_all(c, hdr, strlen(hdr)) < 0) return -1;
  hpush(c);
  return 0;
}

/* parse complete requests in c->in; returns -1 to close */
static int handle_requests(Conn *c) {
  while (!c->active) {
    if (c->in_len == 0) return 0;
    c->in[c->in_len] = 0;
    char *end = strstr(c->in, "\r\n\r\n"); if (!end) return 0;
    size_t hlen = end - c->in + 4; long clen = 0;
    for (char *p = c->in; p < end; ) {
      char *nl = strstr(p, "\r\n"); if (!nl) break;
      if (strncasecmp(p, "content-length:", 15) == 0) clen = atol(p + 15);
      p = nl + 2;
    }
    if (c->in_len < hlen + clen) return 0;
    int64_t t = now_ns();
    if (g_debug) fprintf(stderr, "REQ %.*s\n", (int)(hlen + clen > 600 ? 600 : hlen + clen), c->in);
    char method[8] = {0}, path[256] = {0};
    sscanf(c->in, "%7s %255s", method, path);
    char *q = strchr(path, '?'); if (q) *q = 0;
    char saved = c->in[hlen + clen]; c->in[hlen + clen] = 0;
    const char *body = c->in + hlen; int rc = 0;
    if (strcmp(method, "POST") == 0 && strcmp(path, "/v1/completions") == 0) rc = start_stream(c, EP_COMPL, body, t);
    else if (strcmp(method, "POST") == 0 && strcmp(path, "/v1/chat/completions") == 0) rc = start_stream(c, EP_CHAT, body, t);
    else if (strcmp(method, "POST") == 0 && strcmp(path, "/generate") == 0) rc = start_stream(c, EP_GEN, body, t);
    else if (strcmp(path, "/v1/models") == 0)
      rc = respond_simple(c, "200 OK", "application/json", "{\"object\":\"list\",\"data\":[{\"id\":\"bench-model\",\"object\":\"model\",\"created\":0,\"owned_by\":\"grid\",\"root\":\"bench-model\",\"max_model_len\":32768}]}");
    else if (strcmp(path, "/health") == 0 || strcmp(path, "/health_generate") == 0 || strcmp(path, "/flush_cache") == 0)
      rc = respond_simple(c, "200 OK", "text/plain", "");
    else if (strcmp(method, "GET") == 0) rc = respond_simple(c, "200 OK", "application/json", "{}");
    else rc = respond_simple(c, "404 Not Found", "application/json", "{\"error\":\"not found\"}");
    c->in[hlen + clen] = saved;
    memmove(c->in, c->in + hlen + clen, c->in_len - hlen - clen); c->in_len -= hlen + clen;
    if (rc < 0) return -1;
  }
  return 0;
}

static void on_stop(int s) { (void)s; g_stop = 1; }

int main(int argc, char **argv) {
  if (argc < 5) { fprintf(stderr, "usage: %s PORT_FILE LOG_FILE TTFT_US ITL_US [DEFAULT_TOKENS]\n", argv[0]); return 2; }
  g_ttft = atoll(argv[3]) * 1000; g_itl = atoll(argv[4]) * 1000; if (argc > 5) g_default_tokens = atoi(argv[5]);
  g_debug = getenv("GT_DEBUG") != NULL;
  g_log = fopen(argv[2], "w"); if (!g_log) { perror("log"); return 1; }
  setvbuf(g_log, NULL, _IOFBF, 1 << 22);
  prctl(PR_SET_TIMERSLACK, 1UL);
  { struct sched_param sp = {.sched_priority = 10}; if (getenv("GT_NO_RT") == NULL) sched_setscheduler(0, SCHED_FIFO, &sp); }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {0}; sa.sa_handler = on_stop; sigaction(SIGTERM, &sa, NULL); sigaction(SIGINT, &sa, NULL);
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0); int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0}; a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0) { perror("listen"); return 1; }
  socklen_t al = sizeof a; getsockname(ls, (struct sockaddr *)&a, &al);
  char tmp[4096]; snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  FILE *pf = fopen(tmp, "w"); fprintf(pf, "%d", ntohs(a.sin_port)); fclose(pf); rename(tmp, argv[1]);
  g_ep = epoll_create1(0);
  int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}; epoll_ctl(g_ep, EPOLL_CTL_ADD, ls, &ev);
  static int tmark; struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &tmark}; epoll_ctl(g_ep, EPOLL_CTL_ADD, tfd, &tev);
  struct epoll_event evs[512]; int64_t armed = -1;
  while (!g_stop) {
    /* fire every token that is due */
    int64_t t = now_ns();
    while (heap_n > 0 && due_of(heap[0]) <= t + 20000) {
      Conn *c = heap[0]; hremove(c);
      if (emit_token(c) < 0) { conn_close(c); continue; }
      if (c->active) hpush(c);
      else if (handle_requests(c) < 0) conn_close(c);
      t = now_ns();
    }
    if (heap_n > 0 && due_of(heap[0]) != armed) {
      armed = due_of(heap[0]);
      struct itimerspec its = {0}; its.it_value.tv_sec = armed / 1000000000LL; its.it_value.tv_nsec = armed % 1000000000LL;
      timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
    }
    int n = epoll_wait(g_ep, evs, 512, heap_n > 0 ? 1000 : 200);
    for (int i = 0; i < n; i++) {
      void *p = evs[i].data.ptr;
      if (p == NULL) {
        for (;;) {
          int fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK); if (fd < 0) break;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          Conn *c = calloc(1, sizeof *c); c->fd = fd; c->heap_pos = -1; c->in_cap = 65536; c->in = malloc(c->in_cap + 1);
          struct epoll_event e = {.events = EPOLLIN, .data.ptr = c}; epoll_ctl(g_ep, EPOLL_CTL_ADD, fd, &e);
        }
      } else if (p == &tmark) {
        uint64_t x; ssize_t r = read(tfd, &x, sizeof x); (void)r; armed = -1;
      } else {
        Conn *c = p; int dead = 0;
        if (evs[i].events & EPOLLOUT) {
          while (c->out_off < c->out_len) {
            ssize_t k = write(c->fd, c->out + c->out_off, c->out_len - c->out_off);
            if (k > 0) c->out_off += k; else if (k < 0 && (errno == EAGAIN || errno == EINTR)) break; else { dead = 1; break; }
          }
          if (!dead && c->out_off == c->out_len) {
            c->out_off = c->out_len = 0;
            struct epoll_event e = {.events = EPOLLIN, .data.ptr = c}; epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &e);
          }
        }
        if (!dead && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
          for (;;) {
            if (c->in_len == c->in_cap) { c->in_cap *= 2; c->in = realloc(c->in, c->in_cap + 1); }
            ssize_t k = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
            if (k > 0) { c->in_len += k; continue; }
            if (k == 0) { dead = 1; break; }
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == EINTR) continue;
            dead = 1; break;
          }
          if (!dead && handle_requests(c) < 0) dead = 1;
        }
        if (dead) conn_close(c);
      }
    }
  }
  fclose(g_log);
  return 0;
}
