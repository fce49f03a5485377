/* rpc: request/response traffic between client and server threads, the
 * allocation pattern of an RPC server (the "rpc" workload of Google's
 * TCMalloc and Meta's jemalloc evaluations). Clients allocate request
 * messages with a realistic size mix (85% small 16-256 B, 13% medium
 * 1-16 KiB, 2% large 64-256 KiB), fill them and pass them through bounded
 * mutex+condvar queues to servers; a server validates the request, allocates
 * and fills a response, frees the request (allocated by a client thread)
 * and queues the response; the client validates and frees the response
 * (allocated by a server thread). Each client keeps up to `inflight`
 * requests outstanding. threads=1 runs the client and server roles
 * alternately in one thread. Message sizes are a pure function of
 * (seed, client, sequence number), so the work is fixed. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct msg {        /* header of every message: 16 bytes */
    uint32_t client;
    uint32_t seq;
    uint64_t check;         /* checksum of the payload after the header */
} msg;

enum { SMALL_PCT = 85, MEDIUM_PCT = 13 }; /* the rest is large */

static uint64_t g_seed;
static long g_clients, g_servers, g_inflight;
static wl_queue *g_req;    /* one per server */
static wl_queue *g_resp;   /* one per client */

typedef struct client {
    long index;
    uint64_t requests;     /* how many to send */
    uint64_t digest;       /* sum of per-message hashes: independent of timing */
    uint64_t bytes;
    unsigned char *seen;   /* bitmap of answered sequence numbers */
} client;

/* Size of request (kind 0) or response (kind 1) `seq` of client `c`. */
static size_t msg_size(uint32_t c, uint32_t seq, int kind)
{
    uint64_t st = g_seed ^ ((uint64_t)c << 33) ^ ((uint64_t)seq << 1) ^ (uint64_t)kind;
    uint64_t r = wl_splitmix64(&st);
    uint64_t pct = (r & 0xffffffff) % 100, x = r >> 32;
    if (pct < SMALL_PCT)
        return 16 + x % (256 - 16 + 1);
    if (pct < SMALL_PCT + MEDIUM_PCT)
        return 1024 + x % (16384 - 1024 + 1);
    return 65536 + x % (262144 - 65536 + 1);
}

static uint64_t payload_key(uint32_t c, uint32_t seq, int kind)
{
    uint64_t st = g_seed * 31 + ((uint64_t)c << 32 | seq) * 2 + (uint64_t)kind;
    uint64_t k = wl_splitmix64(&st);
    return k ? k : 1;
}

/* Fills (fill=1) or sums (fill=0) the payload of a message of `size` bytes:
 * densely over its first DENSE bytes, then one word per 4 KiB page and the
 * last word, so large buffers are touched on every page without the run
 * turning into a memory-bandwidth test. */
enum { DENSE = 4096, PAGE_STEP = 4096 };

static inline void word(unsigned char *p, uint64_t *x, uint64_t *sum, int fill)
{
    uint64_t w;
    *x ^= *x << 13; *x ^= *x >> 7; *x ^= *x << 17;
    if (fill)
        memcpy(p, x, 8);
    memcpy(&w, p, 8);
    *sum = ((*sum << 5) | (*sum >> 59)) ^ w;
}

static uint64_t payload(msg *m, size_t size, uint64_t key, int fill)
{
    unsigned char *p = (unsigned char *)(m + 1);
    size_t n = size - sizeof(msg), dense = n < DENSE ? n : DENSE, i = 0, end;
    uint64_t x = key, sum = 0;
    for (; i + 8 <= dense; i += 8)
        word(p + i, &x, &sum, fill);
    for (; i < dense; i++) {
        if (fill)
            p[i] = (unsigned char)(x >> (8 * (i & 7)));
        sum = ((sum << 5) | (sum >> 59)) ^ p[i];
    }
    end = i;
    for (i = DENSE; i + 8 <= n; i += PAGE_STEP) {
        word(p + i, &x, &sum, fill);
        end = i + 8;
    }
    if (n >= 8 && n - 8 >= end)
        word(p + n - 8, &x, &sum, fill);
    return sum;
}

