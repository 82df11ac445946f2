/*
 * depserver.h — a tiny HTTP/1.0 server in the test process standing in for
 * a job's external dependency, and the client its handlers use.
 *
 * The server answers "GET /ATTEMPT" with 503 while it is down and 200
 * otherwise, and records when each request arrived (ms since the first
 * one) with the attempt number the handler sent.  Listen first, fork the
 * worker processes, then start the thread: forked children must not
 * inherit a running thread.
 */
#ifndef SKL_DEPSERVER_H
#define SKL_DEPSERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct dep_request {
	int64_t t_ms;       /* since the first request */
	int attempt;
	bool ok;
} dep_request;

typedef struct depserver {
	int fd, port;
	pthread_t thread;
	bool started;
	atomic_int stop;
	atomic_int failing;       /* 1: every request gets 503 */
	int64_t down_for_ms;      /* > 0: 503 for this long after the first request */
	atomic_int slow_successes; /* the next N successes wait slow_ms first */
	int slow_ms;
	pthread_mutex_t mu;
	int64_t t0;               /* monotonic ms of the first request; 0 before */
	dep_request *reqs;
	int n, cap;
} depserver;

/* Binds 127.0.0.1 on a free port; fails the case on error. */
void dep_listen(depserver *d);
/* Starts answering (a thread). */
void dep_start(depserver *d);
/* Stops the thread, closes the socket, frees the records. */
void dep_stop(depserver *d);
/* Copies the records under the lock; returns how many (free *out). */
int dep_snapshot(depserver *d, dep_request **out);

/* In a handler: GET /ATTEMPT from 127.0.0.1:port.  The HTTP status, or -1
 * when the connection failed. */
int dep_call(int port, int attempt);

#endif
