/* tensorboard.h — TensorBoard event files (train_rank's --tensorboard-dir, Megatron's flag): one
 * file events.out.tfevents.<unix time>.<hostname>.<pid>.<n> per writer, holding scalars
 * (tag, step, value) that TensorBoard plots as it does Megatron's writer.add_scalar. */
#ifndef MCC_RT_TENSORBOARD_H
#define MCC_RT_TENSORBOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_tb rt_tb;

/* Creates dir (and its parents, as mkdir -p) and a new event file in it, whose first record says
 * the format version. NULL with a message naming the directory or file and the reason in err. */
rt_tb *rt_tb_open(const char *dir, char *err, size_t errlen);

/* The event file's path (for the start-up log). */
const char *rt_tb_path(const rt_tb *tb);

/* Appends one scalar as one record (value stored as a float, as TensorBoard's simple_value is).
 * The record is written by this call, whole, with no buffer: there is nothing to flush, and a
 * killed run's file ends with its last whole record. On a write error (disk full, file size
 * limit) the file is cut back to its last whole record and it returns false with the file and
 * the reason in err; the caller should stop the run. */
bool rt_tb_scalar(rt_tb *tb, const char *tag, int64_t step, double value, char *err, size_t errlen);

void rt_tb_close(rt_tb *tb);

#endif