static msg *make_msg(uint32_t c, uint32_t seq, int kind)
{
    size_t size = msg_size(c, seq, kind);
    msg *m = malloc(size);
    if (!m)
        wl_fail("malloc(%zu) returned NULL", size);
    m->client = c;
    m->seq = seq;
    m->check = payload(m, size, payload_key(c, seq, kind), 1);
    return m;
}

static void check_msg(const msg *m, int kind, long want_client, uint64_t seq_limit)
{
    if (m->client >= (uint32_t)g_clients || (want_client >= 0 && m->client != want_client) ||
        m->seq >= seq_limit)
        wl_fail("%s %p has a bad header (client %u seq %u)", kind ? "response" : "request",
                (const void *)m, m->client, m->seq);
    size_t size = msg_size(m->client, m->seq, kind);
    if (payload((msg *)m, size, 0, 0) != m->check)
        wl_fail("%s %p (client %u seq %u, %zu bytes) was corrupted",
                kind ? "response" : "request", (const void *)m, m->client, m->seq, size);
}

/* Server role: validate a request, answer it, free it. */
static void serve(msg *req)
{
    check_msg(req, 0, -1, UINT32_MAX);
    msg *resp = make_msg(req->client, req->seq, 1);
    long c = req->client;
    free(req);
    wl_queue_push(&g_resp[c], resp);
}

static void consume(client *cl, msg *resp, uint64_t sent)
{
    check_msg(resp, 1, cl->index, sent);
    unsigned char bit = (unsigned char)(1u << (resp->seq & 7));
    if (cl->seen[resp->seq >> 3] & bit)
        wl_fail("response %p answers request %u of client %ld a second time", (void *)resp,
                resp->seq, cl->index);
    cl->seen[resp->seq >> 3] |= bit;
    size_t size = msg_size(resp->client, resp->seq, 1);
    cl->digest += wl_digest_add(WL_DIGEST_INIT, (uint64_t)resp->seq << 32 | size | 1ULL << 31);
    cl->bytes += size;
    free(resp);
}

static uint64_t send_request(client *cl, uint32_t seq)
{
    msg *req = make_msg((uint32_t)cl->index, seq, 0);
    size_t size = msg_size((uint32_t)cl->index, seq, 0);
    cl->digest += wl_digest_add(WL_DIGEST_INIT, (uint64_t)seq << 32 | size);
    cl->bytes += size;
    wl_queue_push(&g_req[(cl->index + seq) % g_servers], req);
    return size;
}

static void *client_thread(void *arg)
{
    client *cl = arg;
    uint64_t sent = 0, received = 0;
    while (received < cl->requests) {
        while (sent < cl->requests && sent - received < (uint64_t)g_inflight)
            send_request(cl, (uint32_t)sent++);
        consume(cl, wl_queue_pop(&g_resp[cl->index]), sent);
        received++;
    }
    return NULL;
}

static void *server_thread(void *arg)
{
    wl_queue *q = arg;
    for (;;) {
        msg *req = wl_queue_pop(q);
        if (!req)
            return NULL;
        serve(req);
    }
}

/* threads=1: one thread sends a window, serves it, then consumes it. */
static void run_alone(client *cl)
{
    uint64_t sent = 0;
    while (sent < cl->requests) {
        uint64_t window = 0;
        while (sent < cl->requests && window < (uint64_t)g_inflight) {
            send_request(cl, (uint32_t)sent++);
            window++;
        }
        void *req;
        while (wl_queue_try_pop(&g_req[0], &req))
            serve(req);
        for (uint64_t i = 0; i < window; i++)
            consume(cl, wl_queue_pop(&g_resp[0]), sent);
    }
}

