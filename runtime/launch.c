/* launch.c — train_rank --nproc-per-node N: starts N local ranks of this executable with
 * torchrun's variables, forwards signals to them, and stops them all when one fails. */
#include "launch.h"

#include "common/cli.h"

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

/* The flag as we and torchrun spell it, each also as "--flag=N". */
static const char *const launch_flags[] = {LAUNCH_FLAG, "--nproc_per_node"};

static const int launch_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define LAUNCH_NSIG (int)(sizeof launch_signals / sizeof launch_signals[0])

/* The running children (0 once reaped); read by the signal handler. */
static volatile pid_t *launch_pids;
static int launch_n;
static volatile sig_atomic_t launch_signalled; /* the last signal forwarded to the ranks, or 0 */

static void launch_forward(int sig)
{
    for (int i = 0; i < launch_n; i++)
        if (launch_pids[i] > 0)
            kill(launch_pids[i], sig);
}

static void launch_on_signal(int sig)
{
    launch_signalled = sig;
    launch_forward(sig);
}

/* How many of argv[i..] the launch flag takes (0: it is not the flag); its spelling in *flag, its
 * value in *value (NULL when missing). */
static int launch_flag_at(int argc, char **argv, int i, const char **flag, const char **value)
{
    for (size_t k = 0; k < sizeof launch_flags / sizeof launch_flags[0]; k++) {
        size_t len = strlen(launch_flags[k]);
        *flag = launch_flags[k];
        if (strncmp(argv[i], launch_flags[k], len))
            continue;
        if (argv[i][len] == '=')
            return *value = argv[i] + len + 1, 1;
        if (argv[i][len] == '\0')
            return *value = i + 1 < argc ? argv[i + 1] : NULL, i + 1 < argc ? 2 : 1;
    }
    return 0;
}

int rt_launch_nproc(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *flag, *value;
        if (!launch_flag_at(argc, argv, i, &flag, &value))
            continue;
        long long n;
        char err[256];
        if (!cli_parse_int(flag, value, 1, 1024, &n, err, sizeof err)) {
            fprintf(stderr, "train_rank: error: %s\n", err);
            exit(2);
        }
        return (int)n;
    }
    return 0;
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

/* argv without the launch flag and its value, NULL-terminated. */
static char **launch_child_argv(int argc, char **argv)
{
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *flag, *value;
        int taken = i > 0 ? launch_flag_at(argc, argv, i, &flag, &value) : 0;
        if (taken)
            i += taken - 1;
        else
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
        /* A rank that stopped for the signal forwarded to it (128 + signal, as train_rank exits
         * after the iteration in flight, or killed by it) is no failure to report: the others
         * stop at the same iteration; any still running after the grace period is killed. */
        bool asked = launch_signalled && code == 128 + launch_signalled;
        if (code && !asked)
            fprintf(stderr, "train_rank: rank %d %s %d; stopping the other %d rank(s)\n", r,
                    WIFEXITED(st) ? "exited with status" : "was killed by signal", WIFEXITED(st) ? code : code - 128,
                    running);
        if (code) {
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
    launch_signalled = 0;
    struct sigaction fwd = {.sa_handler = launch_on_signal}, old[LAUNCH_NSIG];
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
