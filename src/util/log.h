/* log.h - libmrcache's diagnostics: one line per message on stderr, "libmrcache[pid]: ...".
 * Invariant: never allocates and never uses stdio streams, so it is safe inside the
 * malloc and munmap hooks (the message is formatted into a stack buffer, then write(2)). */
#ifndef MRC_LOG_H
#define MRC_LOG_H

enum mrc_log_level { MRC_LOG_ERROR, MRC_LOG_WARN, MRC_LOG_INFO, MRC_LOG_DEBUG };

/* The level at and below which messages are printed; set from MRCACHE_LOG. */
extern int mrc_log_level;

/* Prints one line if level <= mrc_log_level. Preserves errno. */
void mrc_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MRC_ERROR(...) mrc_log(MRC_LOG_ERROR, __VA_ARGS__)
#define MRC_WARN(...)  mrc_log(MRC_LOG_WARN, __VA_ARGS__)
#define MRC_INFO(...)  mrc_log(MRC_LOG_INFO, __VA_ARGS__)
#define MRC_DEBUG(...) do { if (mrc_log_level >= MRC_LOG_DEBUG) mrc_log(MRC_LOG_DEBUG, __VA_ARGS__); } while (0)

/* A note about what libmrcache cannot do here: logged at info level now, and repeated
 * once, as one warning with the other notes, by mrc_log_notes_warn (at the first
 * registration: a program that never registers stays silent). */
void mrc_log_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mrc_log_notes_warn(void);

/* Writes all of buf to fd, retrying on EINTR and short writes. Returns 0 or -errno. */
int mrc_write_all(int fd, const char *buf, unsigned long len);

/* Reads a small file (/proc's) into buf, at most size - 1 bytes, NUL-terminated, in one
 * read and without stdio. Returns the length, or -1 when it cannot be read or is empty. */
long mrc_read_text(const char *path, char *buf, unsigned long size);

#endif
