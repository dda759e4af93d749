/* log.c - formats a diagnostic into a stack buffer and writes it with write(2); keeps
 * the notes to repeat as one warning later in a fixed buffer; reads small /proc files.
 * Invariant: no malloc, no stdio stream, errno preserved, the kernel reached through
 * util/sys.h; a message longer than the
 * buffer is truncated, never split. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "util/log.h"
#include "util/sys.h"

int mrc_log_level = MRC_LOG_WARN;

int mrc_write_all(int fd, const char *buf, unsigned long len)
{
    while (len > 0) {
        ssize_t n = mrc_sys_write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        buf += n;
        len -= (unsigned long)n;
    }
    return 0;
}

long mrc_read_text(const char *path, char *buf, unsigned long size)
{
    int fd = mrc_sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    ssize_t n = fd < 0 ? -1 : mrc_sys_read(fd, buf, size - 1);
    if (fd >= 0)
        mrc_sys_close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return (long)n;
}

void mrc_log(int level, const char *fmt, ...)
{
    if (level > mrc_log_level)
        return;
    int saved = errno;
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "libmrcache[%d]: ", (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    buf[len++] = '\n';
    mrc_write_all(2, buf, len);
    errno = saved;
}

/* The notes so far, joined: a fixed buffer, since notes are taken before anything may
 * allocate (the constructor, hooks). */
static char notes[1024];
static size_t notes_len;
static int notes_said;

void mrc_log_note(const char *fmt, ...)
{
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    mrc_log(MRC_LOG_INFO, "%s", m);
    n = snprintf(notes + notes_len, sizeof(notes) - notes_len, "%s%s", notes_len ? "\n  " : "", m);
    if (n > 0)
        notes_len = notes_len + (size_t)n < sizeof(notes) ? notes_len + (size_t)n : sizeof(notes) - 1;
}

void mrc_log_notes_warn(void)
{
    if (!notes_len || __atomic_exchange_n(&notes_said, 1, __ATOMIC_ACQ_REL))
        return;
    mrc_log(MRC_LOG_WARN, "%s", notes);
}
