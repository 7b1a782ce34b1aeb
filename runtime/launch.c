/* launch.c — train_rank --nproc-per-node N: starts N local ranks of this executable with
 * torchrun's variables, forwards signals to them, and stops them all when one fails. */
#include "launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAUNCH_FLAG "--nproc-per-node"
#define LAUNCH_GRACE_S 5 /* SIGTERM to SIGKILL */

static const int launch_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define LAUNCH_NSIG (int)(sizeof launch_signals / sizeof launch_signals[0])

/* The running children (0 once reaped); read by the signal handler. */
static volatile pid_t *launch_pids;
static int launch_n;

static void launch_forward(int sig)
{
    for (int i = 0; i < launch_n; i++)
        if (launch_pids[i] > 0)
            kill(launch_pids[i], sig);
}

/* A port nobody listens on now (the kernel's pick for port 0); rank 0's bootstrap binds it next. */
static int launch_free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* argv without "--nproc-per-node N" / "--nproc-per-node=N", NULL-terminated. */
static char **launch_child_argv(int argc, char **argv)
{
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], LAUNCH_FLAG))
            i++;
        else if (!(i > 0 && !strncmp(argv[i], LAUNCH_FLAG "=", strlen(LAUNCH_FLAG) + 1)))
            args[n++] = argv[i];
    }
    return args;
}

static void launch_setenv_int(const char *var, int v)
{
    char s[16];
    snprintf(s, sizeof s, "%d", v);
    setenv(var, s, 1);
}

/* Forks rank `rank`. The forwarded signals stay blocked from before fork until the child has
 * dropped the parent's handler (else a SIGTERM in between would be caught and not kill it) and
 * until the parent has recorded the pid (else the handler would miss the child). */
static pid_t launch_child(char **args, int rank, int nproc, int port)
{
    sigset_t block, old;
    sigemptyset(&block);
    for (int i = 0; i < LAUNCH_NSIG; i++)
        sigaddset(&block, launch_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t pid = fork();
    if (pid != 0) {
        launch_pids[rank] = pid > 0 ? pid : 0;
        sigprocmask(SIG_SETMASK, &old, NULL);
        return pid;
    }
    for (int i = 0; i < LAUNCH_NSIG; i++)
        signal(launch_signals[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    launch_setenv_int("RANK", rank);
    launch_setenv_int("LOCAL_RANK", rank);
    launch_setenv_int("WORLD_SIZE", nproc);
    launch_setenv_int("LOCAL_WORLD_SIZE", nproc);
    launch_setenv_int("MASTER_PORT", port);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    execv("/proc/self/exe", args);
    fprintf(stderr, "train_rank: error: rank %d cannot run /proc/self/exe: %s\n", rank, strerror(errno));
    _exit(127);
}

/* Exit code as a shell reports it: 128 + signal for a killed process. */
static int launch_status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

static int launch_index(pid_t p)
{
    for (int i = 0; i < launch_n; i++)
        if (launch_pids[i] == p)
            return i;
    return -1;
}

/* Reaps one child (blocking or not); returns its index, or -1 when none was reaped. */
static int launch_reap(bool block, int *status)
{
    pid_t p = waitpid(-1, status, block ? 0 : WNOHANG);
    int r = p > 0 ? launch_index(p) : -1;
    if (r >= 0)
        launch_pids[r] = 0;
    return r;
}

/* Stops the ranks still running: SIGTERM, SIGKILL after LAUNCH_GRACE_S; reaps them all. */
static void launch_stop_rest(int running)
{
    int st;
    launch_forward(SIGTERM);
    struct timespec nap = {0, 10 * 1000 * 1000};
    for (int ms = 0; running > 0 && ms < LAUNCH_GRACE_S * 1000; ms += 10)
        if (launch_reap(false, &st) >= 0)
            running--;
        else
            nanosleep(&nap, NULL);
    if (running > 0)
        launch_forward(SIGKILL);
    while (running > 0)
        if (launch_reap(true, &st) >= 0 || errno == ECHILD)
            running--;
}

/* Waits for every rank; at the first failure stops the rest and returns its code. */
static int launch_wait_all(void)
{
    for (int running = launch_n; running > 0;) {
        int st, r = launch_reap(true, &st);
        if (r < 0) {
            if (errno == ECHILD)
                return 0;
            continue; /* EINTR: a forwarded signal */
        }
        running--;
        int code = launch_status_code(st);
        if (code) {
            fprintf(stderr, "train_rank: rank %d %s %d; stopping the other %d rank(s)\n", r,
                    WIFEXITED(st) ? "exited with status" : "was killed by signal", WIFEXITED(st) ? code : code - 128,
                    running);
            launch_stop_rest(running);
            return code;
        }
    }
    return 0;
}

int rt_launch_local(int nproc, int argc, char **argv)
{
    int port = launch_free_port();
    if (nproc < 1 || port < 0) {
        fprintf(stderr, nproc < 1 ? "train_rank: error: " LAUNCH_FLAG " needs at least 1, got %d\n"
                                  : "train_rank: error: no free TCP port on 127.0.0.1 for MASTER_PORT (%d ranks)\n",
                nproc);
        return 2;
    }
    char **args = launch_child_argv(argc, argv);
    launch_pids = calloc((size_t)nproc, sizeof(pid_t));
    launch_n = nproc;
    struct sigaction fwd = {.sa_handler = launch_forward}, old[LAUNCH_NSIG];
    for (int i = 0; i < LAUNCH_NSIG; i++)
        sigaction(launch_signals[i], &fwd, &old[i]);

    int code = 0;
    for (int r = 0; r < nproc && !code; r++) {
        if (launch_child(args, r, nproc, port) < 0) {
            fprintf(stderr, "train_rank: error: cannot start rank %d: %s\n", r, strerror(errno));
            launch_stop_rest(r);
            code = 1;
        }
    }
    if (!code)
        code = launch_wait_all();

    for (int i = 0; i < LAUNCH_NSIG; i++)
        sigaction(launch_signals[i], &old[i], NULL);
    free((void *)launch_pids);
    launch_pids = NULL, launch_n = 0;
    free(args);
    return code;
}