int main(int argc, char **argv)
{
    wl_param params[] = {
        {"threads", 2, 1, "total threads: (threads+1)/2 clients, threads/2 servers"},
        {"requests", 300000, 1, "total request/response round trips (the operations)"},
        {"inflight", 8, 1, "requests a client keeps outstanding"},
        {"seed", 42, 0, "PRNG seed"},
    };
    size_t np = WL_NPARAMS(params);
    wl_parse_args(argc, argv, "rpc", "Request/response traffic between client and server threads.",
                  params, np);
    long threads = (long)wl_param_get(params, np, "threads");
    uint64_t requests = (uint64_t)wl_param_get(params, np, "requests");
    g_inflight = (long)wl_param_get(params, np, "inflight");
    g_seed = (uint64_t)wl_param_get(params, np, "seed");
    if (threads > 65535 || requests > UINT32_MAX)
        wl_fail("threads must be <= 65535 and requests <= 2^32-1");
    g_clients = threads == 1 ? 1 : (threads + 1) / 2;
    g_servers = threads == 1 ? 1 : threads / 2;

    g_req = wl_xmalloc(sizeof(wl_queue) * (size_t)g_servers);
    g_resp = wl_xmalloc(sizeof(wl_queue) * (size_t)g_clients);
    for (long s = 0; s < g_servers; s++)
        wl_queue_init(&g_req[s], (size_t)(g_clients * g_inflight + 1));
    for (long c = 0; c < g_clients; c++)
        wl_queue_init(&g_resp[c], (size_t)g_inflight);
    client *clients = wl_xmalloc(sizeof(client) * (size_t)g_clients);
    for (long c = 0; c < g_clients; c++) {
        clients[c].index = c;
        clients[c].requests = requests / (uint64_t)g_clients + ((uint64_t)c < requests % (uint64_t)g_clients);
        clients[c].digest = WL_DIGEST_INIT;
        clients[c].bytes = 0;
        clients[c].seen = wl_xmalloc(clients[c].requests / 8 + 1);
        memset(clients[c].seen, 0, clients[c].requests / 8 + 1);
    }

    double start = wl_now(), cpu_start = wl_cpu_now();
    if (threads == 1) {
        run_alone(&clients[0]);
    } else {
        pthread_t *srv = wl_xmalloc(sizeof(pthread_t) * (size_t)g_servers);
        pthread_t *cli = wl_xmalloc(sizeof(pthread_t) * (size_t)g_clients);
        for (long s = 0; s < g_servers; s++)
            wl_thread_create(&srv[s], server_thread, &g_req[s]);
        for (long c = 0; c < g_clients; c++)
            wl_thread_create(&cli[c], client_thread, &clients[c]);
        for (long c = 0; c < g_clients; c++)
            wl_thread_join(cli[c]);
        for (long s = 0; s < g_servers; s++)
            wl_queue_push(&g_req[s], NULL); /* stop */
        for (long s = 0; s < g_servers; s++)
            wl_thread_join(srv[s]);
        free(srv);
        free(cli);
    }
    double seconds = wl_now() - start, cpu_seconds = wl_cpu_now() - cpu_start;

    uint64_t digest = WL_DIGEST_INIT, bytes = 0;
    for (long c = 0; c < g_clients; c++) {
        digest = wl_digest_add(digest, clients[c].digest);
        bytes += clients[c].bytes;
        free(clients[c].seen);
    }
    for (long s = 0; s < g_servers; s++)
        wl_queue_destroy(&g_req[s]);
    for (long c = 0; c < g_clients; c++)
        wl_queue_destroy(&g_resp[c]);
    free(g_req);
    free(g_resp);
    free(clients);

    char hex[17], clients_s[24], servers_s[24], bytes_s[24];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)digest);
    snprintf(clients_s, sizeof clients_s, "%ld", g_clients);
    snprintf(servers_s, sizeof servers_s, "%ld", threads == 1 ? 0L : g_servers);
    snprintf(bytes_s, sizeof bytes_s, "%llu", (unsigned long long)bytes);
    wl_extra extras[] = {
        {"cpu_seconds", cpu_seconds, 0, NULL},
        {"clients", 0, 0, clients_s},
        {"servers", 0, 0, servers_s},
        {"message_bytes", 0, 0, bytes_s},
        {"digest", 0, 0, hex},
    };
    wl_report("rpc", params, np, requests, seconds, extras, WL_NPARAMS(extras));
    return 0;
}
