/*
 * wmetrics.c — a worker's metrics in the Prometheus text format (version
 * 0.0.4); the names, labels and formulas are in docs/metrics.md.
 *
 * Per (queue, kind): the counters of wmetrics.h and a histogram of handler
 * durations, in a small table that grows as kinds appear (a worker runs a
 * few kinds; lookups are linear).  Per queue: depth and the age of the
 * oldest due job, read by the loop thread every few seconds with one
 * bounded statement and cached here; a scrape only copies numbers.
 *
 * The fleet-wide circuit breakers' states (skiplock_breaker_state{kind,
 * state}) are read with the queue gauges, by a second bounded statement,
 * and why available jobs wait (skiplock_jobs_waiting{queue, reason}) by a
 * third (skiplock.waits_summary, skiplock/deps.h).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "skiplock/deps.h"
#include "worker/wmetrics.h"

static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1, 2.5, 5, 10, 30, 60, 300};
#define NBOUNDS SKL_ARRAY_LEN(bounds)

typedef struct series {
	char *queue, *kind;
	uint64_t counts[WM_NCOUNTERS];
	uint64_t buckets[NBOUNDS];  /* non-cumulative; +Inf is the count */
	uint64_t dur_count;
	double dur_sum;
} series;

struct skl_wmetrics {
	pthread_mutex_t mu;
	series *s;
	size_t ns, caps;
	skl_wm_queue *q;
	size_t nq;
	skl_wm_queue *b;            /* breakers: .queue is the kind, .depth the state */
	size_t nb;
	skl_wait_count *w;          /* why available jobs wait, per queue and reason */
	size_t nw;
	int64_t q_at_ms;            /* when the queue gauges were read; 0: never */
	uint64_t leases_held, reconnects, indeterminate;
	uint64_t claims, empty_claims, notifications;
};

skl_wmetrics *skl__wm_new(void)
{
	skl_wmetrics *m = calloc(1, sizeof(*m));
	if (m)
		pthread_mutex_init(&m->mu, NULL);
	return m;
}

static void free_queues(skl_wm_queue *q, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(q[i].queue);
	free(q);
}

void skl__wm_free(skl_wmetrics *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->ns; i++) {
		free(m->s[i].queue);
		free(m->s[i].kind);
	}
	free(m->s);
	free_queues(m->q, m->nq);
	free_queues(m->b, m->nb);
	skl_wait_counts_free(m->w, m->nw);
	pthread_mutex_destroy(&m->mu);
	free(m);
}

/* The series of (queue, kind), created on first use; NULL when out of
 * memory (the sample is dropped).  Called with m->mu held. */
static series *find(skl_wmetrics *m, const char *queue, const char *kind)
{
	for (size_t i = 0; i < m->ns; i++)
		if (strcmp(m->s[i].queue, queue) == 0 && strcmp(m->s[i].kind, kind) == 0)
			return &m->s[i];
	if (m->ns == m->caps) {
		size_t cap = m->caps ? m->caps * 2 : 8;
		series *s = realloc(m->s, cap * sizeof(*s));
		if (s == NULL)
			return NULL;
		m->s = s;
		m->caps = cap;
	}
	series *s = &m->s[m->ns];
	*s = (series){.queue = strdup(queue), .kind = strdup(kind)};
	if (s->queue == NULL || s->kind == NULL) {
		free(s->queue);
		free(s->kind);
		return NULL;
	}
	m->ns++;
	return s;
}

void skl__wm_count(skl_wmetrics *m, const char *queue, const char *kind, skl_wm_counter c,
                   uint64_t n)
{
	if (m == NULL || n == 0)
		return;
	pthread_mutex_lock(&m->mu);
	series *s = find(m, queue, kind);
	if (s)
		s->counts[c] += n;
	pthread_mutex_unlock(&m->mu);
}

void skl__wm_duration(skl_wmetrics *m, const char *queue, const char *kind, double seconds)
{
	if (m == NULL)
		return;
	pthread_mutex_lock(&m->mu);
	series *s = find(m, queue, kind);
	if (s) {
		size_t b = 0;
		while (b < NBOUNDS && seconds > bounds[b])
			b++;
		if (b < NBOUNDS)
			s->buckets[b]++;
		s->dur_count++;
		s->dur_sum += seconds;
	}
	pthread_mutex_unlock(&m->mu);
}

