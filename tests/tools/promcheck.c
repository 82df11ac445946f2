/*
 * promcheck — a strict parser of the Prometheus text exposition format
 * (version 0.0.4), for tests.
 *
 *   promcheck < scrape.txt
 *
 * Reads an exposition on stdin.  On success prints every sample as
 * "name{labels} value" (labels as written) and exits 0; on the first
 * violation prints "promcheck: line N: why" on stderr and exits 1.
 *
 * Checked, beyond the grammar (metric and label names, escapes in label
 * values, float values, optional integer timestamps, "\n" line ends):
 * every sample belongs to a family with one TYPE line, given before its
 * samples; HELP and TYPE at most once per family; a family's samples are
 * contiguous; no series appears twice; no label name repeats or starts
 * with "__"; counters are non-negative; a histogram has _bucket samples with
 * an "le" label, buckets per series are cumulative and end with le="+Inf"
 * equal to its _count.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXF 512
#define MAXS 8192

typedef struct family {
	char name[256];
	char type[16];
	int help, done;
} family;

static family fams[MAXF];
static int nfams, cur = -1, lineno;
static char *seen[MAXS];
static int nseen;

/* Histogram state of the series being read (labels without le). */
static char hist_key[1400];
static double hist_last, hist_inf = -1;

/* The first violation: "promcheck: line N: why" and exit 1. */
#define fail(...)                                                   \
	do {                                                            \
		fprintf(stderr, "promcheck: line %d: ", lineno);            \
		fprintf(stderr, __VA_ARGS__);                               \
		fputc('\n', stderr);                                        \
		exit(1);                                                    \
	} while (0)

static size_t name_len(const char *p, int metric)
{
	size_t n = 0;
	if (!(isalpha((unsigned char)p[0]) || p[0] == '_' || (metric && p[0] == ':')))
		return 0;
	while (isalnum((unsigned char)p[n]) || p[n] == '_' || (metric && p[n] == ':'))
		n++;
	return n;
}

static family *find(const char *name)
{
	for (int i = 0; i < nfams; i++)
		if (strcmp(fams[i].name, name) == 0)
			return &fams[i];
	return NULL;
}

static family *declare(const char *name)
{
	family *f = find(name);
	if (f)
		return f;
	if (nfams == MAXF)
		fail("more than %s families", "512");
	f = &fams[nfams++];
	snprintf(f->name, sizeof(f->name), "%s", name);
	return f;
}

static double parse_value(const char *s, char **end)
{
	if (strncmp(s, "+Inf", 4) == 0 || strncmp(s, "-Inf", 4) == 0 || strncmp(s, "NaN", 3) == 0) {
		*end = (char *)s + (s[0] == 'N' ? 3 : 4);
		return s[0] == 'N' ? NAN : s[0] == '-' ? -INFINITY : INFINITY;
	}
	if (!(isdigit((unsigned char)s[0]) || s[0] == '-' || s[0] == '+' || s[0] == '.'))
		fail("bad value \"%s\"", s);
	errno = 0;
	double v = strtod(s, end);
	if (*end == s || errno == ERANGE || isinf(v) || isnan(v))
		fail("bad value \"%s\"", s);
	return v;
}

static void comment(char *line)
{
	char kw[8], name[256];
	int off = 0;
	if (strncmp(line, "# HELP ", 7) != 0 && strncmp(line, "# TYPE ", 7) != 0)
		return; /* any other comment */
	if (sscanf(line, "# %7s %255s %n", kw, name, &off) < 2 || off == 0)
		fail("malformed %s", line);
	if (name_len(name, 1) != strlen(name))
		fail("bad metric name \"%s\"", name);
	family *f = declare(name);
	if (f->done)
		fail("HELP or TYPE of \"%s\" after its samples ended", name);
	if (strcmp(kw, "HELP") == 0) {
		if (f->help++)
			fail("second HELP for \"%s\"", name);
		return;
	}
	const char *t = line + off;
	if (f->type[0])
		fail("second TYPE for \"%s\"", name);
	if (strcmp(t, "counter") && strcmp(t, "gauge") && strcmp(t, "histogram") &&
	    strcmp(t, "summary") && strcmp(t, "untyped"))
		fail("unknown type \"%s\"", t);
	snprintf(f->type, sizeof(f->type), "%s", t);
}

/* Parses {a="x",b="y"} at *p into out (without braces) and le. */
static void labels(char **p, char *out, size_t cap, char *le, size_t lecap)
{
	char names[32][128];
	int n = 0;
	size_t o = 0;
	le[0] = '\0';
	(*p)++;
	while (**p != '}') {
		size_t l = name_len(*p, 0);
		if (l == 0 || l >= 128 || (*p)[l] != '=' || (*p)[l + 1] != '"')
			fail("bad label at \"%s\"", *p);
		if (strncmp(*p, "__", 2) == 0)
			fail("reserved label name at \"%s\"", *p);
		memcpy(names[n], *p, l);
		names[n][l] = '\0';
		for (int i = 0; i < n; i++)
			if (strcmp(names[i], names[n]) == 0)
				fail("label \"%s\" repeated", names[n]);
		int is_le = strcmp(names[n], "le") == 0;
		if (++n == 32)
			fail("too many labels at \"%s\"", *p);
		char *v = *p + l + 2, *q = v;
		for (; *q != '"'; q++) {
			if (*q == '\0')
				fail("unterminated label value at \"%s\"", v);
			if (*q == '\\' && (q[1] == '\\' || q[1] == '"' || q[1] == 'n'))
				q++;
			else if (*q == '\\')
				fail("bad escape in label value \"%s\"", v);
		}
		if (is_le)
			snprintf(le, lecap, "%.*s", (int)(q - v), v);
		else
			o += (size_t)snprintf(out + o, o < cap ? cap - o : 0, "%s%.*s", o ? "," : "",
			                      (int)(q - *p + 1), *p);
		*p = q + 1;
		if (**p == ',')
			(*p)++;
		else if (**p != '}')
			fail("expected , or } at \"%s\"", *p);
	}
	(*p)++;
}

