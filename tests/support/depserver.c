/*
 * depserver.c — the stand-in HTTP dependency of the retry tests
 * (depserver.h).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "depserver.h"
#include "itest.h"

void dep_listen(depserver *d)
{
	memset(d, 0, sizeof(*d));
	pthread_mutex_init(&d->mu, NULL);
	d->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(d->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	if (d->fd < 0 || bind(d->fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    listen(d->fd, 1024) != 0 || getsockname(d->fd, (struct sockaddr *)&a, &len) != 0)
		itest_fail(__FILE__, __LINE__, "cannot listen on 127.0.0.1");
	d->port = ntohs(a.sin_port);
}

static void set_timeout(int fd, int ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Records one request; returns whether it succeeds. */
static bool record(depserver *d, int attempt)
{
	int64_t now = itest_now_ms();
	pthread_mutex_lock(&d->mu);
	if (d->t0 == 0)
		d->t0 = now;
	int64_t t = now - d->t0;
	bool ok = !atomic_load(&d->failing) && !(d->down_for_ms > 0 && t < d->down_for_ms);
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 1024;
		d->reqs = realloc(d->reqs, (size_t)d->cap * sizeof(dep_request));
	}
	if (d->reqs)
		d->reqs[d->n++] = (dep_request){.t_ms = t, .attempt = attempt, .ok = ok};
	pthread_mutex_unlock(&d->mu);
	return ok;
}

static void serve(depserver *d, int c)
{
	set_timeout(c, 2000);
	char buf[512];
	size_t got = 0;
	while (got < sizeof(buf) - 1) {
		ssize_t r = read(c, buf + got, sizeof(buf) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		buf[got] = '\0';
		if (strstr(buf, "\r\n\r\n"))
			break;
	}
	buf[got] = '\0';
	int attempt = 0;
	if (sscanf(buf, "GET /%d ", &attempt) != 1)
		return;
	bool ok = record(d, attempt);
	if (ok && atomic_load(&d->slow_successes) > 0) {
		atomic_fetch_sub(&d->slow_successes, 1);
		usleep((useconds_t)d->slow_ms * 1000);
	}
	const char *resp = ok ? "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"
	                      : "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n";
	ssize_t w = write(c, resp, strlen(resp));
	(void)w;
}

static void *loop(void *arg)
{
	depserver *d = arg;
	while (!atomic_load(&d->stop)) {
		struct pollfd p = {.fd = d->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int c = accept4(d->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		serve(d, c);
		close(c);
	}
	return NULL;
}

void dep_start(depserver *d)
{
	if (pthread_create(&d->thread, NULL, loop, d) != 0)
		itest_fail(__FILE__, __LINE__, "cannot start the dependency's thread");
	d->started = true;
}

void dep_stop(depserver *d)
{
	atomic_store(&d->stop, 1);
	if (d->started)
		pthread_join(d->thread, NULL);
	close(d->fd);
	free(d->reqs);
	pthread_mutex_destroy(&d->mu);
}

int dep_snapshot(depserver *d, dep_request **out)
{
	pthread_mutex_lock(&d->mu);
	int n = d->n;
	*out = malloc((size_t)(n ? n : 1) * sizeof(dep_request));
	if (*out)
		memcpy(*out, d->reqs, (size_t)n * sizeof(dep_request));
	pthread_mutex_unlock(&d->mu);
	return *out ? n : 0;
}

int dep_call(int port, int attempt)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	set_timeout(fd, 10000);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	char buf[128];
	int status = -1;
	int n = snprintf(buf, sizeof(buf), "GET /%d HTTP/1.0\r\n\r\n", attempt);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && write(fd, buf, (size_t)n) == n) {
		ssize_t r = read(fd, buf, sizeof(buf) - 1);
		if (r > 0) {
			buf[r] = '\0';
			if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
				status = -1;
		}
	}
	close(fd);
	return status;
}
