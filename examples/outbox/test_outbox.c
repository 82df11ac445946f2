/*
 * Test of the outbox example, direct and through PgBouncer.
 *
 * Two posts are published by outbox_publish (schema.sql): each insert and
 * its four delivery jobs commit together.  A `skiplock worker` with one
 * --webhook per channel delivers them to outbox-channels ($SKL_OUTBOX_
 * CHANNELS), whose vk endpoint is down for its first 3 requests (503,
 * Retry-After: 1).  Expected: telegraph and both Telegram channels are
 * delivered on the first attempt and before vk; vk alone retries and then
 * is delivered; every channel receives each post exactly once; publishing
 * the same slug again enqueues nothing, and a rolled-back publish leaves
 * neither post nor job.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <curl/curl.h>

#include "itest.h"
#include "skiplock.h"

static const char *const channels[] = {"telegraph", "tg_ru", "tg_en", "vk"};

static pid_t spawn(const char *const *argv, int *out_fd)
{
	int out[2];
	CHECK(pipe(out) == 0);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed case */
		if (out_fd)
			dup2(out[1], 1);
		close(out[0]);
		close(out[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	if (out_fd)
		*out_fd = out[0];
	else
		close(out[0]);
	return pid;
}

/* Starts outbox-channels with vk down for 3 requests; returns its port. */
static int start_channels(pid_t *pid)
{
	const char *bin = getenv("SKL_OUTBOX_CHANNELS");
	CHECK(bin != NULL);
	const char *argv[] = {bin, "--listen", "127.0.0.1:0", "--fail", "vk=3", NULL};
	int fd;
	*pid = spawn(argv, &fd);
	char line[128] = "";
	size_t n = 0;
	int64_t end = itest_now_ms() + 30000;
	while (strchr(line, '\n') == NULL && n + 1 < sizeof(line)) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (itest_now_ms() > end || poll(&p, 1, 1000) < 0)
			itest_fail(__FILE__, __LINE__, "outbox-channels did not start");
		ssize_t got = p.revents ? read(fd, line + n, sizeof(line) - 1 - n) : 0;
		if (p.revents && got <= 0)
			itest_fail(__FILE__, __LINE__, "outbox-channels exited: \"%s\"", line);
		n += got > 0 ? (size_t)got : 0;
		line[n] = '\0';
	}
	int port = 0;
	CHECK(sscanf(line, "listening on http://127.0.0.1:%d", &port) == 1 && port > 0);
	/* later lines (one per request) are drained into /dev/null by a child */
	if (fork() == 0) {
		char buf[4096];
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		_exit(0);
	}
	close(fd);
	return port;
}

static pid_t start_worker(itest_ctx *t, int port)
{
	static char hooks[4][160];
	const char *argv[32] = {itest_bin(), "worker", "--url", t->url, "--queue", "outbox",
	                        "--concurrency", "4", "--poll", "50ms", "--poll-max", "200ms",
	                        "--backoff-base", "200ms", "--backoff-cap", "5s",
	                        "--webhook-timeout", "10s", "--no-cron", "--log-level", "info"};
	int n = 21;
	for (int i = 0; i < 4; i++) {
		snprintf(hooks[i], sizeof(hooks[i]), "outbox.%s=http://127.0.0.1:%d/%s", channels[i],
		         port, channels[i]);
		argv[n++] = "--webhook";
		argv[n++] = hooks[i];
	}
	return spawn(argv, NULL);
}

static int stop(pid_t pid)
{
	kill(pid, SIGTERM);
	int status = 0;
	int64_t end = itest_now_ms() + 30000;
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (itest_now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			itest_fail(__FILE__, __LINE__, "process %d did not stop on SIGTERM", (int)pid);
		}
		usleep(50000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	char *buf = ctx;
	size_t have = strlen(buf), take = size * n;
	if (have + take > 2047)
		take = 2047 - have;
	memcpy(buf + have, p, take);
	buf[have + take] = '\0';
	return size * n;
}

static void get_stats(int port, char *buf)
{
	char url[64];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/stats", port);
	buf[0] = '\0';
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, buf);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	CHECK_EQ(curl_easy_perform(c), CURLE_OK);
	curl_easy_cleanup(c);
}