void skl__wm_set_queues(skl_wmetrics *m, skl_wm_queue *rows, size_t n)
{
	pthread_mutex_lock(&m->mu);
	skl_wm_queue *old = m->q;
	size_t nold = m->nq;
	m->q = rows;
	m->nq = n;
	m->q_at_ms = skl__now_ms();
	pthread_mutex_unlock(&m->mu);
	free_queues(old, nold);
}

void skl__wm_set_scalars(skl_wmetrics *m, uint64_t leases_held, uint64_t reconnects,
                         uint64_t indeterminate)
{
	pthread_mutex_lock(&m->mu);
	m->leases_held = leases_held;
	m->reconnects = reconnects;
	m->indeterminate = indeterminate;
	pthread_mutex_unlock(&m->mu);
}

void skl__wm_set_wakeups(skl_wmetrics *m, uint64_t claims, uint64_t empty_claims,
                         uint64_t notifications)
{
	pthread_mutex_lock(&m->mu);
	m->claims = claims;
	m->empty_claims = empty_claims;
	m->notifications = notifications;
	pthread_mutex_unlock(&m->mu);
}

/* ---- queue gauges: one bounded statement ---- */

/* Every queue that has jobs, found by a loose scan of the index on
 * (queue, kind, state), or the worker's own queues; for each, at most
 * SKL_WM_DEPTH_CAP due available jobs are counted.  $1: the cap,
 * $2: the queues or NULL. */
static const char *const queues_sql =
	"WITH RECURSIVE q(queue) AS ("
	"  (SELECT queue FROM skiplock.jobs ORDER BY queue LIMIT 1)"
	"  UNION ALL"
	"  SELECT (SELECT j.queue FROM skiplock.jobs j WHERE j.queue > q.queue"
	"           ORDER BY j.queue LIMIT 1) FROM q WHERE q.queue IS NOT NULL),"
	" names AS ("
	"  SELECT queue FROM q WHERE queue IS NOT NULL AND $2::text[] IS NULL"
	"  UNION SELECT unnest($2::text[]))"
	" SELECT n.queue, d.depth, coalesce(d.age, 0)"
	"   FROM (SELECT queue FROM names ORDER BY queue LIMIT 1000) n CROSS JOIN LATERAL ("
	"     SELECT count(*) AS depth,"
	"            extract(epoch FROM now() - min(b.run_at))::float8 AS age"
	"       FROM (SELECT j.run_at FROM skiplock.jobs j"
	"              WHERE j.queue = n.queue AND j.state = 'available' AND j.run_at <= now()"
	"              LIMIT $1) b) d";

static skl_wm_queue *queue_rows(PGresult *res, size_t *n)
{
	*n = (size_t)PQntuples(res);
	skl_wm_queue *rows = calloc(*n ? *n : 1, sizeof(*rows));
	for (size_t i = 0; rows && i < *n; i++) {
		rows[i].queue = strdup(PQgetvalue(res, (int)i, 0));
		rows[i].depth = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
		rows[i].oldest_s = strtod(PQgetvalue(res, (int)i, 2), NULL);
		if (rows[i].queue == NULL) {
			free_queues(rows, i);
			return NULL;
		}
	}
	return rows;
}

/* The breakers' states, as rows of (kind, state index, 0). */
static const char *const breakers_sql =
	"SELECT kind, CASE state WHEN 'closed' THEN 0 WHEN 'half_open' THEN 1 ELSE 2 END, 0"
	"  FROM skiplock.breakers ORDER BY kind LIMIT 1000";

/* Runs one gauge statement: a single attempt, bounded (cached gauges are
 * not worth a wait).  *rows NULL and SKL_NOMEM when out of memory. */
