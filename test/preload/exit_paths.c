/* exit_paths.c - one way for a verbs program to end, chosen by argv[1], taken after it
 * has registered memory (one MR released to the cache, one still held). It prints nothing
 * on success: test_exit_paths.sh compares its exit status or signal, under a generous
 * timeout, with the same run without libmrcache. A helper thread of the cache must never
 * keep the process alive, nor change how it dies. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "common.h"

#define LEN (1u << 20)

static char *held_buf, *idle_buf;
static struct ibv_mr *held;

/* The registrations every mode starts from: released (cached, lazily deregistered under
 * the preload) and held (the program's). */
static void register_some(void)
{
    open_nic();
    held_buf = map_anon(NULL, LEN, 0);
    idle_buf = map_anon(NULL, LEN, 0);
    if (!held_buf || !idle_buf)
        exit(2);
    struct ibv_mr *m = ibv_reg_mr(pd, idle_buf, LEN, IBV_ACCESS_LOCAL_WRITE);
    held = ibv_reg_mr(pd, held_buf, LEN, IBV_ACCESS_LOCAL_WRITE);
    if (!m || !held || ibv_dereg_mr(m) != 0 || !write_visible(held, held_buf, LEN, 3)) {
        fprintf(stderr, "registration failed\n");
        exit(2);
    }
}

static void *register_and_return(void *arg)
{
    (void)arg;
    char *p = map_anon(NULL, LEN, 0);
    struct ibv_mr *m = p ? ibv_reg_mr(pd, p, LEN, IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (m)
        ibv_dereg_mr(m);
    return NULL;
}

static void *exit_now(void *arg)
{
    (void)arg;
    exit(5);
}

/* Registers and releases while another thread exits: exit's handlers run beside a
 * thread that is inside the cache. */
static void *churn(void *arg)
{
    (void)arg;
    for (unsigned i = 0;; i++) {
        struct ibv_mr *m = ibv_reg_mr(pd, idle_buf + (i % 16) * 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
        if (m)
            ibv_dereg_mr(m);
    }
    return NULL;
}

static void *exit_after_churn_started(void *arg)
{
    (void)arg;
    usleep(20000);      /* not a timing assertion: only lets the churn get going */
    exit(6);
}

static void *raise_term(void *arg)
{
    (void)arg;
    raise(SIGTERM);
    pause();
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    pthread_t t;

    register_some();
    if (!strcmp(mode, "return"))
        return 7;
    if (!strcmp(mode, "pthread_exit"))
        pthread_exit(NULL);     /* the process ends with its last thread: status 0 */
    if (!strcmp(mode, "pthread_exit_ready")) {
        /* For the signal test: says when main is about to leave. */
        printf("ready\n");
        fflush(stdout);
        pthread_exit(NULL);
    }
    if (!strcmp(mode, "pthread_exit_threads")) {
        for (int i = 0; i < 2; i++)
            if (pthread_create(&t, NULL, register_and_return, NULL) != 0)
                exit(2);
        pthread_exit(NULL);
    }
    if (!strcmp(mode, "exit_from_thread")) {
        if (pthread_create(&t, NULL, exit_now, NULL) != 0)
            exit(2);
        pthread_join(t, NULL);  /* never returns: the thread ends the process */
        return 2;
    }
    if (!strcmp(mode, "exit_from_thread_while_registering")) {
        if (pthread_create(&t, NULL, exit_after_churn_started, NULL) != 0)
            exit(2);
        churn(NULL);
    }
    if (!strcmp(mode, "_exit"))
        _exit(3);
    if (!strcmp(mode, "exec")) {
        char *args[] = { "/bin/true", NULL };
        execv(args[0], args);
        return 2;
    }
    if (!strcmp(mode, "sigterm"))
        raise(SIGTERM);
    if (!strcmp(mode, "sigterm_from_thread")) {
        if (pthread_create(&t, NULL, raise_term, NULL) != 0)
            exit(2);
        churn(NULL);
    }
    if (!strcmp(mode, "sigsegv")) {
        static int *volatile nowhere;   /* NULL, and the compiler cannot know it */
        *nowhere = 1;
    }
    if (!strcmp(mode, "abort"))
        abort();
    fprintf(stderr, "unknown mode '%s' (or the signal did not end the process)\n", mode);
    return 2;
}
