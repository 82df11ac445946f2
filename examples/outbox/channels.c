/*
 * channels.c — a stand-in for the outside services a post is delivered to
 * (Telegraph, two Telegram channels, VK), for trying the outbox example
 * and for its test.  Not part of the library.
 *
 * Usage: outbox-channels [--listen HOST:PORT] [--fail CHANNEL=N]…
 *
 * POST /CHANNEL with a JSON body is a delivery.  A channel given --fail
 * CHANNEL=N answers its first N requests with 503 and Retry-After: 1 (the
 * service is down for a while); after that, every request is accepted.
 * Deliveries are deduplicated by their Idempotency-Key: a key seen before
 * is answered 200 again without counting a second delivery.  GET /stats
 * answers {"CHANNEL": {"delivered": n, "refused": n, "duplicates": n}, …}.
 *
 * Prints "listening on http://HOST:PORT" once it accepts requests (port 0
 * picks a free port) and one line per request; SIGTERM or SIGINT stops it.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#define MAX_CHANNELS 8
#define MAX_KEYS 4096

typedef struct channel {
	char name[32];
	int fail_first;   /* requests still to refuse */
	int delivered, refused, duplicates;
} channel;

static channel channels[MAX_CHANNELS] = {
	{.name = "telegraph"}, {.name = "tg_ru"}, {.name = "tg_en"}, {.name = "vk"}};
static int nchannels = 4;
static char *keys[MAX_KEYS];
static int nkeys;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "outbox-channels: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static channel *find(const char *name)
{
	for (int i = 0; i < nchannels; i++)
		if (strcmp(channels[i].name, name) == 0)
			return &channels[i];
	return NULL;
}

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *body,
                            bool retry_after)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (retry_after)
		MHD_add_response_header(r, "Retry-After", "1");
	enum MHD_Result ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result stats(struct MHD_Connection *c)
{
	char body[1024] = "{";
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nchannels; i++) {
		size_t n = strlen(body);
		snprintf(body + n, sizeof(body) - n,
		         "%s\"%s\": {\"delivered\": %d, \"refused\": %d, \"duplicates\": %d}",
		         i ? ", " : "", channels[i].name, channels[i].delivered, channels[i].refused,
		         channels[i].duplicates);
	}
	pthread_mutex_unlock(&mu);
	strncat(body, "}", sizeof(body) - strlen(body) - 1);
	return respond(c, 200, body, false);
}

static bool seen_before(const char *key)
{
	for (int i = 0; i < nkeys; i++)
		if (strcmp(keys[i], key) == 0)
			return true;
	if (nkeys < MAX_KEYS)
		keys[nkeys++] = strdup(key);
	return false;
}

/* One delivery to ch, under mu: refuse while failing, else accept once. */
static enum MHD_Result deliver(struct MHD_Connection *c, channel *ch, const char *key)
{
	const char *who = key ? key : "(no key)";
	if (ch->fail_first > 0) {
		ch->fail_first--;
		ch->refused++;
		printf("%s: 503 for %s (down for %d more)\n", ch->name, who, ch->fail_first);
		return respond(c, 503, "{\"error\": \"temporarily unavailable\"}", true);
	}
	if (key == NULL)
		return respond(c, 400, "{\"error\": \"Idempotency-Key is required\"}", false);
	bool dup = seen_before(key);
	dup ? ch->duplicates++ : ch->delivered++;
	printf("%s: %s %s\n", ch->name, dup ? "duplicate of" : "delivered", who);
	char body[160];
	snprintf(body, sizeof(body), "{\"channel\": \"%s\", \"delivery\": %d%s}", ch->name,
	         ch->delivered, dup ? ", \"duplicate\": true" : "");
	return respond(c, 200, body, false);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_len, void **ctx)
{
	if (*ctx == NULL) {
		*ctx = c; /* first call: headers only */
		return MHD_YES;
	}
	if (*data_len > 0) { /* the body is not needed: only counted */
		*data_len = 0;
		return MHD_YES;
	}
	if (strcmp(method, "GET") == 0 && strcmp(url, "/stats") == 0)
		return stats(c);
	channel *ch = url[0] == '/' ? find(url + 1) : NULL;
	if (ch == NULL || strcmp(method, "POST") != 0)
		return respond(c, 404, "{\"error\": \"no such channel\"}", false);
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
	pthread_mutex_lock(&mu);
	enum MHD_Result ok = deliver(c, ch, key);
	fflush(stdout);
	pthread_mutex_unlock(&mu);
	return ok;
}

static void parse_fail(const char *arg)
{
	const char *eq = strchr(arg, '=');
	char name[32];
	if (eq == NULL || eq - arg >= (long)sizeof(name) || atoi(eq + 1) < 0)
		die("--fail wants CHANNEL=N, got \"%s\"", arg);
	snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
	channel *ch = find(name);
	if (ch == NULL)
		die("--fail: unknown channel \"%s\" (telegraph, tg_ru, tg_en, vk)", name);
	ch->fail_first = atoi(eq + 1);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
	                                     {"fail", required_argument, NULL, 'f'}, {0}};
	char host[64] = "127.0.0.1";
	int port = 8080, ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *colon = ch == 'l' ? strrchr(optarg, ':') : NULL;
		if (ch == 'f') {
			parse_fail(optarg);
		} else if (ch == 'l' && colon && colon - optarg < (long)sizeof(host)) {
			snprintf(host, sizeof(host), "%.*s", (int)(colon - optarg), optarg);
			port = atoi(colon + 1);
		} else {
			die("usage: outbox-channels [--listen HOST:PORT] [--fail CHANNEL=N]...");
		}
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 || port < 0 || port > 65535)
		die("--listen: \"%s\" is not IPV4:PORT", host);
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
		on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_END);
	if (d == NULL)
		die("cannot listen on %s", host);
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	printf("listening on http://%s:%u\n", host, info ? info->port : 0);
	fflush(stdout);
	int sig = 0;
	sigwait(&stop, &sig);
	MHD_stop_daemon(d);
	for (int i = 0; i < nkeys; i++)
		free(keys[i]);
	return 0;
}