static skl_rc gauge_rows(skl_client *c, skl_stmt *s, skl_wm_queue **rows, size_t *n,
                         skl_error *err)
{
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1, .statement_timeout_ms = 2000};
	int keep = c->retry_max_ms;
	c->retry_max_ms = 0;
	skl_rc rc = skl__run_stmt(c, &o, s, err);
	c->retry_max_ms = keep;
	if (rc != SKL_OK)
		return rc;
	*rows = queue_rows(s->res, n);
	PQclear(s->res);
	return *rows ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory");
}

static skl_rc refresh_breakers(skl_wmetrics *m, skl_client *c, skl_error *err)
{
	skl_stmt s = {.sql = breakers_sql};
	skl_wm_queue *rows;
	size_t n;
	skl_rc rc = gauge_rows(c, &s, &rows, &n, err);
	if (rc != SKL_OK)
		return rc;
	pthread_mutex_lock(&m->mu);
	skl_wm_queue *old = m->b;
	size_t nold = m->nb;
	m->b = rows;
	m->nb = n;
	pthread_mutex_unlock(&m->mu);
	free_queues(old, nold);
	return SKL_OK;
}

/* Why the queues' available jobs wait: one bounded read, like the others. */
static skl_rc refresh_waits(skl_wmetrics *m, skl_client *c, const char *const *queues,
                            size_t nqueues, skl_error *err)
{
	skl_wait_count *rows;
	size_t n;
	int keep = c->retry_max_ms;
	c->retry_max_ms = 0;
	skl_rc rc = skl_waits_count(c, queues, nqueues, SKL_WM_DEPTH_CAP, &rows, &n, err);
	c->retry_max_ms = keep;
	if (rc != SKL_OK)
		return rc;
	pthread_mutex_lock(&m->mu);
	skl_wait_count *old = m->w;
	size_t nold = m->nw;
	m->w = rows;
	m->nw = n;
	pthread_mutex_unlock(&m->mu);
	skl_wait_counts_free(old, nold);
	return SKL_OK;
}

skl_rc skl__wm_refresh(skl_wmetrics *m, skl_client *c, const char *const *queues,
                       size_t nqueues, skl_error *err)
{
	skl_buf arr = {0};
	if (nqueues > 0) {
		skl_buf_adds(&arr, "{");
		for (size_t i = 0; i < nqueues; i++) {
			if (i)
				skl_buf_adds(&arr, ",");
			skl_buf_array_elem(&arr, queues[i]);
		}
		skl_buf_adds(&arr, "}");
		if (skl_buf_failed(&arr)) {
			skl_buf_free(&arr);
			return skl__seterr(err, SKL_NOMEM, "out of memory");
		}
	}
	char cap[16];
	snprintf(cap, sizeof(cap), "%d", SKL_WM_DEPTH_CAP);
	skl_stmt s = {.sql = queues_sql, .nparams = 2,
	              .params = {cap, nqueues ? skl_buf_str(&arr) : NULL}};
	skl_wm_queue *rows;
	size_t n;
	skl_rc rc = gauge_rows(c, &s, &rows, &n, err);
	skl_buf_free(&arr);
	if (rc != SKL_OK)
		return rc;
	skl__wm_set_queues(m, rows, n);
	rc = refresh_breakers(m, c, err);
	return rc == SKL_OK ? refresh_waits(m, c, queues, nqueues, err) : rc;
}

/* ---- the text exposition ---- */

/* A label value: backslash, double quote and newline escaped. */
static void label(skl_buf *b, const char *name, const char *value)
{
	skl_buf_printf(b, "%s=\"", name);
	for (const char *p = value; *p; p++) {
		if (*p == '\\' || *p == '"')
			skl_buf_printf(b, "\\%c", *p);
		else if (*p == '\n')
			skl_buf_adds(b, "\\n");
		else
			skl_buf_add(b, p, 1);
	}
	skl_buf_adds(b, "\"");
}

