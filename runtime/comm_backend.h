/* comm_backend.h — what a communication backend (comm_mpi.c, cuda/comm_nccl.c) implements
 * behind comm.h; comm.c checks arguments and counts collectives, then calls these. */
#ifndef MCC_RT_COMM_BACKEND_H
#define MCC_RT_COMM_BACKEND_H

#include "comm.h"

#include <stdint.h>

typedef struct {
    void (*all_reduce)(rt_comm *c, void *buf, size_t count, ir_dtype dt, rt_reduce_op op, void *stream);
    void (*all_gather)(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream);
    void (*reduce_scatter)(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, rt_reduce_op op,
                           void *stream);
    void (*broadcast)(rt_comm *c, void *buf, size_t count, ir_dtype dt, int root, void *stream);
    void (*barrier)(rt_comm *c);
    /* Fills out->impl, rank, size and world_ranks (room for c->size) for this rank's new group. */
    void (*split)(rt_comm *c, int color, int key, rt_comm *out);
    void (*free)(rt_comm *c);
    /* Collectives between group_begin and group_end go out as one launch (NCCL's group calls);
     * NULL where each collective runs at once (MPI). */
    void (*group_begin)(rt_comm *c);
    void (*group_end)(rt_comm *c, void *stream);
} rt_comm_ops;

struct rt_comm {
    const rt_comm_ops *ops;
    void *impl;        /* MPI_Comm* / the NCCL group state */
    int rank, size;    /* in this group */
    int *world_ranks;  /* [size]: member i's world rank, for error messages */
    char name[32];     /* "world", "tp", ... */
    uint64_t seq;      /* collectives issued on this group; the current one's number */
    bool is_world;
};

/* A world communicator around a backend handle: member i is world rank i. */
rt_comm *rt_comm_new_world(const rt_comm_ops *ops, void *impl, int rank, int size);

/* MCC_COLLECTIVE_TIMEOUT_S (default 300); exits naming the variable when it is not a positive number. */
double rt_collective_timeout_s(void);
/* "ranks 0,2,4,6" for error messages. */
void rt_comm_format_members(const rt_comm *c, char *out, size_t outlen);
/* Ends the process with "mcc: rank R: error: <what>" on stderr. */
_Noreturn void rt_comm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