/* The family of a sample name: itself, or for _bucket/_sum/_count the
 * histogram (or summary) it belongs to. */
static family *family_of(const char *name, const char **suffix)
{
	static const char *const sfx[] = {"_bucket", "_sum", "_count"};
	*suffix = "";
	for (int i = 0; i < 3; i++) {
		size_t nl = strlen(name), sl = strlen(sfx[i]);
		if (nl > sl && strcmp(name + nl - sl, sfx[i]) == 0) {
			char base[256];
			snprintf(base, sizeof(base), "%.*s", (int)(nl - sl), name);
			family *f = find(base);
			if (f && (strcmp(f->type, "histogram") == 0 || strcmp(f->type, "summary") == 0)) {
				*suffix = sfx[i];
				return f;
			}
		}
	}
	return find(name);
}

static void remember(const char *key)
{
	for (int i = 0; i < nseen; i++)
		if (strcmp(seen[i], key) == 0)
			fail("series %s appears twice", key);
	if (nseen == MAXS)
		fail("more than %s series", "8192");
	seen[nseen++] = strdup(key);
}

/* Bucket order and the +Inf bucket against _count, per series. */
static void histogram(const char *suffix, const char *key, const char *le, double v)
{
	if (strcmp(suffix, "_bucket") == 0) {
		if (le[0] == '\0')
			fail("bucket without le: %s", key);
		if (strcmp(hist_key, key) != 0) {
			if (hist_key[0] && hist_inf < 0)
				fail("histogram series %s has no le=\"+Inf\" bucket", hist_key);
			snprintf(hist_key, sizeof(hist_key), "%s", key);
			hist_last = 0;
			hist_inf = -1;
		} else if (hist_inf >= 0) {
			fail("bucket after le=\"+Inf\": %s", key);
		}
		if (v < hist_last)
			fail("buckets not cumulative at %s", key);
		hist_last = v;
		char *end;
		double bound = parse_value(le, &end);
		if (*end)
			fail("bad le \"%s\"", le);
		if (isinf(bound) && bound > 0)
			hist_inf = v;
		return;
	}
	if (le[0])
		fail("le label outside a bucket: %s", key);
	if (strcmp(suffix, "_count") == 0 && (strcmp(hist_key, key) != 0 || hist_inf != v))
		fail("_count does not match the le=\"+Inf\" bucket of %s", key);
}

static void sample(char *line)
{
	size_t l = name_len(line, 1);
	if (l == 0)
		fail("bad metric name at \"%s\"", line);
	char name[256], lab[1024] = "", le[64], key[1400];
	snprintf(name, sizeof(name), "%.*s", (int)l, line);
	char *p = line + l;
	if (*p == '{')
		labels(&p, lab, sizeof(lab), le, sizeof(le));
	else
		le[0] = '\0';
	if (*p != ' ')
		fail("expected a space before the value at \"%s\"", p);
	const char *suffix;
	family *f = family_of(name, &suffix);
	if (f == NULL || f->type[0] == '\0')
		fail("sample of \"%s\" without a TYPE line", name);
	if (f->done)
		fail("samples of \"%s\" are not contiguous", f->name);
	if (cur >= 0 && &fams[cur] != f)
		fams[cur].done = 1;
	cur = (int)(f - fams);
	char *end;
	double v = parse_value(p + 1, &end);
	if (*end == ' ') { /* a timestamp: an integer */
		char *t = end + 1;
		if (*t == '-')
			t++;
		if (*t == '\0' || strspn(t, "0123456789") != strlen(t))
			fail("bad timestamp \"%s\"", end + 1);
	} else if (*end != '\0') {
		fail("junk after the value: \"%s\"", end);
	}
	snprintf(key, sizeof(key), lab[0] ? "%s{%s}" : "%s", name, lab);
	if (strcmp(f->type, "histogram") == 0) {
		if (suffix[0] == '\0')
			fail("histogram sample %s is not _bucket, _sum or _count", name);
		char hkey[1400];
		snprintf(hkey, sizeof(hkey), "%s{%s}", f->name, lab);
		histogram(suffix, hkey, le, v);
		snprintf(key, sizeof(key), "%s{%s%sle=\"%s\"}", name, lab, lab[0] ? "," : "", le);
		if (le[0] == '\0')
			snprintf(key, sizeof(key), lab[0] ? "%s{%s}" : "%s", name, lab);
	} else if (le[0] && strcmp(f->type, "summary") != 0) {
		snprintf(key, sizeof(key), "%s{%s%sle=\"%s\"}", name, lab, lab[0] ? "," : "", le);
	}
	if (strcmp(f->type, "counter") == 0 && !(v >= 0))
		fail("negative or NaN counter %s", key);
	remember(key);
	printf("%s %s\n", key, p + 1);
}

int main(void)
{
	static char line[65536];
	while (fgets(line, sizeof(line), stdin)) {
		lineno++;
		size_t n = strlen(line);
		if (n == 0 || line[n - 1] != '\n')
			fail("%s", "line too long or missing its final newline");
		line[--n] = '\0';
		if (n && line[n - 1] == '\r')
			fail("%s", "carriage return at the end of the line");
		if (n == 0)
			continue;
		if (line[0] == '#')
			comment(line);
		else
			sample(line);
	}
	if (lineno == 0)
		fail("%s", "empty exposition");
	if (hist_key[0] && hist_inf < 0)
		fail("histogram series %s has no le=\"+Inf\" bucket", hist_key);
	return 0;
}
