/*
 * readfile.c — small input files (--config FILE, cron apply FILE) read
 * whole, safely: opened with O_NONBLOCK, so a FIFO (or <(...)) never holds
 * the command at open(2), then refused unless fstat(2) says it is a
 * regular file, and refused when larger than CLI_FILE_MAX before a byte is
 * read; standard input, where allowed, is read up to the same cap.  A
 * file that grows while it is read is cut at the cap and refused too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *what_it_is(mode_t m)
{
	return S_ISFIFO(m) ? "a FIFO" : S_ISDIR(m) ? "a directory"
	       : S_ISCHR(m) || S_ISBLK(m) ? "a device" : S_ISSOCK(m) ? "a socket" : "not a file";
}

/* Opens path and checks it: a descriptor, or -1 after printing. */
static int open_regular(const cli_common *cc, const char *what, const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		cli_error(cc, "%s%s: unable to open: %s", what, path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) != 0)
		cli_error(cc, "%s%s: cannot read: %s", what, path, strerror(errno));
	else if (!S_ISREG(st.st_mode))
		cli_error(cc, "%s%s: not a regular file (%s)", what, path, what_it_is(st.st_mode));
	else if (st.st_size > CLI_FILE_MAX)
		cli_error(cc, "%s%s: larger than 1 MiB (%lld bytes)", what, path,
		          (long long)st.st_size);
	else
		return fd;
	close(fd);
	return -1;
}

int cli_read_file(const cli_common *cc, const char *what, const char *path, bool allow_stdin,
                  char **data, size_t *len)
{
	*data = NULL;
	*len = 0;
	bool in = allow_stdin && strcmp(path, "-") == 0;
	int fd = in ? STDIN_FILENO : open_regular(cc, what, path);
	if (fd < 0)
		return CLI_USAGE;
	char *buf = malloc(CLI_FILE_MAX + 2);
	size_t n = 0;
	ssize_t got = 1;
	while (buf && n <= CLI_FILE_MAX && got != 0) {
		got = read(fd, buf + n, CLI_FILE_MAX + 1 - n);
		if (got < 0 && errno != EINTR)
			break;
		n += got > 0 ? (size_t)got : 0;
	}
	int err = errno;
	if (!in)
		close(fd);
	if (buf == NULL || got < 0 || n > CLI_FILE_MAX) {
		if (buf == NULL)
			cli_error(cc, "%s%s: out of memory", what, path);
		else if (got < 0)
			cli_error(cc, "%s%s: cannot read: %s", what, path, strerror(err));
		else
			cli_error(cc, "%s%s: larger than 1 MiB", what, path);
		free(buf);
		return CLI_USAGE;
	}
	buf[n] = '\0';
	*data = buf;
	*len = n;
	return CLI_OK;
}