static void head(skl_buf *b, const char *name, const char *type, const char *help)
{
	skl_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void qk(skl_buf *b, const char *name, const series *s)
{
	skl_buf_printf(b, "%s{", name);
	label(b, "queue", s->queue);
	skl_buf_adds(b, ",");
	label(b, "kind", s->kind);
}

static const struct {
	const char *name, *help;
} counters[WM_NCOUNTERS] = {
	[WM_CLAIMED] = {"skiplock_jobs_claimed_total", "Jobs this worker claimed."},
	[WM_COMPLETED] = {"skiplock_jobs_completed_total",
	                  "Completions this worker recorded and the database accepted."},
	[WM_FAILED] = {"skiplock_jobs_failed_total",
	               "Failed attempts of this worker's handlers whose outcome was accepted "
	               "(retried plus discarded by the handler's outcome)."},
	[WM_RETRIED] = {"skiplock_jobs_retried_total",
	                "Failed attempts accepted and scheduled for another try."},
	[WM_DISCARDED] = {"skiplock_jobs_discarded_total",
	                  "Jobs this worker moved to discarded (handler outcome, last attempt, "
	                  "or rescue on the last attempt)."},
	[WM_RESCUED] = {"skiplock_jobs_rescued_total",
	                "Expired leases this worker ended (job back to available, or discarded "
	                "on its last attempt)."},
	[WM_FENCED] = {"skiplock_jobs_fenced_out_total",
	               "Outcomes of this worker refused because the job's lease was lost."},
};

static void render_counters(skl_buf *b, const skl_wmetrics *m)
{
	for (int c = 0; c < WM_NCOUNTERS; c++) {
		head(b, counters[c].name, "counter", counters[c].help);
		for (size_t i = 0; i < m->ns; i++) {
			qk(b, counters[c].name, &m->s[i]);
			skl_buf_printf(b, "} %" PRIu64 "\n", m->s[i].counts[c]);
		}
	}
}

static void render_histogram(skl_buf *b, const skl_wmetrics *m)
{
	static const char name[] = "skiplock_job_duration_seconds";
	head(b, name, "histogram", "Time a handler ran, from its start to its outcome.");
	for (size_t i = 0; i < m->ns; i++) {
		const series *s = &m->s[i];
		uint64_t cum = 0;
		for (size_t k = 0; k <= NBOUNDS; k++) {
			cum += k < NBOUNDS ? s->buckets[k] : 0;
			qk(b, "skiplock_job_duration_seconds_bucket", s);
			if (k < NBOUNDS)
				skl_buf_printf(b, ",le=\"%g\"} %" PRIu64 "\n", bounds[k], cum);
			else
				skl_buf_printf(b, ",le=\"+Inf\"} %" PRIu64 "\n", s->dur_count);
		}
		qk(b, "skiplock_job_duration_seconds_sum", s);
		skl_buf_printf(b, "} %.9g\n", s->dur_sum);
		qk(b, "skiplock_job_duration_seconds_count", s);
		skl_buf_printf(b, "} %" PRIu64 "\n", s->dur_count);
	}
}

static void render_breakers(skl_buf *b, const skl_wmetrics *m)
{
	static const char *const states[] = {"closed", "half_open", "open"};
	if (m->nb == 0)
		return;
	head(b, "skiplock_breaker_state", "gauge",
	     "Fleet-wide circuit breaker of a kind: 1 for its current state, 0 for the others.");
	for (size_t i = 0; i < m->nb; i++)
		for (int st = 0; st < 3; st++) {
			skl_buf_adds(b, "skiplock_breaker_state{");
			label(b, "kind", m->b[i].queue);
			skl_buf_adds(b, ",");
			label(b, "state", states[st]);
			skl_buf_printf(b, "} %d\n", m->b[i].depth == st);
		}
}

/* Every reason for each queue the summary named, 0 for the absent ones,
 * so a reason that stops holding jobs reads 0 rather than vanishing. */
static void render_waits(skl_buf *b, const skl_wmetrics *m)
{
	static const char *const reasons[] = {"dependency", "scheduled", "paused",
	                                      "breaker",    "limit",     "worker"};
	if (m->nw == 0)
		return;
	head(b, "skiplock_jobs_waiting", "gauge",
	     "Available jobs not running, per queue and what holds them (counted up to 10000).");
	for (size_t i = 0; i < m->nw; i++) {
		if (i > 0 && strcmp(m->w[i].queue, m->w[i - 1].queue) == 0)
			continue; /* rows come in queue order: one block per queue */
		for (size_t r = 0; r < SKL_ARRAY_LEN(reasons); r++) {
			int64_t jobs = 0;
			for (size_t k = i; k < m->nw && strcmp(m->w[k].queue, m->w[i].queue) == 0; k++)
				if (strcmp(m->w[k].reason, reasons[r]) == 0)
					jobs = m->w[k].jobs;
			skl_buf_adds(b, "skiplock_jobs_waiting{");
			label(b, "queue", m->w[i].queue);
			skl_buf_adds(b, ",");
			label(b, "reason", reasons[r]);
			skl_buf_printf(b, "} %" PRId64 "\n", jobs);
		}
	}
}

/* The process's own gauge and counters. */
static void render_process(skl_buf *b, const skl_wmetrics *m)
{
	head(b, "skiplock_worker_leases_held", "gauge",
	     "Job leases this worker holds now (claimed, outcome not yet recorded).");
	skl_buf_printf(b, "skiplock_worker_leases_held %" PRIu64 "\n", m->leases_held);
	head(b, "skiplock_db_reconnects_total", "counter",
	     "Connections the worker opened after its first one.");
	skl_buf_printf(b, "skiplock_db_reconnects_total %" PRIu64 "\n", m->reconnects);
	head(b, "skiplock_db_indeterminate_total", "counter",
	     "Database calls whose outcome was unknown (the connection died after a write "
	     "or COMMIT was sent).");
	skl_buf_printf(b, "skiplock_db_indeterminate_total %" PRIu64 "\n", m->indeterminate);
	head(b, "skiplock_worker_claims_total", "counter",
	     "Claim statements this worker sent, whatever they returned.");
	skl_buf_printf(b, "skiplock_worker_claims_total %" PRIu64 "\n", m->claims);
	head(b, "skiplock_worker_empty_claims_total", "counter",
	     "Claim statements of this worker that returned no job.");
	skl_buf_printf(b, "skiplock_worker_empty_claims_total %" PRIu64 "\n", m->empty_claims);
	head(b, "skiplock_worker_notifications_total", "counter",
	     "Wake-up notifications (NOTIFY skiplock_jobs) this worker read; hints, coalesced.");
	skl_buf_printf(b, "skiplock_worker_notifications_total %" PRIu64 "\n", m->notifications);
}

static void render_gauges(skl_buf *b, const skl_wmetrics *m)
{
	render_process(b, m);
	if (m->q_at_ms == 0)
		return; /* queue gauges off, or not read yet */
	head(b, "skiplock_queue_depth", "gauge",
	     "Due available jobs per queue (counted up to 10000).");
	for (size_t i = 0; i < m->nq; i++) {
		skl_buf_adds(b, "skiplock_queue_depth{");
		label(b, "queue", m->q[i].queue);
		skl_buf_printf(b, "} %" PRId64 "\n", m->q[i].depth);
	}
	head(b, "skiplock_queue_oldest_available_age_seconds", "gauge",
	     "Age of the oldest due available job per queue; 0 when none.");
	for (size_t i = 0; i < m->nq; i++) {
		skl_buf_adds(b, "skiplock_queue_oldest_available_age_seconds{");
		label(b, "queue", m->q[i].queue);
		skl_buf_printf(b, "} %.3f\n", m->q[i].oldest_s);
	}
	render_breakers(b, m);
	render_waits(b, m);
	head(b, "skiplock_queue_stats_age_seconds", "gauge",
	     "Seconds since the queue gauges were read from the database.");
	skl_buf_printf(b, "skiplock_queue_stats_age_seconds %.3f\n",
	               (double)(skl__now_ms() - m->q_at_ms) / 1000.0);
}

char *skl__wm_render(skl_wmetrics *m)
{
	skl_buf b;
	skl_buf_init(&b, 0);
	pthread_mutex_lock(&m->mu);
	render_counters(&b, m);
	render_histogram(&b, m);
	render_gauges(&b, m);
	pthread_mutex_unlock(&m->mu);
	return skl_buf_take(&b);
}
