/* comm_backend.h — what a communication backend (comm_mpi.c, cuda/comm_nccl.c) implements
 * behind comm.h; comm.c checks arguments and counts collectives, then calls these. */
#ifndef MCC_RT_COMM_BACKEND_H
#define MCC_RT_COMM_BACKEND_H

#include "comm.h"

#include <stdint.h>

/* What a communicator runs (a collective, a send or recv, a group call, its own setup and
 * teardown), spelt in its errors and watchdogs' messages by rt_coll_names (comm.c): ORDER RT_COLL.
 * Backends compare the kind (a send's timeout says "to" its peer, a recv's "from"). */
typedef enum {
    RT_COLL_ALL_REDUCE, RT_COLL_ALL_GATHER, RT_COLL_REDUCE_SCATTER, RT_COLL_ALL_TO_ALL, RT_COLL_ALL_TO_ALL_V,
    RT_COLL_RING_SHIFT, RT_COLL_BROADCAST, RT_COLL_BARRIER, RT_COLL_SEND, RT_COLL_RECV, RT_COLL_GROUP,
    RT_COLL_SPLIT, RT_COLL_P2P_SETUP, RT_COLL_FREE, RT_NUM_COLLS
} rt_coll_kind;
extern const char *const rt_coll_names[RT_NUM_COLLS];

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
    /* Fills out->impl with a communicator of c's members tuned for `lane` (comm.h); NULL where a
     * group has one lane (MPI). */
    void (*lane)(rt_comm *c, rt_lane lane, rt_comm *out);
    /* Registers [base, base + bytes) for zero-copy collectives on c; false (with a note on
     * stderr) when the backend cannot. Collective over c. NULL where nothing is gained (MPI). */
    bool (*window)(rt_comm *c, void *base, size_t bytes);
    void (*all_to_all)(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream);
    /* Point to point (comm.h): comm.c has checked that peer is a neighbour and numbered the
     * message (p2p_sent/p2p_recvd); p2p_setup fills c->p2p, the backend's free frees it. */
    void (*p2p_setup)(rt_comm *c);
    void (*send)(rt_comm *c, const void *buf, size_t count, ir_dtype dt, int peer, void *stream);
    void (*recv)(rt_comm *c, void *buf, size_t count, ir_dtype dt, int peer, void *stream);
    void (*p2p_flush)(rt_comm *c, void *stream);
    /* rt_all_to_all_v's two halves (comm.c checks the splits and the room between them):
     * all_to_all_counts sends block q of send[size * n] to member q and receives block q of
     * recv from it, both in host memory; all_to_all_v sends send_counts[q] elements of send
     * (packed, member order) to member q and receives recv_counts[q] from it (counts on the host). */
    void (*all_to_all_counts)(rt_comm *c, const int64_t *send, int64_t *recv, int n, void *stream);
    void (*all_to_all_v)(rt_comm *c, const void *send, const size_t *send_counts, void *recv, const size_t *recv_counts,
                         ir_dtype dt, void *stream);
    /* rt_ring_shift on a group of two or more */
    void (*ring_shift)(rt_comm *c, const void *send, void *recv, size_t count, ir_dtype dt, void *stream);
} rt_comm_ops;

struct rt_comm {
    const rt_comm_ops *ops;
    void *impl;        /* MPI_Comm* / the NCCL group state */
    int rank, size;    /* in this group */
    int *world_ranks;  /* [size]: member i's world rank, for error messages */
    char name[40];     /* "world", "tp", "tp/side", ... */
    unsigned axes;     /* the mesh axes it is the group along (rt_comm_mesh_group: 1 << ir_axis each), else 0 */
    uint64_t seq;      /* collectives issued on this group; the current one's number */
    bool is_world;
    rt_comm *lanes[RT_NUM_LANES]; /* rt_comm_add_lane; RT_LANE_MAIN is never set (the group itself) */
    char *window;                 /* the registered window (RT_LANE_COPY), or NULL */
    size_t window_bytes;
    void *window_handle;          /* the backend's */
    void *p2p;                    /* the backend's point-to-point state (rt_comm_add_p2p), or NULL */
    uint64_t *p2p_sent, *p2p_recvd; /* [size]: messages sent to / received from each member */
    size_t p2p_staged;            /* rt_p2p_staged_bytes, kept by the backend */
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