static void install(itest_ctx *t)
{
	CHECK_EQ(itest_sh("%s init --url '%s' >/dev/null", itest_bin(), t->url), 0);
	char path[1024];
	snprintf(path, sizeof(path), "%s/examples/outbox/schema.sql", getenv("SKL_SOURCE_DIR"));
	FILE *f = fopen(path, "r");
	CHECK(f != NULL);
	static char sql[16384];
	size_t n = fread(sql, 1, sizeof(sql) - 1, f);
	fclose(f);
	sql[n] = '\0';
	PQclear(itest_sql(t->admin, "%s", sql));
}

static void wait_all_done(itest_ctx *t, int timeout_s)
{
	int64_t end = itest_now_ms() + timeout_s * 1000LL;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state <> 'completed'")) {
		if (itest_now_ms() > end)
			itest_fail(__FILE__, __LINE__, "deliveries not done after %d s: %s", timeout_s,
			           itest_text(t->admin, "SELECT string_agg(slug || '/' || channel || ':' || "
			                                "state || ':' || attempt, ' ') FROM outbox_status"));
		usleep(100000);
	}
}

static void failing_channel_retries_alone(itest_ctx *t)
{
	install(t);
	PGconn *app = itest_connect(t->url, "outbox-app"); /* pooled in pooled mode */
	PQclear(itest_sql(app, "SELECT outbox_publish('2026-11-29-ru', 'Пост', 'текст')"));
	PQclear(itest_sql(app, "SELECT outbox_publish('2026-11-29-en', 'Post', 'text')"));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 8);
	pid_t server;
	int port = start_channels(&server);
	pid_t worker = start_worker(t, port);
	wait_all_done(t, 40);
	CHECK_EQ(stop(worker), 0);

	/* the healthy channels: one attempt each, all before vk finished */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM outbox_status WHERE channel <> 'vk' "
	                             "AND state = 'completed' AND attempt = 1"), 6);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM outbox_status o JOIN outbox_status v "
	                             "USING (post_id) WHERE o.channel <> 'vk' AND v.channel = "
	                             "'vk' AND o.finished_at >= v.finished_at"), 0);
	/* vk: down for 3 requests, retried alone, then delivered */
	CHECK_EQ(itest_int(t->admin, "SELECT sum(attempt) FROM outbox_status WHERE channel = "
	                             "'vk' AND state = 'completed'"), 5);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs, jsonb_array_elements("
	                             "errors) e WHERE kind = 'outbox.vk' AND e->>'error' LIKE "
	                             "'HTTP 503 (Retry-After: 1)%%'"), 3);
	char stats[2048];
	get_stats(port, stats);
	printf("channel stats: %s\n", stats);
	CHECK_STR(stats, "{\"telegraph\": {\"delivered\": 2, \"refused\": 0, \"duplicates\": 0}, "
	                 "\"tg_ru\": {\"delivered\": 2, \"refused\": 0, \"duplicates\": 0}, "
	                 "\"tg_en\": {\"delivered\": 2, \"refused\": 0, \"duplicates\": 0}, "
	                 "\"vk\": {\"delivered\": 2, \"refused\": 3, \"duplicates\": 0}}");
	/* the two telegraph posts run at once: either may be delivered first */
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(result::text, ' ' ORDER BY result->>'delivery')"
	                               " FROM skiplock.all_jobs WHERE kind = 'outbox.telegraph'"),
	          "{\"channel\": \"telegraph\", \"delivery\": 1} "
	          "{\"channel\": \"telegraph\", \"delivery\": 2}");

	/* publishing again enqueues nothing; a rolled-back publish leaves nothing */
	CHECK_STR(itest_text(app, "SELECT outbox_publish('2026-11-29-ru', 'Пост', 'текст')"), "");
	PQclear(itest_sql(app, "BEGIN"));
	PQclear(itest_sql(app, "SELECT outbox_publish('rolled-back', 'x', 'y')"));
	PQclear(itest_sql(app, "ROLLBACK"));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 8);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM posts"), 2);
	PQfinish(app);
	CHECK_EQ(stop(server), 0);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"failing_channel_retries_alone", failing_channel_retries_alone, 90},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
